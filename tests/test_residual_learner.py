"""The online learner with ``model:=delan_residual`` as a real process over real DDS, fed the
synthetic stream of tests/test_learner_node.py from an arm that differs from its URDF. A module
of its own: the other module's learner (a fixture that lives until that module ends) would
publish on the same topics."""

from __future__ import annotations

import numpy as np
import pytest
from test_learner_node import Harness, _learner_process, _truth

from delan_testing.ros import ros_context, stop_process


@pytest.mark.solo  # learns live against the clock
def test_residual_learner_gives_a_controller_what_the_urdf_misses(tmp_path):
    """model:=delan_residual: the learner fits what the URDF's model misses on an arm with a
    payload and twice the friction; a controller on model=delan_residual follows its versions,
    and at rest commands the true gravity torque where the URDF's model is far off."""
    from delan_common.robot_model import Mismatch

    truth = _truth().mismatched(Mismatch(payload_mass=0.6, viscous_scale=2.0, coulomb_scale=2.0))
    proc, log = _learner_process(tmp_path, '-p', 'model:=delan_residual')
    try:
        with ros_context() as ctx:
            h = Harness(ctx, tmp_path, model='delan_residual')
            try:
                h.start_stream(proc, truth)
                h.wait_for('a model version', lambda: len(h.updates) > 0, 120.0, proc)
                g_true, g_nominal = truth.gravity(h.hold_q), _truth().gravity(h.hold_q)
                cmd = h.command_near(g_true, 0.2 * np.linalg.norm(g_true - g_nominal))
                print(
                    f'\nat rest: true gravity {g_true}, URDF {g_nominal}, controller on the '
                    f'residual v{h.updates[-1].model_version}: {cmd}'
                )
                assert h.ctl.model_kind == 'delan_residual'
            finally:
                h.close()
    finally:
        stop_process(proc)
        log.close()
