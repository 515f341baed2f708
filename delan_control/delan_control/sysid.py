"""Classical system identification: the strongest analytic peer of DeLaN.

The rigid-body torque is linear in the inertial parameters (Atkeson, An & Hollerbach 1986;
Gautier & Khalil): ``tau = Y(q, qd, qdd) pi``, with ``pi`` the 10 parameters of each moving
body ``[m, m c_x, m c_y, m c_z, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]`` (inertia about the joint
frame, Pinocchio's ``Inertia.toDynamicParameters`` order), and ``Y`` Pinocchio's
``computeJointTorqueRegressor``. The suite's friction ``b qd + fc tanh(qd / 0.05)`` is linear
in ``(b, fc)`` too, so the full model is ``tau = Phi(q, qd, qdd) theta``, ``theta = [pi; b; fc]``
(``12 n`` parameters).

Estimator (ridge toward the nominal URDF, in the full parameter space)::

    theta = theta_nom + diag(rho) delta,
    delta = argmin 1/M ||W (Phi theta - tau)||^2 + reg ||delta||^2

* ``W`` weights each joint's rows by ``1 / std(tau_j)``, so every joint counts equally (the
  per-joint nMSE is what we report); ``M`` = number of rows, so ``reg`` is relative to the mean
  squared *normalised* torque residual.
* ``rho`` are prior scales of each parameter from the nominal URDF (a body's mass, mass x
  length, mass x length^2, with floors so massless or on-axis nominal values still move; the
  friction terms' URDF values with a floor), so ``delta`` is a *relative* change and ``reg``
  reads as "how many units of normalised torque misfit a 100 % parameter change is worth".
* Not every parameter is identifiable (only the base parameters are, Gautier & Khalil; e.g. the
  first body's inertia about other axes than its joint axis never shows in the torques). We
  do *not* select base-parameter columns: the ridge term makes the full problem well-posed, and
  it leaves every unidentifiable direction exactly at the nominal value (those directions do
  not change any torque, so predictions are the least-squares ones). With ``reg = 0`` the
  minimum-norm solution (pseudo-inverse, cut at ``rcond``) does the same.
* Solved through the normal equations of the *weighted and scaled* problem, accumulated chunk
  by chunk (memory ``O(p^2)`` for any data size; 7x faster than a tall-skinny QR here):
  ``G = A^T A / M = V diag(ev) V^T``, ``delta = V diag(1 / (ev + reg)) V^T A^T r / M`` over the
  eigenvalues above ``rcond * ev_max`` (``rcond = 1e-12``, i.e. singular values above 1e-6 of
  the largest). The scaling keeps the condition number of ``A`` small (about 1e3 on the 7-DoF
  excitation data), so squaring it loses nothing that matters; ``fit.condition_number``
  reports it.

The identified model need not be physically consistent (no LMI constraints); its
``fit`` info reports whether each body's pseudo-inertia stays positive definite and the
smallest eigenvalue of ``H`` over the training data.

:class:`IdentifiedModel` implements the suite's ``DynamicsModel`` protocol: ``inverse`` and
``gravity`` through a Pinocchio model carrying the identified parameters (exactly ``Phi theta``,
the algorithms being linear in them) or through the regressor when some identified mass is not
positive; ``mass_matrix`` by CRBA (or regressor columns); ``forward`` by solving with ``H``.
Parameters are saved as JSON (with the robot description, so a file is self-contained).

CLI: ``delan-sysid --data X.npz --urdf U --out params.json [--reg R] [--holdout K]`` fits on all
but the last ``K`` trajectories (default 1 when the data hold 2 or more, else 0) and prints the
per-joint nMSE (train and held-out) as JSON.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pinocchio as pin

from delan_learning.dynamics import COULOMB_SMOOTHING, friction_torque
from .robot_model import RobotModel

FORMAT = 'delan_sysid/1'
DEFAULT_REG = 1e-7
PARAMS_PER_BODY = 10
PARAMETER_LAYOUT = ('per joint i in model order: [m, m*c_x, m*c_y, m*c_z, I_xx, I_xy, I_yy, '
                    'I_xz, I_yz, I_zz] of the body moved by joint i, inertia about the joint '
                    'frame (Pinocchio dynamic parameters); then viscous b (n); then Coulomb fc '
                    '(n), friction = b qd + fc tanh(qd / coulomb_smoothing)')


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
            raise ValueError('no qd/qdd, and delan_learning.data.complete_derivatives is not '
                             'available to estimate them') from None
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
            wrong = [nm for nm, ty in zip(robot.joint_names, robot.joint_types)
                     if nm in types and types[nm] != ty]
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
    return np.concatenate([np.arange(PARAMS_PER_BODY * (j - 1), PARAMS_PER_BODY * j)
                           for j in robot._jids])


def nominal_parameters(robot: RobotModel) -> np.ndarray:
    """``theta`` of a model: inertial parameters of each body, then viscous, then Coulomb."""
    pi = np.concatenate([robot.model.inertias[j].toDynamicParameters() for j in robot._jids])
    return np.concatenate([pi, robot.viscous, robot.coulomb])


def regressor(robot: RobotModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray,
              out: Optional[np.ndarray] = None) -> np.ndarray:
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


def parameter_scales(robot: RobotModel) -> np.ndarray:
    """Prior scale ``rho`` of each parameter (see the module docstring)."""
    masses = np.array([robot.model.inertias[j].mass for j in robot._jids])
    m_floor = 0.05 * max(float(masses.mean()), 1e-3)
    rho = []
    for j, m in zip(robot._jids, masses):
        I = robot.model.inertias[j]
        rg = math.sqrt(max(float(np.trace(I.inertia)), 0.0) / m) if m > 0 else 0.0
        L = max(float(np.linalg.norm(I.lever)), rg, 0.05)
        rm = max(float(m), m_floor)
        rho += [rm] + [rm * L] * 3 + [rm * L * L] * 6
    b, fc = robot.viscous, robot.coulomb
    rb = np.maximum(b, max(0.1 * float(b.max(initial=0.0)), 0.01))
    rf = np.maximum(fc, max(0.1 * float(fc.max(initial=0.0)), 0.01))
    return np.concatenate([np.asarray(rho), rb, rf])


def _pseudo_inertia_ok(pi: np.ndarray) -> bool:
    """Physical consistency of one body: its 4x4 pseudo-inertia is positive definite."""
    m, h = pi[0], pi[1:4]
    Ixx, Ixy, Iyy, Ixz, Iyz, Izz = pi[4:10]
    I = np.array([[Ixx, Ixy, Ixz], [Ixy, Iyy, Iyz], [Ixz, Iyz, Izz]])
    J = np.zeros((4, 4))
    J[:3, :3] = 0.5 * np.trace(I) * np.eye(3) - I
    J[:3, 3] = J[3, :3] = h
    J[3, 3] = m
    return bool(np.linalg.eigvalsh(J)[0] > 0)


# ---------------------------------------------------------------------------------- model
class IdentifiedModel:
    """A robot model with identified parameters; implements ``DynamicsModel``.

    ``IdentifiedModel(robot, theta, info=None)``: ``robot`` gives the kinematics (a
    :class:`RobotModel`, URDF path or XML), ``theta`` the ``12 n`` parameters (layout in
    ``PARAMETER_LAYOUT``).
    """

    def __init__(self, robot: Union[RobotModel, str], theta: np.ndarray,
                 info: Optional[Dict] = None):
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
        self.viscous = theta[p_in:p_in + n].copy()
        self.coulomb = theta[p_in + n:].copy()
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
                    self.inertial[PARAMS_PER_BODY * i:PARAMS_PER_BODY * (i + 1)])
        self._data = self._model.createData()
        self._cfg = self.robot.configuration
        self._Y = np.zeros((1, n, 12 * n))

    @property
    def n(self) -> int:
        return self.robot.n

    def physically_consistent(self) -> List[bool]:
        """Per body: is the identified pseudo-inertia positive definite?"""
        return [_pseudo_inertia_ok(self.inertial[10 * i:10 * i + 10]) for i in range(self.n)]

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
        return friction_torque(np.asarray(qd, dtype=np.float64), self.viscous, self.coulomb)

    def inverse(self, q, qd, qdd) -> np.ndarray:
        (q, qd, qdd), single = self._prep(q, qd, qdd)
        out = np.empty_like(q)
        for i in range(q.shape[0]):
            out[i] = self._rnea1(q[i], qd[i], qdd[i])
        out += self.friction(qd)
        return out[0] if single else out

    def gravity(self, q) -> np.ndarray:
        (q,), single = self._prep(q)
        z = np.zeros(self.n)
        out = np.stack([self._rnea1(qi, z, z) for qi in q])
        return out[0] if single else out

    def coriolis(self, q, qd) -> np.ndarray:
        (q, qd), single = self._prep(q, qd)
        z = np.zeros(self.n)
        out = np.stack([self._rnea1(q[i], qd[i], z) - self._rnea1(q[i], z, z)
                        for i in range(q.shape[0])])
        return out[0] if single else out

    def mass_matrix(self, q) -> np.ndarray:
        (q,), single = self._prep(q)
        out = np.stack([self._mass1(qi) for qi in q])
        return out[0] if single else out

    def forward(self, q, qd, tau) -> np.ndarray:
        (q, qd, tau), single = self._prep(q, qd, tau)
        z = np.zeros(self.n)
        out = np.empty_like(q)
        f = self.friction(qd)
        for i in range(q.shape[0]):
            rhs = tau[i] - f[i] - self._rnea1(q[i], qd[i], z)
            out[i] = np.linalg.solve(self._mass1(q[i]), rhs)
        return out[0] if single else out

    def energy(self, q, qd) -> Tuple[np.ndarray, np.ndarray]:
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
        return {'format': FORMAT, 'robot': self.robot.name, 'joint_names': self.joint_names,
                'joint_types': self.joint_types, 'parameter_layout': PARAMETER_LAYOUT,
                'coulomb_smoothing': COULOMB_SMOOTHING, 'theta': self.theta.tolist(),
                'theta_nominal': nominal_parameters(self.robot).tolist(),
                'fit': self.info, 'robot_description': self.robot.xml}

    def save(self, path: str) -> None:
        tmp = f'{path}.tmp'
        with open(tmp, 'w', encoding='utf-8') as fh:
            json.dump(self.to_dict(), fh, indent=1)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> 'IdentifiedModel':
        try:
            with open(path, 'r', encoding='utf-8') as fh:
                doc = json.load(fh)
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f'cannot read identified parameters {path}: {exc}') from None
        if not isinstance(doc, dict) or doc.get('format') != FORMAT:
            raise ValueError(f'{path}: not a {FORMAT} file')
        if abs(float(doc.get('coulomb_smoothing', COULOMB_SMOOTHING)) - COULOMB_SMOOTHING) > 0:
            raise ValueError(f'{path}: fitted with another Coulomb smoothing')
        model = cls(RobotModel(doc['robot_description']), np.asarray(doc['theta']),
                    doc.get('fit'))
        if model.joint_names != list(doc['joint_names']):
            raise ValueError(f'{path}: joint names do not match its robot description')
        return model

    def __repr__(self) -> str:
        return f'IdentifiedModel({self.robot.name!r}, {self.n} joints)'


# ---------------------------------------------------------------------------------- fit
def identify(robot: Union[RobotModel, str], q: np.ndarray, qd: np.ndarray, qdd: np.ndarray,
             tau: np.ndarray, reg: float = DEFAULT_REG, rcond: float = 1e-12,
             chunk: int = 2048) -> IdentifiedModel:
    """Ridge-toward-nominal least squares (module docstring); arrays ``(N, n)`` in model order.

    The nominal values are those of ``robot`` (its URDF, including any mismatch it carries).
    """
    robot = robot if isinstance(robot, RobotModel) else RobotModel(robot)
    if reg < 0 or not math.isfinite(reg):
        raise ValueError(f'reg must be >= 0, got {reg}')
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
    M = N * n
    G = np.zeros((p, p))
    b = np.zeros(p)
    buf = np.zeros((min(chunk, N), n, p))
    for s in range(0, N, chunk):
        e = min(N, s + chunk)
        Phi = regressor(robot, q[s:e], qd[s:e], qdd[s:e], out=buf[:e - s])
        r = ((tau[s:e] - Phi @ theta0) * w).reshape(-1)                     # (b n,)
        A = (Phi * (w[None, :, None] * rho[None, None, :])).reshape(-1, p)  # (b n, p)
        G += A.T @ A
        b += A.T @ r
    G /= M
    b /= M
    ev, V = np.linalg.eigh(0.5 * (G + G.T))
    ev_max = max(float(ev[-1]), 1e-300)
    keep = ev > rcond * ev_max
    filt = np.zeros_like(ev)
    filt[keep] = 1.0 / (ev[keep] + reg)
    delta = V @ (filt * (V.T @ b))
    s = np.sqrt(np.clip(ev[::-1], 0.0, None))
    theta = theta0 + rho * delta
    info = {'reg': reg, 'samples': int(N), 'parameters': int(p),
            'numerical_rank': int(keep.sum()),
            'condition_number': float(s[0] / s[int(keep.sum()) - 1]) if keep.any() else None,
            'seconds': round(time.perf_counter() - t0, 3)}
    model = IdentifiedModel(robot, theta, info)
    pred = model.inverse(q, qd, qdd)
    e = nmse(pred, tau)
    model.info['nmse_train'] = dict(zip(model.joint_names, map(float, e)))
    model.info['physically_consistent'] = model.physically_consistent()
    sample = np.linspace(0, N - 1, min(N, 200)).astype(int)
    model.info['min_mass_matrix_eig'] = float(min(np.linalg.eigvalsh(H)[0]
                                                  for H in model.mass_matrix(q[sample])))
    return model


def identify_dataset(robot: Union[RobotModel, str], data: Mapping[str, np.ndarray],
                     reg: float = DEFAULT_REG, holdout: Optional[int] = None
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
    test_ids = set(ids[len(ids) - holdout:]) if holdout else set()
    test = np.isin(traj, list(test_ids))
    train = ~test
    model = identify(robot, q[train], qd[train], qdd[train], tau[train], reg=reg)
    report = {'joint_names': model.joint_names, 'reg': reg,
              'n_train': int(train.sum()), 'n_test': int(test.sum()),
              'nmse_train': model.info['nmse_train'], 'nmse_test': None}
    if test.any():
        e = nmse(model.inverse(q[test], qd[test], qdd[test]), tau[test])
        report['nmse_test'] = dict(zip(model.joint_names, map(float, e)))
        model.info['nmse_test'] = report['nmse_test']
    report['physically_consistent'] = model.info['physically_consistent']
    report['min_mass_matrix_eig'] = model.info['min_mass_matrix_eig']
    report['numerical_rank'] = model.info['numerical_rank']
    report['parameters'] = model.info['parameters']
    return model, report


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog='delan-sysid',
                                 description='Least-squares identification of inertial and '
                                             'friction parameters (ridge toward the URDF).')
    ap.add_argument('--data', required=True, help='.npz with q, qd, qdd, tau (N, n)')
    ap.add_argument('--urdf', required=True, help='nominal URDF (path or urdf/ file name)')
    ap.add_argument('--out', required=True, help='identified parameters (.json)')
    ap.add_argument('--reg', type=float, default=DEFAULT_REG,
                    help=f'ridge weight toward the nominal parameters (default {DEFAULT_REG})')
    ap.add_argument('--holdout', type=int, default=None,
                    help='trajectories held out for testing (default 1 if >= 2, else 0)')
    args = ap.parse_args(argv)
    try:
        robot = RobotModel(args.urdf)
        data = load_data(args.data)
        model, report = identify_dataset(robot, data, reg=args.reg, holdout=args.holdout)
        model.save(args.out)
    except (ValueError, FileNotFoundError) as exc:
        print(f'delan-sysid: error: {exc}', file=sys.stderr)
        return 2
    report['out'] = args.out
    print(json.dumps(report))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
