"""Which dynamics model the torque controller commands with, and law energy built on it.

A switch (a parameter change, a learner version) loads the new model off the control cycle and
cross-fades to it (:class:`~delan_control.control_laws.BumplessBlend`); a model that does not
load, or under law energy a law that cannot be built on it, is refused and the running one
stays. The control thread takes what one cycle needs in one go (:meth:`ModelSwitch.slot`) while
the executor (parameters) and the loader thread (learner versions) switch.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from delan_common.dynamics import DynamicsModel
from delan_common.model_kinds import CONTROLLER_KINDS, LEARNED_KINDS
from delan_common.urdf_joints import RobotDescription
from delan_control.control_laws import ENERGY_LAW, BumplessBlend, EnergyLaw
from delan_control.energy_control import EnergySwingUp
from delan_control.model_loader import ModelLoadError, load_dynamics_model


class Slot(NamedTuple):
    """What one control cycle commands with, taken together (:meth:`ModelSwitch.slot`)."""

    kind: str  # the selected model kind
    version: int  # the learner version of ``model`` (0: none)
    law: str
    model: Optional[DynamicsModel]  # None: PD
    energy: Optional[EnergySwingUp]  # law energy on ``model`` (None under the other laws)
    old_model: Optional[DynamicsModel]  # the model fading out
    old_energy: Optional[EnergySwingUp]
    weight: Optional[float]  # of the new model's torque, in [0, 1); None: no blend


class UpdateRequest(NamedTuple):
    """A learner version to load as ``kind`` for ``law``, the switch's when it was announced."""

    update: Any  # the learner's announcement: ``checkpoint_path``, ``model_version``
    kind: str
    law: str


#: a model ready to switch to: (kind, the model, law energy on it)
Prepared = Tuple[str, Optional[DynamicsModel], Optional[EnergySwingUp]]
#: a parameter validator: why a value is refused, None when it is accepted
Check = Callable[[Any], Optional[str]]


