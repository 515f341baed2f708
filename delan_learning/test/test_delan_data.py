"""Data handling: derivative estimation, validation, npz I/O and trajectory splits."""

import numpy as np
import pytest

from delan_learning.data import (
    DataError,
    Dataset,
    complete_derivatives,
    load_npz,
    save_npz,
    savgol_window,
    split_by_trajectory,
    validate_arrays,
)


def sine(fs, freq=1.0, duration=4.0, amp=0.8, offset=0.0, t0=0.0):
    t = t0 + np.arange(0.0, duration, 1.0 / fs)
    w = 2 * np.pi * freq
    ph = w * (t - t0)
    q = offset + amp * np.sin(ph)
    return t, q, amp * w * np.cos(ph), -amp * w * w * np.sin(ph), amp * w, amp * w * w


@pytest.mark.parametrize('fs', [100.0, 1000.0])
def test_savgol_on_analytic_sine(fs):
    t, q, qd, qdd, vmax, amax = sine(fs)
    out = complete_derivatives({'q': q[:, None], 't': t})
    assert np.abs(out['qd'][:, 0] - qd).max() < 1e-4 * vmax
    assert np.abs(out['qdd'][:, 0] - qdd).max() < 5e-3 * amax
    # given qd: qdd is one derivative of qd, and more accurate
    out2 = complete_derivatives({'q': q[:, None], 'qd': qd[:, None], 't': t})
    assert np.array_equal(out2['qd'][:, 0], qd)
    assert np.abs(out2['qdd'][:, 0] - qdd).max() < 1e-3 * amax


def test_window_follows_sample_rate():
    assert savgol_window(0.01) == 5
    assert savgol_window(0.005) == 11
    assert savgol_window(0.001) == 51
    assert savgol_window(0.1) == 5  # never below polyorder + 2, always odd


def test_savgol_smooths_noise_better_than_finite_differences():
    rng = np.random.default_rng(0)
    t, q, qd, qdd, vmax, amax = sine(1000.0)
    noisy = q + rng.normal(scale=1e-4, size=q.shape)
    est = complete_derivatives({'q': noisy[:, None], 't': t})['qdd'][:, 0]
    naive = np.gradient(np.gradient(noisy, t), t)
    inner = slice(50, -50)
    sg_err = np.sqrt(np.mean((est[inner] - qdd[inner]) ** 2))
    fd_err = np.sqrt(np.mean((naive[inner] - qdd[inner]) ** 2))
    assert sg_err < 0.1 * fd_err


def test_no_smoothing_across_trajectory_boundaries():
    fs = 100.0
    t1, q1, qd1, qdd1, vmax, amax = sine(fs, duration=2.0)
    t2, q2, qd2, qdd2, *_ = sine(fs, duration=2.0, offset=5.0, freq=0.7)  # jump + time reset
    q = np.concatenate([q1, q2])[:, None]
    t = np.concatenate([t1, t2])
    truth_qd = np.concatenate([qd1, qd2])
    truth_qdd = np.concatenate([qdd1, qdd2])
    traj = np.repeat([3, 8], [len(t1), len(t2)])
    for arrays in (
        {'q': q, 't': t, 'traj': traj},  # explicit ids
        {'q': q, 't': t},
    ):  # ids from the time reset
        out = complete_derivatives(arrays)
        assert np.abs(out['qd'][:, 0] - truth_qd).max() < 1e-3 * vmax
        assert np.abs(out['qdd'][:, 0] - truth_qdd).max() < 1e-2 * amax
    # the same time base in both trajectories with explicit ids also works (t not reset)
    out = complete_derivatives({'q': q, 't': np.concatenate([t1, t2 + 10.0]), 'traj': traj})
    assert np.abs(out['qd'][:, 0] - truth_qd).max() < 1e-3 * vmax


