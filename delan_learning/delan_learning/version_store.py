"""The online learner's checkpoint folder: one file per published version, ``model_vNNNNN.pt``.

A version is written atomically (:func:`~delan_learning.checkpoint.save_model`), with the
compiled controller's weights beside it (``.cw``) for the kinds it commands with, ``delan`` and
``delan_residual`` (the file records which: the compiled node refuses a residual's weights as a
whole model and a whole model's as a residual), and only the newest ``keep_versions`` stay.
Version numbers go on from the highest in the folder -- after a restart without resume and
after a reset too: pruning keeps the highest numbers, so numbering from 1 among an earlier
run's versions would delete each new version as it is announced.

No weights are written for the variants (``mlp``, ``blackbox_lagrangian``, ``hamiltonian``):
the ``.cw`` format is DeLaN's networks for the C kernel (:mod:`delan_learning.c_export`), which
the MLP and the black-box Lagrangian do not have, and no controller commands with a variant (a
hamiltonian's networks are DeLaN's, but exported they would be followed as a delan model). The
compiled controller finds no weights beside such a version and refuses it, keeping its model.
"""

from __future__ import annotations

import glob
import os
import re
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

from delan_learning.c_export import ROLES, export_delan, weights_path
from delan_learning.checkpoint import CheckpointError, load_model, save_model
from delan_learning.models import DynamicsModule
from delan_learning.online import Log

#: a version's file name; its number is group 1
VERSION_RE = re.compile(r'model_v(\d+)\.pt$')
#: the temporary files of a save cut short (``save_model``'s ``.<name>.<random>.tmp``)
PARTIAL_GLOB = '.model_v*.pt.*.tmp'

#: a checkpoint as read: (model, metadata)
Loaded = Tuple[DynamicsModule, Dict[str, Any]]


def _remove(path: str) -> None:
    """Delete ``path`` if it is there."""
    try:
        os.remove(path)
    except OSError:
        pass


def new_model_id() -> str:
    """A new lineage id (12 hex digits)."""
    return uuid.uuid4().hex[:12]


class VersionStore:
    """The numbered checkpoints of ``directory`` (made if missing), of a ``model_kind`` model of
    ``joint_names``. Temporary files of an interrupted save are removed on construction: never
    loaded (hidden, not matched by :data:`VERSION_RE`), they would pile up."""

    def __init__(
        self,
        directory: str,
        keep_versions: int,
        joint_names: Sequence[str],
        model_kind: str,
        log: Log,
    ):
        self.directory = os.path.abspath(os.path.expanduser(directory))
        self.keep_versions = keep_versions  # assignable at runtime
        self.joint_names, self.model_kind, self.log = list(joint_names), model_kind, log
        os.makedirs(self.directory, exist_ok=True)
        self.remove_partial()

    def path(self, version: int) -> str:
        """The file of ``version`` (zero-padded, so names sort as numbers)."""
        return os.path.join(self.directory, f'model_v{version:05d}.pt')

    def versions(self) -> List[Tuple[int, str]]:
        """(number, path) of every version file, oldest first."""
        found = []
        for path in glob.glob(os.path.join(self.directory, 'model_v*.pt')):
            m = VERSION_RE.search(path)
            if m:
                found.append((int(m.group(1)), path))
        return sorted(found)

    def newest(self) -> int:
        """The highest version number in the folder (0 when it has none)."""
        return max([v for v, _ in self.versions()], default=0)

    def write(self, model: DynamicsModule, version: int, metadata: Dict[str, Any]) -> str:
        """Save ``model`` as ``version`` (and its compiled weights for ``delan`` and
        ``delan_residual``); its path. The file is complete before this returns: announce the
        version only then."""
        path = self.path(version)
        save_model(model, path, metadata)
        if self.model_kind in ROLES:
            self._export_weights(path, version)
        else:
            # weights an earlier delan or delan_residual run left under this name (its
            # checkpoints deleted by hand, the numbers started over) would be followed as this
            # version
            _remove(weights_path(path))
        return path

    def _export_weights(self, path: str, version: int) -> None:
        """From the weights as the checkpoint holds them, so both controllers command the same
        torque; a failure costs the compiled controller this version only (a warning)."""
        try:
            export_delan(load_model(path)[0], weights_path(path), self.joint_names, version)
        except (OSError, ValueError, CheckpointError) as err:
            self.log.warning(f'v{version}: no weights for the compiled controller: {err}')

    def prune(self) -> None:
        """Delete all but the newest ``keep_versions`` versions (and their weights files)."""
        for _, path in self.versions()[: -self.keep_versions]:
            _remove(path)
            _remove(weights_path(path))

    def remove_partial(self) -> None:
        """Delete the temporary files of saves cut short (a killed learner), with a warning."""
        for path in glob.glob(os.path.join(self.directory, PARTIAL_GLOB)):
            try:
                os.unlink(path)
                self.log.warning(f'removed a partial checkpoint: {path}')
            except OSError:
                pass

    def read(self, path: str) -> Loaded:
        """A checkpoint to continue from: of these joints and this kind, its metadata's
        ``model_id`` filled in (a new one when it has none); CheckpointError otherwise."""
        model, meta = load_model(path, expected_joint_names=self.joint_names)
        if getattr(model, 'kind', 'delan') != self.model_kind:
            raise CheckpointError(
                f'{path} holds a {model.kind!r} model, the learner learns {self.model_kind}'
            )
        meta = dict(meta)
        meta['model_id'] = str(meta.get('model_id') or new_model_id())
        return model, meta

    def newest_readable(self) -> Optional[Tuple[int, str, Loaded]]:
        """(number, path, what :meth:`read` gives) of the newest version that reads; the
        unreadable ones above it are skipped with a warning. None: none reads."""
        for version, path in reversed(self.versions()):
            try:
                return version, path, self.read(path)
            except CheckpointError as err:
                self.log.warning(f'resume: skipping {path}: {err}')
        return None

    def copy(self, src: str, dst: str) -> str:
        """Save the checkpoint ``src`` again as ``dst`` (default, '': ``saved_model.pt`` in the
        folder); the path written. Raises OSError or CheckpointError."""
        dst = (
            os.path.abspath(os.path.expanduser(dst))
            if dst
            else os.path.join(self.directory, 'saved_model.pt')
        )
        model, meta = load_model(src, expected_joint_names=self.joint_names)
        save_model(model, dst, meta)
        return dst
