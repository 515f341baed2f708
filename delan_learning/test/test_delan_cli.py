"""delan-train and delan-eval as a user runs them: subprocesses, JSON out, exit codes."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from delan_learning.data import save_npz


def command(name):
    """The installed console script, else the same entry point through this interpreter."""
    exe = shutil.which(name)
    if exe:
        return [exe]
    fn = {'delan-train': 'train_main', 'delan-eval': 'eval_main'}[name]
    return [
        sys.executable,
        '-c',
        f'import sys; from delan_learning.cli import {fn}; sys.exit({fn}())',
    ]


def run(name, *args, timeout=120):
    return subprocess.run(
        command(name) + [str(a) for a in args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope='module')
def files(tmp_path_factory, two_link):
    d = tmp_path_factory.mktemp('cli')
    save_npz(d / 'train.npz', two_link.make_data(range(4), duration=4.0))
    save_npz(d / 'test.npz', two_link.make_data([40], duration=4.0))
    return d


@pytest.fixture(scope='module')
def trained(files):
    out = files / 'model.pt'
    r = run(
        'delan-train',
        '--data',
        files / 'train.npz',
        '--out',
        out,
        '--epochs',
        40,
        '--batch',
        64,
        '--lr',
        1e-2,
        '--width',
        32,
        '--seed',
        1,
        '--quiet',
    )
    return r, out


def test_train_writes_checkpoint_and_summary(trained):
    r, out = trained
    assert r.returncode == 0, r.stderr
    assert r.stderr == ''  # --quiet
    summary = json.loads(r.stdout)
    assert summary['model_kind'] == 'delan' and summary['joint_names'] == ['shoulder', 'elbow']
    assert summary['epochs_run'] >= 1 and summary['n_val'] > 0
    assert os.path.isfile(out)


def test_train_defaults_run_to_the_plateau(files):
    """Without --epochs, training runs until the validation loss stops improving: about as good
    on held-out data as a long fixed run of cosine decay, in fewer steps. (The two trainings
    run side by side: each takes one torch thread.)"""
    runs = {
        name: subprocess.Popen(
            command('delan-train')
            + [
                str(a)
                for a in ('--data', files / 'train.npz', '--out', files / f'{name}.pt')
                + ('--width', 32, '--quiet', *extra)
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, extra in (('default', ()), ('long', ('--epochs', 3000, '--schedule', 'cosine')))
    }
    scores = {}
    try:
        for name, proc in runs.items():
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, stderr
            e = run('delan-eval', '--model', files / f'{name}.pt', '--data', files / 'test.npz')
            scores[name] = (json.loads(stdout), json.loads(e.stdout)['inverse']['nmse_mean'])
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    default, long = scores['default'], scores['long']
    assert default[0]['stop_reason'] == 'plateau'
    assert long[0]['stop_reason'] in ('epochs', 'patience')
    assert default[0]['steps'] < long[0]['steps']
    assert default[1] < 1.5 * long[1], scores


def test_eval_prints_metrics(trained, files):
    _, model = trained
    r = run('delan-eval', '--model', model, '--data', files / 'test.npz', '--forward')
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res['model_kind'] == 'delan' and res['n_samples'] == 400
    for part in ('inverse', 'forward'):
        assert set(res[part]['mse']) == {'shoulder', 'elbow'}
        assert set(res[part]['nmse']) == {'shoulder', 'elbow'}
        assert all(np.isfinite(v) and v >= 0 for v in res[part]['nmse'].values())
    # a short training already explains most of the held-out torque variance
    assert max(res['inverse']['nmse'].values()) < 0.2
    data = np.load(files / 'test.npz')
    var = np.var(data['tau'], axis=0)
    assert res['inverse']['nmse']['elbow'] == pytest.approx(
        res['inverse']['mse']['elbow'] / var[1], rel=1e-9
    )


def test_eval_reorders_joints_by_name(trained, files, two_link):
    _, model = trained
    arrays = two_link.make_data([40], duration=4.0)
    swapped = {
        k: (
            v[:, ::-1]
            if k in ('q', 'qd', 'qdd', 'tau')
            else v[::-1]
            if k in ('joint_names', 'joint_types')
            else v
        )
        for k, v in arrays.items()
    }
    save_npz(files / 'swapped.npz', swapped)
    a = json.loads(run('delan-eval', '--model', model, '--data', files / 'test.npz').stdout)
    b = json.loads(run('delan-eval', '--model', model, '--data', files / 'swapped.npz').stdout)
    assert a['inverse']['mse'] == pytest.approx(b['inverse']['mse'])


def test_mlp_and_no_friction_options(files):
    for extra in (['--model', 'mlp'], ['--no-friction']):
        out = files / f'm{len(extra)}.pt'
        r = run(
            'delan-train',
            '--data',
            files / 'train.npz',
            '--out',
            out,
            '--epochs',
            2,
            '--width',
            16,
            '--quiet',
            '--val-fraction',
            0.25,
            *extra,
        )
        assert r.returncode == 0, r.stderr
    r = run('delan-eval', '--model', files / 'm2.pt', '--data', files / 'test.npz', '--forward')
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)['model_kind'] == 'mlp'


def test_friction_model_option(files):
    from delan_learning.checkpoint import read_checkpoint

    args = ('--data', files / 'train.npz', '--epochs', 1, '--width', 8, '--quiet')
    out = files / 'stribeck.pt'
    r = run('delan-train', *args, '--out', out, '--friction-model', 'stribeck')
    assert r.returncode == 0, r.stderr
    assert read_checkpoint(str(out))[0]['hyperparameters']['friction_model'] == 'stribeck'
    r = run('delan-eval', '--checkpoint', out, '--data', files / 'test.npz')
    assert r.returncode == 0, r.stderr
    mlp = ('--model', 'mlp', '--friction-model', 'stribeck')
    r = run('delan-train', *args, '--out', files / 'x.pt', *mlp)
    assert r.returncode != 0 and '--friction-model is for DeLaN models' in r.stderr


def bad(files, name, **change):
    arrays = dict(np.load(files / 'train.npz'))
    for k, v in change.items():
        if v is None:
            del arrays[k]
        else:
            arrays[k] = v
    path = files / name
    save_npz(path, arrays)
    return path


@pytest.mark.parametrize(
    'case', ['missing_tau', 'nan_q', 'no_file', 'bad_budget', 'command_order_for_npz', 'no_yaml']
)
def test_train_bad_input_exit_2(files, case):
    arrays = dict(np.load(files / 'train.npz'))
    q = arrays['q'].copy()
    q[5, 1] = np.nan
    args = {
        'missing_tau': ['--data', bad(files, 'notau.npz', tau=None)],
        'nan_q': ['--data', bad(files, 'nan.npz', q=q)],
        'no_file': ['--data', files / 'absent.npz'],
        'bad_budget': ['--data', files / 'train.npz', '--time-budget', -1],
        'command_order_for_npz': ['--data', files / 'train.npz', '--command-joints', 'a,b'],
        'no_yaml': ['--bag', files / 'absent', '--controllers-yaml', files / 'absent.yaml'],
    }[case]
    r = run('delan-train', *args, '--out', files / 'never.pt')
    assert r.returncode == 2
    assert r.stderr.startswith('delan-train: error:') and 'Traceback' not in r.stderr
    expected = {
        'missing_tau': "'tau'",
        'nan_q': 'non-finite',
        'no_file': 'no such data file',
        'bad_budget': '--time-budget',
        'command_order_for_npz': 'are for --bag',
        'no_yaml': 'cannot read controllers yaml',
    }[case]
    assert expected in r.stderr
    assert not os.path.exists(files / 'never.pt')


def test_eval_bad_input_exit_2(trained, files, two_link):
    _, model = trained
    other = two_link.make_data([1], duration=1.0)
    other['joint_names'] = np.array(['hip', 'knee'])
    save_npz(files / 'other.npz', other)
    (files / 'corrupt.pt').write_bytes(open(model, 'rb').read()[:500])
    for args, expected in (
        (['--model', model, '--data', files / 'other.npz'], 'lack joints'),
        (['--model', files / 'corrupt.pt', '--data', files / 'test.npz'], 'checkpoint'),
        (['--model', model], 'required'),
    ):  # argparse: --data/--bag missing
        r = run('delan-eval', *args)
        assert r.returncode == 2, (args, r.stderr)
        assert expected in r.stderr and 'Traceback' not in r.stderr
