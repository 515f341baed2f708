"""Builds the dynamics model a controller holds, by name: one place that knows every kind."""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Optional

from delan_common.dynamics import DynamicsModel
from delan_common.model_kinds import CONTROLLER_KINDS, LEARNED_KINDS
from delan_common.urdf_joints import RobotDescription


class ModelLoadError(ValueError):
    """The requested model cannot be built (missing file, other robot, corrupt checkpoint...)."""


def load_dynamics_model(
    kind: str, robot: RobotDescription, checkpoint: str = '', identified_params: str = ''
) -> Optional[DynamicsModel]:
    """``None`` for ``pd``; else a :class:`DynamicsModel` whose joints are the robot's. A learned
    model carries ``model_version``, the learner's version in its checkpoint (0 when none)."""
    if kind == 'pd':
        return None
    if kind == 'pinocchio':
        return _nominal(robot)
    if kind == 'identified':
        from delan_control.sysid import IdentifiedModel

        if not identified_params:
            raise ModelLoadError(
                'model=identified needs the identified_params file (run delan-sysid)'
            )
        if not os.path.isfile(identified_params):
            raise ModelLoadError(f'identified parameters not found: {identified_params}')
        try:
            model = IdentifiedModel.load(identified_params)
        except (ValueError, KeyError) as err:
            raise ModelLoadError(str(err)) from None
        if list(model.joint_names) != robot.joint_names:
            raise ModelLoadError(
                f'{identified_params} is for joints {model.joint_names}, not {robot.joint_names}'
            )
        if model.robot.locked != robot.locked:
            model = _relocked(model, robot)
        return model
    if kind in LEARNED_KINDS:
        return _learned(kind, robot, checkpoint)
    raise ModelLoadError(f'unknown model {kind!r}; expected one of {CONTROLLER_KINDS}')


def preload_model_libraries() -> Optional[str]:
    """Import what every model kind needs (Pinocchio, torch, the DeLaN C kernel) at start-up
    (~2 s, RSS ~300 MB instead of ~80 MB). Loaded on first use instead, a runtime switch to
    pinocchio / delan (or the first learner update) blocks the control callback for ~0.15 s /
    ~1.6 s -- past the watchdog, with the arm uncommanded; preloaded, a load takes ~10 ms.

    Returns why the learned kinds cannot be loaded (``delan_learning`` or torch not installed:
    a pd / pinocchio / identified controller does not need them), else ``None``."""
    import delan_common.robot_model  # noqa: F401  (Pinocchio)
    import delan_control.sysid  # noqa: F401

    try:
        import delan_learning.checkpoint  # noqa: F401  (torch)
        import delan_learning.fastpath  # noqa: F401
        from delan_learning.c_kernel import c_kernel
    except ImportError as err:
        return str(err)
    c_kernel()
    return None


def _nominal(robot: RobotDescription):
    from delan_common.robot_model import RobotModel

    try:
        return RobotModel.from_description(robot)
    except ValueError as err:
        raise ModelLoadError(str(err)) from None


def _learned(kind: str, robot: RobotDescription, checkpoint: str):
    """A learner's checkpoint as ``kind``; a residual (``delan_residual``) is added to the URDF's
    model. The checkpoint's own kind must match: a residual used as a whole model would command
    a fraction of the torque the arm needs, a whole model used as a residual twice it. A
    variant or the MLP (which the learner may learn too) is refused whatever ``kind`` is: the
    control laws need a mass matrix (the MLP has none), positive definite (the black-box
    Lagrangian's is not, by construction), every cycle within the control period (the
    Hamiltonian form takes several autograd passes; its networks are DeLaN's: learn
    model:=delan to control with them)."""
    try:
        from delan_learning.checkpoint import CheckpointError, load_model
        from delan_learning.fastpath import dynamics_model
    except ImportError as err:
        raise ModelLoadError(
            f'model={kind} needs the delan_learning package and PyTorch: {err}'
        ) from None
    if not checkpoint:
        raise ModelLoadError(
            f'model={kind} needs a checkpoint (delan_checkpoint parameter or '
            'a model update from the learner)'
        )
    try:
        model, meta = load_model(checkpoint, expected_joint_names=robot.joint_names)
    except (CheckpointError, OSError) as err:
        raise ModelLoadError(str(err)) from None
    held = meta.get('model_kind')
    if held not in LEARNED_KINDS:
        raise ModelLoadError(
            f'{checkpoint} holds a {held!r} model, which no controller commands with (the '
            f'learner learns it for comparison); for control run the learner with '
            f'model:={kind}'
        )
    if held != kind:
        raise ModelLoadError(
            f'{checkpoint} holds a {held!r} model, not {kind!r} (learner parameter model:={kind})'
        )
    try:
        loaded = dynamics_model(model, robot.joint_names)
    except OSError as err:  # the C kernel
        raise ModelLoadError(str(err)) from None
    try:
        loaded.model_version = int(meta.get('model_version') or 0)
    except (TypeError, ValueError):
        loaded.model_version = 0
    if kind == 'delan_residual':
        from delan_common.residual_dynamics import NominalPlusResidual

        return NominalPlusResidual(_nominal(robot), loaded)
    return loaded


def _relocked(model, robot: RobotDescription):
    """``model`` (identified, its joints locked as by default) with the robot's locked joints
    where the robot locks them: the kinematics change, the identified parameters stay."""
    from delan_common.robot_model import RobotModel
    from delan_control.sysid import IdentifiedModel

    try:
        kinematics = RobotModel(model.robot.xml, joints=robot.joint_names, locked=robot.locked)
    except ValueError as err:
        raise ModelLoadError(str(err)) from None
    return IdentifiedModel(kinematics, model.theta, model.info)


class LatestLoader:
    """Loads models in a background thread, newest request first: a checkpoint load (~3-10 ms,
    more under load) must not hold up a 1 kHz control callback. Requests that arrive while a
    load is running replace each other; only the newest is loaded next.

    ``load(request)`` returns the model; ``done(request, model)`` or ``failed(request, error)``
    is called from the loader thread.
    """

    def __init__(
        self,
        load: Callable[[Any], Any],
        done: Callable[[Any, Any], None],
        failed: Callable[[Any, Exception], None],
        name: str = 'model_loader',
    ):
        self._load, self._done, self._failed = load, done, failed
        self._cond = threading.Condition()
        self._request: Any = None
        self._has_request = False
        self._closed = False
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def submit(self, request: Any) -> None:
        """Ask for ``request`` to be loaded; it replaces a request still waiting (one being loaded
        runs on)."""
        with self._cond:
            self._request, self._has_request = request, True
            self._cond.notify()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the loader thread after the load in progress, waiting up to ``timeout`` [s];
        waiting requests are dropped."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self.thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._has_request and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                request, self._has_request = self._request, False
            try:
                model = self._load(request)
            except Exception as err:  # noqa: BLE001 -- report any failure; the thread must live on
                self._failed(request, err)
                continue
            self._done(request, model)
