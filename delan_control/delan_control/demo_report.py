"""Analysis, plots and ``report.md`` of the demo (kept apart from the orchestration)."""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Tuple

import matplotlib
import numpy as np

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

from delan_common.dynamics import DynamicsModel  # noqa: E402
from delan_common.robot_model import Mismatch, RobotModel  # noqa: E402
from delan_control.model_loader import load_dynamics_model  # noqa: E402
from delan_control.params.sim import MISMATCH, NOISE  # noqa: E402
from delan_learning.data import complete_derivatives, split_at_gaps  # noqa: E402

MODEL_LABELS = {
    'true': 'true plant',
    'pinocchio': 'Pinocchio (nominal URDF)',
    'identified': 'identified (least squares)',
    'delan': 'DeLaN (online)',
    'delan_residual': 'DeLaN residual on the URDF (online)',
}


#: the report's files besides its plots (``*.png``)
REPORT_FILES = ('report.md', 'results.json')


def write_failure(demo, why: str) -> None:
    """The failed verdict ``why`` in ``report.md`` and ``results.json``: added to this run's
    report when it is written (``demo.reported``: a step after it failed), else a report of a
    run that ended before its evaluation, with what the run had measured by then."""
    path = os.path.join(demo.out, 'results.json')
    if demo.reported:
        with open(path) as f:
            res = json.load(f)
        verdict = res.setdefault('verdict', {})
        verdict['passed'] = False
        verdict.setdefault('failures', []).append(why)
        with open(os.path.join(demo.out, 'report.md'), 'a') as f:
            f.write(f'\n**FAILED** after the report: {why}\n')
    else:
        res = _results(demo)
        res['verdict'] = {'passed': False, 'failures': [why], 'delan_vs_pinocchio_rms': {}}
        with open(os.path.join(demo.out, 'report.md'), 'w') as f:
            f.write(f'# delan_ros demo report\n\n**FAILED** before its evaluation: {why}\n')
    with open(path, 'w') as f:
        json.dump(res, f, indent=1, default=_json_value)


def _results(demo) -> Dict:
    """The run's results so far with its timing, joints and robot: what every results.json
    holds."""
    names = list(demo.robot.joint_names)
    res = dict(demo.results)
    res.update(timing=demo.timing, joint_names=names, robot={'urdf': demo.urdf, 'joints': names})
    return res


def _json_value(value):
    """numpy values (and anything else) in results.json: lists and numbers, else the text."""
    return value.tolist() if hasattr(value, 'tolist') else str(value)


def true_plant(demo) -> RobotModel:
    """The sim's model with the mismatch of the parameter file: the ground truth."""
    return RobotModel(
        demo.urdf, Mismatch.from_params(demo.node_params('sim')), **demo.robot.selection_kwargs()
    )


def segment_arrays(segments) -> Dict[str, np.ndarray]:
    """The evaluation segments' ``t``, ``q``, ``qd``, ``tau`` concatenated, with ``qdd``
    differentiated per segment."""
    arrays = {
        k: np.concatenate([getattr(s, k) for s in segments]) for k in ('t', 'q', 'qd', 'tau')
    }
    # one trajectory per segment, split where states were lost (a gap would give a false qdd)
    arrays['traj'] = split_at_gaps(
        arrays['t'], np.concatenate([np.full(len(s.t), i) for i, s in enumerate(segments)])
    )
    return complete_derivatives(arrays)


