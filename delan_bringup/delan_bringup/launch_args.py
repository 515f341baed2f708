"""The launch arguments the suite's launch files share, and how old argument names map to new.

Arguments are named for the parameter they set: ``model:=`` sets the torque controller's
``model`` (its kind, as ``ros2 param set /torque_controller model delan`` does),
``delan_checkpoint:=`` its ``delan_checkpoint`` and ``urdf:=`` every node's ``urdf_path``. The
names of the first release stay accepted for one more, with a warning: ``controller:=`` (the
model kind), ``model:=<checkpoint file>`` (a value that is not a model kind is a checkpoint) and
``robot:=``. :func:`resolve_arguments` is the plain rule; :func:`resolved` applies it in a launch
context.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Sequence, Tuple

from launch.actions import DeclareLaunchArgument
from launch.launch_context import LaunchContext
from launch.logging import get_logger
from launch.substitutions import LaunchConfiguration

from delan_common.model_kinds import CONTROLLER_KINDS, LEARNED_KINDS, ONLINE_KINDS

DEFAULT_URDF = 'two_link_arm.urdf'


class SuiteArguments(NamedTuple):
    """Resolved values of the shared arguments."""

    urdf: str
    model: str
    delan_checkpoint: str
    #: what the learner learns: ``delan_residual`` when the controller starts on it, else delan
    learner_model: str = 'delan'


def declare_suite_arguments() -> List[DeclareLaunchArgument]:
    """The arguments every launch file of the suite declares (sim, robot, Gazebo)."""
    return [
        DeclareLaunchArgument(
            'urdf',
            default_value='',
            description='Robot description (.urdf / .xacro): a path, or a file name of this '
            f"package's urdf/ folder or of example-robot-data ('' = {DEFAULT_URDF})",
        ),
        DeclareLaunchArgument(
            'model',
            default_value='pd',
            description='Dynamics model of the torque controller: one of '
            f'{list(CONTROLLER_KINDS)}',
        ),
        DeclareLaunchArgument(
            'delan_checkpoint',
            default_value='',
            description="Checkpoint for model:=delan / delan_residual ('' = the learner's latest)",
        ),
        DeclareLaunchArgument(
            'learner_model',
            default_value='',
            choices=['', *ONLINE_KINDS],
            description="What the learner learns ('' = delan_residual when model:= is, else "
            'delan); mlp, blackbox_lagrangian and hamiltonian are learned for comparison, no '
            'controller follows them',
        ),
        DeclareLaunchArgument('robot', default_value='', description='Deprecated name of urdf'),
        DeclareLaunchArgument(
            'controller', default_value='', description='Deprecated name of model (the model kind)'
        ),
    ]


def declare_node_arguments() -> List[DeclareLaunchArgument]:
    """The arguments of the launch files that start the suite's nodes (sim and robot)."""
    return [
        DeclareLaunchArgument(
            'record',
            default_value='true',
            choices=['true', 'false'],
            description='Record joint states and commands to a rosbag2',
        ),
        DeclareLaunchArgument('bag_dir', default_value='bags', description='Where bags go'),
        DeclareLaunchArgument(
            'identified_params',
            default_value='',
            description='delan-sysid output for model:=identified',
        ),
        DeclareLaunchArgument(
            'checkpoint_dir',
            default_value='delan_checkpoints',
            description="Learner's checkpoint folder",
        ),
        DeclareLaunchArgument('namespace', default_value='', description='Namespace of all nodes'),
        DeclareLaunchArgument(
            'controller_impl',
            default_value='python',
            choices=['python', 'rt'],
            description='The torque controller: python (delan_control torque_controller) or '
            'rt (delan_control_rt torque_controller_rt, compiled); both have every model and '
            'law',
        ),
    ]


