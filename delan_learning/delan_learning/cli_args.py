"""Options the command lines share, so that each name means one thing in every CLI.

The robot is ``--urdf``, a checkpoint to read is ``--checkpoint``, the joints of the model are
``--joints`` (comma separated), and recorded data are ``--data X.npz`` or
``--bag DIR``. A bag is read the same way by every CLI (:func:`add_data_arguments`,
:func:`arrays_from_args`). Renamed options keep their old name as a hidden alias that warns
(:func:`add_renamed_option`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, cast

import numpy as np

from delan_common.command_order import add_command_order_args, command_joints_of, csv_list

#: The per-joint arrays of a data set: their last axis is the joint axis.
JOINT_KEYS = ('q', 'qd', 'qdd', 'tau', 'joint_names', 'joint_types')


class DeprecatedAlias(argparse.Action):
    """An old option name: stores into the new option's ``dest`` and says once on stderr that
    the old name is deprecated, so scripts keep working while their authors learn the new one."""

    def __init__(
        self, option_strings: Sequence[str], dest: str, canonical: str = '', **kwargs: Any
    ):
        super().__init__(option_strings, dest, **kwargs)
        self.canonical = canonical
        self._warned = False

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: Optional[str] = None,
    ) -> None:
        """Store the value under the new option's ``dest``; warn on the first use only."""
        if not self._warned:
            sys.stderr.write(
                f'{parser.prog}: warning: {option_string} is deprecated, use {self.canonical}\n'
            )
            self._warned = True
        setattr(namespace, self.dest, values)


def add_renamed_option(
    parser: argparse.ArgumentParser, name: str, old: str, required: bool = False, **kwargs: Any
) -> argparse.Action:
    """``name`` with ``old`` as its deprecated alias (hidden from --help).

    Either one satisfies ``required``; giving both is a usage error. ``kwargs`` go to ``name``
    (``type``/``metavar`` to both)."""
    dest = kwargs.pop('dest', name.lstrip('-').replace('-', '_'))
    group = parser.add_mutually_exclusive_group(required=required)
    action = group.add_argument(name, dest=dest, **kwargs)
    group.add_argument(
        old,
        dest=dest,
        action=DeprecatedAlias,
        canonical=name,
        # None (no conversion) is argparse's own default, which typeshed's stub does not admit
        type=cast(Any, kwargs.get('type')),
        metavar=kwargs.get('metavar'),
        help=argparse.SUPPRESS,
    )
    return action


def add_data_arguments(parser: argparse.ArgumentParser, joints_help: str) -> None:
    """``--data X.npz`` or ``--bag DIR`` (one is required), ``--joints`` (``args.joints``: a
    list of names, or None; ``joints_help`` says what they mean to this CLI), and the joint
    order of a bag's torque commands (``--command-joints`` / ``--controllers-yaml``)."""
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument('--data', metavar='X.npz', help='data file: q, qd, qdd, tau (N x n) ...')
    src.add_argument(
        '--bag',
        metavar='DIR',
        help='ROS 2 bag of joint states (bag directory, .mcap/.db3 file, or a '
        'directory of bags); qdd is estimated as delan-bag2npz does',
    )
    parser.add_argument(
        '--joints', type=csv_list, default=None, metavar='A,B,...', help=joints_help
    )
    add_command_order_args(parser)


def select_joint_columns(arrays: Mapping[str, Any], joints: Sequence[str]) -> Dict[str, Any]:
    """``arrays`` with only the columns of ``joints``, in that order, so an ``.npz`` serves a
    model of fewer joints (ValueError naming the joints the data lack, on repeated joints, or
    when the data do not name their joints)."""
    if 'joint_names' not in arrays:
        raise ValueError('--joints needs data that name their joints (no joint_names array)')
    if len(set(joints)) != len(joints):
        raise ValueError(f'--joints repeats joints: {list(joints)}')
    names = [str(s) for s in np.asarray(arrays['joint_names']).ravel()]
    missing = [j for j in joints if j not in names]
    if missing:
        raise ValueError(f'the data lack joints {missing} (data joints: {names})')
    cols = [names.index(j) for j in joints]
    out = dict(arrays)
    for key in JOINT_KEYS:
        if key in out and out[key] is not None:
            out[key] = np.asarray(out[key])[..., cols]
    return out


def read_bag(
    path: str,
    joints: Optional[Sequence[str]] = None,
    command_joints: Optional[Sequence[str]] = None,
) -> Dict[str, np.ndarray]:
    """The data arrays of a bag (:func:`delan_learning.bags.read_bag_arrays` with its
    defaults); ValueError with a one-line reason when it cannot be read."""
    try:
        from delan_learning.bags import read_bag_arrays
    except ImportError as err:
        raise ValueError(
            f'--bag needs the rosbag reader delan_learning.bags, which cannot be '
            f'imported here ({err}); convert the bag to .npz and use --data'
        ) from None
    try:
        res = read_bag_arrays(path, joint_names=joints, command_joints=command_joints)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f'cannot read bag {path}: {err}') from None
    return {k: v for k, v in res.items() if k not in ('rejected', 'info')}


def arrays_from_args(
    args: argparse.Namespace, load_npz: Callable[[str], Mapping[str, Any]]
) -> Dict[str, Any]:
    """The data the options of :func:`add_data_arguments` ask for: ``load_npz(args.data)`` or
    the bag, restricted to ``--joints``. ValueError on bad options or unreadable data."""
    command_joints = command_joints_of(args)
    if args.data is not None:
        if command_joints is not None:
            raise ValueError(
                '--command-joints and --controllers-yaml are for --bag (an .npz '
                'holds torques in its own joint order)'
            )
        arrays = dict(load_npz(args.data))
        return select_joint_columns(arrays, args.joints) if args.joints else arrays
    return read_bag(args.bag, args.joints, command_joints)
