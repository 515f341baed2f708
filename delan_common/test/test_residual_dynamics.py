"""NominalPlusResidual adds two dynamics models term by term (Euler-Lagrange is linear in L)."""

import numpy as np
import pytest

from delan_common.residual_dynamics import NominalPlusResidual
from delan_common.robot_model import Mismatch, RobotModel, find_urdf


@pytest.fixture(scope='module')
def panda():
    return RobotModel(find_urdf('panda.urdf'))


def _states(model, n_samples=32, seed=0):
    rng = np.random.default_rng(seed)
    lo, hi = model.sample_bounds()
    n = model.n
    return (
        rng.uniform(lo, hi, (n_samples, n)),
        rng.normal(0, 1, (n_samples, n)),
        rng.normal(0, 3, (n_samples, n)),
    )


def test_sum_is_term_by_term_and_forward_inverts_inverse(panda):
    payload = panda.mismatched(Mismatch(payload_mass=2.0))
    both = NominalPlusResidual(panda, payload)
    q, qd, qdd = _states(panda)
    assert np.allclose(
        both.inverse(q, qd, qdd), panda.inverse(q, qd, qdd) + payload.inverse(q, qd, qdd)
    )
    H = both.mass_matrix(q)
    assert np.allclose(H, panda.mass_matrix(q) + payload.mass_matrix(q))
    assert np.linalg.eigvalsh(H).min() > 0
    assert np.allclose(both.gravity(q), panda.gravity(q) + payload.gravity(q))
    assert np.allclose(both.coriolis(q, qd), panda.coriolis(q, qd) + payload.coriolis(q, qd))
    assert np.allclose(both.friction(qd), panda.friction(qd) + payload.friction(qd))
    T, V = both.energy(q, qd)
    assert np.allclose(T, panda.energy(q, qd)[0] + payload.energy(q, qd)[0])
    assert np.allclose(V, panda.energy(q, qd)[1] + payload.energy(q, qd)[1])
    tau = both.inverse(q, qd, qdd)
    assert np.allclose(both.forward(q, qd, tau), qdd, atol=1e-8)
    # one state as well as a batch
    assert np.allclose(both.forward(q[0], qd[0], tau[0]), qdd[0], atol=1e-8)


def test_joints_must_match(panda):
    other = RobotModel(find_urdf('two_link_arm.urdf'))
    with pytest.raises(ValueError, match='joints'):
        NominalPlusResidual(panda, other)
