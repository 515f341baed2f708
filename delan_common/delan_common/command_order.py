"""Joint order of torque commands: which joint each value of a command array drives.

A ``std_msgs/Float64MultiArray`` command carries no joint names: ros2_control's
``forward_command_controller`` applies value k to joint k of its ``joints`` parameter, whatever
order the model (depth first) or ``joint_states`` (any order) has. A torque vector read or sent
in the model's order belongs to the wrong motors when that list is ordered differently, and a
list naming other joints cannot be mapped at all. :class:`CommandOrder` reorders (the torque
controller when it publishes, the bag reader when it reads recorded commands back);
:func:`command_joints_from_controllers_yaml` reads a controller's ``joints`` from its config.
"""

from __future__ import annotations

import argparse
import os
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np


class CommandOrderError(ValueError):
    """The receiver's joints are not the model's joints."""


def _repeated(names: Sequence[str]) -> list:
    seen, out = set(), []
    for name in names:
        if name in seen and name not in out:
            out.append(name)
        seen.add(name)
    return out


def order_mismatch(model_joints: Sequence[str], command_joints: Sequence[str]) -> Optional[str]:
    """Why ``command_joints`` cannot carry one torque per model joint (None when it can)."""
    model, command = list(model_joints), list(command_joints)
    problems = []
    repeated = _repeated(command)
    missing = [j for j in model if j not in command]
    extra = [j for j in dict.fromkeys(command) if j not in model]
    if repeated:
        problems.append(f'repeated {repeated}')
    if missing:
        problems.append(f'missing {missing}')
    if extra:
        problems.append(f'extra {extra}')
    if not problems:
        return None
    return f'joints {command} are not the model joints {model}: ' + ', '.join(problems)


class CommandOrder:
    """The model's torques in a receiver's joint order: ``command[k] = tau[index[k]]``.

    The index array is computed once: a control cycle pays one fancy index, nothing when the
    orders agree (``index`` is None then). Raises :class:`CommandOrderError` with the reason
    when the joints differ (missing, extra or repeated ones)."""

    def __init__(self, model_joints: Sequence[str], command_joints: Sequence[str]):
        reason = order_mismatch(model_joints, command_joints)
        if reason is not None:
            raise CommandOrderError(reason)
        self.joints: Tuple[str, ...] = tuple(command_joints)
        position = {name: i for i, name in enumerate(model_joints)}
        index = np.array([position[name] for name in self.joints], dtype=np.intp)
        self.index: Optional[np.ndarray] = (
            None if np.array_equal(index, np.arange(len(index))) else index
        )

    @property
    def is_model_order(self) -> bool:
        """Whether the receiver's order is the model's (:meth:`to_command` then copies nothing)."""
        return self.index is None

    def to_command(self, tau: np.ndarray) -> np.ndarray:
        """Model order -> the receiver's order."""
        return tau if self.index is None else tau[self.index]

    def to_model(self, command: np.ndarray) -> np.ndarray:
        """The receiver's order -> model order."""
        if self.index is None:
            return command
        out = np.empty_like(command)
        out[self.index] = command
        return out


def command_joints_from_controllers_yaml(
    path: Union[str, os.PathLike], controller: str = 'effort_controller'
) -> List[str]:
    """The ``joints`` parameter of ``controller`` in a ros2_control controllers yaml
    (``<controller>: ros__parameters: joints: [...]``; a namespaced key such as
    ``/arm/<controller>`` counts too): the order in which that controller applies its commands.

    Raises ValueError (naming the file) when the controller or its joint list is not there."""
    import yaml  # lazy: only this reader needs it

    try:
        with open(path, encoding='utf-8') as fh:
            doc = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f'cannot read controllers yaml {path}: {exc}') from None
    doc = doc if isinstance(doc, dict) else {}
    keys = [k for k in doc if isinstance(k, str) and k.rstrip('/').split('/')[-1] == controller]
    if len(keys) != 1:
        found = 'several' if keys else 'no'
        raise ValueError(
            f'{path}: {found} entry for controller {controller!r} '
            f'(top-level keys: {sorted(map(str, doc))})'
        )
    params = doc[keys[0]]
    params = params.get('ros__parameters') if isinstance(params, dict) else None
    joints = params.get('joints') if isinstance(params, dict) else None
    if (
        not isinstance(joints, list)
        or not joints
        or not all(isinstance(j, str) and j for j in joints)
    ):
        raise ValueError(
            f'{path}: {keys[0]}.ros__parameters.joints is not a list of joint '
            f'names (got {joints!r})'
        )
    return list(joints)


def csv_list(text: str) -> List[str]:
    """``a, b,c`` -> ['a', 'b', 'c'] (an argparse type: an empty list is a usage error)."""
    items = [s.strip() for s in text.split(',') if s.strip()]
    if not items:
        raise argparse.ArgumentTypeError('empty list')
    return items


def add_command_order_args(parser: argparse.ArgumentParser) -> None:
    """``--command-joints`` / ``--controllers-yaml`` (one or the other): the joint order of a
    bag's torque commands, for the CLIs that read bags."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        '--command-joints',
        type=csv_list,
        default=None,
        metavar='A,B,...',
        help='joint order of the recorded torque commands (the effort '
        "controller's joints parameter); default: the order of the joints "
        'read; where no joints are selected, also the joints read (a '
        'gripper in the joint states that no command drives is left out)',
    )
    group.add_argument(
        '--controllers-yaml',
        default=None,
        metavar='FILE',
        help='ros2_control controllers yaml whose effort_controller joints give '
        'the command order (as --command-joints)',
    )


def command_joints_of(args: argparse.Namespace) -> Optional[List[str]]:
    """The command order the options of :func:`add_command_order_args` ask for (None: none);
    ValueError when the yaml does not name the effort controller's joints."""
    if args.controllers_yaml is not None:
        return command_joints_from_controllers_yaml(args.controllers_yaml)
    return args.command_joints
