"""The online learner's learning-rate schedule (:mod:`delan_learning.online_lr`)."""

import pytest

from delan_learning.online_lr import OnlineLearningRate


def test_halves_every_halflife_down_to_the_final_rate():
    lr = OnlineLearningRate(3e-3, 3e-4, 1000)
    assert lr.at(0) == pytest.approx(3e-3)
    assert lr.at(1000) == pytest.approx(1.5e-3)
    assert lr.at(2000) == pytest.approx(7.5e-4)
    assert lr.at(3000) == pytest.approx(3.75e-4)
    assert lr.at(4000) == pytest.approx(3e-4)  # floored
    assert lr.at(10**7) == pytest.approx(3e-4)
    rates = [lr.at(s) for s in range(0, 5000, 100)]
    assert rates == sorted(rates, reverse=True)


def test_restart_goes_back_to_the_start_rate_and_decays_again():
    lr = OnlineLearningRate(3e-3, 3e-4, 1000)
    assert lr.at(20_000) == pytest.approx(3e-4)
    lr.restart(20_000)
    assert lr.at(20_000) == pytest.approx(3e-3)
    assert lr.at(21_000) == pytest.approx(1.5e-3)
    assert lr.at(19_000) == pytest.approx(3e-3)  # steps before the origin: the start


@pytest.mark.parametrize('final,halflife', [(3e-3, 1000), (1e-2, 1000), (3e-4, 0)])
def test_no_decay_when_final_is_not_lower_or_halflife_is_zero(final, halflife):
    lr = OnlineLearningRate(3e-3, final, halflife)
    assert lr.at(0) == lr.at(50_000) == pytest.approx(3e-3)


def test_runtime_changes_take_effect_at_once():
    lr = OnlineLearningRate(3e-3, 3e-4, 1000)
    lr.start = 1e-3
    assert lr.at(1000) == pytest.approx(5e-4)
    lr.final = 6e-4
    assert lr.at(1000) == pytest.approx(6e-4)
