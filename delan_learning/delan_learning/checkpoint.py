"""Model checkpoints: weights plus JSON metadata in one file, written atomically, read safely.

File layout (a ``torch.save`` of a plain dict, so ``torch.load(weights_only=True)`` reads it and
no pickled code is ever executed)::

    {'format_version': int, 'metadata_json': str, 'state_dict': {name: tensor}}

``metadata`` (also returned by :func:`load_model`) holds ``format_version``,
``library_version``, ``model_kind`` (one of ``models.MODEL_KINDS``), ``joint_names``,
``joint_types``, ``dof``, ``hyperparameters`` (the model's constructor arguments),
``torque_normalisation`` (``{'mean': [...], 'std': [...]}`` when known) and whatever else the
caller adds (training metrics, data source). Every failure to use a file raises
:class:`CheckpointError`.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import warnings
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import torch

import delan_learning
from delan_learning.models import MODEL_KINDS, DynamicsModule, build_model

#: Bumped when the layout changes incompatibly; older readers refuse newer files.
FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be loaded (missing, corrupt, newer, or for other joints)."""


def _json_safe(x: Any) -> Any:
    """``x`` made JSON-able (numpy arrays/scalars to lists/floats); raises TypeError otherwise."""
    return json.loads(
        json.dumps(x, default=lambda o: o.tolist() if hasattr(o, 'tolist') else _refuse(o))
    )


def _refuse(o: Any):
    raise TypeError(f'metadata value of type {type(o).__name__} is not JSON-able')


def save_model(
    model: DynamicsModule, path: str, metadata: Optional[Mapping[str, Any]] = None
) -> Dict[str, Any]:
    """Write ``model`` (weights moved to CPU) and metadata to ``path`` atomically.

    The file is written to a temporary file in the same directory, flushed to disk and renamed
    over ``path`` (``os.replace``), so readers see the old file or the new one, never a partial
    one. ``metadata`` must contain ``joint_names`` unless the model knows them; the identity
    fields (kind, types, dof, hyperparameters, versions) are filled from the model. Returns
    the metadata written.
    """
    meta = dict(_json_safe(dict(metadata or {})))
    names = meta.get('joint_names', getattr(model, 'joint_names', None))
    if names is None:
        raise ValueError('save_model needs metadata["joint_names"]')
    names = [str(s) for s in names]
    if len(names) != model.n_dof:
        raise ValueError(f'{len(names)} joint names for a {model.n_dof}-DoF model')
    meta.update(
        {
            'format_version': FORMAT_VERSION,
            'library_version': delan_learning.__version__,
            'model_kind': model.kind,
            'joint_names': names,
            'joint_types': list(model.joint_types),
            'dof': model.n_dof,
            'hyperparameters': model.config(),
        }
    )
    meta.setdefault('saved_at', time.strftime('%Y-%m-%dT%H:%M:%S%z'))
    state = {k: v.detach().to('cpu').clone() for k, v in model.state_dict().items()}
    payload = {
        'format_version': FORMAT_VERSION,
        'metadata_json': json.dumps(meta),
        'state_dict': state,
    }
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix='.' + os.path.basename(path) + '.', suffix='.tmp', dir=directory
    )
    try:
        with os.fdopen(fd, 'wb') as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return meta


def read_checkpoint(path: str) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    """``(metadata, state_dict)`` of a checkpoint file, checked but not yet built into a model."""
    if not os.path.isfile(path):
        raise CheckpointError(f'no such checkpoint file: {path}')
    try:
        with warnings.catch_warnings():  # e.g. "pickle protocol" notes on foreign files
            warnings.simplefilter('ignore')
            payload = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as err:  # truncated zip, foreign pickle, unsafe globals, ...
        raise CheckpointError(
            f'{path} is not a readable checkpoint (corrupt, truncated or '
            f'not written by save_model): {type(err).__name__}: '
            f'{str(err).splitlines()[0] if str(err) else ""}'
        ) from None
    if not isinstance(payload, dict) or not {
        'format_version',
        'metadata_json',
        'state_dict',
    } <= set(payload):
        raise CheckpointError(f'{path} is not a delan_learning checkpoint (unexpected content)')
    version = payload['format_version']
    if not isinstance(version, int):
        raise CheckpointError(f'{path}: format_version is not an integer')
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f'{path} has format version {version}, newer than this library '
            f'reads ({FORMAT_VERSION}); upgrade delan_learning'
        )
    try:
        meta = json.loads(payload['metadata_json'])
    except (TypeError, ValueError) as err:
        raise CheckpointError(f'{path}: metadata is not valid JSON: {err}') from None
    state = payload['state_dict']
    if (
        not isinstance(meta, dict)
        or not isinstance(state, dict)
        or not all(torch.is_tensor(v) for v in state.values())
    ):
        raise CheckpointError(f'{path}: malformed metadata or weights')
    for key in ('model_kind', 'joint_names', 'joint_types', 'hyperparameters'):
        if key not in meta:
            raise CheckpointError(f'{path}: metadata lacks {key!r}')
    if meta['model_kind'] not in MODEL_KINDS:
        raise CheckpointError(f'{path}: unknown model kind {meta["model_kind"]!r}')
    return meta, state


def load_model(
    path: str,
    expected_joint_names: Optional[Sequence[str]] = None,
    map_location: str = 'cpu',
    dtype: torch.dtype = torch.float64,
) -> Tuple[DynamicsModule, Dict[str, Any]]:
    """``(model, metadata)``: the model in eval mode on ``map_location`` in ``dtype``.

    ``expected_joint_names``: the joints (in order) the caller will feed; a checkpoint for other
    joints or another order raises :class:`CheckpointError` naming both lists.
    """
    meta, state = read_checkpoint(path)
    names = [str(s) for s in meta['joint_names']]
    if expected_joint_names is not None and [str(s) for s in expected_joint_names] != names:
        raise CheckpointError(
            f'{path} is a model of joints {names}, but joints '
            f'{list(expected_joint_names)} were expected'
        )
    try:
        model = build_model(meta['model_kind'], meta['joint_types'], **meta['hyperparameters'])
        for key, value in getattr(model, 'STATE_DEFAULTS', {}).items():
            state.setdefault(key, value(model))  # buffers older checkpoints lack
        model.load_state_dict(state, strict=True)
    except (TypeError, ValueError, RuntimeError) as err:
        raise CheckpointError(
            f'{path}: weights do not fit the model described by its '
            f'metadata: {str(err).splitlines()[0]}'
        ) from None
    model.joint_names = names
    model = model.to(device=map_location, dtype=dtype).eval()
    return model, meta
