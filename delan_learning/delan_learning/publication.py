"""When the online learner rolls back, keeps training or publishes a new model version.

After every training round :meth:`PublicationPolicy.judge` looks at the round's validation
result and answers with a :class:`Verdict`:

* **roll back** on a non-finite loss, or a validation loss ``divergence_factor`` times worse
  (and above ``divergence_floor``) than the last good weights *on the same data* -- or than
  the published version, whose weights are then restored;
* **publish** every ``publish_period`` when the last good weights beat the published version
  on the same data (both re-measured on the current validation data: a loss measured on the
  validation data of another time says little, as their error floor moves with what the arm
  did) and pass the quality gate ``publish_max_nmse`` on every joint;
* **hold** the publication after the data changed under the published version (its loss
  ``shift_factor`` times its loss at publication): a burst of bad but plausible data and a
  lasting change (a payload) look the same while they are in the buffers, so a new version
  must also beat the published one on validation data stamped ``publish_hold_s`` after the
  change was seen -- after a burst those are good data again.

ROS-free: the weights are reached through :class:`Weights` (:class:`TrainerWeights` for a
:class:`~delan_learning.training.Trainer`), the buffers through :class:`DataWindow`.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, Protocol, Tuple

from delan_learning.online import diverged, evaluate_total

#: validation samples stamped after a data change needed before a held version is compared
MIN_SETTLED_SAMPLES = 100

Data = Mapping[str, Any]
State = Dict[str, Any]


@dataclass
class PublicationParams:
    """The learner's parameters of the same names (assignable at runtime)."""

    publish_period: float = 5.0  # [s of the caller's clock]
    publish_max_nmse: float = 0.25
    divergence_factor: float = 20.0
    divergence_floor: float = 1e-3
    shift_factor: float = 5.0
    publish_hold_s: float = 10.0  # [s of joint-state stamps]

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> 'PublicationParams':
        """From the learner's parameter values (any mapping that holds these names)."""
        return cls(**{f.name: values[f.name] for f in fields(cls)})


class Weights(Protocol):
    """The model being trained, as the policy sees it."""

    def current(self) -> State:
        """A copy of the weights as they are."""

    def load(self, state: State) -> None:
        """Make ``state`` the weights being trained."""

    def evaluate(self, data: Data, state: Optional[State] = None) -> Dict[str, Any]:
        """``{'loss': float, 'nmse': (n,)}`` of ``state`` (None: the current weights) on
        ``data``, leaving the current weights as they were."""


class DataWindow(Protocol):
    """The replay buffers, as the policy sees them."""

    def newest_t(self) -> float:
        """Stamp of the newest sample in the buffers [s]."""

    def validation_since(self, t: float) -> Data:
        """The validation samples stamped after ``t``."""


class TrainerWeights:
    """:class:`Weights` of a :class:`~delan_learning.training.Trainer`'s model."""

    def __init__(self, trainer: Any):
        self.trainer = trainer

    def current(self) -> State:
        """A deep copy of the model's state dict, unaffected by further training."""
        return copy.deepcopy(self.trainer.model.state_dict())

    def load(self, state: State) -> None:
        """Load ``state`` into the model being trained."""
        self.trainer.model.load_state_dict(state)

    def evaluate(self, data: Data, state: Optional[State] = None) -> Dict[str, Any]:
        """:func:`evaluate_total` of ``state`` (None: the current weights) on ``data``; the current
        weights are put back afterwards, even on an error."""
        if state is None:
            return evaluate_total(self.trainer, data)
        current = self.current()
        self.load(state)
        try:
            return evaluate_total(self.trainer, data)
        finally:
            self.load(current)


@dataclass(frozen=True)
class Verdict:
    """What the learner does after a round."""

    action: str  # 'rolled_back', 'training', 'waiting' or 'publish'
    message: str  # for the status
    restore: Optional[State] = None  # 'rolled_back': weights to go on from (None: afresh)
    restart_lr: bool = False  # the data changed: learn the change fast
    notes: Tuple[Tuple[str, str], ...] = field(default=())  # (level, text) to log


