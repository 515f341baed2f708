"""Random DeLaN models for tests: every weight and bias drawn, not the near-flat initialisation."""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple, Type, Union

import torch

from delan_learning.lagrangian import DelanModel


def random_delan(
    joint_types: Sequence[str],
    *,
    seed: int = 0,
    std: float = 0.4,
    scales: Optional[Tuple[float, float]] = None,
    dtype: torch.dtype = torch.float64,
    model_class: Type[DelanModel] = DelanModel,
    **config,
) -> DelanModel:
    """A ``model_class(joint_types, **config)`` in eval mode and ``dtype``, its parameters drawn
    from N(0, ``std``) after ``torch.manual_seed(seed)`` (the head's masked entries kept zero).

    ``scales``: ``(h, v)``, the values of ``h_scale`` and ``v_scale``, with ``tau_scale`` drawn
    from U(0.5, 2) (data-like scales); ``None`` keeps the model's.
    """
    torch.manual_seed(seed)
    m = model_class(joint_types, **config).to(dtype)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, std)
        m.head_weight.mul_(m.head_mask)
        if scales is not None:
            m.h_scale.fill_(scales[0])
            m.v_scale.fill_(scales[1])
            m.tau_scale.uniform_(0.5, 2.0)
    return m.eval()


def small_checkpoints(
    folder: Union[str, os.PathLike],
    robot: Any,
    kinds: Iterable[str],
    *,
    width: int,
    version: int = 3,
) -> Dict[str, str]:
    """``{kind: path}``: a freshly built model of each kind (``width`` x 1 layer, seed 0) for
    ``robot`` (a ``RobotDescription``), saved in ``folder`` as a learner's version ``version``."""
    from delan_learning.checkpoint import save_model
    from delan_learning.models import build_model

    paths = {}
    for kind in kinds:
        torch.manual_seed(0)
        paths[kind] = os.path.join(str(folder), f'{kind}.pt')
        save_model(
            build_model(kind, robot.joint_types, width=width, depth=1).double(),
            paths[kind],
            {'joint_names': robot.joint_names, 'model_version': version},
        )
    return paths
