"""Training data from the simulated plant: ``delan-gen-data`` and :func:`generate_dataset`.

Method (tracking on the plant, the realistic way): for each of ``trajectories`` seeded Fourier
excitation trajectories (:mod:`delan_common.excitation`, inside the URDF's position limits and
``0.6 x`` its velocity limits, played at ``speed``), the plant -- the URDF with the given
mismatch, integrated at ``physics_rate`` -- starts on the reference and is driven by a
computed-torque law built on the *nominal* URDF, run at ``rate`` with the torque held between
control ticks (zero-order hold)::

    tau = clamp(RNEA_nom(q, qd, qdd_ref + kp (q_ref - q) + kd (qd_ref - qd)) + tau_f,nom(qd_ref))

Since the plant differs from the nominal model, it does not follow the reference exactly, which
is what real excitation data look like. One sample per control tick ``t_k``:

* ``q, qd``: the plant state at ``t_k`` (exact, before measurement noise),
* ``tau``: the torque applied over ``[t_k, t_k+1)`` (after the effort-limit clamp; the plant's
  ``torque_noise`` disturbance is *not* in it -- it acts like an unmodelled disturbance),
* ``qdd`` (``qdd_source='model'``, default): the plant's true acceleration at ``(q_k, qd_k,
  tau_k)`` (forward dynamics of the mismatched robot, friction included) -- what a perfect
  accelerometer would read, so noise-free data satisfy the rigid-body equation exactly;
  ``'finite_difference'``: central differences of the sampled ``qd`` (what a real robot gives).

``noise`` adds white Gaussian measurement noise afterwards, per channel and joint with standard
deviation ``noise x std`` of that channel (``q, qd, qdd, tau``): ``noise=0.01`` is 1 %.

Output keys (the DeLaN trainer's ``.npz`` format): ``q, qd, qdd, tau`` ``(N, n)``, ``traj``
``(N,)`` int, ``t`` ``(N,)`` (restarting at 0 for each trajectory), ``joint_names``,
``joint_types`` (str arrays), plus ``q_ref`` ``(N, n)`` and ``meta`` (a JSON string).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from typing import Any, Dict, List, Optional, Sequence, cast, overload

import numpy as np

from delan_common.excitation import random_fourier_trajectory
from delan_common.robot_model import PRESETS, Mismatch, RobotModel

from .plant import Plant

QDD_SOURCES = ('model', 'finite_difference')


def generate_dataset(
    urdf: str,
    *,
    trajectories: int = 8,
    duration: float = 20.0,
    rate: float = 500.0,
    seed: int = 0,
    speed: float = 1.0,
    mismatch: Optional[Mismatch] = None,
    noise: float = 0.0,
    torque_noise: float = 0.0,
    physics_rate: float = 1000.0,
    integrator: str = 'rk4',
    qdd_source: str = 'model',
    bandwidth: Optional[float] = None,
    n_harmonics: int = 5,
    base_freq: float = 0.1,
    velocity_fraction: float = 0.6,
) -> Dict[str, np.ndarray]:
    """Simulate ``trajectories`` excitation runs; return the dataset dict (see module doc).

    ``bandwidth`` [rad/s] sets the tracking loop: ``kp = bandwidth^2``, ``kd = 2 bandwidth``
    (critically damped in acceleration units); default ``min(60, rate / 8)`` -- high enough
    that Coulomb friction on the light wrist roll of the 7-DoF arm leaves ~0.1 rad worst-case
    tracking error (0.06 rad RMS), low enough for the sampled loop (``kd / rate <= 0.25``).
    ``physics_rate`` is rounded up to a multiple of ``rate``.
    """
    if trajectories < 1 or duration <= 0 or rate <= 0 or speed <= 0:
        raise ValueError('trajectories >= 1, duration > 0, rate > 0 and speed > 0 required')
    if noise < 0 or torque_noise < 0:
        raise ValueError('noise levels must be >= 0')
    if qdd_source not in QDD_SOURCES:
        raise ValueError(f'qdd_source must be one of {QDD_SOURCES}')
    nominal = RobotModel(urdf)
    substeps = max(1, int(np.ceil(physics_rate / rate - 1e-9)))
    plant = Plant(
        nominal,
        mismatch,
        physics_rate=rate * substeps,
        integrator=integrator,
        torque_noise=torque_noise,
        seed=seed,
    )
    spec = nominal.spec
    n = nominal.n
    T = int(round(duration * rate))
    t = np.arange(T) / rate
    if bandwidth is None:
        bandwidth = min(60.0, rate / 8.0)
    kp, kd = bandwidth**2, 2.0 * bandwidth
    out: Dict[str, np.ndarray] = {
        k: np.empty((trajectories * T, n)) for k in ('q', 'qd', 'qdd', 'tau', 'q_ref')
    }
    traj_id = np.repeat(np.arange(trajectories, dtype=np.int64), T)
    clipped = 0
    finite = np.isfinite(spec.lower) & np.isfinite(spec.upper)
    # excitation.py needs an explicit centre when a joint is continuous (infinite limits)
    center = np.where(
        finite, 0.5 * (np.where(finite, spec.lower, 0.0) + np.where(finite, spec.upper, 0.0)), 0.0
    )
    for i in range(trajectories):
        ref = random_fourier_trajectory(
            spec.lower,
            spec.upper,
            spec.velocity_limit,
            seed=seed * 1000 + i,
            n_harmonics=n_harmonics,
            base_freq=base_freq,
            velocity_fraction=velocity_fraction,
            center=center,
        ).at_speed(speed)
        q_ref, qd_ref, qdd_ref = ref.sample(t)
        f_ref = nominal.friction(qd_ref)
        plant.reset(q_ref[0], qd_ref[0])
        sl = slice(i * T, (i + 1) * T)
        Q, QD, TAU = out['q'][sl], out['qd'][sl], out['tau'][sl]
        for k in range(T):
            q, qd = plant.q, plant.qd
            a_des = qdd_ref[k] + kp * (q_ref[k] - q) + kd * (qd_ref[k] - qd)
            # friction feed-forward on the reference velocity: compensating the stiff tanh on
            # the sampled, measured velocity is a high-gain velocity loop that a light wrist
            # cannot take at the control rate
            tau = nominal.rigid_body_torque(q, qd, a_des) + f_ref[k]
            applied = plant.step(tau, substeps)
            clipped += int(np.any(applied != tau))
            Q[k], QD[k], TAU[k] = q, qd, applied
        out['q_ref'][sl] = q_ref
        if qdd_source == 'model':
            out['qdd'][sl] = plant.truth.forward(Q, QD, TAU)
        else:
            out['qdd'][sl] = np.gradient(QD, 1.0 / rate, axis=0)
    if noise > 0:
        out = add_measurement_noise(out, noise, seed + 7919)
    meta = {
        'urdf': nominal.source,
        'robot': nominal.name,
        'trajectories': trajectories,
        'duration': duration,
        'rate': rate,
        'physics_rate': rate * substeps,
        'seed': seed,
        'speed': speed,
        'noise': noise,
        'torque_noise': torque_noise,
        'integrator': integrator,
        'qdd_source': qdd_source,
        'bandwidth': bandwidth,
        # the plant's own mismatch: a preset expanded to the values it simulated
        'mismatch': {
            k: (np.asarray(v).tolist() if v is not None else None)
            for k, v in asdict(plant.truth.mismatch).items()
        },
        'clipped_ticks': clipped,
        'tracking_rmse': float(np.sqrt(np.mean((out['q'] - out['q_ref']) ** 2))),
    }
    out.update(
        {
            'traj': traj_id,
            't': np.tile(t, trajectories),
            'joint_names': np.asarray(nominal.joint_names),
            'joint_types': np.asarray(nominal.joint_types),
            'meta': np.asarray(json.dumps(meta)),
        }
    )
    return out


def add_measurement_noise(
    data: Dict[str, np.ndarray], level: float, seed: Optional[int] = None
) -> Dict[str, np.ndarray]:
    """A copy of ``data`` with white Gaussian noise of ``level x std`` (per channel and joint)
    added to ``q, qd, qdd, tau``."""
    rng = np.random.default_rng(seed)
    out = dict(data)
    for key in ('q', 'qd', 'qdd', 'tau'):
        std = np.asarray(data[key]).std(axis=0)
        out[key] = data[key] + rng.normal(size=data[key].shape) * (level * std)
    return out


def save_dataset(path: str, data: Dict[str, np.ndarray]) -> None:
    """``np.savez_compressed`` with only plain (non-object) arrays, loadable without pickle."""
    for k, v in data.items():
        if np.asarray(v).dtype == object:
            raise ValueError(f'{k} is an object array')
    # cast: numpy's stub would let a ``**`` key fill its ``allow_pickle: bool``; these are arrays
    np.savez_compressed(path, **cast(Dict[str, Any], data))


@overload
def _floats(text: str) -> List[float]: ...
@overload
def _floats(text: None) -> None: ...
def _floats(text: Optional[str]) -> Optional[List[float]]:
    if text is None:
        return None
    return [float(x) for x in text.replace(',', ' ').split()]


def build_arg_parser() -> argparse.ArgumentParser:
    """The ``delan-gen-data`` command line."""
    p = argparse.ArgumentParser(prog='delan-gen-data', description=__doc__.split('\n')[0])
    p.add_argument('--urdf', required=True, help='URDF path (or file name in the urdf/ folder)')
    p.add_argument('--out', required=True, help='output .npz')
    p.add_argument('--trajectories', type=int, default=8)
    p.add_argument('--duration', type=float, default=20.0, help='seconds per trajectory')
    p.add_argument('--rate', type=float, default=500.0, help='control and sample rate [Hz]')
    p.add_argument('--physics-rate', type=float, default=1000.0, help='plant rate [Hz]')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--speed', type=float, default=1.0, help='trajectory time scaling')
    p.add_argument(
        '--noise',
        type=float,
        default=0.0,
        help="relative measurement noise (fraction of each channel's std)",
    )
    p.add_argument(
        '--torque-noise',
        type=float,
        default=0.0,
        help='plant torque disturbance std [N m] per physics step',
    )
    p.add_argument(
        '--mismatch-payload', type=float, default=0.0, help='payload on the last link [kg]'
    )
    p.add_argument(
        '--mismatch-mass-scale',
        type=str,
        default='1.0',
        help='link mass scale: one value or one per joint (comma separated)',
    )
    p.add_argument('--mismatch-inertia-scale', type=str, default='1.0')
    p.add_argument(
        '--mismatch-viscous',
        type=str,
        default=None,
        help='viscous friction per joint (overrides the URDF)',
    )
    p.add_argument(
        '--mismatch-coulomb',
        type=str,
        default=None,
        help='Coulomb friction per joint (overrides the URDF)',
    )
    p.add_argument(
        '--mismatch-friction-scale', type=float, default=1.0, help='scales both friction terms'
    )
    p.add_argument(
        '--mismatch-preset',
        choices=tuple(k for k in PRESETS if k),
        default=None,
        help='a mismatch preset (robot_model.PRESETS); the --mismatch-* options '
        'left at their defaults take its values',
    )
    p.add_argument('--qdd-source', choices=QDD_SOURCES, default='model')
    p.add_argument('--integrator', choices=('rk4', 'semi_implicit_euler'), default='rk4')
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``delan-gen-data``; returns the exit code."""
    args = build_arg_parser().parse_args(argv)
    try:
        mismatch = Mismatch(
            mass_scale=_floats(args.mismatch_mass_scale),
            inertia_scale=_floats(args.mismatch_inertia_scale),
            payload_mass=args.mismatch_payload,
            viscous=_floats(args.mismatch_viscous),
            coulomb=_floats(args.mismatch_coulomb),
            viscous_scale=args.mismatch_friction_scale,
            coulomb_scale=args.mismatch_friction_scale,
            preset=args.mismatch_preset or '',
        )
        t0 = time.perf_counter()
        data = generate_dataset(
            args.urdf,
            trajectories=args.trajectories,
            duration=args.duration,
            rate=args.rate,
            seed=args.seed,
            speed=args.speed,
            mismatch=mismatch,
            noise=args.noise,
            torque_noise=args.torque_noise,
            physics_rate=args.physics_rate,
            integrator=args.integrator,
            qdd_source=args.qdd_source,
        )
        save_dataset(args.out, data)
    except (ValueError, FileNotFoundError) as exc:
        print(f'delan-gen-data: error: {exc}', file=sys.stderr)
        return 2
    meta = json.loads(str(data['meta']))
    print(
        json.dumps(
            {
                'out': args.out,
                'samples': int(len(data['q'])),
                'joint_names': data['joint_names'].tolist(),
                'tracking_rmse': meta['tracking_rmse'],
                'clipped_ticks': meta['clipped_ticks'],
                'seconds': round(time.perf_counter() - t0, 2),
            }
        )
    )
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
