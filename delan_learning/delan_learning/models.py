"""What every learned torch dynamics model shares, and how to build one from checkpoint metadata.

:class:`~delan_learning.lagrangian.DelanModel`, the black-box
:class:`~delan_learning.mlp.MlpInverseModel` and the variants of Lutter & Peters (2021),
:class:`~delan_learning.blackbox_lagrangian.BlackboxLagrangianModel` and
:class:`~delan_learning.hamiltonian.HamiltonianModel`, derive from :class:`DynamicsModule`, so the
trainer, the checkpoints, the protocol adapter and the CLIs treat them alike. Tensors are batched:
``q, qd, qdd, tau`` are ``(B, n)``; any float dtype and device (the model's own).
"""

from __future__ import annotations

from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from delan_common.model_kinds import FRICTION_LAW_KINDS, LEARNED_KINDS, TRAINABLE_KINDS
from delan_learning.features import check_joint_types
from delan_learning.train_config import DEFAULT_FRICTION_MODEL, friction_model_error

#: the kinds built here; ``delan_residual`` is the residual on a nominal model (residual_model.py)
MODEL_KINDS = TRAINABLE_KINDS


class DynamicsModule(nn.Module):
    """Base of the learned models: ``model(q, qd, qdd) -> tau`` is the inverse model.

    Subclasses set :attr:`kind`, implement :meth:`inverse` and :meth:`config` and may override
    the structured terms; those a model does not define raise ``NotImplementedError``.
    """

    kind: str = ''
    #: registered buffer (torch's attribute typing of modules does not know it)
    scales_initialised: torch.Tensor

    def __init__(self, joint_types: Sequence[str]):
        super().__init__()
        self.joint_types = check_joint_types(joint_types)
        self.n_dof = len(self.joint_types)
        #: joint names in model order when known (set by training / load_model), else None
        self.joint_names: Optional[List[str]] = None
        # set from data once (Trainer / init_scales) and then saved with the weights
        self.register_buffer('scales_initialised', torch.zeros((), dtype=torch.bool))

    # -- identity -------------------------------------------------------------------------------
    def config(self) -> Dict[str, Any]:
        """JSON-able constructor arguments (without ``joint_types``)."""
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        """Device of the model's tensors (read from its buffers: every model has
        ``scales_initialised``)."""
        return next(iter(self.buffers())).device

    @property
    def dtype(self) -> torch.dtype:
        """Floating dtype of the model's parameters."""
        return next(iter(self.parameters())).dtype

    def init_scales(
        self, q: torch.Tensor, qd: torch.Tensor, qdd: torch.Tensor, tau: torch.Tensor
    ) -> None:
        """Set the fixed output/input scales from training data ``(N, n)``; once per model."""
        raise NotImplementedError

    # -- dynamics -------------------------------------------------------------------------------
    def forward(self, q: torch.Tensor, qd: torch.Tensor, qdd: torch.Tensor) -> torch.Tensor:
        """Inverse dynamics ``tau (B, n)``; what the trainer fits."""
        return self.inverse(q, qd, qdd)

    def inverse(self, q: torch.Tensor, qd: torch.Tensor, qdd: torch.Tensor) -> torch.Tensor:
        """Torque ``tau (B, n)`` that the motion ``q, qd, qdd (B, n)`` takes; every subclass
        defines it."""
        raise NotImplementedError

    def forward_dynamics(
        self, q: torch.Tensor, qd: torch.Tensor, tau: torch.Tensor
    ) -> torch.Tensor:
        """Acceleration ``qdd (B, n)`` produced by ``tau``."""
        raise NotImplementedError

    def _undefined(self, what: str) -> NoReturn:
        raise NotImplementedError(
            f'{type(self).__name__} ({self.kind!r}) is a black-box torque model: it has no '
            f'{what}. Use a DeLaN model (kind "delan") for the structured terms.'
        )

    def mass_matrix(self, q: torch.Tensor) -> torch.Tensor:
        """Inertia matrix ``H(q) (B, n, n)``; NotImplementedError for a black-box model."""
        self._undefined('mass matrix H(q)')

    def coriolis(self, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        """Coriolis/centrifugal torque ``c(q, qd) (B, n)``; NotImplementedError for a black-box
        model."""
        self._undefined('Coriolis/centrifugal term c(q, qd)')

    def gravity(self, q: torch.Tensor) -> torch.Tensor:
        """Gravity torque ``g(q) (B, n)``; NotImplementedError for a black-box model."""
        self._undefined('gravity term g(q)')

    def friction(self, qd: torch.Tensor) -> torch.Tensor:
        """Friction torque ``(B, n)`` at velocities ``qd``, where the model has a separate term;
        NotImplementedError otherwise."""
        self._undefined('separate friction term')

    def energy(self, q: torch.Tensor, qd: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Kinetic and potential energy ``(T, V)``, each ``(B,)``; NotImplementedError for a
        black-box model."""
        self._undefined('energy (T, V)')


# -- autograd helpers of the models that differentiate their networks by autograd ------------
def graph_input(x: torch.Tensor) -> torch.Tensor:
    """``x`` as a node autograd can differentiate with respect to.

    A tensor already in a graph (a rollout's state depends on the weights) is cloned, so its
    outer gradients still flow; any other is detached into a fresh leaf."""
    return x.clone() if x.requires_grad else x.detach().requires_grad_(True)


def grad(out: torch.Tensor, wrt: torch.Tensor, create_graph: bool = True) -> torch.Tensor:
    """``d out.sum() / d wrt`` (shaped as ``wrt``); zeros where ``out`` does not depend on it."""
    (g,) = torch.autograd.grad(
        out.sum(), wrt, create_graph=create_graph, retain_graph=True, allow_unused=True
    )
    return torch.zeros_like(wrt) if g is None else g


def joint_names_of(
    model: DynamicsModule, joint_names: Optional[Sequence[str]] = None
) -> List[str]:
    """``joint_names`` (given) or the model's own, else ``joint0, joint1, ...``; one per joint."""
    names = joint_names if joint_names is not None else model.joint_names
    if names is None:
        names = [f'joint{i}' for i in range(model.n_dof)]
    names = [str(s) for s in names]
    if len(names) != model.n_dof:
        raise ValueError(f'{len(names)} joint names for a {model.n_dof}-DoF model')
    return names


def data_scales(
    q: np.ndarray, qd: np.ndarray, qdd: np.ndarray, tau: np.ndarray
) -> Dict[str, np.ndarray]:
    """Order-of-magnitude scales of a data set, used to condition the networks' outputs.

    ``tau_std`` / ``qd_std`` / ``qdd_std`` are per joint ``(n,)``; ``h_scale`` (a typical inertia:
    the median of torque / acceleration spreads) and ``v_scale`` (a typical potential-energy
    change, torque * 1 rad) are scalars; ``h_joint (n,)`` is each joint's inertia estimate
    (:func:`joint_inertia_estimates`). Tiny or zero spreads are floored so a constant column
    cannot divide by zero.
    """

    def std(x):
        s = np.std(np.asarray(x, dtype=np.float64), axis=0)
        floor = max(1e-6, 1e-3 * float(np.max(s)) if s.size else 1e-6)
        return np.maximum(s, floor)

    tau_std, qd_std, qdd_std = std(tau), std(qd), std(qdd)
    tau_rms = float(np.sqrt(np.mean(np.asarray(tau, dtype=np.float64) ** 2)))
    ratio = np.clip(tau_std / qdd_std, 1e-6, 1e6)
    return {
        'h_joint': joint_inertia_estimates(q, qd, qdd, tau, ratio),
        'tau_std': tau_std,
        'qd_std': qd_std,
        'qdd_std': qdd_std,
        'tau_mean': np.mean(np.asarray(tau, dtype=np.float64), axis=0),
        'h_scale': float(np.clip(np.median(ratio), 1e-6, 1e6)),
        'v_scale': float(max(tau_rms, 1e-6)),
    }


def joint_inertia_estimates(
    q: np.ndarray, qd: np.ndarray, qdd: np.ndarray, tau: np.ndarray, upper: np.ndarray
) -> np.ndarray:
    """Each joint's inertia ``(n,)``: the coefficient of ``qdd_j`` in a least-squares fit of
    ``tau_j`` by every joint's ``qdd`` (a constant row of ``H``), its own friction features
    ``qd_j, tanh(qd_j / eps)``, gravity-like ``sin q, cos q`` and a constant, kept within
    ``[1e-4, 1] * upper`` (``upper`` = torque spread / acceleration spread).

    The spread ratio alone is far too large on a joint whose torque is mostly friction (a light
    roll joint: 3 orders of magnitude on the 7-DoF arm's wrist); a model started there keeps an
    inertia several times too large, which a computed-torque loop turns into several times its
    gains -- unstable at the control rate."""
    from delan_common.dynamics import COULOMB_SMOOTHING

    q, qd, qdd, tau = (np.asarray(x, dtype=np.float64) for x in (q, qd, qdd, tau))
    out = np.array(upper, dtype=np.float64)
    shared = np.concatenate([qdd, np.sin(q), np.cos(q), np.ones((len(tau), 1))], axis=1)
    for j in range(tau.shape[1]):
        A = np.concatenate(
            [shared, qd[:, j : j + 1], np.tanh(qd[:, j : j + 1] / COULOMB_SMOOTHING)], axis=1
        )
        try:
            coef = np.linalg.lstsq(A, tau[:, j], rcond=None)[0][j]
        except np.linalg.LinAlgError:
            continue
        if np.isfinite(coef):
            out[j] = np.clip(coef, 1e-4 * upper[j], upper[j])
    return out


def model_config(
    kind: str,
    width: int,
    depth: int,
    friction: bool = True,
    friction_model: str = DEFAULT_FRICTION_MODEL,
    inertia_invariant_joints: Sequence[int] = (),
) -> Dict[str, Any]:
    """The :func:`build_model` arguments of a ``kind`` model from the settings ``delan-train``
    and the learner share, which not every kind takes: the MLP has no friction term (its
    network learns friction with the rest: ``friction`` does not apply), and only the
    :data:`~delan_common.model_kinds.FRICTION_LAW_KINDS` choose a friction law. ValueError for
    another law on another kind (:func:`~delan_learning.train_config.friction_model_error`).
    ``inertia_invariant_joints`` (the joints the mass matrix does not depend on,
    :attr:`~delan_common.urdf_joints.RobotDescription.inertia_invariant_joints`) applies to the
    :data:`~delan_common.model_kinds.LEARNED_KINDS`, DeLaN's networks, and is dropped for the
    others."""
    error = friction_model_error(kind, friction_model)
    if error is not None:
        raise ValueError(error)
    config: Dict[str, Any] = {'width': width, 'depth': depth}
    if kind != 'mlp':
        config['friction'] = bool(friction)
    if kind in FRICTION_LAW_KINDS:
        config['friction_model'] = friction_model
    if kind in LEARNED_KINDS and inertia_invariant_joints:
        config['inertia_invariant_joints'] = [int(j) for j in inertia_invariant_joints]
    return config


def build_model(kind: str, joint_types: Sequence[str], **config: Any) -> DynamicsModule:
    """A fresh model of ``kind`` (:data:`MODEL_KINDS`) from :meth:`DynamicsModule.config`
    values."""
    if kind == 'delan':
        from delan_learning.lagrangian import DelanModel

        return DelanModel(joint_types, **config)
    if kind == 'delan_residual':
        from delan_learning.residual_model import ResidualDelanModel

        return ResidualDelanModel(joint_types, **config)
    if kind == 'mlp':
        from delan_learning.mlp import MlpInverseModel

        return MlpInverseModel(joint_types, **config)
    if kind == 'blackbox_lagrangian':
        from delan_learning.blackbox_lagrangian import BlackboxLagrangianModel

        return BlackboxLagrangianModel(joint_types, **config)
    if kind == 'hamiltonian':
        from delan_learning.hamiltonian import HamiltonianModel

        return HamiltonianModel(joint_types, **config)
    raise ValueError(f'unknown model kind {kind!r}; expected one of {MODEL_KINDS}')
