"""The model kinds, named in one place: what is trained, learned online and controlled with."""

#: learned online by the learner and followed by a controller (checkpoints of these kinds)
LEARNED_KINDS = ('delan', 'delan_residual')
#: the variants Lutter & Peters (2021) compare DeLaN with, trained and scored offline only
#: (``delan-train``, ``delan-eval``, bench/bench_variants.py): one MLP for L(q, qd), and DeLaN's
#: networks in Hamiltonian form
VARIANT_KINDS = ('blackbox_lagrangian', 'hamiltonian')
#: the kinds whose forward dynamics are differentiable, so the forward loss can train them
#: (``TrainConfig.loss``; the class attribute ``differentiable_forward``): not the residual
#: (its forward model would need the URDF's in torch) nor the black-box MLP (inverse only)
FORWARD_KINDS = ('delan',) + VARIANT_KINDS
#: every kind a checkpoint may hold (the black-box MLP: no structure a controller could check)
TRAINABLE_KINDS = LEARNED_KINDS + ('mlp',) + VARIANT_KINDS
#: what a torque controller holds: PD alone, the URDF's model, least squares, learned
CONTROLLER_KINDS = ('pd', 'pinocchio', 'identified') + LEARNED_KINDS
