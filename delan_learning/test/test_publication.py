"""The online learner's decisions (``publication.PublicationPolicy``), on scripted losses."""

import math

import pytest

from delan_learning.publication import MIN_SETTLED_SAMPLES, PublicationParams, PublicationPolicy


class Weights:
    """Weights named by a string; ``losses[(weights, data)]`` is their loss on named data."""

    def __init__(self, losses):
        self.losses, self.name = losses, 'w0'

    def current(self):
        return {'name': self.name}

    def load(self, state):
        self.name = state['name']

    def evaluate(self, data, state=None):
        loss = self.losses[((state or self.current())['name'], data['name'])]
        return {'loss': loss, 'nmse': [loss, loss]}


class Window:
    def __init__(self, newest=0.0, since=0):
        self.newest, self.count, self.asked = newest, since, []

    def newest_t(self):
        return self.newest

    def validation_since(self, t):
        self.asked.append(t)
        return {'name': 'recent', 'tau': [0.0] * self.count}


PARAMS = dict(
    publish_period=5.0,
    publish_max_nmse=0.25,
    divergence_factor=20.0,
    divergence_floor=1e-3,
    shift_factor=5.0,
    publish_hold_s=10.0,
)


def _round(policy, weights, name, loss, now, published=None, window=None, data='val'):
    """A round that trained the weights into ``name`` with validation loss ``loss``."""
    weights.name = name
    weights.losses[(name, data)] = loss
    return policy.judge(
        loss,
        {'loss': loss, 'nmse': [loss, loss]},
        {'name': data},
        weights,
        published,
        now,
        window or Window(),
    )


def test_the_first_version_goes_out_once_better_gated_and_due():
    policy, w = PublicationPolicy(PublicationParams(**PARAMS)), Weights({})
    assert _round(policy, w, 'a', 0.5, now=10.0).action == 'waiting'  # nMSE 0.5 > 0.25
    assert 'publish_max_nmse' in _round(policy, w, 'b', 0.4, now=20.0).message
    v = _round(policy, w, 'c', 0.1, now=30.0)
    assert v.action == 'publish' and policy.good_state == {'name': 'c'}
    policy.published(30.0)
    assert policy.published_val == 0.1
    # better weights again, but before publish_period has passed: not yet
    assert (
        _round(policy, w, 'd', 0.05, now=32.0, published=(1, {'name': 'c'})).action == 'training'
    )
    w.losses[('c', 'val')] = 0.1
    assert _round(policy, w, 'e', 0.04, now=36.0, published=(1, {'name': 'c'})).action == 'publish'
    assert policy.good_nmse == [0.04, 0.04]


def test_a_version_goes_out_only_if_it_beats_the_published_one_on_the_same_data():
    """The published version's loss at publication was measured on the validation data of its
    time: a candidate with a lower loss on today's (easier) data can still be far worse than it
    there. Both are compared on the same data; until the next comparison (a publish_period
    later) the decision stands."""
    policy, w = PublicationPolicy(PublicationParams(**PARAMS)), Weights({})
    _round(policy, w, 'p', 0.05, now=10.0)
    policy.published(10.0)
    pub = (1, {'name': 'p'})
    w.losses[('p', 'val2')] = 0.01  # the published version on today's data
    v = _round(policy, w, 'a', 0.03, now=20.0, published=pub, data='val2')
    assert v.action == 'training' and policy.best_val == 0.03 < policy.published_val
    # 0.008 beats it on the same data; not compared before a publish_period has passed
    assert _round(policy, w, 'b', 0.008, now=22.0, published=pub, data='val2').action == (
        'training'
    )
    assert _round(policy, w, 'b', 0.008, now=25.0, published=pub, data='val2').action == (
        'publish'
    )


