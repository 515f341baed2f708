"""Ground truth for the DeLaN tests: the 2-link arm of ``delan_bringup/urdf/two_link_arm.urdf`` in
Pinocchio.

Torques are ``pinocchio.rnea`` plus the URDF's joint friction (``damping`` as viscous,
``friction`` as smooth Coulomb, :func:`delan_common.dynamics.friction_torque`) along seeded
finite-Fourier excitation trajectories from :mod:`delan_common.excitation`.
"""

from __future__ import annotations

import os
from typing import Dict, Sequence

import numpy as np
import pytest

from delan_common.dynamics import friction_torque
from delan_common.excitation import random_fourier_trajectory

URDF = os.path.normpath(
    os.path.join(
        os.path.dirname(__file__), '..', '..', 'delan_bringup', 'urdf', 'two_link_arm.urdf'
    )
)


class TwoLinkArm:
    """Pinocchio model of the arm and a generator of labelled excitation data."""

    def __init__(self, urdf: str = URDF):
        import pinocchio as pin

        self.pin = pin
        self.model = pin.buildModelFromUrdf(urdf)
        self.data = self.model.createData()
        self.joint_names = [str(n) for n in list(self.model.names)[1:]]
        self.joint_types = ['revolute'] * self.model.nq
        self.viscous = np.array(self.model.damping, dtype=np.float64)
        self.coulomb = np.array(self.model.friction, dtype=np.float64)
        self.lower = np.array(self.model.lowerPositionLimit)
        self.upper = np.array(self.model.upperPositionLimit)
        self.vmax = np.array(self.model.velocityLimit)

    def trajectory(self, seed: int, speed: float = 1.0):
        return random_fourier_trajectory(
            self.lower,
            self.upper,
            self.vmax,
            seed=seed,
            n_harmonics=5,
            base_freq=0.1,
            velocity_fraction=0.5,
        ).at_speed(speed)

    def inverse(self, q, qd, qdd) -> np.ndarray:
        pin, m, d = self.pin, self.model, self.data
        tau = np.stack([pin.rnea(m, d, a, b, c).copy() for a, b, c in zip(q, qd, qdd)])
        return tau + friction_torque(qd, self.viscous, self.coulomb)

    def mass_matrix(self, q) -> np.ndarray:
        out = []
        for x in q:
            H = self.pin.crba(self.model, self.data, x).copy()
            out.append(np.triu(H) + np.triu(H, 1).T)  # crba fills the upper triangle
        return np.stack(out)

    def gravity(self, q) -> np.ndarray:
        return np.stack(
            [self.pin.computeGeneralizedGravity(self.model, self.data, x).copy() for x in q]
        )

    def make_data(
        self, seeds: Sequence[int], speed: float = 1.0, rate: float = 100.0, duration: float = 10.0
    ) -> Dict[str, np.ndarray]:
        """Arrays as in an ``.npz`` (q, qd, qdd, tau, traj, t, joint_names, joint_types).

        ``duration`` is in the 1x-speed time base, so a 2x trajectory covers the same path.
        """
        parts = []
        for k, seed in enumerate(seeds):
            traj = self.trajectory(seed, speed)
            t = np.arange(0.0, duration / speed, 1.0 / rate)
            q, qd, qdd = traj.sample(t)
            parts.append((q, qd, qdd, self.inverse(q, qd, qdd), np.full(len(t), k), t))
        q, qd, qdd, tau, ids, t = (np.concatenate(x) for x in zip(*parts))
        return {
            'q': q,
            'qd': qd,
            'qdd': qdd,
            'tau': tau,
            'traj': ids.astype(np.int64),
            't': t,
            'joint_names': np.array(self.joint_names),
            'joint_types': np.array(self.joint_types),
        }


@pytest.fixture(scope='session')
def two_link() -> TwoLinkArm:
    return TwoLinkArm()


#: Seeds of the training trajectories and of the never-seen test trajectories.
TRAIN_SEEDS = tuple(range(12))
TEST_SEEDS = (100, 101, 102)


@pytest.fixture(scope='session')
def two_link_data(two_link):
    """``{'train': arrays, 'test': arrays, 'train_seeds', 'test_seeds'}``: 1x speed, 100 Hz,
    10 s per trajectory; the test trajectories use seeds training never saw."""
    return {
        'train': two_link.make_data(TRAIN_SEEDS),
        'test': two_link.make_data(TEST_SEEDS),
        'train_seeds': TRAIN_SEEDS,
        'test_seeds': TEST_SEEDS,
    }
