"""Swing-up experiments on the simulated plant: excitation data of an under-actuated robot, a
DeLaN trained on them, and closed-loop runs of
:class:`~delan_control.energy_control.EnergySwingUp`.

Shared by ``delan_control/test/test_energy_control.py`` and ``bench/bench_swing_up.py``. numpy
and the plant only; :func:`train_delan` imports torch and ``delan_learning`` when called (a test
dependency of this package, as in :mod:`delan_control.model_loader`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

import numpy as np

from delan_common.excitation import random_fourier_trajectory
from delan_control.energy_control import EnergySwingUp, wrap_angle
from delan_control.plant import Plant

#: the under-actuated robot of ``delan_bringup``: arm (motor) about the vertical, pendulum free
FURUTA = 'furuta_pendulum.urdf'
FURUTA_ACTUATED = (True, False)
#: arm at 0, pendulum upright
FURUTA_UPRIGHT = (0.0, np.pi)


def excitation_data(
    plant: Plant,
    *,
    trajectories: int = 8,
    duration: float = 8.0,
    rate: float = 200.0,
    seed: int = 0,
    kp: float = 3.0,
    kd: float = 0.2,
    passive_speed: float = 1.0,
    upright: Optional[Sequence[float]] = None,
    upright_fraction: float = 0.5,
) -> Dict[str, np.ndarray]:
    """Training data of the plant's actuated joints tracking a random excitation, passive ones
    swinging: the learner's ``.npz`` keys ``q, qd, qdd, tau (N, n)``, ``traj, t (N,)``,
    ``joint_names, joint_types (n,)``.

    Per trajectory (seeded): a random Fourier reference on the actuated joints
    (:func:`~delan_common.excitation.random_fourier_trajectory`, 30 % of the range kept free at
    each limit, 0.3-1.5 Hz, within 0.6 of the velocity limit) tracked by a PD (``kp`` [N m/rad],
    ``kd`` [N m s/rad]) at ``rate`` with the torque held between ticks; the passive joints start
    at a uniformly random angle and a normal random velocity (std ``passive_speed``) so their
    whole circle is seen -- or, for ``upright_fraction`` of the trajectories when ``upright
    (n,)`` is given, released from within 0.3 rad of it nearly at rest: a pendulum passes the
    top too fast to be learned there from swings alone, and the balance needs the model there.
    ``tau`` is the plant's applied torque (0 on passive joints), ``qdd`` the true acceleration
    at the sample (exact data). Uses the plant's ``actuated`` mask.
    """
    rng = np.random.default_rng(seed)
    n, a = plant.n, np.flatnonzero(plant.actuated)
    spec = plant.truth.spec
    sub = max(1, int(round(plant.physics_rate / rate)))
    steps = int(round(duration * rate))
    out: Dict[str, list] = {k: [] for k in ('q', 'qd', 'qdd', 'tau', 'traj', 't')}
    for i in range(trajectories):
        ref = random_fourier_trajectory(
            spec.lower[a],
            spec.upper[a],
            spec.velocity_limit[a],
            seed=int(rng.integers(2**31)),
            n_harmonics=6,
            base_freq=0.25,
            margin=0.3,
        )
        if upright is not None and rng.uniform() < upright_fraction:
            q0 = np.asarray(upright, dtype=np.float64) + rng.uniform(-0.3, 0.3, n)
            qd0 = 0.3 * rng.standard_normal(n)
        else:
            q0 = rng.uniform(-np.pi, np.pi, n)
            qd0 = passive_speed * rng.standard_normal(n)
        q0 = np.where(plant.actuated, 0.0, q0)
        qd0 = np.where(plant.actuated, 0.0, qd0)
        q0[a] = ref.sample(np.zeros(1))[0][0]
        plant.reset(q0, qd0)
        times = np.arange(steps) / rate
        r, rd, _ = ref.sample(times)
        for k in range(steps):
            _, q, qd = plant.state()
            tau = np.zeros(n)
            tau[a] = kp * (r[k] - q[a]) + kd * (rd[k] - qd[a])
            applied = plant.clamp(tau)
            out['q'].append(q)
            out['qd'].append(qd)
            out['qdd'].append(plant.acceleration(q, qd, applied))
            out['tau'].append(applied)
            out['traj'].append(i)
            out['t'].append(times[k])
            plant.advance(applied, sub)
    data: Dict[str, np.ndarray] = {k: np.asarray(v) for k, v in out.items()}
    data['joint_names'] = np.array(plant.joint_names)
    data['joint_types'] = np.array(plant.truth.joint_types)
    return data


def train_delan(
    data: Dict[str, np.ndarray],
    *,
    seed: int = 0,
    width: int = 64,
    depth: int = 2,
    steps: int = 3000,
    batch_size: int = 256,
    lr: float = 5e-3,
) -> Any:
    """A DeLaN (``build_model('delan')``) fitted offline to ``data`` with the suite's trainer
    (inverse loss, cosine learning rate over ``steps``), returned in float64 behind the numpy
    model protocol (:func:`delan_learning.fastpath.dynamics_model`: ``NumpyDelan``, what the
    controller node holds).

    Passive joints have ``tau = 0`` throughout: the torque normalisation gives them the largest
    actuated spread (:func:`delan_learning.data.constant_torque`, as the online learner does), so
    every joint's equation counts alike. Seeded; the caller sets torch's threads.
    """
    import torch

    from delan_learning.fastpath import dynamics_model
    from delan_learning.models import build_model
    from delan_learning.training import TorqueNormalizer, TrainConfig, Trainer

    torch.manual_seed(seed)
    normalizer = TorqueNormalizer.from_torques(np.asarray(data['tau'], dtype=np.float64))
    types = [str(t) for t in data['joint_types']]
    model = build_model('delan', types, width=width, depth=depth)
    model.joint_names = [str(s) for s in data['joint_names']]
    cfg = TrainConfig(batch_size=batch_size, lr=lr, seed=seed, lr_schedule='cosine')
    trainer = Trainer(model, cfg, normalizer)
    arrays = {k: data[k] for k in ('q', 'qd', 'qdd', 'tau')}
    done = 0
    while done < steps:  # cosine over the run, in rounds of 100 steps
        k = min(100, steps - done)
        trainer.train_steps(
            arrays, k, lr=lr * (0.01 + 0.99 * 0.5 * (1 + np.cos(np.pi * done / steps)))
        )
        done += k
    return dynamics_model(trainer.model.double().eval())


@dataclass
class SwingUpRun:
    """One closed-loop run; arrays per control tick ``(K,)`` or ``(K, n)``."""

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    tau: np.ndarray  # applied torque (after the plant's clamp and actuated mask)
    balance: np.ndarray  # bool: the law was balancing
    energy: np.ndarray  # true total energy of the plant [J]
    work: np.ndarray  # int qd^T tau dt since the start [J] (trapezoid per physics step)
    friction_loss: np.ndarray  # int qd^T tau_f(qd) dt since the start [J]
    e_target_true: float  # true V at the upright [J]
    #: first time from which the state stayed in the upright set for ``hold`` s (None: never)
    time_to_upright: Optional[float]
    max_excursion: float  # max |q_a - r| over the run [rad or m]
    final_error: float  # max |angle to upright| of the passive joints at the end [rad]
    catch_energy_error: float  # E_p - E* at the first catch, the law's model [J]
    catch_energy_error_true: float  # the same with the true model [J]
    catches: int
    releases: int


def in_upright_set(
    law: EnergySwingUp,
    q: np.ndarray,
    qd: np.ndarray,
    angle_tol: float = 0.1,
    rate_tol: float = 0.5,
) -> np.ndarray:
    """Whether states ``q, qd (..., n)`` have every passive joint within ``angle_tol`` [rad] of
    the upright and slower than ``rate_tol`` [rad/s]: ``(...)`` bool."""
    p = law.p_idx
    err = np.abs(wrap_angle(np.asarray(q)[..., p] - law.upright[p]))
    return np.all(err < angle_tol, axis=-1) & np.all(
        np.abs(np.asarray(qd)[..., p]) < rate_tol, axis=-1
    )


def first_hold(t: np.ndarray, ok: np.ndarray, hold: float) -> Optional[float]:
    """The first time of ``t (K,)`` from which ``ok (K,)`` held for ``hold`` seconds (None:
    never); time-based, so it reads recorded joint states at any (or a jittering) rate."""
    start = None
    for tk, okk in zip(np.asarray(t, dtype=np.float64), np.asarray(ok, dtype=bool)):
        if not okk:
            start = None
        elif start is None:
            start = tk
        if start is not None and tk - start >= hold:
            return float(start)
    return None


def run_swing_up(
    law: EnergySwingUp,
    plant: Plant,
    *,
    q0: Sequence[float],
    qd0: Optional[Sequence[float]] = None,
    duration: float = 20.0,
    control_rate: float = 250.0,
    hold: float = 2.0,
    angle_tol: float = 0.1,
    rate_tol: float = 0.5,
) -> SwingUpRun:
    """Run ``law`` on ``plant`` (reset to ``q0, qd0``) for ``duration`` s at ``control_rate``,
    the torque held between ticks (zero-order hold, as the sim node does), the law fed the
    plant's measured state. The upright set is :func:`in_upright_set`'s."""
    plant.reset(q0, qd0)
    law.reset()
    sub = max(1, int(round(plant.physics_rate / control_rate)))
    dt = plant.dt
    truth = plant.truth
    steps = int(round(duration * control_rate))
    rows: Dict[str, list] = {k: [] for k in ('t', 'q', 'qd', 'tau', 'bal', 'E', 'W', 'F')}
    work = loss = 0.0
    catch_true = float('nan')
    e_true = float(truth.energy(law.upright, np.zeros(plant.n))[1])
    for _ in range(steps):
        t = plant.t
        q, qd = plant.measure()
        tau = law.command(q, qd)
        applied = plant.clamp(tau)
        if law.catches == 1 and np.isnan(catch_true):
            qp = np.where(law.actuated, 0.0, plant.qd)
            T, V = truth.energy(plant.q, qp)
            catch_true = float(T + V) - e_true
        T, V = truth.energy(plant.q, plant.qd)
        rows['t'].append(t)
        rows['q'].append(plant.q.copy())
        rows['qd'].append(plant.qd.copy())
        rows['tau'].append(applied)
        rows['bal'].append(law.mode == 'balance')
        rows['E'].append(float(T + V))
        rows['W'].append(work)
        rows['F'].append(loss)
        for _ in range(sub):
            v0 = plant.qd
            f0 = truth.friction(v0)
            plant.advance(applied, 1)
            v1 = plant.qd
            work += 0.5 * dt * float((v0 + v1) @ applied)
            loss += 0.5 * dt * float(v0 @ f0 + v1 @ truth.friction(v1))
    arr = {k: np.asarray(v) for k, v in rows.items()}
    up = in_upright_set(law, arr['q'], arr['qd'], angle_tol, rate_tol)
    t_up = first_hold(arr['t'], up, hold)
    a, p = law.a_idx, law.p_idx
    return SwingUpRun(
        t=arr['t'],
        q=arr['q'],
        qd=arr['qd'],
        tau=arr['tau'],
        balance=arr['bal'],
        energy=arr['E'],
        work=arr['W'],
        friction_loss=arr['F'],
        e_target_true=e_true,
        time_to_upright=t_up,
        max_excursion=float(np.max(np.abs(arr['q'][:, a] - law.reference))),
        final_error=float(np.max(np.abs(wrap_angle(plant.q[p] - law.upright[p])))),
        catch_energy_error=law.catch_energy_error,
        catch_energy_error_true=catch_true,
        catches=law.catches,
        releases=law.releases,
    )
