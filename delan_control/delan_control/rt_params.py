"""Parameters of the compiled torque controller (delan_control_rt's ``torque_controller_rt``)
that the Python node derives from the URDF at start-up: the C node reads no URDF, so whoever
starts it (the launch files, the benchmark, the tests) passes them, computed here by the same
functions as the Python node (``control_laws.arm_gains``, the URDF's effort limits), and the
files it reads its models from: the rigid-body model the Python node holds for ``pinocchio``,
``identified`` and ``delan_residual`` (:mod:`delan_common.rigid_body_export`, written to
:func:`model_folder`) and a checkpoint's DeLaN weights (``<checkpoint>.cw``)."""

from __future__ import annotations

import math
import os
from typing import Dict, Mapping, Optional

import numpy as np

from delan_common.model_kinds import CONTROLLER_KINDS, LEARNED_KINDS
from delan_control.control_laws import LAWS, URDF_FEEDBACK_LAWS

#: the Python node's gain parameters; [nan] (or absent) means "derive from the URDF"
GAIN_NAMES = ('ct_kp', 'ct_kd', 'kp', 'kd')
#: the models the compiled node evaluates (from exported files: it reads no URDF): all
RT_MODELS = CONTROLLER_KINDS
#: the laws the compiled node has: all; those of URDF_FEEDBACK_LAWS take the URDF's mass matrix
#: from ``rigid_body_file``
RT_LAWS = LAWS
#: the models with a rigid-body part, which the compiled node reads from ``rigid_body_file``
#: (the URDF's) or ``identified_rigid_body_file``
RIGID_BODY_MODELS = ('pinocchio', 'identified', 'delan_residual')
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
    from delan_control.control_cycle import FALLBACK_GAINS
    from delan_control.control_laws import robot_gains

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
            gains, _ = robot_gains(model, robot, 1.0 / control_rate)
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


def model_folder() -> str:
    """Where exported rigid-body models go: ``$DELAN_RT_MODEL_DIR``, else
    ``$ROS_HOME/delan_control_rt`` (``~/.ros/delan_control_rt``)."""
    folder = os.environ.get('DELAN_RT_MODEL_DIR', '')
    if folder:
        return folder
    ros_home = os.environ.get('ROS_HOME', '') or os.path.join(os.path.expanduser('~'), '.ros')
    return os.path.join(ros_home, 'delan_control_rt')


def rigid_body_file(
    model: str, urdf: str, identified_params: str = '', folder: Optional[str] = None
) -> str:
    """The compiled node's rigid-body model file for ``model`` (pinocchio, identified,
    delan_residual): the rigid-body model the Python node holds for it
    (``model_loader.load_dynamics_model``; for delan_residual the URDF's), exported into
    ``folder`` (default :func:`model_folder`) under a name of its content's checksum, so that a
    file once written never changes. Raises ``ModelLoadError`` (a ``ValueError``) as the Python
    node refuses the model."""
    from delan_common.rigid_body_export import SUFFIX, export_bytes
    from delan_common.urdf_joints import RobotDescription
    from delan_control.model_loader import load_dynamics_model

    if model not in RIGID_BODY_MODELS:
        raise ValueError(f'model={model} has no rigid-body part (one of {RIGID_BODY_MODELS})')
    kind = 'pinocchio' if model == 'delan_residual' else model
    robot = RobotDescription.load(urdf)
    data = export_bytes(load_dynamics_model(kind, robot, identified_params=identified_params))
    folder = folder or model_folder()
    os.makedirs(folder, exist_ok=True)
    # the file's own checksum (its last 8 bytes) names it
    path = os.path.join(folder, f'{robot.name or "robot"}_{kind}_{data[-8:].hex()}{SUFFIX}')
    if not os.path.exists(path):
        from delan_common.binary_file import write_atomic

        write_atomic(path, data)
    return path


