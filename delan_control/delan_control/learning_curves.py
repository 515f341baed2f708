"""Learning curves side by side: model kinds learned online from the same recorded joint states,
each published version judged on the demo's evaluation loop as the data came in.

Each kind is learned by the real ``LearnerNode`` fed a demo bag's joint states in stamp order,
optimiser steps paced by the stamps (:func:`delan_learning.learner_replay.replay_learner`: the
same data and step budget per second of data for every kind). Every published version is then
tracked on the demo's figure eight (:mod:`delan_control.replay`) at 1x and 2x; a curve is its
mean RMS error over nominal Pinocchio's against the seconds of data the version had seen, beside
the demo's bound (1/3), and the validation nMSE the learner reported.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from delan_control.replay import SPEEDS, EvaluationSetup, mean_rms

#: the demo's verdict: DeLaN within this fraction of nominal's error at every speed
BOUND = 1.0 / 3.0


@dataclass
class Curve:
    """One model kind's published versions: data seen, validation, tracking over nominal."""

    kind: str
    seconds: List[float] = field(default_factory=list)  # of stamps, at publication
    samples: List[int] = field(default_factory=list)
    validation: List[float] = field(default_factory=list)  # mean over joints
    ratio: List[List[float]] = field(default_factory=list)  # per speed
    steps: int = 0

    def first_within(self, bound: float = BOUND) -> Optional[int]:
        """Index of the first version within ``bound`` of nominal at every speed, or None."""
        for i, r in enumerate(self.ratio):
            if all(x <= bound for x in r):
                return i
        return None


def learn_curve(
    kind: str,
    msgs: Sequence,
    setup: EvaluationSetup,
    overrides: Dict,
    nominal: Dict[float, float],
    *,
    rate: float,
    until: float = 0.0,
    seed: int = 0,
    threads: int = 2,
    every: int = 1,
    say: Callable[[str], None] = print,
) -> Curve:
    """Replay ``msgs`` through a learner of ``kind`` at ``rate`` optimiser steps per second of
    stamps; track every ``every``-th published version (and the last) at :data:`SPEEDS`."""
    from delan_control.model_loader import load_dynamics_model
    from delan_learning.learner_replay import replay_learner

    curve = Curve(kind)
    saved: List[str] = []
    tmp = tempfile.mkdtemp(prefix=f'curves_{kind}_')
    keep = os.path.join(tmp, 'versions')
    os.makedirs(keep)

    def on_publish(node, seconds: float) -> None:
        # the learner prunes old versions: keep a copy of each for the evaluation below
        path = os.path.join(keep, f'{len(saved):04d}.pt')
        shutil.copyfile(node.checkpoint_path, path)
        saved.append(path)
        curve.seconds.append(seconds)
        curve.samples.append(int(node.samples_seen))
        curve.validation.append(float(np.mean(node.val_nmse)) if node.val_nmse else np.nan)

    try:
        curve.steps, _, wall = replay_learner(
            msgs,
            setup.robot.source,
            {**overrides, 'model': kind},
            rate,
            until,
            seed,
            os.path.join(tmp, 'ckpt'),
            threads,
            on_publish=on_publish,
            say=say,
        )
        say(f'{kind}: {len(saved)} versions in {curve.steps} steps, {wall:.0f} s wall')
        for i, path in enumerate(saved):
            if i % every and i != len(saved) - 1:
                curve.ratio.append([np.nan] * len(SPEEDS))
                continue
            model = load_dynamics_model(kind, setup.robot, checkpoint=path)
            rms = mean_rms(setup, model)
            curve.ratio.append([rms[sp] / nominal[sp] for sp in SPEEDS])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return curve


def plot(curves: List[Curve], title: str, path: str) -> None:
    """Two panels over seconds of data: validation nMSE, tracking error over nominal."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.2))
    for c, color in zip(curves, ('tab:blue', 'tab:orange', 'tab:green', 'tab:red')):
        a.semilogy(c.seconds, c.validation, '.-', color=color, label=c.kind)
        r = np.asarray(c.ratio, dtype=float).reshape(-1, len(SPEEDS))
        ok = np.isfinite(r[:, 0])
        x = np.asarray(c.seconds)[ok]
        for k, (sp, style) in enumerate(zip(SPEEDS, ('--', '-'))):
            b.semilogy(x, r[ok, k], style, marker='.', color=color, label=f'{c.kind} {sp:g}x')
    b.axhline(BOUND, color='k', lw=0.8, ls=':', label='bound (1/3 of nominal)')
    a.set_ylabel('validation torque nMSE (mean of joints)')
    b.set_ylabel('mean RMS tracking error / nominal')
    for ax in (a, b):
        ax.set_xlabel('data seen at publication [s of joint states]')
        ax.grid(True, which='both', alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(curves: List[Curve]) -> str:
    """Markdown: per kind, the first version within the bound and the last one."""
    rows = [
        '| learned | versions | optimiser steps | first within 1/3 at 1x and 2x: s of data '
        '(samples) | its 1x / 2x | last 1x / 2x |',
        '|---|---|---|---|---|---|',
    ]
    for c in curves:
        i = c.first_within()
        last = c.ratio[-1] if c.ratio else [np.nan, np.nan]
        first = f'{c.seconds[i]:.0f} ({c.samples[i]})' if i is not None else 'never'
        its = f'{c.ratio[i][0]:.3f} / {c.ratio[i][1]:.3f}' if i is not None else '-'
        rows.append(
            f'| `{c.kind}` | {len(c.seconds)} | {c.steps} | {first} | {its} | '
            f'{last[0]:.3f} / {last[1]:.3f} |'
        )
    return '\n'.join(rows)


def compare(
    demo_dir: str,
    urdf: str,
    joints: Optional[List[str]],
    kinds: Sequence[str],
    *,
    rate: float,
    until: float = 0.0,
    seed: int = 0,
    threads: int = 2,
    every: int = 1,
    say: Callable[[str], None] = print,
) -> List[Curve]:
    """The curves of ``kinds`` learned from a demo output folder's bag (``bags/``) with its
    learner parameters (``params.yaml``; each kind with its own loss metric)."""
    from delan_learning.learner_replay import joint_states, learner_overrides

    params = os.path.join(demo_dir, 'params.yaml')
    setup = EvaluationSetup.from_params(urdf, params, joints)
    overrides = {**learner_overrides(params), 'keep_versions': 1000}
    overrides.pop('loss_metric', None)
    msgs = joint_states(os.path.join(demo_dir, 'bags'))
    nominal = mean_rms(setup, setup.nominal)
    say(f'learning curves: {len(msgs)} joint states, {rate:.0f} steps/s, kinds {list(kinds)}')
    return [
        learn_curve(
            kind,
            msgs,
            setup,
            overrides,
            nominal,
            rate=rate,
            until=until,
            seed=seed,
            threads=threads,
            every=every,
            say=say,
        )
        for kind in kinds
    ]
