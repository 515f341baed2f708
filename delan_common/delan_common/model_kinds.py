"""The model kinds, named in one place: what is trained, learned online and controlled with."""

#: learned online by the learner and followed by a controller (checkpoints of these kinds)
LEARNED_KINDS = ('delan', 'delan_residual')
#: the variants Lutter & Peters (2021) compare DeLaN with: one MLP for L(q, qd), and DeLaN's
#: networks in Hamiltonian form; trained and scored (``delan-train``, ``delan-eval``,
#: bench/bench_variants.py, the learner), never controlled with
VARIANT_KINDS = ('blackbox_lagrangian', 'hamiltonian')
#: the kinds whose forward dynamics are differentiable, so the forward loss can train them
#: (``TrainConfig.loss``; the class attribute ``differentiable_forward``): not the residual
#: (its forward model would need the URDF's in torch) nor the black-box MLP (inverse only)
FORWARD_KINDS = ('delan',) + VARIANT_KINDS
#: every kind a checkpoint may hold (the black-box MLP: no structure a controller could check)
TRAINABLE_KINDS = LEARNED_KINDS + ('mlp',) + VARIANT_KINDS
#: what the online learner can learn (its ``model`` parameter): every trainable kind, so the
#: variants can be compared on a live stream; a controller follows only the LEARNED_KINDS and
#: refuses a version of any other
ONLINE_KINDS = TRAINABLE_KINDS
#: the kinds built on DeLaN's networks, which take DeLaN's choice of friction law
#: (``friction_model``): the black-box Lagrangian has viscous + Coulomb only, the MLP no
#: friction term at all (its network learns friction with the rest)
FRICTION_LAW_KINDS = ('delan', 'delan_residual', 'hamiltonian')
#: what a torque controller holds: PD alone, the URDF's model, least squares, learned
CONTROLLER_KINDS = ('pd', 'pinocchio', 'identified') + LEARNED_KINDS
