"""The demo's simulated arm can track its own evaluation: the figure eight is sized to the
effort limits by the URDF, so where the URDF's friction already takes much of a motor (a
flying arm's 0.3 N m joints with 0.15-0.2 N m of friction), the sim's doubled friction is
lowered until the arm needs at most its limits there; an arm with headroom keeps the mismatch it
was given."""

from __future__ import annotations

import numpy as np
import pytest

from delan_common.robot_model import Mismatch, bringup_path, find_urdf
from delan_control.demo import TRUE_EFFORT_SHARE, Demo, build_parser
from delan_control.trajectories import effort_share

PR2_ARM = (
    'shoulder_pan_joint',
    'shoulder_lift_joint',
    'upper_arm_roll_joint',
    'elbow_flex_joint',
    'forearm_roll_joint',
    'wrist_flex_joint',
    'wrist_roll_joint',
)


def _demo(urdf: str, tmp_path, joints: str = '') -> Demo:
    argv = ['--robot', find_urdf(urdf), '--out', str(tmp_path), '--joints', joints]
    args = build_parser().parse_args(argv)
    args.params = bringup_path('config', 'sim_params.yaml')  # as main() does
    return Demo(args)


def _sim(demo: Demo) -> dict:
    """The sim's overrides before its friction: the payload the arm carries."""
    return demo.payload(float(np.min(demo.gains().ct_kp)))


def _need(demo: Demo, scale: float) -> float:
    """The sim's largest share of an effort limit on the 2x figure eight at ``scale``."""
    params = {**demo.node_params('sim'), **_sim(demo), 'friction_scale': scale}
    ref = demo.evaluation_setup(params).figure_eight(2.0, demo.args.test_duration)
    q, qd, qdd = ref.sample(np.arange(0.0, ref.t[-1], 0.005))
    plant = demo.model.mismatched(Mismatch.from_params(params))
    return effort_share(plant.inverse, demo.model.operating_effort_limit(), q, qd, qdd)


def test_friction_a_motor_cannot_overcome_is_lowered(tmp_path):
    demo = _demo('hextilt_flying_arm_5.urdf', tmp_path)
    assert demo.node_params('sim')['friction_scale'] == 2.0
    assert _need(demo, 2.0) > 1.2  # doubled, the friction alone is more than the motors have
    lowered = demo.friction_scale(_sim(demo))['friction_scale']
    assert 1.0 <= lowered < 2.0
    assert _need(demo, lowered) <= TRUE_EFFORT_SHARE < _need(demo, lowered + 0.05)


@pytest.mark.parametrize('urdf', ['seven_dof_arm.urdf', 'z1.urdf'])
def test_an_arm_with_headroom_keeps_its_mismatch(tmp_path, urdf):
    demo = _demo(urdf, tmp_path)
    assert _need(demo, 2.0) <= TRUE_EFFORT_SHARE
    assert demo.friction_scale(_sim(demo)) == {}


def test_an_arm_that_cannot_play_it_with_the_urdfs_friction_keeps_its_mismatch(tmp_path):
    """A PR2 arm without its counterbalance spring: gravity, not friction, is beyond its
    shoulder (the start-posture check refuses it before launching)."""
    demo = _demo('pr2.urdf', tmp_path, ','.join(f'r_{j}' for j in PR2_ARM))
    assert _need(demo, 1.0) > TRUE_EFFORT_SHARE
    assert demo.friction_scale(_sim(demo)) == {}
