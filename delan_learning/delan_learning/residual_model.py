"""DeLaN on top of a nominal model: the learned part of ``tau = RNEA_nominal + DeLaN_residual``.

The network is a :class:`~delan_learning.lagrangian.DelanModel` fitted to ``tau - tau_nominal``
(what the URDF's rigid bodies and friction do not explain); the nominal part is added outside
torch, by :class:`delan_common.residual_dynamics.NominalPlusResidual` with the Pinocchio model.
Only the start differs from plain DeLaN: the residual begins near zero, so an untrained model is
the nominal one:

* ``L``'s diagonal starts at ``softplus(DIAG_START)`` (~0.13) of the residual's inertia scale
  and its strict lower triangle at 0, so ``H_res = L L^T`` starts at ~2 % of that scale;
  not at exactly 0, where ``L L^T`` has no gradient.
* ``V``'s head starts at 0 (no gravity residual; its gradient is not 0 there).
* friction starts as in plain DeLaN, on the residual: at 2 % of its torque spread, or, with
  ``friction_model='stribeck'``, at a least-squares fit of that law to it.

Its scales (``init_scales``) come from the residual data, so the networks work at the size of
the mismatch, not of the whole torque.
"""

from __future__ import annotations

from typing import Sequence

import torch

from delan_learning.lagrangian import DelanModel

#: pre-softplus start of ``L``'s diagonal (softplus(-2) = 0.127)
DIAG_START = -2.0


class ResidualDelanModel(DelanModel):
    """The residual of ``delan_residual``: same networks, equations and checkpoint format as
    ``delan``, started near zero (module docstring). Arguments as :class:`DelanModel`."""

    kind = 'delan_residual'
    #: its forward dynamics are the residual's alone: a rollout needs the nominal model too
    differentiable_forward = False

    def __init__(self, joint_types: Sequence[str], **config):
        super().__init__(joint_types, **config)
        n = self.n_dof
        with torch.no_grad():
            self.head_weight[..., n:] = 0.0  # strict lower triangle and V
            self.head_bias[:n] = DIAG_START
            self.head_bias[n:] = 0.0
