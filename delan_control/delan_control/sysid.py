"""Classical system identification: the strongest analytic peer of DeLaN.

The rigid-body torque is linear in the inertial parameters (Atkeson, An & Hollerbach 1986;
Gautier & Khalil): ``tau = Y(q, qd, qdd) pi``, with ``pi`` the 10 parameters of each moving
body ``[m, m c_x, m c_y, m c_z, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]`` (inertia about the joint
frame, Pinocchio's ``Inertia.toDynamicParameters`` order), and ``Y`` Pinocchio's
``computeJointTorqueRegressor``. The suite's friction ``b qd + fc tanh(qd / 0.05)`` is linear
in ``(b, fc)`` too, so the full model is ``tau = Phi(q, qd, qdd) theta``, ``theta = [pi; b; fc]``
(``12 n`` parameters).

Objective (ridge toward the nominal URDF, in the full parameter space)::

    theta = theta_nom + diag(rho) delta,
    f(delta) = 1/M ||W (Phi theta - tau)||^2 + reg ||delta||^2

* ``W`` weights each joint's rows by ``1 / std(tau_j)``, so every joint counts equally (the
  per-joint nMSE is what we report: the first term is the mean over joints of the train nMSE);
  ``M`` = number of rows, so ``reg`` is relative to the mean squared *normalised* torque
  residual.
* ``rho`` are prior scales of each parameter from the nominal URDF (a body's mass, mass x
  length, mass x length^2, with floors so massless or on-axis nominal values still move; the
  friction terms' URDF values with a floor), so ``delta`` is a *relative* change and ``reg``
  reads as "how many units of normalised torque misfit a 100 % parameter change is worth".
* ``f`` is quadratic, so the data enter only through the normal equations of the *weighted
  and scaled* problem ``G = A^T A / M``, ``b = A^T r / M`` (``p x p``, ``p = 12 n``),
  accumulated chunk by chunk (memory ``O(p^2)`` for any data size; einsum loops, not a
  threaded BLAS, see :func:`_normal_equations`). Both estimators work on ``G, b`` alone.
* Not every parameter is identifiable (only the base parameters are, Gautier & Khalil; e.g. the
  first body's inertia about other axes than its joint axis never shows in the torques). We
  do *not* select base-parameter columns: the ridge term makes the full problem well-posed.

Two estimators (``identify(..., consistent=...)``, CLI ``--unconstrained``):

* **Consistent (default)**: minimise ``f`` subject to physical consistency -- every body's
  4x4 pseudo-inertia ``J = [[Sigma, h], [h^T, m]]`` (``Sigma = tr(I)/2 - I``) positive definite
  with a margin, ``J >= F_i = 1e-6 x`` (a solid sphere of the body's mass and length scale at
  its nominal centre of mass; Wensing, Kim & Slotine 2017: ``J > 0`` is exactly "some mass
  density produces these parameters"), and friction ``b, fc >= 0``. Then the mass matrix is
  positive definite at every configuration and the model can be used for control. The problem
  is convex (a quadratic over linear matrix inequalities) and solved by a log-det barrier
  (interior-point) Newton method on ``G, b``: ~100-200 Newton steps of size ``p``, 0.1 s for
  the 7-DoF arm, with a duality-gap bound (``fit.duality_gap_bound``) of ``1e-12`` of the
  nominal objective. The alternative ``solver='log_cholesky'`` parametrises each body by the
  log-Cholesky parameters of ``J - F`` (Rucker & Wensing 2022; Pinocchio's
  ``LogCholeskyParameters`` and its analytic Jacobian) and runs ``scipy``'s trust-region least
  squares: no constraints left and no spurious local minima, but it converges slowly when the
  optimum is on the boundary (some ``J - F`` singular, the usual case with little data): on
  7-DoF data its excess over the unconstrained objective was still 15 % above the barrier's
  optimum after 500 evaluations (0.7-10 s, against 0.2 s).
  Unidentifiable directions are no longer exactly at nominal: the constraint couples them to
  the identified ones (e.g. a body's identified first moment ``h`` needs ``Sigma >= h h^T /
  m``), and the ridge makes them move as little as consistency needs. A body whose nominal
  pseudo-inertia is not positive definite (a massless link, a URDF inertia breaking the
  triangle inequality) starts from its projection onto the consistent set; ``fit``
  lists it in ``floored_bodies``. When the unconstrained solution is already consistent it is
  the constrained optimum and is returned as such.
* **Unconstrained**: the linear ridge solution ``delta = V diag(1 / (ev + reg)) V^T b`` with
  ``G = V diag(ev) V^T`` over the eigenvalues above ``rcond * ev_max`` (``rcond = 1e-12``,
  i.e. singular values above 1e-6 of the largest); every unidentifiable direction stays exactly
  at nominal. The scaling keeps the condition number of ``A`` small (about 1e3 on the 7-DoF
  excitation data), so squaring it loses nothing that matters; ``fit.condition_number``
  reports it. Not physically consistent in general: on short or noisy excitation data of the
  7-DoF arm its mass matrix has eigenvalues down to -3 within the joint limits.

``fit`` (the model's ``info``, saved in the JSON) reports the train nMSE, whether each body's
pseudo-inertia is positive definite (``physically_consistent``), the smallest eigenvalue of
``H`` over (up to 1000 of) the training samples, the objective of the returned solution and of
the unconstrained one (``consistency_cost`` = their difference: what consistency costs in fit),
the Newton iterations and the seconds.

:class:`IdentifiedModel` implements the suite's ``DynamicsModel`` protocol: ``inverse`` and
``gravity`` through a Pinocchio model carrying the identified parameters (exactly ``Phi theta``,
the algorithms being linear in them) or through the regressor when some identified mass is not
positive; ``mass_matrix`` by CRBA (or regressor columns); ``forward`` by solving with ``H``.
Parameters are saved as JSON (with the robot description, so a file is self-contained).

CLI: ``delan-sysid (--data X.npz | --bag DIR) --urdf U --out params.json [--joints A,B,...]
[--reg R] [--holdout K] [--unconstrained]`` fits on all but the last ``K`` trajectories (default
1 when the data hold 2 or more, else 0) and prints the per-joint nMSE (train and held-out) as
JSON. A bag is read as ``delan-train --bag`` reads it (same options, same arrays as its
``delan-bag2npz`` conversion); ``--joints`` selects the joints of the URDF to identify, the
others locked.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pinocchio as pin

from delan_common.dynamics import COULOMB_SMOOTHING, Energy, friction_torque
from delan_common.robot_model import RobotModel

FORMAT = 'delan_sysid/1'
DEFAULT_REG = 1e-7
PARAMS_PER_BODY = 10
PARAMETER_LAYOUT = (
    'per joint i in model order: [m, m*c_x, m*c_y, m*c_z, I_xx, I_xy, I_yy, '
    'I_xz, I_yz, I_zz] of the body moved by joint i, inertia about the joint '
    'frame (Pinocchio dynamic parameters); then viscous b (n); then Coulomb fc '
    '(n), friction = b qd + fc tanh(qd / coulomb_smoothing)'
)


# ---------------------------------------------------------------------------------- data
def load_data(path: str) -> Dict[str, np.ndarray]:
    """The arrays of a trainer-format ``.npz`` (``allow_pickle=False``), ``qdd`` completed.

    Requires ``q``, ``qd``/``qdd`` or the means to estimate them, and ``tau``. When ``qdd`` is
    missing, ``delan_learning.data.complete_derivatives`` estimates it (needs ``t``).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f'no such data file: {path}')
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except Exception as exc:  # BadZipFile, ValueError (object arrays), OSError
        raise ValueError(f'cannot read {path} as .npz: {exc}') from None
    for key in ('q', 'tau'):
        if key not in arrays:
            raise ValueError(f'{path}: missing array {key!r} (have {sorted(arrays)})')
    try:
        return complete_arrays(arrays)
    except ValueError as exc:
        raise ValueError(f'{path}: {exc}') from None