def model_files(
    model: str,
    urdf: str,
    checkpoint: str = '',
    identified_params: str = '',
    folder: Optional[str] = None,
) -> Dict[str, str]:
    """What the compiled node needs on disk for ``model``, exported now
    (:func:`rigid_body_file`): ``rigid_body_file``, the URDF's model, which ``pinocchio`` and
    ``delan_residual`` evaluate and any other model takes for a switch to them while the node
    runs (``ros2 param set``; left out for those when the URDF has no rigid-body model), and
    with ``identified_params`` (required for ``identified``) ``identified_rigid_body_file``; for
    the learned models with a ``checkpoint``, its weights file (:func:`ensure_weights`, which
    refuses a checkpoint of another kind: the C node cannot read one). Raises ``ValueError``
    for a model the compiled node does not have or cannot load."""
    if model not in RT_MODELS:
        raise ValueError(f'model={model} is not one of {list(RT_MODELS)}')
    out: Dict[str, str] = {}
    try:
        out['rigid_body_file'] = rigid_body_file('pinocchio', urdf, folder=folder)
    except ValueError:
        if model in ('pinocchio', 'delan_residual'):
            raise
    if identified_params or model == 'identified':
        out['identified_rigid_body_file'] = rigid_body_file(
            'identified', urdf, identified_params, folder
        )
    if model in LEARNED_KINDS and checkpoint:
        ensure_weights(checkpoint, model)
    return out


def controller_node(
    impl: str,
    urdf: str,
    params_file: str = '',
    model: str = '',
    checkpoint: str = '',
    identified_params: str = '',
):
    """``(package, executable, extra parameters)`` of the torque controller ``impl`` chooses
    (``controller_impl:=python|rt``); for ``rt`` the parameters above, for the control rate
    and gains of ``params_file``'s torque_controller (its ``/**/torque_controller``,
    ``/torque_controller`` or ``torque_controller`` section), and with ``model`` the files it
    needs for it (:func:`model_files`). Raises ``ValueError`` for a law the compiled node does
    not have, or a URDF-feedback law with a model (not pd) when the URDF has no rigid-body
    model to take the mass matrix from (the node would refuse to start)."""
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
    law = str(section.get('law', 'computed_torque'))
    if law not in RT_LAWS:
        raise ValueError(f'law={law} is not one of {list(RT_LAWS)}')
    given = {k: section[k] for k in GAIN_NAMES if k in section}
    params = rt_parameters(urdf, float(section.get('control_rate', 250.0)), given)
    if model:
        params.update(model_files(model, urdf, checkpoint, identified_params))
        if law in URDF_FEEDBACK_LAWS and model != 'pd' and 'rigid_body_file' not in params:
            try:
                params['rigid_body_file'] = rigid_body_file('pinocchio', urdf)
            except ValueError as err:
                raise ValueError(
                    f"law={law} with model={model} needs the URDF's mass matrix: {err}"
                ) from None
    return package, exe, params


def ensure_weights(checkpoint: str, kind: str = '') -> str:
    """The compiled node's weights file of ``checkpoint`` (``<checkpoint>.cw``), exported now
    (``delan_learning.c_export``, the model as the checkpoint holds it, its kind as the file's
    role) when it is missing, older than the checkpoint or (with ``kind``) of another role, as
    an earlier writer without roles left a residual's; ``''`` for no checkpoint. With ``kind``
    (delan or delan_residual), a checkpoint holding another kind raises ``ValueError``, as the
    Python node refuses it: a residual used as a whole model commands a fraction of the torque,
    a whole model used as a residual twice it."""
    if not checkpoint:
        return ''
    from delan_learning.c_export import export_delan, file_role, weights_path
    from delan_learning.checkpoint import load_model

    path = weights_path(checkpoint)
    stale = not os.path.exists(path) or os.path.getmtime(path) < os.path.getmtime(checkpoint)
    if stale or kind:
        model, meta = load_model(checkpoint)
        if kind and meta.get('model_kind') != kind:
            raise ValueError(
                f'{checkpoint} holds a {meta.get("model_kind")!r} model, not {kind!r}'
            )
        if stale or file_role(path) != kind:
            export_delan(model, path, meta.get('joint_names'))
    return path
