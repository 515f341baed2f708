"""reference_from_points: a trajectory message's points in the model's joint order, refused
with the reason when they cannot be tracked; Resumed.describe: what a resume logs."""

import numpy as np
import pytest

from delan_control.reference_tracking import Resumed, reference_from_points

JOINTS = ['shoulder', 'elbow']


def test_points_are_reordered_to_the_models_joints():
    ref = reference_from_points(
        JOINTS,
        ['elbow', 'extra', 'shoulder'],
        100.0,
        [0.0, 1.0],
        [[0.2, 9.0, 0.1], [0.4, 9.0, 0.3]],
        [[], []],
        [[], []],
    )
    q, qd, _ = (a[0] for a in ref.sample(100.0))
    np.testing.assert_allclose(q, [0.1, 0.2])
    q, _, _ = (a[0] for a in ref.sample(101.0))
    np.testing.assert_allclose(q, [0.3, 0.4])


@pytest.mark.parametrize(
    'names, offsets, positions, velocities, match',
    [
        (['shoulder'], [0.0], [[0.0]], [[]], r"lacks joints \['elbow'\]"),
        (JOINTS, [], [], [], 'has no points'),
        (JOINTS, [0.0], [[]], [[]], 'have no positions'),
        (JOINTS, [0.0, 1.0], [[0.0, 0.0], [0.0]], [[], []], 'positions of some points'),
        (JOINTS, [0.0], [[0.0, 0.0]], [[1.0]], 'velocities of some points'),
    ],
)
def test_bad_points_are_refused(names, offsets, positions, velocities, match):
    with pytest.raises(ValueError, match=match):
        reference_from_points(
            JOINTS, names, 0.0, offsets, positions, velocities, [[]] * len(offsets)
        )


def test_what_a_resume_logs():
    assert Resumed('unchanged').describe('the stall', 0.0, 0.5) is None
    level, text = Resumed('rejoining', 0.25, 3.0).describe('the stall', 1.0, 0.5)
    assert level == 'info' and text == (
        'rejoining the reference (the stall left it 0.250 farther from the arm) over 2.00 s'
    )
    level, text = Resumed('dropped', 0.9).describe('a jump of the arm', 1.0, 0.5)
    assert level == 'warning' and 'after a jump of the arm (resume_tolerance 0.5)' in text