def complete_arrays(arrays: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Checked float copies of ``q, qd, qdd, tau``; a missing ``qd``/``qdd`` is estimated by
    ``delan_learning.data.complete_derivatives`` (imported only then; needs ``t``)."""
    arrays = dict(arrays)
    if 'qd' not in arrays or 'qdd' not in arrays:
        try:
            from delan_learning.data import complete_derivatives
        except ImportError:
            raise ValueError(
                'no qd/qdd, and delan_learning.data.complete_derivatives is not '
                'available to estimate them'
            ) from None
        arrays = dict(complete_derivatives(arrays))
    n = np.asarray(arrays['q']).shape[-1]
    for key in ('q', 'qd', 'qdd', 'tau'):
        if key not in arrays:
            raise ValueError(f'missing array {key!r}')
        a = np.asarray(arrays[key], dtype=np.float64)
        if a.ndim != 2 or a.shape[1] != n or a.shape[0] != len(arrays['q']):
            raise ValueError(f'{key} has shape {a.shape}, expected (N, {n})')
        if not np.all(np.isfinite(a)):
            raise ValueError(f'{key} has NaN/Inf')
        arrays[key] = a
    return arrays


def nmse(pred: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Per-joint normalised MSE: ``mean((pred - target)^2) / var(target)``, ``(n,)``."""
    var = np.var(target, axis=0)
    var = np.where(var > 0, var, 1.0)
    return np.mean((pred - target) ** 2, axis=0) / var


def _in_model_order(robot: RobotModel, data: Mapping[str, np.ndarray]) -> Tuple[np.ndarray, ...]:
    arrays = [np.asarray(data[k], dtype=np.float64) for k in ('q', 'qd', 'qdd', 'tau')]
    if 'joint_names' in data:
        names = [str(s) for s in np.asarray(data['joint_names']).ravel()]
        if 'joint_types' in data:
            types = dict(zip(names, (str(s) for s in np.asarray(data['joint_types']).ravel())))
            wrong = [
                nm
                for nm, ty in zip(robot.joint_names, robot.joint_types)
                if nm in types and types[nm] != ty
            ]
            if wrong:
                raise ValueError(f'joint types of the data differ from the URDF for {wrong}')
        if names != robot.joint_names:
            arrays = [robot.to_model_order(names, a) for a in arrays]
    elif arrays[0].shape[1] != robot.n:
        raise ValueError(f'data have {arrays[0].shape[1]} joints, the URDF {robot.n}')
    return tuple(arrays)


# ---------------------------------------------------------------------------------- regressor
def _columns(robot: RobotModel) -> np.ndarray:
    """Regressor columns of each joint's body, in model order (Pinocchio orders by joint id)."""
    return np.concatenate(
        [np.arange(PARAMS_PER_BODY * (j - 1), PARAMS_PER_BODY * j) for j in robot._jids]
    )


def nominal_parameters(robot: RobotModel) -> np.ndarray:
    """``theta`` of a model: inertial parameters of each body, then viscous, then Coulomb."""
    pi = np.concatenate([robot.model.inertias[j].toDynamicParameters() for j in robot._jids])
    return np.concatenate([pi, robot.viscous, robot.coulomb])


def regressor(
    robot: RobotModel,
    q: np.ndarray,
    qd: np.ndarray,
    qdd: np.ndarray,
    out: Optional[np.ndarray] = None,
) -> np.ndarray:
    """``Phi``: ``(B, n, 12 n)`` so that ``tau = Phi @ theta`` (friction columns included)."""
    q, qd, qdd = (np.atleast_2d(np.asarray(a, dtype=np.float64)) for a in (q, qd, qdd))
    B, n = q.shape
    p_in = PARAMS_PER_BODY * n
    if out is None:
        out = np.zeros((B, n, p_in + 2 * n))
    cols = _columns(robot)
    ident = np.array_equal(cols, np.arange(p_in)) and robot.model.njoints - 1 == n
    m, d, cfg = robot.model, robot.data, robot.configuration
    for i in range(B):
        Y = pin.computeJointTorqueRegressor(m, d, cfg(q[i]), qd[i], qdd[i])
        out[i, :, :p_in] = Y if ident else Y[:, cols]
    diag = np.arange(n)
    out[:, diag, p_in + diag] = qd
    out[:, diag, p_in + n + diag] = np.tanh(qd / COULOMB_SMOOTHING)
    return out


def _body_scales(robot: RobotModel) -> Tuple[np.ndarray, np.ndarray]:
    """Per moving body: the mass scale ``rm`` (its mass, floored at 5 % of the mean) and the
    length scale ``L`` (lever, radius of gyration, at least 5 cm), from the nominal URDF."""
    masses = np.array([robot.model.inertias[j].mass for j in robot._jids])
    m_floor = 0.05 * max(float(masses.mean()), 1e-3)
    rms, Ls = [], []
    for j, m in zip(robot._jids, masses):
        I = robot.model.inertias[j]
        rg = math.sqrt(max(float(np.trace(I.inertia)), 0.0) / m) if m > 0 else 0.0
        Ls.append(max(float(np.linalg.norm(I.lever)), rg, 0.05))
        rms.append(max(float(m), m_floor))
    return np.asarray(rms), np.asarray(Ls)


def parameter_scales(robot: RobotModel) -> np.ndarray:
    """Prior scale ``rho`` of each parameter (see the module docstring)."""
    rho = []
    for rm, L in zip(*_body_scales(robot)):
        rho += [rm] + [rm * L] * 3 + [rm * L * L] * 6
    b, fc = robot.viscous, robot.coulomb
    rb = np.maximum(b, max(0.1 * float(b.max(initial=0.0)), 0.01))
    rf = np.maximum(fc, max(0.1 * float(fc.max(initial=0.0)), 0.01))
    return np.concatenate([np.asarray(rho), rb, rf])


def pseudo_inertia(pi: np.ndarray) -> np.ndarray:
    """The 4x4 pseudo-inertia ``[[Sigma, h], [h^T, m]]`` of one body's 10 dynamic parameters,
    ``Sigma = tr(I) / 2 - I`` (the second moment of the mass distribution)."""
    m, h = pi[0], pi[1:4]
    Ixx, Ixy, Iyy, Ixz, Iyz, Izz = pi[4:10]
    I = np.array([[Ixx, Ixy, Ixz], [Ixy, Iyy, Iyz], [Ixz, Iyz, Izz]])
    J = np.zeros((4, 4))
    J[:3, :3] = 0.5 * np.trace(I) * np.eye(3) - I
    J[:3, 3] = J[3, :3] = h
    J[3, 3] = m
    return J


def dynamic_parameters(J: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pseudo_inertia`: ``I = tr(Sigma) - Sigma``."""
    S = 0.5 * (J[:3, :3] + J[:3, :3].T)
    I = np.trace(S) * np.eye(3) - S
    return np.array(
        [J[3, 3], J[0, 3], J[1, 3], J[2, 3], I[0, 0], I[0, 1], I[1, 1], I[0, 2], I[1, 2], I[2, 2]]
    )


def _pseudo_inertia_ok(pi: np.ndarray) -> bool:
    """Physical consistency of one body: its 4x4 pseudo-inertia is positive definite."""
    return bool(np.linalg.eigvalsh(pseudo_inertia(pi))[0] > 0)


_FLIP = np.eye(4)[::-1]


def log_cholesky(K: np.ndarray) -> np.ndarray:
    """Log-Cholesky parameters ``[alpha, d1, d2, d3, s12, s23, s13, t1, t2, t3]`` of a positive
    definite 4x4 ``K`` (Rucker & Wensing 2022; Pinocchio's ``LogCholeskyParameters`` order):
    ``K = U U^T``, ``U = e^alpha [[e^d1, s12, s13, t1], [0, e^d2, s23, t2], [0, 0, e^d3, t3],
    [0, 0, 0, 1]]``. ``U`` is the upper-triangular factor: the lower Cholesky factor of the
    reversed matrix, reversed."""
    Lr = np.linalg.cholesky(_FLIP @ (0.5 * (K + K.T)) @ _FLIP)
    U = _FLIP @ Lr @ _FLIP
    alpha = math.log(U[3, 3])
    V = U / U[3, 3]
    return np.array(
        [
            alpha,
            math.log(V[0, 0]),
            math.log(V[1, 1]),
            math.log(V[2, 2]),
            V[0, 1],
            V[1, 2],
            V[0, 2],
            V[0, 3],
            V[1, 3],
            V[2, 3],
        ]
    )


def reference_pseudo_inertias(robot: RobotModel) -> np.ndarray:
    """Per body ``(n, 4, 4)``: a solid sphere of mass ``rm`` and radius ``L`` (the body's
    :func:`parameter_scales`) at its nominal centre of mass (the joint origin when massless) --
    the yardstick of the consistent estimator's floor and projections."""
    out = []
    for j, rm, L in zip(robot._jids, *_body_scales(robot)):
        I = robot.model.inertias[j]
        c = np.asarray(I.lever, dtype=np.float64) if I.mass > 0 else np.zeros(3)
        J = np.zeros((4, 4))
        J[:3, :3] = rm * (L * L / 5.0 * np.eye(3) + np.outer(c, c))
        J[:3, 3] = J[3, :3] = rm * c
        J[3, 3] = rm
        out.append(J)
    return np.asarray(out)


# ---------------------------------------------------------------------------------- model
_SELECTION_KEYS = ('joints', 'locked', 'effort_limits', 'velocity_limits')


def _jsonable_selection(selection: Dict) -> Dict:
    """``RobotModel.selection_kwargs()`` for JSON: infinite limits (not given) become null."""
    out = dict(selection)
    for k in ('effort_limits', 'velocity_limits'):
        if out.get(k) is not None:
            out[k] = [None if not math.isfinite(v) else float(v) for v in out[k]]
    return out


class IdentifiedModel:
    """A robot model with identified parameters; implements ``DynamicsModel``.

    ``IdentifiedModel(robot, theta, info=None)``: ``robot`` gives the kinematics (a
    :class:`RobotModel`, URDF path or XML), ``theta`` the ``12 n`` parameters (layout in
    ``PARAMETER_LAYOUT``).
    """

    def __init__(
        self, robot: Union[RobotModel, str], theta: np.ndarray, info: Optional[Dict] = None
    ):
        self.robot = robot if isinstance(robot, RobotModel) else RobotModel(robot)
        n = self.robot.n
        theta = np.asarray(theta, dtype=np.float64).reshape(-1)
        if theta.shape != (12 * n,) or not np.all(np.isfinite(theta)):
            raise ValueError(f'theta must be {12 * n} finite values, got {theta.shape}')
        self.theta = theta
        self.joint_names: List[str] = list(self.robot.joint_names)
        self.joint_types: List[str] = list(self.robot.joint_types)
        p_in = PARAMS_PER_BODY * n
        self.inertial = theta[:p_in]
        self.viscous = theta[p_in : p_in + n].copy()
        self.coulomb = theta[p_in + n :].copy()
        self.info: Dict = dict(info or {})
        masses = self.inertial[0::PARAMS_PER_BODY]
        # a Pinocchio model carrying the identified parameters: its RNEA/CRBA are linear in
        # them, so they give exactly Phi theta. Needs every mass > 0 (Pinocchio stores c = h/m).
        self.uses_pinocchio = bool(np.all(masses > 1e-9))
        self._model = self.robot.model.copy()
        self._model.armature = np.zeros(n)
        if self.uses_pinocchio:
            for i, j in enumerate(self.robot._jids):
                self._model.inertias[j] = pin.Inertia.FromDynamicParameters(
                    self.inertial[PARAMS_PER_BODY * i : PARAMS_PER_BODY * (i + 1)]
                )
        self._data = self._model.createData()
        self._cfg = self.robot.configuration
        self._Y = np.zeros((1, n, 12 * n))

    @property
    def n(self) -> int:
        """Number of joints."""
        return self.robot.n

    def physically_consistent(self) -> List[bool]:
        """Per body: is the identified pseudo-inertia positive definite?"""
        return [_pseudo_inertia_ok(self.inertial[10 * i : 10 * i + 10]) for i in range(self.n)]

    # -- rigid body
    def _prep(self, *arrays):
        return self.robot._prep(*arrays)

    def _rnea1(self, q, qd, qdd) -> np.ndarray:
        if self.uses_pinocchio:
            return pin.rnea(self._model, self._data, self._cfg(q), qd, qdd).copy()
        Y = regressor(self.robot, q, qd, qdd, out=self._Y)[0]
        p_in = PARAMS_PER_BODY * self.n
        return Y[:, :p_in] @ self.inertial

    def _mass1(self, q) -> np.ndarray:
        n = self.n
        if self.uses_pinocchio:
            M = pin.crba(self._model, self._data, self._cfg(q))
            return np.triu(M) + np.triu(M, 1).T
        z = np.zeros(n)
        g = self._rnea1(q, z, z)
        H = np.empty((n, n))
        for k in range(n):
            e = np.zeros(n)
            e[k] = 1.0
            H[:, k] = self._rnea1(q, z, e) - g
        return 0.5 * (H + H.T)

    def friction(self, qd: np.ndarray) -> np.ndarray:
        """Identified viscous + smooth Coulomb friction torque ``(..., n)`` at velocities
        ``qd``."""
        return friction_torque(np.asarray(qd, dtype=np.float64), self.viscous, self.coulomb)

    def inverse(self, q, qd, qdd) -> np.ndarray:
        """Torque ``(n,)`` or ``(B, n)`` for the motion ``(q, qd, qdd)``: rigid body (the
        identified inertial parameters) plus identified friction."""
        (q, qd, qdd), single = self._prep(q, qd, qdd)
        out = np.empty_like(q)
        for i in range(q.shape[0]):
            out[i] = self._rnea1(q[i], qd[i], qdd[i])
        out += self.friction(qd)
        return out[0] if single else out

    def gravity(self, q) -> np.ndarray:
        """Gravity torque ``g(q)``, ``(n,)`` or ``(B, n)`` (no friction)."""
        (q,), single = self._prep(q)
        z = np.zeros(self.n)
        out = np.stack([self._rnea1(qi, z, z) for qi in q])
        return out[0] if single else out

    def coriolis(self, q, qd) -> np.ndarray:
        """Coriolis and centrifugal torque ``C(q, qd) qd``, ``(n,)`` or ``(B, n)``: the RNEA at
        zero acceleration less gravity (no friction)."""
        (q, qd), single = self._prep(q, qd)
        z = np.zeros(self.n)
        out = np.stack(
            [self._rnea1(q[i], qd[i], z) - self._rnea1(q[i], z, z) for i in range(q.shape[0])]
        )
        return out[0] if single else out

    def mass_matrix(self, q) -> np.ndarray:
        """Symmetric joint-space inertia ``H(q)``, ``(n, n)`` or ``(B, n, n)``."""
        (q,), single = self._prep(q)
        out = np.stack([self._mass1(qi) for qi in q])
        return out[0] if single else out

    def forward(self, q, qd, tau) -> np.ndarray:
        """Acceleration ``(n,)`` or ``(B, n)`` that torques ``tau`` give at ``(q, qd)``: ``H^-1
        (tau - friction - C qd - g)``."""
        (q, qd, tau), single = self._prep(q, qd, tau)
        z = np.zeros(self.n)
        out = np.empty_like(q)
        f = self.friction(qd)
        for i in range(q.shape[0]):
            rhs = tau[i] - f[i] - self._rnea1(q[i], qd[i], z)
            out[i] = np.linalg.solve(self._mass1(q[i]), rhs)
        return out[0] if single else out

    def energy(self, q, qd) -> Tuple[Energy, Energy]:
        """``T = qd^T H qd / 2``; ``V`` from the potential-energy regressor (world origin = 0)."""
        (q, qd), single = self._prep(q, qd)
        B = q.shape[0]
        T, V = np.empty(B), np.empty(B)
        cols = _columns(self.robot)
        m, d = self.robot.model, self.robot.data
        for i in range(B):
            H = self._mass1(q[i])
            T[i] = 0.5 * qd[i] @ H @ qd[i]
            Yv = pin.computePotentialEnergyRegressor(m, d, self._cfg(q[i]))
            V[i] = float(np.asarray(Yv).reshape(-1)[cols] @ self.inertial)
        if single:
            return np.float64(T[0]), np.float64(V[0])
        return T, V

    # -- persistence
    def to_dict(self) -> Dict:
        """JSON-ready document: the parameters, the fit report, the robot description and joint
        selection, so :meth:`load` rebuilds the model without the URDF file."""
        return {
            'format': FORMAT,
            'robot': self.robot.name,
            'joint_names': self.joint_names,
            'joint_types': self.joint_types,
            'parameter_layout': PARAMETER_LAYOUT,
            'coulomb_smoothing': COULOMB_SMOOTHING,
            'theta': self.theta.tolist(),
            'theta_nominal': nominal_parameters(self.robot).tolist(),
            'fit': self.info,
            'robot_description': self.robot.xml,
            'selection': _jsonable_selection(self.robot.selection_kwargs()),
        }

    def save(self, path: str) -> None:
        """Write :meth:`to_dict` as JSON to ``path``, through a temporary file so a reader never
        sees half a file."""
        tmp = f'{path}.tmp'
        with open(tmp, 'w', encoding='utf-8') as fh:
            json.dump(self.to_dict(), fh, indent=1)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> 'IdentifiedModel':
        """The model :meth:`save` wrote; ValueError for an unreadable, foreign or inconsistent file
        (another format or Coulomb smoothing, joint names that do not match)."""
        try:
            with open(path, 'r', encoding='utf-8') as fh:
                doc = json.load(fh)
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f'cannot read identified parameters {path}: {exc}') from None
        if not isinstance(doc, dict) or doc.get('format') != FORMAT:
            raise ValueError(f'{path}: not a {FORMAT} file')
        if abs(float(doc.get('coulomb_smoothing', COULOMB_SMOOTHING)) - COULOMB_SMOOTHING) > 0:
            raise ValueError(f'{path}: fitted with another Coulomb smoothing')
        selection = doc.get('selection') or {}
        if not isinstance(selection, dict) or not set(selection) <= set(_SELECTION_KEYS):
            raise ValueError(f'{path}: unreadable joint selection {selection!r}')
        try:
            limits = {
                k: [math.inf if v is None else float(v) for v in selection[k]]
                for k in ('effort_limits', 'velocity_limits')
                if selection.get(k) is not None
            }
            robot = RobotModel(doc['robot_description'], **dict(selection, **limits))
        except (TypeError, ValueError) as exc:
            raise ValueError(f'{path}: unreadable joint selection {selection!r} ({exc})') from None
        model = cls(robot, np.asarray(doc['theta']), doc.get('fit'))
        if model.joint_names != list(doc['joint_names']):
            raise ValueError(f'{path}: joint names do not match its robot description')
        return model

    def __repr__(self) -> str:
        return f'IdentifiedModel({self.robot.name!r}, {self.n} joints)'


# ---------------------------------------------------------------------------------- fit
def _normal_equations(
    robot: RobotModel, q, qd, qdd, tau, theta0, rho, w, chunk: int
) -> Tuple[np.ndarray, np.ndarray, float]:
    """``G = A^T A / M``, ``b = A^T r / M``, ``c = r^T r / M`` of the weighted, scaled problem,
    accumulated chunk by chunk. The products are ``np.einsum`` loops, not BLAS: a threaded
    OpenBLAS GEMM on a machine whose cores are busy (the demo's nodes, other jobs) waits for
    its threads and ran 10-300x slower than one thread (measured: 0.05 s -> 2-15 s for 15,000
    7-DoF samples); the loops take ~0.2 s whatever the load."""
    N, n = q.shape
    p = theta0.size
    G = np.zeros((p, p))
    b = np.zeros(p)
    c = 0.0
    scale = w[None, :, None] * rho[None, None, :]
    buf = np.zeros((min(chunk, N), n, p))
    for s in range(0, N, chunk):
        e = min(N, s + chunk)
        Phi = regressor(robot, q[s:e], qd[s:e], qdd[s:e], out=buf[: e - s])
        r = ((tau[s:e] - np.einsum('bjp,p->bj', Phi, theta0)) * w).reshape(-1)  # (b n,)
        A = (Phi * scale).reshape(-1, p)  # (b n, p)
        G += np.einsum('ri,rj->ij', A, A)
        b += np.einsum('ri,r->i', A, r)
        c += float(r @ r)
    M = N * n
    return 0.5 * (G + G.T) / M, b / M, c / M


def _objective(delta: np.ndarray, G: np.ndarray, b: np.ndarray, c: float, reg: float) -> float:
    """``1/M ||W (Phi theta - tau)||^2 + reg ||delta||^2`` from the normal equations."""
    return max(float(delta @ (G @ delta) - 2.0 * b @ delta + c + reg * delta @ delta), 0.0)


class _ConsistentProblem:
    """The consistent estimator on ``G, b`` alone.

    With ``G = V diag(ev) V^T`` (eigenvalues below ``rcond ev_max`` dropped, as the unconstrained
    solution does), ``S = diag(sqrt(ev + reg)) V^T`` and ``z = diag(1 / sqrt(ev + reg)) V^T b``,
    the objective is ``||S delta - z||^2`` plus a constant, and ``S delta_u = z`` at the
    unconstrained solution: this cost is exactly how much worse than it the fit is. Dropped
    directions get the weight ``max(reg, rcond ev_max)`` (so ``reg = 0`` still pins them).

    Feasible set: every body's pseudo-inertia ``J >= F`` (``F = margin x``
    :func:`reference_pseudo_inertias`, so ``J`` is positive definite with a margin), friction
    ``>= 0``. Two solvers:

    * ``interior_point`` (default): the problem is convex in ``delta`` (a quadratic over linear
      matrix inequalities), so a log-det barrier method finds the global optimum: Newton steps
      on ``t q(delta) - sum log det(J_i - F_i) - sum log theta_f``, ``t`` x10 until the
      duality-gap bound ``(4 + 2) n / t`` is below ``1e-12`` of the nominal objective.
    * ``log_cholesky``: per body the 10 log-Cholesky parameters of ``J - F`` (Pinocchio's
      ``LogCholeskyParameters``, analytic Jacobian ``calculateJacobian``), friction bounded;
      ``scipy.optimize.least_squares`` (trf). Unconstrained, nonconvex, but every stationary
      point is the global optimum (the map is a diffeomorphism onto the feasible interior);
      it converges slowly when the optimum lies on the boundary (a body with a singular
      ``J - F``, usual with little data): kept for comparison.
    """

    def __init__(
        self,
        robot: RobotModel,
        theta0: np.ndarray,
        rho: np.ndarray,
        ev: np.ndarray,
        V: np.ndarray,
        b: np.ndarray,
        keep: np.ndarray,
        reg: float,
        rcond: float,
        margin: float,
    ):
        n = robot.n
        self.n, self.p_in = n, PARAMS_PER_BODY * n
        self.theta0, self.rho = theta0, rho
        ev_max = max(float(ev[-1]), 1e-300)
        weight = np.where(keep, np.clip(ev, 0.0, None) + reg, max(reg, rcond * ev_max))
        weight = np.maximum(weight, 1e-300)
        self.S = np.sqrt(weight)[:, None] * V.T
        self.z = np.where(keep, (V.T @ b) / np.sqrt(weight), 0.0)
        self.ref = reference_pseudo_inertias(robot)
        self.floor = margin * self.ref
        self.floor_pi = np.concatenate([dynamic_parameters(F) for F in self.floor])
        self.margin = margin
        f0 = theta0[self.p_in :]
        self.lower = np.concatenate([np.full(self.p_in, -np.inf), -f0 / rho[self.p_in :]])
        self._ref_chol = [np.linalg.cholesky(R) for R in self.ref]

    # -- parametrisation
    def project(self, pi_body: np.ndarray, i: int) -> Tuple[np.ndarray, bool]:
        """Log-Cholesky parameters of the consistent body nearest to ``pi_body`` (eigenvalues
        clipped in the metric of the reference sphere: ``J - F >= margin x ref``); and whether
        it had to move."""
        Lr = self._ref_chol[i]
        K = pseudo_inertia(pi_body) - self.floor[i]
        Kw = np.linalg.solve(Lr, np.linalg.solve(Lr, K).T)  # Lr^-1 K Lr^-T
        lam, Q = np.linalg.eigh(0.5 * (Kw + Kw.T))
        moved = bool(lam[0] < self.margin)
        if moved:
            Kw = (Q * np.maximum(lam, self.margin)) @ Q.T
            K = Lr @ Kw @ Lr.T
        return log_cholesky(K), moved

    def start(self, theta: np.ndarray) -> Tuple[np.ndarray, List[int]]:
        """``x`` of the consistent point nearest to ``theta``; the bodies that had to move."""
        x = np.empty(self.theta0.size)
        moved = []
        for i in range(self.n):
            sl = slice(PARAMS_PER_BODY * i, PARAMS_PER_BODY * (i + 1))
            x[sl], mv = self.project(theta[sl], i)
            if mv:
                moved.append(i)
        x[self.p_in :] = np.maximum(
            (theta[self.p_in :] - self.theta0[self.p_in :]) / self.rho[self.p_in :],
            self.lower[self.p_in :],
        )
        return x, moved

    def theta(self, x: np.ndarray) -> np.ndarray:
        out = np.empty_like(self.theta0)
        for i in range(self.n):
            sl = slice(PARAMS_PER_BODY * i, PARAMS_PER_BODY * (i + 1))
            out[sl] = self.floor_pi[sl] + pin.LogCholeskyParameters(x[sl]).toDynamicParameters()
        out[self.p_in :] = np.maximum(
            self.theta0[self.p_in :] + self.rho[self.p_in :] * x[self.p_in :], 0.0
        )
        return out

    def delta(self, x: np.ndarray) -> np.ndarray:
        return (self.theta(x) - self.theta0) / self.rho

    # -- least squares
    def residual(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(over='ignore', invalid='ignore'):  # a trial step that overflows exp
            return self.S @ self.delta(x) - self.z  # is non-finite: trf shrinks it

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        Jx = np.empty_like(self.S)
        for i in range(self.n):
            sl = slice(PARAMS_PER_BODY * i, PARAMS_PER_BODY * (i + 1))
            D = pin.LogCholeskyParameters(x[sl]).calculateJacobian() / self.rho[sl, None]
            Jx[:, sl] = self.S[:, sl] @ D
        Jx[:, self.p_in :] = self.S[:, self.p_in :]
        return Jx

    def cost(self, x: np.ndarray) -> float:
        r = self.residual(x)
        return float(r @ r)

    def solve_log_cholesky(self, x0: np.ndarray, max_nfev: int):
        """trf from ``x0``, once with the variables scaled by the Jacobian's columns and once
        unscaled, the lower cost kept: each scaling stalls far above the optimum on some data
        (a collapsed trust region near the boundary; scaled: a 2-link arm's full data set,
        unscaled: a UR5's short one). Tolerances 1e-15: with 1e-12 its step test stopped it
        after 3 iterations at 500x the optimal cost; in practice each run ends at
        ``max_nfev``. ``njev`` of the result counts both runs."""
        from scipy.optimize import least_squares

        runs = []
        with np.errstate(over='ignore', invalid='ignore'):
            for x_scale in ('jac', 1.0):
                runs.append(
                    least_squares(
                        self.residual,
                        x0,
                        jac=self.jacobian,
                        bounds=(self.lower, np.full_like(self.lower, np.inf)),
                        method='trf',
                        x_scale=x_scale,
                        ftol=1e-15,
                        xtol=1e-15,
                        gtol=1e-15,
                        max_nfev=max_nfev,
                    )
                )
        best = min(runs, key=lambda r: float(r.cost) if np.isfinite(r.cost) else np.inf)
        best.njev = sum(int(r.njev) for r in runs)
        return best

    # -- interior point, in delta
    def _barrier(self, delta: np.ndarray):
        """``-sum log det(J_i - F_i) - sum log theta_f`` (inf outside) and ``X_i, theta_f``."""
        X = self._X0 + np.einsum('nk,nkab->nab', delta[: self.p_in].reshape(self.n, 10), self._dX)
        y = self.theta0[self.p_in :] + self.rho[self.p_in :] * delta[self.p_in :]
        if np.any(y <= 0):
            return np.inf, X, y
        try:
            L = np.linalg.cholesky(X)
        except np.linalg.LinAlgError:
            return np.inf, X, y
        return (
            (
                -2.0 * float(np.log(np.diagonal(L, axis1=1, axis2=2)).sum())
                - float(np.log(y).sum())
            ),
            X,
            y,
        )

    def solve_interior_point(
        self, delta0: np.ndarray, gap_tol: float, max_newton: int = 600
    ) -> Tuple[np.ndarray, int, float, int]:
        """Barrier method from the strictly feasible ``delta0``: ``(delta, Newton steps,
        duality-gap bound, status)``; status 0: converged (the bound holds), 1: the line
        search stalled (rounding; the bound is then approximate), 2: ``max_newton`` reached."""
        n, p_in = self.n, self.p_in
        p = self.theta0.size
        H = self.S.T @ self.S
        lin = self.S.T @ self.z
        E = np.stack([pseudo_inertia(e) for e in np.eye(PARAMS_PER_BODY)])  # (10, 4, 4)
        self._X0 = (
            np.stack([pseudo_inertia(self.theta0[10 * i : 10 * i + 10]) for i in range(n)])
            - self.floor
        )
        self._dX = self.rho[:p_in].reshape(n, 10)[:, :, None, None] * E[None]  # dX / d delta
        rf = self.rho[p_in:]
        m = 6 * n  # barrier degree: 4 per body, 1 per friction
        d = delta0.copy()
        t = m / max(float(np.sum((self.S @ d - self.z) ** 2)), 1e-300)
        steps, status = 0, 0
        Hb = np.zeros((p, p))
        gb = np.zeros(p)
        while steps < max_newton:
            status = 0  # of the last centring, the one the bound is about
            for _ in range(60):
                bval, X, y = self._barrier(d)
                A = np.einsum('nab,nkbc->nkac', np.linalg.inv(X), self._dX)  # X^-1 dX_k
                gb[:p_in] = -np.einsum('nkaa->nk', A).reshape(-1)
                blk = np.einsum('nkab,nlba->nkl', A, A)
                Hb[:] = 0.0
                for i in range(n):
                    Hb[10 * i : 10 * i + 10, 10 * i : 10 * i + 10] = blk[i]
                gb[p_in:] = -rf / y
                Hb[p_in:, p_in:] = np.diag((rf / y) ** 2)
                g = t * (2.0 * (H @ d) - 2.0 * lin) + gb
                step = -np.linalg.solve(2.0 * t * H + Hb, g)
                slope = float(g @ step)
                steps += 1
                if -slope / 2.0 < 1e-7:
                    break
                if steps >= max_newton:
                    status = 2
                    break
                f_cur = t * float(d @ (H @ d) - 2.0 * lin @ d) + bval
                s = 1.0
                while s > 1e-12:
                    dn = d + s * step
                    bn = self._barrier(dn)[0]
                    if math.isfinite(bn) and (
                        t * float(dn @ (H @ dn) - 2.0 * lin @ dn) + bn <= f_cur + 0.25 * s * slope
                    ):
                        break
                    s *= 0.5
                if s <= 1e-12:
                    status = 1  # no progress at this t
                    break
                d = dn
            if m / t < gap_tol or status == 2:
                break
            t *= 10.0
        return d, steps, m / t, status


CONSISTENCY_MARGIN = 1e-6
SOLVERS = ('interior_point', 'log_cholesky')
MAX_FUNCTION_EVALUATIONS = 500  # log_cholesky solver


def identify(
    robot: Union[RobotModel, str],
    q: np.ndarray,
    qd: np.ndarray,
    qdd: np.ndarray,
    tau: np.ndarray,
    reg: float = DEFAULT_REG,
    rcond: float = 1e-12,
    chunk: int = 2048,
    consistent: bool = True,
    margin: float = CONSISTENCY_MARGIN,
    solver: str = 'interior_point',
) -> IdentifiedModel:
    """Ridge-toward-nominal least squares (module docstring); arrays ``(N, n)`` in model order.

    ``consistent`` (default): the physically consistent estimator (every body's pseudo-inertia
    ``>= margin x`` its reference sphere, friction ``>= 0``; ``solver`` one of ``SOLVERS``, see
    :class:`_ConsistentProblem`); ``False``: the unconstrained linear one. The nominal values
    are those of ``robot`` (its URDF, including any mismatch it carries).
    """
    robot = robot if isinstance(robot, RobotModel) else RobotModel(robot)
    if reg < 0 or not math.isfinite(reg):
        raise ValueError(f'reg must be >= 0, got {reg}')
    if not 0 < margin < 1:
        raise ValueError(f'margin must be in (0, 1), got {margin}')
    if solver not in SOLVERS:
        raise ValueError(f'solver must be one of {SOLVERS}, got {solver!r}')
    q, qd, qdd, tau = (np.asarray(a, dtype=np.float64) for a in (q, qd, qdd, tau))
    N, n = q.shape
    if n != robot.n or any(a.shape != (N, n) for a in (qd, qdd, tau)):
        raise ValueError(f'q, qd, qdd, tau must all be (N, {robot.n})')
    if N == 0:
        raise ValueError('no samples')
    t0 = time.perf_counter()
    theta0 = nominal_parameters(robot)
    rho = parameter_scales(robot)
    p = theta0.size
    std = tau.std(axis=0)
    w = 1.0 / np.where(std > 1e-9, std, max(float(std.max()), 1e-9))
    G, b, c = _normal_equations(robot, q, qd, qdd, tau, theta0, rho, w, chunk)
    t_acc = time.perf_counter() - t0
    ev, V = np.linalg.eigh(G)
    ev_max = max(float(ev[-1]), 1e-300)
    keep = ev > rcond * ev_max
    filt = np.zeros_like(ev)
    filt[keep] = 1.0 / (ev[keep] + reg)
    delta_u = V @ (filt * (V.T @ b))
    s = np.sqrt(np.clip(ev[::-1], 0.0, None))
    theta_u = theta0 + rho * delta_u
    names = list(robot.joint_names)
    info: Dict[str, Any] = {
        'estimator': 'consistent' if consistent else 'unconstrained',
        'reg': reg,
        'samples': int(N),
        'parameters': int(p),
        'numerical_rank': int(keep.sum()),
        'condition_number': float(s[0] / s[int(keep.sum()) - 1]) if keep.any() else None,
        'objective_nominal': _objective(np.zeros(p), G, b, c, reg),
        'objective_unconstrained': _objective(delta_u, G, b, c, reg),
    }
    theta = theta_u
    if consistent:
        t1 = time.perf_counter()
        prob = _ConsistentProblem(robot, theta0, rho, ev, V, b, keep, reg, rcond, margin)
        x_nom, floored = prob.start(theta0)
        x_unc, projected = prob.start(theta_u)
        friction_ok = bool(np.all(theta_u[PARAMS_PER_BODY * n :] >= 0))
        if not projected and friction_ok:
            # the unconstrained optimum is consistent: it is the constrained one too
            theta, start, iters, status, gap = (
                theta_u,
                'unconstrained (already consistent)',
                0,
                0,
                0.0,
            )
        else:
            costs = {'nominal': prob.cost(x_nom), 'projected unconstrained': prob.cost(x_unc)}
            start = min(costs, key=costs.__getitem__)
            x0 = x_nom if start == 'nominal' else x_unc
            if solver == 'log_cholesky':
                res = prob.solve_log_cholesky(x0, MAX_FUNCTION_EVALUATIONS)
                theta, iters, status, gap = prob.theta(res.x), int(res.njev), int(res.status), None
            else:
                delta0 = prob.delta(x0)
                # strictly inside the friction bound (the barrier needs it)
                p_in = PARAMS_PER_BODY * n
                delta0[p_in:] = np.maximum(
                    delta0[p_in:], (1e-3 * rho[p_in:] - theta0[p_in:]) / rho[p_in:]
                )
                d, iters, gap, status = prob.solve_interior_point(
                    delta0, gap_tol=1e-12 * max(info['objective_nominal'], 1e-300)
                )
                theta = theta0 + rho * d
        info.update(
            {
                'objective': _objective((theta - theta0) / rho, G, b, c, reg),
                'consistency_cost': float(
                    np.sum((prob.S @ ((theta - theta0) / rho) - prob.z) ** 2)
                ),
                'solver': solver,
                'start': start,
                'iterations': iters,
                'duality_gap_bound': gap,
                'optimizer_status': status,
                'consistency_margin': margin,
                'floored_bodies': [names[i] for i in floored],
                'unconstrained_inconsistent_bodies': [names[i] for i in projected],
                'seconds_optimizer': round(time.perf_counter() - t1, 3),
            }
        )
    else:
        info.update({'objective': info['objective_unconstrained'], 'iterations': 0})
    info['seconds_normal_equations'] = round(t_acc, 3)
    info['seconds'] = round(time.perf_counter() - t0, 3)
    model = IdentifiedModel(robot, theta, info)
    pred = model.inverse(q, qd, qdd)
    e = nmse(pred, tau)
    model.info['nmse_train'] = dict(zip(model.joint_names, map(float, e)))
    model.info['physically_consistent'] = model.physically_consistent()
    sample = np.linspace(0, N - 1, min(N, MASS_MATRIX_SAMPLES)).astype(int)
    model.info['min_mass_matrix_eig'] = float(
        np.linalg.eigvalsh(model.mass_matrix(q[sample]))[:, 0].min()
    )
    model.info['seconds_total'] = round(time.perf_counter() - t0, 3)
    return model


MASS_MATRIX_SAMPLES = 1000


def identify_dataset(
    robot: Union[RobotModel, str],
    data: Mapping[str, np.ndarray],
    reg: float = DEFAULT_REG,
    holdout: Optional[int] = None,
    consistent: bool = True,
) -> Tuple[IdentifiedModel, Dict]:
    """Fit on all trajectories but the last ``holdout`` (default: 1 if >= 2 exist, else 0);
    returns the model and a report with per-joint nMSE on train and held-out data."""
    robot = robot if isinstance(robot, RobotModel) else RobotModel(robot)
    data = complete_arrays(data)
    q, qd, qdd, tau = _in_model_order(robot, data)
    traj = np.asarray(data['traj']).astype(np.int64) if 'traj' in data else np.zeros(len(q), int)
    ids = list(dict.fromkeys(traj.tolist()))
    if holdout is None:
        holdout = 1 if len(ids) >= 2 else 0
    if holdout < 0 or (holdout > 0 and holdout >= len(ids)):
        raise ValueError(f'holdout={holdout} leaves no training trajectory ({len(ids)} in data)')
    test_ids = set(ids[len(ids) - holdout :]) if holdout else set()
    test = np.isin(traj, list(test_ids))
    train = ~test
    model = identify(
        robot, q[train], qd[train], qdd[train], tau[train], reg=reg, consistent=consistent
    )
    report = {
        'joint_names': model.joint_names,
        'estimator': model.info['estimator'],
        'reg': reg,
        'n_train': int(train.sum()),
        'n_test': int(test.sum()),
        'nmse_train': model.info['nmse_train'],
        'nmse_test': None,
    }
    if test.any():
        e = nmse(model.inverse(q[test], qd[test], qdd[test]), tau[test])
        report['nmse_test'] = dict(zip(model.joint_names, map(float, e)))
        model.info['nmse_test'] = report['nmse_test']
    report['physically_consistent'] = model.info['physically_consistent']
    report['min_mass_matrix_eig'] = model.info['min_mass_matrix_eig']
    for key in (
        'numerical_rank',
        'parameters',
        'objective',
        'objective_unconstrained',
        'iterations',
        'seconds',
    ):
        report[key] = model.info[key]
    if consistent:
        report['floored_bodies'] = model.info['floored_bodies']
    return model, report


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``delan-sysid``; returns the exit code."""
    # the bag and npz readers are delan_learning's; the identified model itself needs neither
    from delan_learning.cli_args import add_data_arguments, arrays_from_args

    ap = argparse.ArgumentParser(
        prog='delan-sysid',
        description='Least-squares identification of inertial and '
        'friction parameters (ridge toward the URDF), '
        'physically consistent unless --unconstrained.',
    )
    add_data_arguments(
        ap,
        'joints to identify, comma separated (default: the main chain of '
        'the URDF); the other movable joints are locked, and the data are read '
        'for these joints',
    )
    ap.add_argument('--urdf', required=True, help='nominal URDF (path or urdf/ file name)')
    ap.add_argument('--out', required=True, help='identified parameters (.json)')
    ap.add_argument(
        '--reg',
        type=float,
        default=DEFAULT_REG,
        help=f'ridge weight toward the nominal parameters (default {DEFAULT_REG})',
    )
    ap.add_argument(
        '--holdout',
        type=int,
        default=None,
        help='trajectories held out for testing (default 1 if >= 2, else 0)',
    )
    ap.add_argument(
        '--unconstrained',
        action='store_true',
        help='the plain linear estimator (no physical-consistency constraints: '
        'its mass matrix may be indefinite)',
    )
    args = ap.parse_args(argv)
    try:
        robot = RobotModel(args.urdf, joints=args.joints)
        data = arrays_from_args(args, load_data)
        model, report = identify_dataset(
            robot, data, reg=args.reg, holdout=args.holdout, consistent=not args.unconstrained
        )
        model.save(args.out)
    except (ValueError, FileNotFoundError) as exc:
        print(f'delan-sysid: error: {exc}', file=sys.stderr)
        return 2
    report['out'] = args.out
    print(json.dumps(report))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
