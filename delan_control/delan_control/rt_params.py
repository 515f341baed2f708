"""Parameters of the compiled torque controller (delan_control_rt's ``torque_controller_rt``)
that the Python node derives from the URDF at start-up: the C node reads no URDF, so whoever
starts it (the launch files, the benchmark, the tests) passes them, computed here by the same
functions as the Python node (``control_laws.arm_gains``, the URDF's effort limits)."""

from __future__ import annotations

import math
from typing import Dict, Mapping, Optional

import numpy as np

#: the Python node's gain parameters; [nan] (or absent) means "derive from the URDF"
GAIN_NAMES = ('ct_kp', 'ct_kd', 'kp', 'kd')
#: the models the compiled node evaluates (it reads parameters once and no URDF)
RT_MODELS = ('pd', 'delan')
#: the executables the launch argument ``controller_impl`` chooses between
IMPLEMENTATIONS = {
    'python': ('delan_control', 'torque_controller'),
    'rt': ('delan_control_rt', 'torque_controller_rt'),
}


def _derived(value) -> bool:
    v = list(np.atleast_1d(np.asarray(value, dtype=float)))
    return len(v) == 1 and math.isnan(v[0])


def rt_parameters(
    urdf: str, control_rate: float = 250.0, given: Optional[Mapping[str, object]] = None
) -> Dict[str, object]:
    """``joint_names`` (model order), ``effort_limits``, ``velocity_limits``,
    ``continuous_joints`` and the four gains for ``urdf``: those in ``given`` (not [nan]) as
    they are, the others derived for ``control_rate`` as ``torque_controller`` derives them."""
    from delan_common.robot_model import RobotModel
    from delan_common.urdf_joints import RobotDescription
    from delan_control.control_laws import arm_gains
    from delan_control.nodes.torque_controller import FALLBACK_GAINS

    given = dict(given or {})
    robot = RobotDescription.load(urdf)
    n = len(robot.joint_names)
    limits = np.asarray(robot.effort_limits, dtype=float)
    missing = [k for k in GAIN_NAMES if _derived(given.get(k, [math.nan]))]
    derived = dict(FALLBACK_GAINS)
    if missing or not np.all(robot.effort_given):
        try:
            model = RobotModel(robot.xml, **robot.selection_kwargs())
            if not np.all(robot.effort_given):
                limits = np.where(robot.effort_given, limits, model.operating_effort_limit())
            gains, _ = arm_gains(model, robot.home(), 1.0 / control_rate)
            derived = {k: getattr(gains, k) for k in GAIN_NAMES}
        except ValueError:
            pass  # no inertias: the fixed fall-back gains, as the Python node
    out: Dict[str, object] = {
        'joint_names': list(robot.joint_names),
        'effort_limits': [float(x) for x in limits],
        # the pace of a rejoin after a stall (0 or not given: 1 rad/s, as the Python node)
        'velocity_limits': [
            float(x) if math.isfinite(x) and x > 0 else 0.0
            for x in np.asarray(robot.velocity_limits, dtype=float)
        ],
        'continuous_joints': [
            j for j, t in zip(robot.joint_names, robot.joint_types) if t == 'continuous'
        ]
        or [''],
    }
    for k in GAIN_NAMES:
        v = derived[k] if k in missing else given[k]
        out[k] = [float(x) for x in np.broadcast_to(np.asarray(v, dtype=float), (n,))]
    return out


def controller_node(impl: str, urdf: str, params_file: str = ''):
    """``(package, executable, extra parameters)`` of the torque controller ``impl`` chooses
    (``controller_impl:=python|rt``); for ``rt`` the parameters above, for the control rate
    and gains of ``params_file``'s torque_controller (its ``/**/torque_controller``,
    ``/torque_controller`` or ``torque_controller`` section)."""
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f'controller_impl:={impl} is not one of {list(IMPLEMENTATIONS)}')
    package, exe = IMPLEMENTATIONS[impl]
    if impl == 'python':
        return package, exe, {}
    import yaml

    section: Dict = {}
    if params_file:
        with open(params_file) as f:
            data = yaml.safe_load(f) or {}
        for key in ('/**/torque_controller', '/torque_controller', 'torque_controller'):
            section.update((data.get(key) or {}).get('ros__parameters', {}))
    given = {k: section[k] for k in GAIN_NAMES if k in section}
    return package, exe, rt_parameters(urdf, float(section.get('control_rate', 250.0)), given)


def ensure_weights(checkpoint: str) -> str:
    """The compiled node's weights file of ``checkpoint`` (``<checkpoint>.cw``), exported now
    (``delan_learning.c_export``, the model as the checkpoint holds it) when it is missing or
    older than the checkpoint; ``''`` for no checkpoint."""
    if not checkpoint:
        return ''
    import os

    from delan_learning.c_export import export_delan, weights_path
    from delan_learning.checkpoint import load_model

    path = weights_path(checkpoint)
    if not os.path.exists(path) or os.path.getmtime(path) < os.path.getmtime(checkpoint):
        model, meta = load_model(checkpoint)
        export_delan(model, path, meta.get('joint_names'))
    return path