class ModelSwitch:
    """The active model and the one fading out, with law energy built on each.

    A parameter change is validated before it is applied: the validators (:meth:`checks`, run
    through :meth:`validated`) load what the change asks for and keep it, :meth:`apply`
    switches to it once the change is accepted. Loads take
    milliseconds (a checkpoint, a Riccati solution): never on the control thread.
    """

    def __init__(
        self,
        robot: RobotDescription,
        kind: str,
        law: str,
        blend_time: float,
        delan_checkpoint: str = '',
        identified_params: str = '',
        energy_law: Optional[EnergyLaw] = None,
        energy_unavailable: str = '',
    ):
        self.robot = robot
        self.kind, self.law, self.blend_time = kind, law, blend_time
        self.delan_checkpoint, self.identified_params = delan_checkpoint, identified_params
        # what law energy needs besides the model; None (and why) when it cannot be used
        self.energy_law, self.energy_unavailable = energy_law, energy_unavailable
        self.model: Optional[DynamicsModel] = None  # None: PD
        self.version = 0  # the learner version of ``model`` (ControllerState.model_version)
        self.energy: Optional[EnergySwingUp] = None  # law energy on ``model``
        self.old_model: Optional[DynamicsModel] = None  # the model fading out
        self.old_energy: Optional[EnergySwingUp] = None
        self.latest_update: Any = None  # the learner's newest announcement
        self.updates_refused = 0  # learner versions that could not be used (load_update)
        self._blend = BumplessBlend(blend_time)
        self._lock = threading.RLock()
        self._pending: Optional[Prepared] = None  # loaded by the validators of a change
        self._incoming: Dict[str, Any] = {}  # the parameters of the change being validated

    def start(self, warn: Callable[[str], Any]) -> None:
        """Load the selected model, no blend. A learned kind without a usable checkpoint yet
        is PD until the learner publishes one (``warn`` says so); any other kind that does not
        load raises ``ModelLoadError``, law energy that cannot be built on it ``ValueError``."""
        try:
            model = self._load(self.kind)
        except ModelLoadError:
            if self.kind not in LEARNED_KINDS:
                raise
            warn(
                f'model={self.kind}: no usable checkpoint yet; PD until the learner publishes one'
            )
            model = None
        self._activate(self.kind, model, self._energy_for(model, self.kind, self.law), False)

    def slot(self, t: float) -> Slot:
        """What the cycle of the joint state stamped ``t`` [s] commands with (a blend started
        since begins at ``t``)."""
        with self._lock:
            return Slot(
                self.kind,
                self.version,
                self.law,
                self.model,
                self.energy,
                self.old_model,
                self.old_energy,
                self._blend.weight(t),
            )

    # ---------------------------------------------------------------- parameter changes
    def checks(self, law_choice: Check) -> Dict[str, Check]:
        """The validators of the parameters a switch loads for, by name; ``law_choice`` (the
        parameter table's check of ``law``) comes before the switch's."""
        return {
            'model': self.check_model,
            'law': lambda law: law_choice(law) or self.check_law(law),
            'delan_checkpoint': self.check_file('delan_checkpoint', LEARNED_KINDS),
            'identified_params': self.check_file('identified_params', ('identified',)),
        }

    def validated(self, validate: Callable[[List[Any]], Any]) -> Callable[[List[Any]], Any]:
        """``validate`` of a parameter change (parameters with ``name`` and ``value``) made to
        run the :meth:`checks` with the change's other values at hand (an atomic set of model
        + its file is validated with the new file), after dropping a model loaded for an
        earlier change that was then refused (an atomic set with another invalid value)."""

        def on_set(params: List[Any]) -> Any:
            self._pending = None
            self._incoming = {p.name: p.value for p in params}
            try:
                return validate(params)
            finally:
                self._incoming = {}

        return on_set

    def check_model(self, kind: str) -> Optional[str]:
        """Validator of ``model``: refused unless the model loads (and, under law energy, unless
        the law can be built on it)."""
        if kind not in CONTROLLER_KINDS:
            return f'model={kind!r} is not one of {list(CONTROLLER_KINDS)}'
        error = self._prepare(kind, self._incoming.get('law', self.law))
        return None if error is None else f'model={kind} cannot be used: {error}'

    def check_law(self, law: str) -> Optional[str]:
        """Validator of ``law``: a switch to law energy builds it on a fresh instance of the
        model (the model's validator does when the model changes too), refused when it cannot
        be built."""
        if law != ENERGY_LAW or self.law == ENERGY_LAW or 'model' in self._incoming:
            return None
        error = self._prepare(self.kind, law)
        return None if error is None else f'law={law} cannot be used: {error}'

    def check_file(self, name: str, kinds: Tuple[str, ...]) -> Check:
        """Validator of the file parameter ``name`` that the model ``kinds`` load from: refused
        unless the model (of the kind selected, or being selected) loads from it."""

        def check(path: str) -> Optional[str]:
            kind = self._incoming.get('model', self.kind)
            if kind not in kinds or not path:
                return None
            try:
                model = load_dynamics_model(
                    kind,
                    self.robot,
                    checkpoint=path if kind in LEARNED_KINDS else '',
                    identified_params=path if kind == 'identified' else '',
                )
                energy = self._energy_for(model, kind, self._incoming.get('law', self.law))
            except ValueError as err:  # ModelLoadError too
                return f'{name}={path!r} cannot be used: {err}'
            self._pending = (kind, model, energy)
            return None

        return check

    def apply(self, law: Optional[str]) -> List[str]:
        """Switch to what an accepted change asks for: ``law`` (None: unchanged) and the model
        its validators loaded (a law switch takes it at once, the old torque is another law's;
        a model switch alone blends). Returns what to log."""
        pending, self._pending = self._pending, None
        previous, done = self.kind, []
        with self._lock:  # the control thread takes law, model and its law energy together
            if law is not None and law != self.law:
                self.law = law
                self.energy = self.old_energy = None  # built for law energy only
                if pending is not None:  # a model (with law energy built on it) for the law
                    self._activate(*pending, blend=False)
                    pending = None
                done.append(f'law {law}')
            if pending is not None:
                self._activate(*pending)
                done.append(
                    f'switched model {previous} -> {pending[0]} (bumpless, '
                    f'{self.blend_time:.2f} s blend)'
                )
        return done

    # ---------------------------------------------------------------- learner versions
    def follows_learner(self) -> bool:
        """Whether learner versions are switched to: a learned kind and no checkpoint set."""
        return self.kind in LEARNED_KINDS and not self.delan_checkpoint

    def update_request(self, update: Any) -> Optional[UpdateRequest]:
        """Note the learner's newest version (``update``: ``checkpoint_path``,
        ``model_version``); what to load (off the control and executor threads) when the
        switch follows the learner, else None. The running model stays until it is loaded."""
        self.latest_update = update
        return UpdateRequest(update, self.kind, self.law) if self.follows_learner() else None

    def load_update(
        self, request: UpdateRequest
    ) -> Tuple[Optional[DynamicsModel], Optional[EnergySwingUp]]:
        """``(model, law energy on it or None)`` of a learner version. A version that cannot
        be used raises ``ValueError`` (``ModelLoadError``: of another kind, a variant or the MLP
        that no controller commands with, a broken file) and is counted in
        :attr:`updates_refused`; the running model stays."""
        try:
            model = load_dynamics_model(
                request.kind, self.robot, checkpoint=request.update.checkpoint_path
            )
            return model, self._energy_for(model, request.kind, request.law)
        except ValueError:
            with self._lock:
                self.updates_refused += 1
            raise

    def adopt_update(
        self,
        request: UpdateRequest,
        loaded: Tuple[Optional[DynamicsModel], Optional[EnergySwingUp]],
    ) -> Optional[str]:
        """Switch (blended) to a loaded learner version, and say so; None when the switch moved
        on meanwhile: another model or law, or a newer version announced."""
        with self._lock:
            if (
                not self.follows_learner()
                or self.latest_update is not request.update
                or self.kind != request.kind
                or self.law != request.law
            ):
                return None
            self._activate(request.kind, *loaded)
        name = 'DeLaN' if request.kind == 'delan' else 'DeLaN residual'
        update = request.update
        return f'{name} model v{update.model_version} from {update.checkpoint_path}'

    # ---------------------------------------------------------------- internals
    def _load(self, kind: str) -> Optional[DynamicsModel]:
        """A fresh instance of ``kind``, from the files of the change being validated, else
        the parameters', else the learner's newest version."""
        latest = self.latest_update.checkpoint_path if self.latest_update else ''
        return load_dynamics_model(
            kind,
            self.robot,
            checkpoint=self._incoming.get('delan_checkpoint', self.delan_checkpoint) or latest,
            identified_params=self._incoming.get('identified_params', self.identified_params),
        )

    def _energy_for(
        self, model: Optional[DynamicsModel], kind: str, law: str
    ) -> Optional[EnergySwingUp]:
        """Law energy built on ``model`` (kind ``kind``) when ``law`` is energy, else None;
        None too for a learned kind with no version yet (PD until one comes). ``ValueError``
        with the reason when it cannot be built. ~ms (linearisation, Riccati), on the instance
        the control thread will hold, not the one it holds."""
        if law != ENERGY_LAW:
            return None
        if self.energy_law is None:
            raise ValueError(self.energy_unavailable)
        if model is None and kind in LEARNED_KINDS:
            return None
        return self.energy_law.build(model, kind)

    def _prepare(self, kind: str, law: str) -> Optional[str]:
        """Load ``kind`` and, for law energy, build the law on it, kept for :meth:`apply`;
        else why not."""
        try:
            model = self._load(kind)
            self._pending = (kind, model, self._energy_for(model, kind, law))
        except ValueError as err:  # ModelLoadError too
            return str(err)
        return None

    def _activate(
        self,
        kind: str,
        model: Optional[DynamicsModel],
        energy: Optional[EnergySwingUp],
        blend: bool = True,
    ) -> None:
        """Make ``model`` (of ``kind``, law energy ``energy`` on it) the active one; the
        running one fades out over ``blend_time`` unless ``blend`` is False."""
        with self._lock:
            if blend:
                self.old_model, self.old_energy = self.model, self.energy
                self._blend.duration = self.blend_time
                self._blend.start()  # at the next state's stamp
            else:
                self._blend.stop()
            self.model, self.energy = model, energy
            self.version = getattr(model, 'model_version', 0)
            self.kind = kind
