"""``delan-train --bag DIR`` gives the same model as ``delan-bag2npz`` + ``delan-train --data``.

A rosbag2 bag (mcap) of ``/joint_states`` is written here from simulated excitation runs of the
mismatched arm (payload, friction x2): real CDR payloads serialised by rclpy, stamped at 500 Hz,
trajectories separated by gaps, plus the effort commands topic. The installed CLIs then train the
same seed twice -- once on the bag directly, once on its ``.npz`` conversion -- and ``delan-eval``
scores both; the results must agree (training on CPU with one thread and a fixed seed is
deterministic, so "closely" is in fact to rounding).
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import List, Optional, Sequence

import numpy as np
import pytest
from rclpy.serialization import serialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from delan_learning.bags import (
    COMMAND_TYPE,
    JOINT_STATE_TYPE,
    SplitBagWriter,
    TopicSpec,
    qos_profile,
    read_bag_arrays,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')
RATE = 500.0


def cli(name: str, *args: str) -> str:
    """Run an installed CLI of delan_learning; return its stdout (fails the test on exit != 0)."""
    prefix = os.environ.get('COLCON_PREFIX_PATH', '').split(os.pathsep)[0] or os.path.join(
        ROOT, 'install'
    )
    exe = os.path.join(prefix, 'delan_learning', 'lib', 'delan_learning', name)
    proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f'{name} {" ".join(args)} -> {proc.returncode}:\n{proc.stderr}'
    return proc.stdout


def write_bag(bag_dir: str, data, command_joints: Optional[Sequence[str]] = None) -> int:
    """The dataset as a logger session: one JointState per sample (position, velocity, effort =
    the applied torque), header stamp = receive time, 2 s between trajectories.

    With ``command_joints``, as a ros2_control robot records it instead: joint_state_broadcaster's
    states carry a gripper joint too, in a random order per message, and no effort; the applied
    torque is only on the commands, in ``command_joints`` order, received 0.3 ms before the
    state it acts at (so the reader pairs each state with its own torque)."""
    names = [str(s) for s in data['joint_names']]
    rng = np.random.default_rng(5)
    cmd_col = [names.index(j) for j in command_joints or names]
    cmd_dt = 300_000 if command_joints is None else -300_000
    writer = SplitBagWriter(
        bag_dir,
        [
            TopicSpec('/joint_states', JOINT_STATE_TYPE, (qos_profile(),)),
            TopicSpec('/effort_controller/commands', COMMAND_TYPE, (qos_profile(),)),
        ],
        storage='mcap',
    )
    t_ns = 1_700_000_000 * 1_000_000_000
    count = 0
    msg = JointState()
    for traj in np.unique(data['traj']):
        idx = np.flatnonzero(data['traj'] == traj)
        for i in idx:
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(t_ns, 1_000_000_000)
            if command_joints is None:
                msg.name, msg.position = names, data['q'][i].tolist()
                msg.velocity, msg.effort = data['qd'][i].tolist(), data['tau'][i].tolist()
            else:
                order = rng.permutation(len(names) + 1)
                msg.name = [(names + ['gripper'])[k] for k in order]
                msg.position = [np.append(data['q'][i], 0.01)[k] for k in order]
                msg.velocity = [np.append(data['qd'][i], 0.0)[k] for k in order]
            writer.write('/joint_states', t_ns, serialize_message(msg))
            writer.write(
                '/effort_controller/commands',
                t_ns + cmd_dt,
                serialize_message(Float64MultiArray(data=data['tau'][i, cmd_col].tolist())),
            )
            count += 1
            t_ns += int(round(1e9 / RATE))
        t_ns += 2_000_000_000
    writer.close()
    return count


@pytest.fixture(scope='module')
def bag(tmp_path_factory):
    pytest.importorskip('pinocchio')
    from delan_common.robot_model import Mismatch
    from delan_control.datagen import generate_dataset

    tmp = tmp_path_factory.mktemp('bag')
    data = generate_dataset(
        URDF,
        trajectories=4,
        duration=6.0,
        rate=RATE,
        seed=11,
        mismatch=Mismatch(payload_mass=0.6, viscous_scale=2.0, coulomb_scale=2.0),
    )
    n = write_bag(str(tmp / 'session'), data)
    return {'dir': str(tmp / 'session'), 'samples': n, 'tmp': tmp, 'data': data}


def test_bag_reads_back_as_written(bag):
    arrays = read_bag_arrays(bag['dir'], match_torque=False)
    assert arrays['info']['samples'] == bag['samples'] and not arrays['rejected']
    assert arrays['info']['trajectories'] == 4
    assert [str(s) for s in arrays['joint_names']] == ['shoulder', 'elbow']
    np.testing.assert_array_equal(arrays['q'], bag['data']['q'])
    np.testing.assert_array_equal(arrays['tau'], bag['data']['tau'])
    # qdd is estimated from q (Savitzky-Golay). The plant's true acceleration steps with every
    # held 2 ms torque (and at each Coulomb velocity reversal), which no smoother follows: the
    # estimate is close in RMS, not exact (measured ~4 % / 14 % of the std for shoulder / elbow)
    err = np.sqrt(np.mean((arrays['qdd'] - bag['data']['qdd']) ** 2, axis=0))
    assert np.all(err < 0.25 * np.std(bag['data']['qdd'], axis=0)), err


def _train(source: List[str], out: str) -> dict:
    return json.loads(
        cli(
            'delan-train',
            *source,
            '--out',
            out,
            '--epochs',
            '6',
            '--seed',
            '3',
            '--width',
            '32',
            '--batch',
            '256',
            '--patience',
            '0',
            '--quiet',
            '--threads',
            '1',
        )
    )


@pytest.fixture(scope='module')
def trained_on_bag(bag):
    """``delan-train --bag`` on the logger bag (the summary; the model in ``from_bag.pt``): both
    tests' model of that bag, trained once (the same seed and options give the same model)."""
    return _train(['--bag', bag['dir']], str(bag['tmp'] / 'from_bag.pt'))