def test_jittered_time_stamps():
    rng = np.random.default_rng(1)
    fs = 200.0
    t = np.arange(0.0, 4.0, 1.0 / fs) + rng.uniform(-0.2, 0.2, 800) / fs
    w = 2 * np.pi
    out = complete_derivatives({'q': np.sin(w * t)[:, None], 't': t})
    inner = slice(10, -10)
    assert np.abs(out['qd'][inner, 0] - w * np.cos(w * t[inner])).max() < 2e-2 * w
    assert np.abs(out['qdd'][inner, 0] + w * w * np.sin(w * t[inner])).max() < 5e-2 * w * w


def test_given_arrays_are_kept_and_input_not_mutated():
    t, q, qd, qdd, *_ = sine(100.0)
    arrays = {'q': q[:, None], 'qd': qd[:, None], 'qdd': qdd[:, None], 'tau': q[:, None]}
    out = complete_derivatives(arrays)
    assert np.array_equal(out['qdd'], arrays['qdd']) and 't' not in arrays
    arrays2 = {'q': q[:, None], 't': t}
    complete_derivatives(arrays2)
    assert set(arrays2) == {'q', 't'}


@pytest.mark.parametrize(
    'arrays,match',
    [
        ({'qd': np.zeros((3, 2))}, "missing array 'q'"),
        ({'q': np.zeros((3, 2)), 'tau': np.zeros((4, 2))}, 'tau has 4 rows'),
        ({'q': np.zeros((3, 2)), 'tau': np.zeros((3, 3))}, 'tau has 3 joints'),
        ({'q': np.array([[0.0, np.nan], [0, 0]]), 'tau': np.zeros((2, 2))}, 'q has 1 non-finite'),
        ({'q': np.zeros((3, 2)), 'tau': np.full((3, 2), np.inf)}, 'tau has 6 non-finite'),
        ({'q': np.zeros((3, 2)), 'joint_types': np.array(['revolute', 'ball'])}, "'ball'"),
        ({'q': np.zeros((3, 2)), 'joint_names': np.array(['a'])}, 'joint_names has 1'),
        ({'q': np.zeros((3, 2)), 'joint_names': np.array(['a', 'a'])}, 'duplicated'),
        ({'q': np.zeros((3, 2)), 'traj': np.zeros(4, dtype=int)}, 'traj must have shape'),
        ({'q': np.zeros((3, 2)), 'traj': np.array([0.0, 0.5, 1.0])}, 'integer'),
        ({'q': np.zeros((0, 2))}, 'no samples'),
        ({'q': np.zeros((3, 2, 2))}, 'must be'),
    ],
)
def test_validation_errors_are_clear(arrays, match):
    with pytest.raises(DataError, match=match):
        validate_arrays(arrays)


def test_missing_derivatives_need_time():
    with pytest.raises(DataError, match='no time stamps'):
        complete_derivatives({'q': np.zeros((10, 2)), 'tau': np.zeros((10, 2))})
    with pytest.raises(DataError, match='increase'):
        complete_derivatives(
            {'q': np.zeros((3, 1)), 't': np.array([0.0, 0.1, 0.1]), 'traj': np.zeros(3, dtype=int)}
        )


def test_dataset_requires_torque_for_training():
    with pytest.raises(DataError, match="'tau'"):
        Dataset.from_arrays(
            {'q': np.zeros((3, 1)), 'qd': np.zeros((3, 1)), 'qdd': np.zeros((3, 1))}
        )
    d = Dataset.from_arrays(
        {'q': np.zeros((3, 1)), 'qd': np.zeros((3, 1)), 'qdd': np.zeros((3, 1))}, require_tau=False
    )
    assert d.joint_names == ['joint0'] and d.joint_types == ['revolute']