def test_weights_measured_this_round_are_not_measured_again():
    policy, w = PublicationPolicy(PublicationParams(**PARAMS)), Weights({})
    _round(policy, w, 'p', 0.05, now=10.0)
    policy.published(10.0)
    w.losses[('p', 'val2')] = 0.1
    asked = []
    evaluate = w.evaluate
    w.evaluate = lambda data, state=None: (
        asked.append((state or {}).get('name')) or evaluate(data, state)
    )
    v = _round(policy, w, 'a', 0.02, now=20.0, published=(1, {'name': 'p'}), data='val2')
    assert v.action == 'publish' and asked == ['p']  # 'a' was measured on val2 by its round


def test_a_decision_to_wait_stands_until_the_next_comparison():
    policy, w = PublicationPolicy(PublicationParams(**PARAMS)), Weights({})
    v = _round(policy, w, 'a', 0.5, now=10.0)
    assert v.action == 'waiting'
    assert _round(policy, w, 'a', 0.5, now=12.0) == v  # the same status, not re-evaluated
    assert _round(policy, w, 'b', 0.1, now=15.0).action == 'publish'


def test_a_non_finite_loss_rolls_back_to_the_last_good_weights_or_starts_afresh():
    policy, w = PublicationPolicy(PublicationParams(**PARAMS)), Weights({})
    v = _round(policy, w, 'x', math.nan, now=1.0)
    assert v.action == 'rolled_back' and v.restore is None and policy.rollbacks == 1
    _round(policy, w, 'a', 0.1, now=2.0)
    v = policy.judge(
        math.inf, {'loss': 0.1, 'nmse': [0.1]}, {'name': 'val'}, w, None, 3.0, Window()
    )
    assert v.action == 'rolled_back' and v.restore == {'name': 'a'}
    assert 'non-finite' in v.message and policy.rollbacks == 2


def test_divergence_is_judged_against_the_last_good_weights_on_the_same_data():
    policy, w = PublicationPolicy(PublicationParams(**PARAMS)), Weights({})
    _round(policy, w, 'a', 0.01, now=1.0)
    # 50x worse, and the good weights are still good on these data: rolled back
    w.losses[('a', 'val2')] = 0.01
    v = _round(policy, w, 'b', 0.5, now=2.0, data='val2')
    assert v.action == 'rolled_back' and v.restore == {'name': 'a'}
    # 50x worse, but the data got harder for every weight (new motions): not a divergence,
    # the best loss follows the data
    w.losses[('a', 'val3')] = 0.4
    v = _round(policy, w, 'c', 0.5, now=3.0, data='val3')
    assert v.action != 'rolled_back' and policy.best_val == 0.4
    # below the floor, ratios are noise
    policy2 = PublicationPolicy(PublicationParams(**PARAMS))
    _round(policy2, w, 'a', 1e-6, now=1.0)
    w.losses[('a', 'val4')] = 1e-6
    assert _round(policy2, w, 'b', 1e-4, now=2.0, data='val4').action != 'rolled_back'


def test_far_worse_than_the_published_version_on_the_same_data_restores_it():
    policy, w = PublicationPolicy(PublicationParams(**PARAMS)), Weights({})
    _round(policy, w, 'p', 0.01, now=10.0)
    policy.published(10.0)
    # the last good weights followed a burst of bad data; the published ones are still good
    w.losses[('p', 'val2')] = 0.01
    policy.good_state, policy.best_val = {'name': 'astray'}, 0.3
    v = _round(policy, w, 'b', 0.6, now=11.0, published=(1, {'name': 'p'}), data='val2')
    assert v.action == 'rolled_back' and 'published v1' in v.message
    assert v.restore == {'name': 'p'} and w.name == 'p' and policy.best_val == 0.01


