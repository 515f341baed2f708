"""Joint-position features for the networks: ``sin``/``cos`` for angles, raw values for slides.

A revolute joint's dynamics are 2*pi-periodic in its angle, so feeding ``(sin q, cos q)`` makes the
learned H(q) and V(q) periodic by construction and keeps network inputs bounded whatever the
joint wraps to. Prismatic joints are fed their raw position. The feature vector is ordered

    z = [sin(q_a), cos(q_a), q_p]        (shape (B, m), m = 2 * n_angular + n_prismatic)

with ``q_a`` the revolute/continuous joints and ``q_p`` the prismatic ones, each in model order.

Besides the map itself the encoder gives its exact tangent map (``dz = J dq``, for forward-mode
derivatives) and cotangent map (``dq = J^T dz``, for reverse mode); ``J`` is sparse (one
``cos``/``-sin`` entry per angular feature), so both are elementwise.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np
import torch
from torch import nn

#: Joint types a model accepts (URDF names). ``continuous`` is an unlimited revolute joint.
JOINT_TYPES = ('revolute', 'continuous', 'prismatic')
ANGULAR_TYPES = ('revolute', 'continuous')


def check_joint_types(joint_types: Sequence[str]) -> list:
    """The joint types as a list of str; ``ValueError`` naming the first unknown one."""
    types = [str(t) for t in joint_types]
    if not types:
        raise ValueError('a model needs at least one joint')
    for i, t in enumerate(types):
        if t not in JOINT_TYPES:
            raise ValueError(f'joint {i} has type {t!r}; expected one of {JOINT_TYPES}')
    return types


class JointFeatures(nn.Module):
    """``q (B, n) -> z (B, m)`` with exact tangent and cotangent maps; no learnable parameters."""

    #: registered buffers (torch's attribute typing of modules does not know them)
    ang_idx: torch.Tensor
    lin_idx: torch.Tensor
    inv_order: torch.Tensor

    def __init__(self, joint_types: Sequence[str]):
        super().__init__()
        self.joint_types = check_joint_types(joint_types)
        ang = [i for i, t in enumerate(self.joint_types) if t in ANGULAR_TYPES]
        lin = [i for i, t in enumerate(self.joint_types) if t not in ANGULAR_TYPES]
        self.n_dof = len(self.joint_types)
        self.n_angular = len(ang)
        self.n_features = 2 * len(ang) + len(lin)
        #: True when every joint is angular: then z = [sin q, cos q] needs no gathers.
        self.all_angular = not lin
        self.register_buffer('ang_idx', torch.tensor(ang, dtype=torch.long), persistent=False)
        self.register_buffer('lin_idx', torch.tensor(lin, dtype=torch.long), persistent=False)
        # position of each joint's (first) feature, to scatter cotangents back without a loop
        order = np.argsort(np.array(ang + lin, dtype=np.int64))
        self.register_buffer(
            'inv_order', torch.as_tensor(order, dtype=torch.long), persistent=False
        )

    def columns(self, joint: int) -> List[int]:
        """The feature columns of model joint ``joint``: its ``sin`` and ``cos``, or its value."""
        if self.joint_types[joint] in ANGULAR_TYPES:
            k = int((self.ang_idx == joint).nonzero()[0, 0])
            return [k, self.n_angular + k]
        k = int((self.lin_idx == joint).nonzero()[0, 0])
        return [2 * self.n_angular + k]

    def encode(self, q: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(z, s, c)``: features ``(B, m)``, ``sin``/``cos`` of angular joints ``(B, n_a)``."""
        if self.all_angular:
            s, c = torch.sin(q), torch.cos(q)
            return torch.cat((s, c), dim=-1), s, c
        qa = q.index_select(-1, self.ang_idx)
        s, c = torch.sin(qa), torch.cos(qa)
        return torch.cat((s, c, q.index_select(-1, self.lin_idx)), dim=-1), s, c

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        """Features ``z (B, m)`` of ``q (B, n)``: ``sin``, ``cos`` of the angular joints, then the
        linear ones."""
        return self.encode(q)[0]

    def tangent(self, s: torch.Tensor, c: torch.Tensor, dq: torch.Tensor) -> torch.Tensor:
        """``dz = J(q) dq``: ``(B, m)`` for a joint-space direction ``dq (B, n)``."""
        if self.all_angular:
            return torch.cat((c * dq, -s * dq), dim=-1)
        dqa = dq.index_select(-1, self.ang_idx)
        return torch.cat((c * dqa, -s * dqa, dq.index_select(-1, self.lin_idx)), dim=-1)

    def cotangent(self, s: torch.Tensor, c: torch.Tensor, dz: torch.Tensor) -> torch.Tensor:
        """``dq = J(q)^T dz``: ``(B, n)`` for a feature-space cotangent ``dz (B, m)``."""
        na = self.n_angular
        ga = c * dz[..., :na] - s * dz[..., na : 2 * na]
        if self.all_angular:
            return ga
        return torch.cat((ga, dz[..., 2 * na :]), dim=-1).index_select(-1, self.inv_order)
