"""The flags every CLI shares, as a user runs them (subprocesses): ``--checkpoint`` (with
``--model`` as a deprecated alias on delan-eval), ``--joints`` on delan-train and delan-eval."""

import json
import os

import pytest
from test_delan_cli import run

from delan_learning.data import save_npz

DEPRECATED = '--model is deprecated, use --checkpoint'
TRAIN = (
    '--epochs',
    1,
    '--max-steps',
    5,
    '--width',
    8,
    '--batch',
    64,
    '--patience',
    0,
    '--seed',
    1,
    '--quiet',
)


@pytest.fixture(scope='module')
def files(tmp_path_factory, two_link):
    d = tmp_path_factory.mktemp('cli_flags')
    save_npz(d / 'data.npz', two_link.make_data([0, 1], duration=2.0))
    return d


@pytest.fixture(scope='module')
def swapped(files):
    """A checkpoint trained on the joints in the order elbow, shoulder (``--joints``)."""
    out = files / 'swapped.pt'
    r = run(
        'delan-train',
        '--data',
        files / 'data.npz',
        '--joints',
        'elbow,shoulder',
        '--out',
        out,
        *TRAIN,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)['joint_names'] == ['elbow', 'shoulder']
    return out


def test_eval_checkpoint_and_its_deprecated_alias(files, swapped):
    new = run(
        'delan-eval',
        '--checkpoint',
        swapped,
        '--data',
        files / 'data.npz',
        '--joints',
        'shoulder,elbow',
    )
    assert new.returncode == 0, new.stderr
    assert 'deprecated' not in new.stderr
    old = run('delan-eval', '--model', swapped, '--data', files / 'data.npz')
    assert old.returncode == 0, old.stderr
    assert old.stderr.count(DEPRECATED) == 1
    assert json.loads(old.stdout) == json.loads(new.stdout)
    assert json.loads(new.stdout)['joint_names'] == ['elbow', 'shoulder']


@pytest.mark.parametrize(
    'args,message',
    [
        (['--checkpoint', 'a.pt', '--model', 'b.pt'], 'not allowed with'),
        ([], 'required'),
    ],
    ids=['both', 'neither'],
)
def test_eval_checkpoint_usage_errors(files, args, message):
    r = run('delan-eval', *args, '--data', files / 'data.npz')
    assert r.returncode == 2
    assert message in r.stderr and '--checkpoint' in r.stderr and 'Traceback' not in r.stderr


def test_eval_joints_must_be_the_checkpoints(files, swapped):
    r = run(
        'delan-eval', '--checkpoint', swapped, '--data', files / 'data.npz', '--joints', 'shoulder'
    )
    assert r.returncode == 2
    assert 'not the joints of the checkpoint' in r.stderr and 'Traceback' not in r.stderr


def test_train_joints_the_data_lack(files):
    out = files / 'none.pt'
    r = run(
        'delan-train',
        '--data',
        files / 'data.npz',
        '--joints',
        'shoulder,wrist',
        '--out',
        out,
        *TRAIN,
    )
    assert r.returncode == 2
    assert "lack joints ['wrist']" in r.stderr and 'Traceback' not in r.stderr
    assert not os.path.exists(out)


def test_train_model_still_names_the_kind(capsys):
    """delan-train's --model is the kind of model (delan|mlp), not a checkpoint: no warning."""
    from delan_learning.cli import train_parser

    args = train_parser().parse_args(['--data', 'x.npz', '--out', 'm.pt', '--model', 'mlp'])
    assert args.model == 'mlp' and capsys.readouterr().err == ''


def test_train_urdf_learns_h_independent_of_the_first_joint(files):
    """``--urdf``: the learner's inertia_invariance offline, mapped to the data's column order
    (here elbow, shoulder: the shoulder is column 1), and its loss_metric (auto: both with a
    URDF, torque without); a description without the data's joints is a clear error."""
    from delan_learning.checkpoint import read_checkpoint

    urdf_dir = os.path.join(os.path.dirname(__file__), '..', '..', 'delan_bringup', 'urdf')

    def train(name, *extra):
        out = files / name
        args = ('--data', files / 'data.npz', '--joints', 'elbow,shoulder', '--out', out)
        return out, run('delan-train', *args, *extra, *TRAIN)

    for urdf in (os.path.join(urdf_dir, 'two_link_arm.urdf'), 'two_link_arm.urdf'):  # or a name
        out, r = train('with_urdf.pt', '--urdf', urdf)
        assert r.returncode == 0, r.stderr
        meta = read_checkpoint(str(out))[0]
        assert meta['hyperparameters']['inertia_invariant_joints'] == [1]
        assert meta['training']['config']['loss_metric'] == 'both'
        assert json.loads(r.stdout)['loss_metric'] == 'both'
    out, r = train('without_urdf.pt')
    assert r.returncode == 0, r.stderr
    meta = read_checkpoint(str(out))[0]
    assert meta['hyperparameters']['inertia_invariant_joints'] == []
    assert meta['training']['config']['loss_metric'] == 'torque'
    out, r = train('wrong_urdf.pt', '--urdf', os.path.join(urdf_dir, 'seven_dof_arm.urdf'))
    assert r.returncode == 2 and '--urdf' in r.stderr and 'Traceback' not in r.stderr, r.stderr
    assert not os.path.exists(out)


@pytest.mark.parametrize(
    'extra,message',
    [
        (('--loss-metric', 'both'), "inverse of the URDF's mass matrix: give --urdf"),
        (
            ('--loss-metric', 'acceleration', '--urdf', 'two_link_arm.urdf', '--loss', 'forward'),
            '--loss-metric acceleration weighs the inverse loss, not --loss forward',
        ),
    ],
)
def test_train_loss_metric_usage_errors(files, extra, message):
    out = files / 'refused.pt'
    r = run('delan-train', '--data', files / 'data.npz', '--out', out, *extra, *TRAIN)
    assert r.returncode == 2 and message in r.stderr and 'Traceback' not in r.stderr, r.stderr
    assert not os.path.exists(out)


def test_train_acceleration_metric_is_the_urdfs_inverse_inertia_in_the_data_order(two_link):
    """What ``--loss-metric`` weighs errors with: ``H^-1`` of the URDF at every sample, its
    rows and columns in the data's joint order (here elbow, shoulder), as the learner's intake
    computes it in the model's."""
    import numpy as np

    from delan_common.robot_model import RobotModel
    from delan_learning.cli import _acceleration_metric, _description

    q = two_link.make_data([3], duration=1.0)['q']  # (N, 2): shoulder, elbow
    swapped = q[:, ::-1]
    w = _acceleration_metric(
        _description('two_link_arm.urdf', ['elbow', 'shoulder']), ['elbow', 'shoulder'], swapped
    )
    expected = RobotModel('two_link_arm.urdf').acceleration_metric(q)[:, ::-1, ::-1]
    assert w.shape == (len(q), 2, 2)
    np.testing.assert_allclose(w, expected, rtol=1e-12)
    assert np.abs(w[:, 0, 1]).max() > 0.1 * np.abs(w[:, 0, 0]).max()  # coupled: order matters