def nmse(pred: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Per-joint MSE of ``pred`` over the variance of ``tau``, both ``(T, n)``."""
    return np.mean((pred - tau) ** 2, axis=0) / np.maximum(np.var(tau, axis=0), 1e-12)


def models_under_test(demo) -> Dict[str, Optional[DynamicsModel]]:
    """The models the report compares, by name: the true plant, nominal, identified, learned."""
    ckpt = demo.results['learner']['checkpoint']
    return {
        'true': true_plant(demo),
        'pinocchio': load_dynamics_model('pinocchio', demo.robot),
        'identified': load_dynamics_model(
            'identified', demo.robot, identified_params=demo.identified_path
        ),
        demo.args.learner_model: load_dynamics_model(
            demo.args.learner_model, demo.robot, checkpoint=ckpt
        ),
    }


def _fmt(v) -> str:
    return ' / '.join(f'{x:.4f}' for x in np.atleast_1d(v))


def write_report(demo) -> str:
    """Write ``report.md`` and its plots into the demo's output folder; returns the path."""
    out = demo.out
    names = demo.robot.joint_names
    models = models_under_test(demo)
    # ---- torque prediction on the evaluation data (1x and 2x separately)
    pred_rows: List[Tuple[str, float, np.ndarray]] = []
    data_by_speed = {}
    for speed in sorted({s.speed for s in demo.segments}):
        clean = [s for s in demo.segments if s.speed == speed and not s.diverged]
        if not clean:
            continue
        d = segment_arrays(clean)  # a diverged run's data would pollute every model's error
        data_by_speed[speed] = d
        for key, m in models.items():
            assert m is not None  # load_dynamics_model gives None for 'pd' only, not compared
            pred = np.asarray(m.inverse(d['q'], d['qd'], d['qdd']))
            pred_rows.append((key, speed, nmse(pred, d['tau'])))
    # ---- results.json
    res = _results(demo)
    res['torque_nmse'] = [{'model': k, 'speed': sp, 'nmse': v.tolist()} for k, sp, v in pred_rows]
    demo.results['torque_nmse'] = res['torque_nmse']
    verdict = demo.verdict()
    res['verdict'] = demo.results['verdict'] = {
        'passed': verdict.passed,
        'failures': verdict.failures,
        'delan_vs_pinocchio_rms': {str(k): v for k, v in verdict.ratios.items()},
    }
    res['tracking'] = [
        {
            'controller': s.controller,
            'speed': s.speed,
            'rms': s.rms.tolist(),
            'max_abs': s.max_abs.tolist(),
            'diverged': s.diverged,
            'lockstep_misses': s.lockstep_misses,
        }
        for s in demo.segments
    ]
    with open(os.path.join(out, 'results.json'), 'w') as f:
        json.dump(res, f, indent=1)
    # ---- plots
    plots = [_plot_learning(demo), _plot_tracking(demo)]
    if data_by_speed:  # else every run diverged: no clean data to predict
        plots += [
            _plot_torque(demo, models, data_by_speed),
            _plot_structure(demo, models, data_by_speed),
        ]
    # ---- tables
    lines = [
        '| controller | speed | RMS tracking error per joint [rad] | mean RMS [rad] |',
        '|---|---|---|---|',
    ]
    for s in demo.segments:
        mark = f' **diverged**: {s.diverged}' if s.diverged else ''
        if s.lockstep_misses:
            mark += f' ({s.lockstep_misses} commands late for the lockstep sim)'
        lines.append(
            f'| {s.controller} | {s.speed:.0f}x | {_fmt(s.rms)} | {np.mean(s.rms):.4f}{mark} |'
        )
    for speed, rms in sorted(demo.results.get('loop_floor_rms', {}).items()):
        lines.append(
            f"| *true plant (replayed: the loop's floor)* | {float(speed):.0f}x | "
            f'{_fmt(rms)} | {np.mean(rms):.4f} |'
        )
    late = sum(s.lockstep_misses or 0 for s in demo.segments)
    if late:
        lines += [
            '',
            f'The controller answered {late} joint states too late for the lockstep sim '
            "(its lockstep_timeout): the arm moved on the previous command there, so a run's "
            "error is not its model's alone (a machine too loaded for the sim's timeout).",
        ]
    tracking = '\n'.join(lines)
    lines = ['| model | speed | torque nMSE per joint | mean nMSE |', '|---|---|---|---|']
    for key, speed, v in pred_rows:
        lines.append(f'| {MODEL_LABELS[key]} | {speed:.0f}x | {_fmt(v)} | {np.mean(v):.4f} |')
    prediction = '\n'.join(lines)
    lr = demo.results['learner']
    t = demo.timing
    summary = (
        f'- robot: `{os.path.relpath(demo.urdf, os.getcwd())}`, joints {", ".join(names)}\n'
        f'- plant mismatch vs the URDF: `{json.dumps(_mismatch(demo))}`\n'
        f'- online learning: {lr["samples_seen"]} joint states, {lr["training_steps"]} '
        f'optimiser steps, {lr["model_version"]} model versions in '
        f'{t.get("excitation_wall_s", 0):.0f} s wall ({t.get("excitation_sim_s", 0):.0f} s'
        f' sim, {lr.get("steps_per_s", 0):.0f} steps/s); final validation nMSE '
        f'{_fmt(lr["validation_nmse"])}; target {_fmt(demo.results.get("target_nmse", []))}'
        f' (true-plant floor {_fmt(demo.results.get("noise_floor_nmse", []))}), '
        f'{_reached(t)}{_plateau(demo.results)}\n'
        f'- rosbag2: {demo.results["bag"]["samples"]} joint states, '
        f'{demo.results["bag"]["bytes"] / 1e6:.1f} MB; identification took '
        f'{t.get("identification_s", 0):.1f} s\n'
        f'- whole demo: {t.get("total_wall_s", 0):.0f} s wall\n'
    )
    if verdict.passed:
        ratios = ', '.join(f'{r:.3f} at {sp:g}x' for sp, r in verdict.ratios.items())
        outcome = (
            f"**PASSED**: DeLaN tracks with {ratios} of nominal Pinocchio's mean RMS "
            f'error (bound {demo.args.max_delan_ratio:.2f}).'
        )
    else:
        outcome = '**FAILED**:\n\n' + '\n'.join(f'- {why}' for why in verdict.failures)
    md = [
        '# delan_ros demo report',
        '',
        outcome,
        '',
        summary,
        '## Tracking the unseen figure eight',
        '',
        tracking,
        '',
        '## Torque prediction on the evaluation data',
        '',
        'nMSE = MSE / Var(measured torque); qdd estimated offline (Savitzky-Golay). '
        '"true plant" is the sim\'s own model: its error is the floor set by noise and the '
        'acceleration estimate.',
        '',
        prediction,
        '',
        '## Plots',
        '',
    ]
    md += [f'![{os.path.splitext(p)[0]}]({p})' for p in plots]
    with open(os.path.join(out, 'report.md'), 'w') as f:
        f.write('\n'.join(md) + '\n')
    return tracking + '\n\n' + prediction


#: the sim's parameters that make the plant differ from the URDF, as the report shows them
MISMATCH_KEYS = MISMATCH + NOISE


def _reached(timing: Dict) -> str:
    if 'time_to_target_s' not in timing:
        return '**target not reached**'
    return (
        f'reached after {timing["time_to_target_s"]:.0f} s wall '
        f'({timing["sim_time_to_target_s"]:.0f} s sim)'
    )


def _plateau(results: Dict) -> str:
    if 'learning_plateaued' not in results:
        return ''
    return (
        '; learned until it stopped improving'
        if results['learning_plateaued']
        else '; **still improving** when the extra excitation time ran out'
    )


def _mismatch(demo) -> Dict:
    p = demo.node_params('sim')
    return {k: p[k] for k in MISMATCH_KEYS if k in p}


def _plot_learning(demo) -> str:
    fig, ax = plt.subplots(figsize=(7, 4))
    rows = [
        (w, list(m.validation_nmse), m.samples_seen)
        for w, m in demo.mon.status
        if len(m.validation_nmse)
    ]
    if rows:
        w = np.array([r[0] for r in rows])
        v = np.array([r[1] for r in rows])
        for j, name in enumerate(demo.robot.joint_names):
            ax.semilogy(w, v[:, j], label=name)
    ax.set_xlabel('wall time since start [s]')
    ax.set_ylabel('validation torque nMSE')
    ax.set_title('Online DeLaN learning curve')
    ax.grid(True, which='both', alpha=0.3)
    ax.legend()
    return _save(fig, demo.out, 'learning_curve.png')


def _plot_tracking(demo) -> str:
    speeds = sorted({s.speed for s in demo.segments})
    ctrls = list(dict.fromkeys(s.controller for s in demo.segments))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(speeds)
    for i, sp in enumerate(speeds):
        vals = [
            np.mean(next(s.rms for s in demo.segments if s.controller == c and s.speed == sp))
            for c in ctrls
        ]
        axes[0].bar(np.arange(len(ctrls)) + i * width, vals, width, label=f'{sp:.0f}x')
    axes[0].set_xticks(np.arange(len(ctrls)) + 0.4 - width / 2, ctrls)
    axes[0].set_yscale('log')
    axes[0].set_ylabel('mean RMS joint error [rad]')
    axes[0].legend()
    axes[0].set_title('Tracking error by controller')
    for s in demo.segments:
        if s.speed == speeds[-1]:
            axes[1].semilogy(
                s.t - s.t[0], np.linalg.norm(s.q_ref - s.q, axis=1) + 1e-6, label=s.controller
            )
    axes[1].set_xlabel('time [s]')
    axes[1].set_ylabel('|q_ref - q| [rad]')
    axes[1].set_title(f'Error over time at {speeds[-1]:.0f}x')
    axes[1].legend()
    return _save(fig, demo.out, 'tracking_error.png')


def _plot_torque(demo, models, data_by_speed) -> str:
    sp = max(data_by_speed)
    d = data_by_speed[sp]
    seg = d['traj'] == d['traj'][-1]
    n = len(demo.robot.joint_names)
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.2 * n), sharex=True, squeeze=False)
    t = d['t'][seg] - d['t'][seg][0]
    for j in range(n):
        ax = axes[j, 0]
        ax.plot(t, d['tau'][seg, j], 'k', lw=2, label='measured')
        for key in ('pinocchio', 'identified', demo.args.learner_model):
            pred = np.asarray(models[key].inverse(d['q'][seg], d['qd'][seg], d['qdd'][seg]))
            ax.plot(t, pred[:, j], lw=1, label=MODEL_LABELS[key])
        ax.set_ylabel(f'{demo.robot.joint_names[j]} [N m]')
    axes[0, 0].legend(fontsize=7, ncol=2)
    axes[0, 0].set_title(f'Predicted vs measured torque, figure eight at {sp:.0f}x')
    axes[-1, 0].set_xlabel('time [s]')
    return _save(fig, demo.out, 'torque_prediction.png')