def resolve_arguments(
    values: Dict[str, str], kinds: Sequence[str] = CONTROLLER_KINDS
) -> Tuple[SuiteArguments, List[str]]:
    """The shared arguments from their launch values, and the deprecation warnings to log.

    Raises ``ValueError`` with the message a user needs when the values contradict each other
    or name no model kind.
    """
    warnings: List[str] = []
    urdf, robot = values.get('urdf', ''), values.get('robot', '')
    if robot:
        warnings.append(f"launch argument 'robot' is deprecated: use urdf:={robot}")
        if urdf and urdf != robot:
            raise ValueError(f'urdf:={urdf} and its deprecated name robot:={robot} disagree')
        urdf = urdf or robot
    model = values.get('model', '') or 'pd'
    controller = values.get('controller', '')
    checkpoint = values.get('delan_checkpoint', '')
    if model not in kinds:
        if not controller and not model.endswith('.pt'):
            raise ValueError(
                f'model:={model} is not a model kind; valid: {list(kinds)} '
                '(a DeLaN checkpoint goes in delan_checkpoint:=)'
            )
        # the first release's model:= was the checkpoint
        warnings.append(
            f"launch argument 'model' as a checkpoint is deprecated: use delan_checkpoint:={model}"
        )
        if checkpoint and checkpoint != model:
            raise ValueError(f'two checkpoints: delan_checkpoint:={checkpoint} and model:={model}')
        checkpoint, model = model, 'pd'
    if controller:
        warnings.append(f"launch argument 'controller' is deprecated: use model:={controller}")
        if controller not in kinds:
            raise ValueError(f'controller:={controller} is not a model kind; valid: {list(kinds)}')
        if model != 'pd' and model != controller:
            raise ValueError(
                f'model:={model} and its deprecated name controller:={controller} disagree'
            )
        model = controller
    learner_model = values.get('learner_model', '') or (
        model if model in LEARNED_KINDS else 'delan'
    )
    if model in LEARNED_KINDS and model != learner_model:
        raise ValueError(
            f'model:={model} cannot follow a learner of learner_model:={learner_model}'
        )
    return SuiteArguments(urdf or DEFAULT_URDF, model, checkpoint, learner_model), warnings


def resolved(context: LaunchContext) -> SuiteArguments:
    """:func:`resolve_arguments` on the launch configuration, the URDF found as the nodes find
    it (``delan_common.robot_model.find_urdf``); warnings go to the launch log, a contradiction
    or a missing URDF stops the launch with its message."""
    names = ('urdf', 'robot', 'model', 'controller', 'delan_checkpoint', 'learner_model')
    values = {n: LaunchConfiguration(n).perform(context) for n in names}
    try:
        args, warnings = resolve_arguments(values)
    except ValueError as err:
        raise RuntimeError(str(err)) from None
    logger = get_logger('launch')
    for w in warnings:
        logger.warning(w)
    from delan_common.robot_model import find_urdf

    try:
        return args._replace(urdf=find_urdf(args.urdf))
    except FileNotFoundError as err:
        raise RuntimeError(f'urdf:={args.urdf}: {err}') from None


def rt_controller_parameters(context: LaunchContext, args: SuiteArguments, params) -> Dict:
    """What the launch files give the compiled controller (``controller_impl:=rt``) beyond the
    parameter file: it reads no URDF, so the gains and limits derived here as the Python node
    derives them, and the model files (``delan_control.rt_params.model_files``): the URDF's
    rigid-body model (also the mass matrix of the URDF-feedback laws) and, with
    ``identified_params:=``, the identified one, exported (for the model it starts with and any
    it is switched to), ``<checkpoint>.cw`` for a learned model with a checkpoint. A model it
    cannot load, or a law it cannot apply with it, stops the launch with the reason."""
    from delan_control.rt_params import RT_MODELS, controller_node

    if args.model not in RT_MODELS:
        raise RuntimeError(
            f'controller_impl:=rt has models {list(RT_MODELS)}, not model:={args.model}'
        )
    identified = context.launch_configurations.get('identified_params', '')
    try:
        return controller_node(
            'rt',
            args.urdf,
            params.perform(context),
            model=args.model,
            checkpoint=args.delan_checkpoint,
            identified_params=identified,
        )[2]
    except (ValueError, RuntimeError, OSError) as err:
        raise RuntimeError(f'controller_impl:=rt model:={args.model}: {err}') from None
