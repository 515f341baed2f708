"""The hidden-layer activations of the learned models (DeLaN and the black-box MLP)."""

from __future__ import annotations

from typing import Tuple

import torch
import torch.nn.functional as F

ACTIVATIONS = ('softplus', 'tanh')


class _SoftplusAndSlope(torch.autograd.Function):
    """``(softplus(a), sigmoid(a))`` with a hand-written backward from the saved sigmoid.

    Autograd of ``F.softplus`` and ``torch.sigmoid`` separately costs ~7x more on CPU (the
    softplus backward kernel is slow and recomputes the exponential); the chain rule here is
    ``dL/da = d * (gh + gd * (1 - d))`` with ``d = sigmoid(a)``: four cheap elementwise ops.
    ``threshold=40`` keeps softplus exact in float64 (``log1p(e^a)`` below, ``a`` above).
    """

    @staticmethod
    def forward(ctx, a):
        d = torch.sigmoid(a)
        ctx.save_for_backward(d)
        return F.softplus(a, beta=1.0, threshold=40.0), d

    @staticmethod
    def backward(ctx, gh, gd):
        (d,) = ctx.saved_tensors
        if gd is None:
            return gh * d
        inner = gd * (1.0 - d)
        return d * (inner if gh is None else gh + inner)


def activation_and_slope(a: torch.Tensor, activation: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(sigma(a), sigma'(a))`` for the hidden layers."""
    if activation == 'tanh':
        h = torch.tanh(a)
        return h, 1.0 - h * h
    return _SoftplusAndSlope.apply(a)


def activation(a: torch.Tensor, activation: str) -> torch.Tensor:
    """``sigma(a)`` alone (plain ops, so ``torch.func`` transforms work through it)."""
    return torch.tanh(a) if activation == 'tanh' else F.softplus(a, beta=1.0, threshold=40.0)