def _plot_structure(demo, models, data_by_speed) -> str:
    d = data_by_speed[min(data_by_speed)]
    seg = d['traj'] == d['traj'][0]
    q, qd = d['q'][seg], d['qd'][seg]
    t = d['t'][seg] - d['t'][seg][0]
    n = q.shape[1]
    pairs = [(i, j) for i in range(n) for j in range(i, n)][:6]
    fig, axes = plt.subplots(2, 2, figsize=(12, 7))
    styles = {
        'true': ('k', 2.0),
        'pinocchio': ('tab:blue', 1.0),
        'identified': ('tab:orange', 1.0),
        'delan': ('tab:red', 1.2),
        'delan_residual': ('tab:red', 1.2),
    }
    for key, m in models.items():
        c, lw = styles[key]
        H = np.asarray(m.mass_matrix(q))
        for k, (i, j) in enumerate(pairs):
            axes[0, 0].plot(
                t,
                H[:, i, j],
                color=c,
                lw=lw,
                alpha=0.4 + 0.6 * (k == 0),
                label=MODEL_LABELS[key] if k == 0 else None,
            )
        g = np.asarray(m.gravity(q))
        for j in range(min(n, 3)):
            axes[0, 1].plot(
                t, g[:, j], color=c, lw=lw, label=MODEL_LABELS[key] if j == 0 else None
            )
        T, V = (np.asarray(x) for x in m.energy(q, qd))
        axes[1, 0].plot(t, T.reshape(-1), color=c, lw=lw, label=MODEL_LABELS[key])
        V = V.reshape(-1)
        axes[1, 1].plot(t, V - V.mean(), color=c, lw=lw, label=MODEL_LABELS[key])
    axes[0, 0].set_title(f'mass matrix entries H_ij(q) {pairs}')
    axes[0, 1].set_title('gravity torque g(q) [N m]')
    axes[1, 0].set_title('kinetic energy T [J]')
    axes[1, 1].set_title('potential energy V - mean(V) [J]')
    for ax in axes.flat:
        ax.set_xlabel('time [s]')
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle('What the models believe along the 1x figure eight')
    return _save(fig, demo.out, 'dynamics_structure.png')


def _save(fig, out: str, name: str) -> str:
    fig.tight_layout()
    fig.savefig(os.path.join(out, name), dpi=90)
    plt.close(fig)
    return name
