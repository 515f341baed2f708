"""A model's feed-forward error split by term (delan_control.model_terms), on the 2-link arm."""

import os

import numpy as np
import pytest

from delan_common.robot_model import find_urdf
from delan_control.model_terms import TERMS, term_errors
from delan_control.replay import EvaluationSetup, replay_tracking, true_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARAMS = os.path.join(ROOT, 'delan_bringup', 'config', 'sim_params.yaml')


@pytest.fixture(scope='module')
def two_link():
    return EvaluationSetup.from_params(find_urdf('two_link_arm.urdf'), PARAMS)


class HeavierInertia:
    """The sim's own model with its mass matrix (and so its Coriolis term) 20 % heavier."""

    def __init__(self, truth):
        self.truth = truth
        self.joint_names = truth.joint_names

    def mass_matrix(self, q):
        return 1.2 * self.truth.mass_matrix(q)

    def coriolis(self, q, qd):
        return 1.2 * self.truth.coriolis(q, qd)

    def gravity(self, q):
        return self.truth.gravity(q)

    def friction(self, qd):
        return self.truth.friction(qd)

    def inverse(self, q, qd, qdd):
        return self.mass_matrix(q) @ qdd + self.coriolis(q, qd) + self.gravity(q)


def test_the_sims_own_model_has_no_error(two_link):
    err = term_errors(two_link, true_model(two_link), 2.0)
    for name in TERMS + ('total',):
        np.testing.assert_allclose(err[name], 0.0, atol=1e-9)


def test_an_inertia_error_is_found_in_the_inertia_terms_and_grows_with_speed(two_link):
    model = HeavierInertia(true_model(two_link))
    slow, fast = (term_errors(two_link, model, s) for s in (1.0, 2.0))
    for err in (slow, fast):
        np.testing.assert_allclose(err['gravity'], 0.0, atol=1e-9)
        np.testing.assert_allclose(err['friction'], 0.0, atol=1e-9)
        assert np.all(err['inertia'] > 0.0) and np.all(err['coriolis'] > 0.0)
    # the same path twice as fast: four times the acceleration
    assert np.all(fast['inertia'] > 3.0 * slow['inertia'])
    assert np.all(fast['inertia'] < 5.0 * slow['inertia'])


def test_nominal_misses_the_payloads_gravity_and_its_errors_predict_its_tracking(two_link):
    """The URDF lacks the sim's payload: gravity is nominal's largest error. The loop holds an
    acceleration error ``a`` at about ``a / omega^2``: the split is in the units of tracking."""
    nominal = two_link.nominal
    err = term_errors(two_link, nominal, 1.0)
    assert np.all(err['gravity'] > err['inertia'])
    assert np.all(err['gravity'] > err['friction'])
    predicted = err['total'] / np.asarray(two_link.gains().ct_kp, float)
    tracked = replay_tracking(two_link, nominal, 1.0)
    assert np.all(predicted > 0.75 * tracked) and np.all(predicted < 1.33 * tracked), (
        predicted,
        tracked,
    )
