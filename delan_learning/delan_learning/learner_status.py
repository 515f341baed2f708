"""What the learner reports of itself: the fields of its ``~/status`` (``ModelStatus``) and its
1 Hz health on ``/diagnostics``, composed from the trainer and the intake without ROS."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Tuple

from delan_learning.online_trainer import OnlineTrainer


def status_fields(learning: OnlineTrainer, samples_seen: int, rejected: int) -> Dict[str, Any]:
    """The ``ModelStatus`` fields but ``header``, ``joint_names``, ``state`` (a name here,
    ``learning.state``) and ``last_update_stamp`` (``learning.lineage.stamp``)."""
    lineage = learning.lineage
    return {
        'model_id': lineage.model_id,
        'model_version': lineage.version,
        'checkpoint_path': lineage.checkpoint_path,
        'message': learning.message,
        'samples_seen': samples_seen,
        'samples_in_buffer': learning.buffers.size,
        'samples_rejected': rejected,
        'training_steps': learning.training_steps,
        'rollbacks': learning.policy.rollbacks,
        'train_loss': float(learning.train_loss),
        'validation_nmse': list(learning.val_nmse),
        'last_update_duration': float(learning.last_round_s),
    }


class Health:
    """The learner's ``/diagnostics`` status: its state, and the optimiser steps per second
    since the last report (by ``clock`` [s])."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._last = (clock(), 0)  # (when, training steps) at the last report

    def report(
        self, learning: OnlineTrainer, samples_seen: int, rejected: int, estimate_rate: float
    ) -> Tuple[str, str, Dict[str, Any]]:
        """(state name, message, values); ``estimate_rate``: the estimates' rate [Hz]."""
        now, steps = self.clock(), learning.training_steps
        then, before = self._last
        self._last = (now, steps)
        lineage, nmse = learning.lineage, learning.val_nmse
        return (
            learning.state,
            f'{learning.state}: {learning.message}',
            {
                'state': learning.state,
                'model_id': lineage.model_id,
                'model_version': lineage.version,
                'steps_per_s': f'{max(0, steps - before) / max(now - then, 1e-9):.1f}',
                'training_steps': steps,
                'learning_rate': f'{learning.lr:.3g}',
                'samples_seen': samples_seen,
                'samples_in_buffer': learning.buffers.size,
                'samples_rejected': rejected,
                'validation_nmse': ' '.join(f'{x:.4g}' for x in nmse),
                'validation_nmse_max': f'{max(nmse):.4g}' if nmse else '',
                'rollbacks': learning.policy.rollbacks,
                'checkpoint': lineage.checkpoint_path,
                'estimate_publish_rate': estimate_rate,
            },
        )