def test_delan_train_on_bag_reproduces_npz_training(bag, trained_on_bag):
    tmp = bag['tmp']
    npz = str(tmp / 'session.npz')
    out = cli('delan-bag2npz', '--bag', bag['dir'], '--out', npz)
    assert f'{bag["samples"]} samples, 4 trajectories' in out, out
    from_npz = _train(['--data', npz], str(tmp / 'from_npz.pt'))
    from_bag = trained_on_bag
    for key in ('joint_names', 'epochs_run', 'steps', 'n_train', 'n_val'):
        assert from_bag[key] == from_npz[key], key
    assert from_bag['n_train'] + from_bag['n_val'] == bag['samples']
    for j in from_npz['val_nmse']:
        assert from_bag['val_nmse'][j] == pytest.approx(
            from_npz['val_nmse'][j], rel=1e-6, abs=1e-12
        )
    # the models score alike on the same data, whichever way each reads it
    ev_npz = json.loads(cli('delan-eval', '--model', str(tmp / 'from_npz.pt'), '--data', npz))
    ev_bag = json.loads(
        cli('delan-eval', '--model', str(tmp / 'from_bag.pt'), '--bag', bag['dir'])
    )
    print(
        f'\nnMSE trained on npz: {ev_npz["inverse"]["nmse"]}, trained on the bag: '
        f'{ev_bag["inverse"]["nmse"]}'
    )
    assert ev_bag['n_samples'] == ev_npz['n_samples'] == bag['samples']
    for metric in ('mse', 'nmse'):
        for j, v in ev_npz['inverse'][metric].items():
            assert ev_bag['inverse'][metric][j] == pytest.approx(v, rel=1e-6, abs=1e-12)
    # and training did something: far better than predicting the mean torque
    assert ev_npz['inverse']['nmse_mean'] < 0.2


def test_training_on_a_ros2_control_bag_matches_the_logger_bag(bag, trained_on_bag):
    """The same motion recorded by a ros2_control robot (no effort in the joint states, a
    gripper, commands in the controller's joint order) trains as good a model, given the
    controllers yaml; held-out data from another seed score both."""
    tmp = bag['tmp']
    ros2_control = str(tmp / 'ros2_control')
    assert write_bag(ros2_control, bag['data'], ['elbow', 'shoulder']) == bag['samples']
    controllers = tmp / 'controllers.yaml'
    controllers.write_text(
        'effort_controller:\n  ros__parameters:\n    joints: [elbow, shoulder]\n'
    )
    from delan_common.robot_model import Mismatch
    from delan_control.datagen import generate_dataset

    heldout = str(tmp / 'heldout')
    write_bag(
        heldout,
        generate_dataset(
            URDF,
            trajectories=2,
            duration=6.0,
            rate=RATE,
            seed=12,
            mismatch=Mismatch(payload_mass=0.6, viscous_scale=2.0, coulomb_scale=2.0),
        ),
    )
    # the recovered arrays are the logger bag's, joint by joint
    ref = read_bag_arrays(bag['dir'], match_torque=False)
    got = read_bag_arrays(
        ros2_control,
        ['shoulder', 'elbow'],
        match_torque=False,
        command_joints=['elbow', 'shoulder'],
    )
    assert got['rejected'] == {}  # rclpy pads a JointState without effort: still read
    for key in ('q', 'qd', 'tau'):
        np.testing.assert_array_equal(got[key], ref[key])
    trained = _train(
        ['--bag', ros2_control, '--controllers-yaml', str(controllers)],
        str(tmp / 'ros2_control.pt'),
    )
    assert trained['joint_names'] == ['elbow', 'shoulder']  # the commanded joints
    nmse = {
        name: json.loads(cli('delan-eval', '--model', str(tmp / f'{model}.pt'), '--bag', heldout))[
            'inverse'
        ]['nmse_mean']
        for name, model in (('logger', 'from_bag'), ('ros2_control', 'ros2_control'))
    }
    print(f'\nheld-out nMSE: {nmse}')
    assert nmse['logger'] < 0.2
    assert nmse['ros2_control'] < 1.5 * nmse['logger'] + 0.005
