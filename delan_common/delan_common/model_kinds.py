"""The model kinds, named in one place: what is trained, learned online and controlled with."""

#: learned online by the learner and followed by a controller (checkpoints of these kinds)
LEARNED_KINDS = ('delan', 'delan_residual')
#: every kind ``delan-train`` builds (the black-box MLP: no structure a controller could check)
TRAINABLE_KINDS = LEARNED_KINDS + ('mlp',)
#: what a torque controller holds: PD alone, the URDF's model, least squares, learned
CONTROLLER_KINDS = ('pd', 'pinocchio', 'identified') + LEARNED_KINDS
