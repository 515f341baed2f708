"""The forward models the benchmarks score learned ones against, behind the models' interface
(``joint_types``, ``forward_dynamics(q, qd, tau)``): the simulator's own dynamics (the floor of
a rollout metric: only the integration differs) and constant velocity (what a learned forward
model must beat to have learned anything)."""

from __future__ import annotations

import torch

from delan_common.robot_model import RobotModel


class TruePlant(torch.nn.Module):
    """The simulator's own forward dynamics behind the model interface (numpy, no gradient)."""

    def __init__(self, model: RobotModel):
        super().__init__()
        self.truth = model
        self.joint_types = list(model.joint_types)

    def forward_dynamics(self, q, qd, tau):
        return torch.as_tensor(self.truth.forward(q.numpy(), qd.numpy(), tau.numpy()))


class ZeroAcceleration(torch.nn.Module):
    """The reference a learned forward model must beat: constant velocity, ``qdd = 0``."""

    def __init__(self, joint_types):
        super().__init__()
        self.joint_types = list(joint_types)

    def forward_dynamics(self, q, qd, tau):
        return torch.zeros_like(q)
