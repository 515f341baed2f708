"""The fastest numpy :class:`~delan_common.dynamics.DynamicsModel` of a learned model:
:class:`~delan_learning.numpy_delan.NumpyDelan` (numpy and the compiled kernel, no torch per
call) for a DeLaN, :class:`~delan_learning.torch_dynamics.TorchDynamics` otherwise."""

from __future__ import annotations

from typing import Optional, Sequence, Union

from delan_learning.lagrangian import DelanModel
from delan_learning.models import DynamicsModule
from delan_learning.numpy_delan import NumpyDelan
from delan_learning.torch_dynamics import TorchDynamics


def dynamics_model(
    model: DynamicsModule, joint_names: Optional[Sequence[str]] = None, prefer_numpy: bool = True
) -> Union[NumpyDelan, TorchDynamics]:
    """The fastest protocol implementation for ``model``: numpy for DeLaN, torch otherwise."""
    if prefer_numpy and isinstance(model, DelanModel):
        return NumpyDelan(model, joint_names)
    return TorchDynamics(model, joint_names)