def test_npz_round_trip_and_bad_files(tmp_path, two_link):
    arrays = two_link.make_data([0, 1], duration=1.0)
    path = str(tmp_path / 'd.npz')
    save_npz(path, arrays)
    d = load_npz(path)
    assert d.joint_names == ['shoulder', 'elbow'] and d.joint_types == ['revolute'] * 2
    assert np.array_equal(d.q, arrays['q']) and np.array_equal(d.traj, arrays['traj'])
    # without qd/qdd the loader estimates them (the data are smooth: close to exact)
    del arrays['qd'], arrays['qdd']
    save_npz(path, arrays)
    d2 = load_npz(path)
    assert np.abs(d2.qd - d.qd).max() < 1e-2 * np.abs(d.qd).max()
    with pytest.raises(DataError, match='no such data file'):
        load_npz(str(tmp_path / 'missing.npz'))
    (tmp_path / 'junk.npz').write_bytes(b'not a zip file')
    with pytest.raises(DataError, match='cannot read'):
        load_npz(str(tmp_path / 'junk.npz'))
    np.savez(tmp_path / 'obj.npz', q=np.array([{'a': 1}], dtype=object))
    with pytest.raises(DataError):
        load_npz(str(tmp_path / 'obj.npz'))


def test_split_by_trajectory(two_link):
    d = Dataset.from_arrays(two_link.make_data(range(10), duration=1.0))
    train, val = split_by_trajectory(d, 0.3, seed=4)
    assert set(np.unique(train.traj)).isdisjoint(np.unique(val.traj))
    assert len(np.unique(val.traj)) == 3 and len(train) + len(val) == len(d)
    again, _ = split_by_trajectory(d, 0.3, seed=4)
    assert np.array_equal(again.traj, train.traj)
    other, _ = split_by_trajectory(d, 0.3, seed=5)
    assert not np.array_equal(np.unique(other.traj), np.unique(train.traj))
    # one trajectory: the last part in time is held out
    one = d.subset(np.flatnonzero(d.traj == 0))
    tr, va = split_by_trajectory(one, 0.25)
    assert tr.t.max() < va.t.min() and len(va) == round(0.25 * len(one))
    assert split_by_trajectory(d, 0.0)[1] is None


def test_complete_derivatives_adds_only_derivatives():
    """What a bag reader hands over comes back with qd/qdd and nothing else new."""
    t, q, *_ = sine(100.0)
    arrays = {
        'q': q[:, None],
        't': t,
        'tau': q[:, None],
        'joint_names': np.array(['j']),
        'info': {'source': 'bag'},
    }
    out = complete_derivatives(arrays)
    assert set(out) == set(arrays) | {'qd', 'qdd'}
    assert out['info'] is arrays['info'] and 'joint_types' not in out


def test_split_at_gaps_keeps_differentiation_off_lost_messages():
    from delan_learning.data import split_at_gaps

    t = np.arange(0.0, 2.0, 0.004)
    lost = (t > 0.5) & (t < 0.56)  # 60 ms of states lost in transport
    t_rx = t[~lost]
    ids = split_at_gaps(t_rx)
    assert ids.tolist() == sorted(ids.tolist()) and ids.max() == 1
    assert ids[np.searchsorted(t_rx, 0.5)] == 0 and ids[np.searchsorted(t_rx, 0.56)] == 1
    # a stamp stepping back and a given segment change start trajectories too
    assert split_at_gaps([0.0, 0.01, 0.02, 0.0, 0.01]).tolist() == [0, 0, 0, 1, 1]
    assert split_at_gaps([0.0, 0.01, 0.02, 0.03], traj=[4, 4, 7, 7]).tolist() == [0, 0, 1, 1]
    assert split_at_gaps([1.0]).tolist() == [0] and split_at_gaps([]).tolist() == []

    # differentiated with the split, the sine's acceleration is right on both sides of the gap
    q = np.sin(2 * np.pi * t_rx)[:, None]
    qd = 2 * np.pi * np.cos(2 * np.pi * t_rx)[:, None]
    true_qdd = -((2 * np.pi) ** 2) * q
    whole = complete_derivatives({'t': t_rx, 'q': q, 'qd': qd})
    split = complete_derivatives({'t': t_rx, 'q': q, 'qd': qd, 'traj': ids})
    near = np.abs(t_rx - 0.53) < 0.06
    err_whole = np.abs(whole['qdd'] - true_qdd)[near].max()
    err_split = np.abs(split['qdd'] - true_qdd)[near].max()
    assert err_split < 0.5 < err_whole
