"""``delan-sysid --bag`` as a user runs it: the bag is read as ``delan-train --bag`` reads it, so
identifying from the bag gives the model identified from its ``delan-bag2npz`` conversion.

The bag is written with the project's bag writer (the logger's :class:`SplitBagWriter`) from a
short simulated run of the 2-link arm: one JointState per sample carrying the applied torque
as effort, trajectories separated by 2 s gaps.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from delan_learning.bags import JOINT_STATE_TYPE, SplitBagWriter, TopicSpec, ros2_typestore

URDF = 'two_link_arm.urdf'
RATE = 200.0


def write_joint_state_bag(bag_dir: str, data: dict) -> int:
    """``data`` as a logger session on /joint_states (header stamp = receive time)."""
    store = ros2_typestore()
    types = store.types
    names = [str(s) for s in data['joint_names']]
    writer = SplitBagWriter(bag_dir, [TopicSpec('/joint_states', JOINT_STATE_TYPE)])
    t_ns, count = 1_700_000_000 * 1_000_000_000, 0
    for traj in np.unique(data['traj']):
        for i in np.flatnonzero(data['traj'] == traj):
            stamp = types['builtin_interfaces/msg/Time'](
                sec=t_ns // 1_000_000_000, nanosec=t_ns % 1_000_000_000
            )
            msg = types[JOINT_STATE_TYPE](
                header=types['std_msgs/msg/Header'](stamp=stamp, frame_id=''),
                name=names,
                position=data['q'][i],
                velocity=data['qd'][i],
                effort=data['tau'][i],
            )
            writer.write('/joint_states', t_ns, bytes(store.serialize_cdr(msg, JOINT_STATE_TYPE)))
            count += 1
            t_ns += int(round(1e9 / RATE))
        t_ns += 2_000_000_000
    writer.close()
    return count


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope='module')
def bag(tmp_path_factory):
    from delan_control.datagen import generate_dataset

    tmp = tmp_path_factory.mktemp('sysid_bag')
    data = generate_dataset(URDF, trajectories=3, duration=3.0, rate=RATE, seed=4)
    samples = write_joint_state_bag(str(tmp / 'session'), data)
    return {'dir': str(tmp / 'session'), 'tmp': tmp, 'samples': samples}


def test_sysid_bag_matches_sysid_on_its_npz(bag):
    tmp = bag['tmp']
    npz = str(tmp / 'session.npz')
    r = run('delan-bag2npz', '--bag', bag['dir'], '--out', npz)
    assert r.returncode == 0, r.stderr
    reports, params = {}, {}
    for source in (['--data', npz], ['--bag', bag['dir']]):
        out = str(tmp / f'params{source[0]}.json')
        r = run('delan-sysid', *source, '--urdf', URDF, '--out', out)
        assert r.returncode == 0, r.stderr
        reports[source[0]] = json.loads(r.stdout)
        with open(out, encoding='utf-8') as fh:
            params[source[0]] = json.load(fh)
    from_npz, from_bag = reports['--data'], reports['--bag']
    assert from_bag['n_train'] + from_bag['n_test'] == bag['samples']
    for key in ('joint_names', 'n_train', 'n_test', 'numerical_rank'):
        assert from_bag[key] == from_npz[key], key
    np.testing.assert_allclose(
        params['--bag']['theta'], params['--data']['theta'], rtol=1e-9, atol=1e-12
    )
    for j, v in from_npz['nmse_test'].items():
        assert from_bag['nmse_test'][j] == pytest.approx(v, rel=1e-6, abs=1e-12)
    # the simulated plant is the URDF: the fit is close to exact on held-out data
    assert max(from_bag['nmse_test'].values()) < 1e-3


def test_sysid_joints_selects_and_locks(bag):
    out = str(bag['tmp'] / 'shoulder.json')
    r = run(
        'delan-sysid', '--bag', bag['dir'], '--urdf', URDF, '--joints', 'shoulder', '--out', out
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)['joint_names'] == ['shoulder']
    with open(out, encoding='utf-8') as fh:
        doc = json.load(fh)
    assert doc['joint_names'] == ['shoulder'] and list(doc['selection']['locked']) == ['elbow']
    r = run('delan-sysid', '--bag', bag['dir'], '--urdf', URDF, '--joints', 'wrist', '--out', out)
    assert r.returncode == 2 and 'wrist' in r.stderr and 'Traceback' not in r.stderr


def test_sysid_bag_and_data_together_is_a_usage_error(bag, tmp_path):
    r = run(
        'delan-sysid',
        '--bag',
        bag['dir'],
        '--data',
        str(tmp_path / 'x.npz'),
        '--urdf',
        URDF,
        '--out',
        str(tmp_path / 'p.json'),
    )
    assert r.returncode == 2
    assert 'argument --data: not allowed with argument --bag' in r.stderr
    assert not (tmp_path / 'p.json').exists()


def test_demo_takes_urdf_as_well_as_robot():
    from delan_control.demo import build_parser

    for flag in ('--urdf', '--robot'):
        assert build_parser().parse_args([flag, 'panda.urdf']).robot == 'panda.urdf'
