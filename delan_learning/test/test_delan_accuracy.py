"""DeLaN learns the 2-link arm's dynamics from Pinocchio ground truth: held-out torques,
the mass matrix and gravity themselves, friction, and extrapolation to twice the speed."""

import numpy as np
import pytest
import torch

from delan_learning.data import Dataset
from delan_learning.numpy_delan import NumpyDelan
from delan_learning.training import TrainConfig, train_model

#: Training must fit in 60 s on 2 CPU cores: the schedule is cut by this budget when the
#: machine is slower (the cosine decay then follows the clock), never by an assertion.
DELAN_BUDGET_S = 50.0


def train_single_threaded(data, kind, cfg):
    """Batch-512 ops are too small to gain from a second thread (and other tests may run)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_model(data, kind, cfg, {'width': 64, 'depth': 2})
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope='module')
def delan_2link(two_link_data):
    data = Dataset.from_arrays(two_link_data['train'])
    cfg = TrainConfig(
        epochs=150,
        batch_size=512,
        lr=1e-2,
        patience=0,
        seed=0,
        lr_schedule='cosine',
        time_budget=DELAN_BUDGET_S,
    )
    return train_single_threaded(data, 'delan', cfg)


@pytest.fixture(scope='module')
def mlp_2link(two_link_data):
    data = Dataset.from_arrays(two_link_data['train'])
    cfg = TrainConfig(
        epochs=200,
        batch_size=512,
        lr=1e-2,
        patience=0,
        seed=0,
        lr_schedule='cosine',
        time_budget=20.0,
    )
    return train_single_threaded(data, 'mlp', cfg)


def predict(model, arrays):
    with torch.no_grad():
        return model.inverse(*(torch.as_tensor(arrays[k]) for k in ('q', 'qd', 'qdd'))).numpy()


def nmse(pred, target):
    return np.mean((pred - target) ** 2, axis=0) / np.var(target, axis=0)


def rel_frobenius(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_trajectories_are_held_out(delan_2link, two_link_data):
    val = delan_2link.metadata['training']['val_trajectories']
    assert val, 'the trainer validates on whole held-out trajectories'
    # and the test trajectories come from seeds the training data never used
    assert not set(two_link_data['test_seeds']) & set(two_link_data['train_seeds'])


def test_heldout_inverse_dynamics(delan_2link, two_link_data):
    test = two_link_data['test']
    err = nmse(predict(delan_2link.model, test), test['tau'])
    print('DeLaN held-out nMSE per joint', err)
    assert np.all(err < 1e-3), err


def test_mass_matrix_and_gravity_match_pinocchio(delan_2link, two_link, two_link_data):
    q = two_link_data['test']['q']
    fast = NumpyDelan(delan_2link.model)
    H_err = rel_frobenius(fast.mass_matrix(q), two_link.mass_matrix(q))
    g_err = rel_frobenius(fast.gravity(q), two_link.gravity(q))
    print(f'relative Frobenius error: H {H_err:.4f}, g {g_err:.4f}')
    assert H_err < 0.05 and g_err < 0.05


def test_friction_is_identified(delan_2link, two_link):
    viscous, coulomb = (c.detach().numpy() for c in delan_2link.model.friction_coefficients())
    print('viscous', viscous, 'vs', two_link.viscous, '; coulomb', coulomb, 'vs', two_link.coulomb)
    np.testing.assert_allclose(viscous, two_link.viscous, rtol=0.2)
    np.testing.assert_allclose(coulomb, two_link.coulomb, rtol=0.2)


def test_forward_model_on_heldout(delan_2link, two_link_data):
    test = two_link_data['test']
    with torch.no_grad():
        qdd = delan_2link.model.forward_dynamics(
            *(torch.as_tensor(test[k]) for k in ('q', 'qd', 'tau'))
        ).numpy()
    err = nmse(qdd, test['qdd'])
    print('forward-model nMSE per joint', err)
    assert np.all(err < 5e-2), err  # H^-1 amplifies torque errors (cond(H) ~ 40 here)


def test_extrapolates_to_double_speed_better_than_mlp(
    delan_2link, mlp_2link, two_link, two_link_data
):
    """Trained at 1x speed, tested on the same paths at 2x (4x the accelerations)."""
    fast = two_link.make_data(two_link_data['test_seeds'], speed=2.0)
    rms = {
        name: float(np.sqrt(np.mean((predict(r.model, fast) - fast['tau']) ** 2)))
        for name, r in (('delan', delan_2link), ('mlp', mlp_2link))
    }
    print('RMS torque error at 2x speed [N m]:', rms)
    assert rms['delan'] <= rms['mlp'] / 3.0