def test_after_a_data_change_a_version_must_beat_the_published_one_on_settled_data():
    params = PublicationParams(**PARAMS)
    policy, w = PublicationPolicy(params), Weights({})
    _round(policy, w, 'p', 0.01, now=10.0)
    policy.published(10.0)
    pub = (1, {'name': 'p'})
    # the published version is 10x worse on the current data (> shift_factor 5): held
    w.losses[('p', 'val2')] = 0.1
    win = Window(newest=100.0, since=0)
    v = _round(policy, w, 'a', 0.005, now=20.0, published=pub, window=win, data='val2')
    assert v.action == 'waiting' and v.restart_lr and policy.shift_t == 100.0
    assert v.notes[0][0] == 'warning' and 'waiting for validation data after 110.00' in v.message
    # the change is not "seen" twice: no second restart of the learning rate
    v = _round(
        policy, w, 'b', 0.004, now=30.0, published=pub, window=Window(105.0, 0), data='val2'
    )
    assert v.action == 'waiting' and not v.restart_lr and not v.notes
    # settled data came: the published version is better on them (it was a burst): held
    win = Window(newest=130.0, since=MIN_SETTLED_SAMPLES)
    w.losses[('b', 'recent')], w.losses[('p', 'recent')] = 0.02, 0.01
    v = _round(policy, w, 'b', 0.004, now=40.0, published=pub, window=win, data='val2')
    assert v.action == 'waiting' and 'v1 is better on the data since the change' in v.message
    assert win.asked == [110.0]
    # ... or it is worse on them (a lasting change, learnt): published
    w.losses[('b', 'recent')] = 0.005
    v = _round(policy, w, 'b', 0.004, now=50.0, published=pub, window=win, data='val2')
    assert v.action == 'publish'
    policy.published(50.0)
    assert policy.shift_t is None


def test_data_back_in_line_lift_the_hold():
    policy, w = PublicationPolicy(PublicationParams(**PARAMS)), Weights({})
    _round(policy, w, 'p', 0.01, now=10.0)
    policy.published(10.0)
    pub = (1, {'name': 'p'})
    w.losses[('p', 'val2')] = 0.1
    _round(policy, w, 'a', 0.005, now=20.0, published=pub, window=Window(100.0), data='val2')
    w.losses[('p', 'val3')] = 0.02  # 2x its loss at publication: in line
    v = _round(policy, w, 'c', 0.004, now=30.0, published=pub, data='val3')
    assert v.action == 'publish' and v.notes[0][0] == 'info' and policy.shift_t is None


def test_a_lasting_change_is_followed_by_remeasuring_the_last_good_weights():
    """After the error floor rose, no new weights beat the old best loss: the last good
    weights are re-measured on the current data every publish_period, and publishing goes
    on once they beat the published version there."""
    params = PublicationParams(**{**PARAMS, 'shift_factor': 1e6})
    policy, w = PublicationPolicy(params), Weights({})
    _round(policy, w, 'p', 0.01, now=10.0)
    policy.published(10.0)
    pub = (1, {'name': 'p'})
    w.losses[('p', 'val2')] = 0.1  # the floor rose 10x (a payload)
    # 0.05 never beats the old best 0.01: the last good weights ('p') are re-measured instead
    v = _round(policy, w, 'a', 0.05, now=20.0, published=pub, data='val2')
    assert v.action == 'training' and policy.best_val == 0.1 and policy.last_recheck == 20.0
    # now the new weights are the good ones, and they beat the published version on these data
    v = _round(policy, w, 'a', 0.05, now=30.0, published=pub, data='val2')
    assert v.action == 'publish' and policy.good_state == {'name': 'a'}


def test_params_are_followed_at_runtime():
    params = PublicationParams(**PARAMS)
    policy, w = PublicationPolicy(params), Weights({})
    assert _round(policy, w, 'a', 0.5, now=10.0).action == 'waiting'
    params.publish_max_nmse = 1.0
    assert _round(policy, w, 'b', 0.45, now=20.0).action == 'publish'


@pytest.mark.parametrize('restart_with', [None, {'name': 'ckpt'}])
def test_a_restart_forgets_the_losses(restart_with):
    policy, w = PublicationPolicy(PublicationParams(**PARAMS)), Weights({})
    _round(policy, w, 'a', 0.01, now=10.0)
    policy.published(10.0)
    policy.restart(restart_with)
    assert policy.good_state == restart_with and policy.good_nmse == []
    assert policy.best_val == policy.published_val == math.inf and policy.shift_t is None