class PublicationPolicy:
    """The learner's memory of its weights and versions, and its decisions (module docstring).

    ``best_val``: validation loss of the last good weights ``good_state`` (per-joint nMSE
    ``good_nmse``); ``published_val``: the loss of the published version when it went out;
    ``shift_t``: the stamp at which changed data were seen (None: none); ``standing``: what
    the last comparison for publication decided, answered until the next one (they come every
    ``publish_period``)."""

    def __init__(self, params: Optional[PublicationParams] = None):
        self.params = params or PublicationParams()
        self.rollbacks = 0
        self.last_publish = 0.0
        self.last_recheck = 0.0  # when the weights were last compared for publication
        self.restart(None)

    def restart(self, good_state: Optional[State]) -> None:
        """Forget the losses: a reset (``good_state`` None) or an adopted checkpoint."""
        self.good_state = good_state
        self.standing = Verdict('training', 'training')
        self.good_nmse: List[float] = []
        self.best_val = self.published_val = math.inf
        self.shift_t: Optional[float] = None

    def published(self, now: float) -> None:
        """The last good weights went out as a new version at ``now``."""
        self.published_val = self.best_val
        self.shift_t = None  # the new version is the yardstick of changed data from now on
        self.last_publish = now

    def judge(
        self,
        train_loss: float,
        ev: Mapping[str, Any],
        val: Data,
        weights: Weights,
        published: Optional[Tuple[int, State]],
        now: float,
        window: DataWindow,
    ) -> Verdict:
        """After a round with training loss ``train_loss`` and validation result ``ev``
        (``{'loss', 'nmse'}`` on ``val``) of the current ``weights``; ``published``: the
        version number and weights out there (None: none yet); ``now``: the publication
        clock [s]."""
        p = self.params
        if not (math.isfinite(train_loss) and math.isfinite(ev['loss'])):
            return self._roll_back(
                f'non-finite loss {train_loss:.3g} / validation {ev["loss"]:.3g}'
            )
        loss = ev['loss']
        factor, floor = p.divergence_factor, p.divergence_floor
        if published is not None and diverged(loss, self.published_val, factor, floor):
            # far worse than the published version was: if that version is still far better on
            # *these* data, training went astray (on a burst of bad but plausible data, since
            # flushed out of the validation buffer) -- and the last good weights may have
            # followed it there, judged on that bad data: back to the published weights
            version, state = published
            pub_loss = weights.evaluate(val, state)['loss']
            if diverged(loss, pub_loss, factor, floor):
                weights.load(state)
                self.good_state, self.best_val = weights.current(), pub_loss
                return self._roll_back(
                    f'validation {loss:.3g} vs {pub_loss:.3g} of the published v{version}'
                )
        if math.isfinite(self.best_val) and diverged(loss, self.best_val, factor, floor):
            # the validation set grows with new motions, so compare against the last good
            # weights on the *same* data before calling it divergence
            good = weights.evaluate(val, self.good_state)['loss']
            if diverged(loss, good, factor, floor):
                return self._roll_back(
                    f'validation {loss:.3g} vs {good:.3g} of the last good weights'
                )
            self.best_val = good
        fresh = loss < self.best_val  # the last good weights measured on val just now
        if fresh:
            self.best_val, self.good_state = loss, weights.current()
            self.good_nmse = [float(x) for x in ev['nmse']]
        if now - self.last_publish < p.publish_period or self.good_state is None:
            return Verdict('training', 'training')
        if now - self.last_recheck < p.publish_period:
            return self.standing  # decided at the last comparison
        self.last_recheck = now
        verdict = self._decide(val, weights, published, window, fresh)
        self.standing = Verdict(verdict.action, verdict.message)
        if verdict.action == 'publish':
            self.standing = Verdict('training', 'training')
        return verdict

    def _decide(
        self,
        val: Data,
        weights: Weights,
        published: Optional[Tuple[int, State]],
        window: DataWindow,
        fresh: bool,
    ) -> Verdict:
        """Whether the last good weights go out now (module docstring), compared with the
        published version on the current validation data ``val`` (``fresh``: the last good
        weights are this round's, already measured on it)."""
        p = self.params
        pub_loss = self._remeasure(val, weights, published, fresh)
        if pub_loss is not None and not self.best_val < pub_loss:
            return Verdict('training', 'training')
        worst = max(self.good_nmse, default=math.inf)
        if worst > p.publish_max_nmse:
            return Verdict(
                'waiting',
                f'training; not published yet: validation nMSE '
                f'{worst:.3g} > publish_max_nmse {p.publish_max_nmse:.3g}',
            )
        held, restart_lr, notes = self._held(weights, published, pub_loss, window)
        if held:
            return Verdict(
                'waiting',
                f'training; not published yet: {held}',
                restart_lr=restart_lr,
                notes=notes,
            )
        return Verdict('publish', 'training', restart_lr=restart_lr, notes=notes)

    def _roll_back(self, why: str) -> Verdict:
        self.rollbacks += 1
        return Verdict(
            'rolled_back',
            f'diverged ({why}); rolled back to the last good weights',
            restore=self.good_state,
        )

    def _remeasure(
        self,
        val: Data,
        weights: Weights,
        published: Optional[Tuple[int, State]],
        fresh: bool = False,
    ) -> Optional[float]:
        """The last good weights re-measured on the current validation data ``val``
        (``best_val``, ``good_nmse``; not when ``fresh``: measured on it this round); the
        published version's loss on the same data (None while nothing is published: the
        quality gate decides). A measurement costs the learner as much as a few dozen optimiser
        steps: none is repeated.

        ``best_val`` and the published loss were measured on the validation data of their time.
        After a lasting change (a payload, a new region of the workspace) the error floor rises:
        no new weights beat the old ``best_val`` (the last good weights froze) and no version
        would beat the old published loss (publishing stopped for good); on easier data than the
        published version's (the motions of its time gone from the buffer, a young model) a
        version far worse than it would beat it. So both are compared on the same data here.
        The published loss at publication (``published_val``) is *not* overwritten: it stays the
        reference that tells a burst of bad data. Before the first version the same holds for
        the quality gate: a best loss measured on the small early validation set froze the last
        good weights with an nMSE above the gate, and nothing was ever published."""
        if not fresh:
            good = weights.evaluate(val, self.good_state)
            self.best_val, self.good_nmse = good['loss'], [float(x) for x in good['nmse']]
        if published is None:
            return None
        return float(weights.evaluate(val, published[1])['loss'])

    def _held(
        self,
        weights: Weights,
        published: Optional[Tuple[int, State]],
        pub_loss: Optional[float],
        window: DataWindow,
    ) -> Tuple[Optional[str], bool, Tuple[Tuple[str, str], ...]]:
        """(why better weights must not go out yet after the data changed (None: they may),
        whether the change was seen just now, what to log); ``pub_loss``: the published
        version's loss on the current validation data."""
        if published is None or pub_loss is None:
            return None, False, ()
        version, state = published
        if pub_loss <= self.params.shift_factor * self.published_val:
            notes: Tuple[Tuple[str, str], ...] = ()
            if self.shift_t is not None:
                notes = (
                    (
                        'info',
                        f'validation data back in line with v{version}: publication '
                        'no longer held',
                    ),
                )
            self.shift_t = None
            return None, False, notes
        newest = window.newest_t()
        seen = self.shift_t is None or newest < self.shift_t  # (a clock restart: from now)
        if seen:
            self.shift_t = newest
        assert self.shift_t is not None  # set just above unless already set
        settled = self.shift_t + self.params.publish_hold_s
        recent = window.validation_since(settled)
        notes = ()
        if seen:
            notes = (
                (
                    'warning',
                    f'validation data changed: v{version} has loss {pub_loss:.3g} '
                    f'on them, {self.published_val:.3g} when published; a new '
                    f'version must beat it on data stamped after {settled:.2f}',
                ),
            )
        if len(recent['tau']) < MIN_SETTLED_SAMPLES:
            return (
                (
                    f'the data changed at stamp {self.shift_t:.2f}: waiting for validation '
                    f'data after {settled:.2f}'
                ),
                seen,
                notes,
            )
        mine = weights.evaluate(recent, self.good_state)['loss']
        theirs = weights.evaluate(recent, state)['loss']
        if not mine < theirs:
            return (
                (
                    f'v{version} is better on the data since the change (loss {theirs:.3g} vs '
                    f'{mine:.3g})'
                ),
                seen,
                notes,
            )
        return None, seen, notes
