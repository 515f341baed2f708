"""Random DeLaN models for tests: every weight and bias drawn, not the near-flat initialisation."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Type

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
