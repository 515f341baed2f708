"""The variants DeLaN is compared with (Lutter & Peters 2021): a black-box Lagrangian and DeLaN's
networks in Hamiltonian form.

Structure with random weights (the Hamiltonian's torque is DeLaN's for the same networks, the
black-box ``H`` is the finite-difference Hessian of its ``L``, inverse and forward models invert
each other, training gradients are exact), checkpoints, real (small, seeded) training on the
analytic 2-link arm, energy conservation of the learned forward models, and the CLIs.
"""

import json

import numpy as np
import pytest
import torch

from delan_common.model_kinds import CONTROLLER_KINDS, LEARNED_KINDS, TRAINABLE_KINDS
from delan_learning import rollout as ro
from delan_learning.blackbox_lagrangian import BlackboxLagrangianModel
from delan_learning.checkpoint import load_model, save_model
from delan_learning.cli import eval_main, train_main
from delan_learning.data import Dataset, save_npz
from delan_learning.hamiltonian import HamiltonianModel
from delan_learning.lagrangian import DelanModel
from delan_learning.models import build_model

KINDS = ('blackbox_lagrangian', 'hamiltonian')
TYPES = ['revolute', 'prismatic', 'continuous']


@pytest.fixture(autouse=True, scope='module')
def one_thread():
    """One torch thread: the ops are tiny, and a second thread stalls on a busy CPU."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def randomised(model, seed=0, std=0.5):
    """``model`` in float64 eval mode with every weight random and data-like scales (drawn in
    float32, as a checkpoint stores them)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, std)
        if isinstance(model, DelanModel):
            model.head_weight.mul_(model.head_mask)
        g = torch.Generator().manual_seed(seed + 1)
        x = [torch.randn(200, model.n_dof, generator=g) for _ in range(4)]
        model.init_scales(x[0], x[1], 2.0 * x[2], 3.0 * x[2] + x[3])
    return model.double().eval()


def random_states(n, B=16, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, n, generator=g, dtype=torch.float64) for _ in range(3)]


def rel_err(a, b):
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def test_kinds_are_registered_as_offline_kinds():
    for kind, cls in zip(KINDS, (BlackboxLagrangianModel, HamiltonianModel)):
        assert kind in TRAINABLE_KINDS and kind not in LEARNED_KINDS + CONTROLLER_KINDS
        m = build_model(kind, ['revolute'] * 2, width=8)
        assert isinstance(m, cls) and m.kind == kind
    with pytest.raises(ValueError, match='activation'):
        BlackboxLagrangianModel(['revolute'], activation='relu')


# -- structure with random weights --------------------------------------------------------------
@pytest.mark.parametrize('types', [['revolute'] * 2, TYPES, ['revolute'] * 7])
@pytest.mark.parametrize('shared', [False, True])
def test_hamiltonian_torque_is_delans_for_the_same_networks(types, shared):
    """Hamilton's equations at fixed momentum (autograd through M^-1) and DeLaN's analytic
    Euler-Lagrange passes are two computations of one model: equal to rounding."""
    delan = randomised(DelanModel(types, width=24, shared_trunk=shared), seed=2)
    ham = HamiltonianModel(types, width=24, shared_trunk=shared).double().eval()
    ham.delan.load_state_dict(delan.state_dict())
    q, qd, qdd = random_states(len(types))
    tau = delan.inverse(q, qd, qdd)
    assert rel_err(ham.inverse(q, qd, qdd), tau) < 1e-8
    assert rel_err(ham.coriolis(q, qd), delan.coriolis(q, qd)) < 1e-8
    assert rel_err(ham.gravity(q), delan.gravity(q)) < 1e-12
    T, V = ham.energy(q, qd)
    p = ham.momentum(q, qd)
    assert rel_err(ham.hamiltonian(q, p), T + V) < 1e-10
    assert rel_err(ham.total_energy(q, qd), T + V) < 1e-14
    # the Hamiltonian's forward model gives the acceleration DeLaN maps back to tau (judged by
    # the torque: random weights give cond(M) up to 1e9, which amplifies rounding in qdd)
    assert rel_err(delan.inverse(q, qd, ham.forward_dynamics(q, qd, tau)), tau) < 1e-8


def finite_difference_hessian(m, q, qd, h=1e-3):
    """``d2L/dqd2`` by central second differences of ``L`` alone ``(B, n, n)``."""
    n = qd.shape[1]
    E = torch.eye(n, dtype=qd.dtype) * h
    H = torch.empty(qd.shape[0], n, n, dtype=qd.dtype)
    with torch.no_grad():
        for i in range(n):
            for j in range(n):
                f = [m.lagrangian(q, qd + a * E[i] + b * E[j]) for a, b in ((1, 1), (1, -1))]
                f += [m.lagrangian(q, qd + a * E[i] + b * E[j]) for a, b in ((-1, 1), (-1, -1))]
                H[:, i, j] = (f[0] - f[1] - f[2] + f[3]) / (4 * h * h)
    return H


@pytest.mark.parametrize('types', [['revolute'] * 2, TYPES])
def test_blackbox_mass_matrix_is_the_hessian_of_its_lagrangian(types):
    m = randomised(BlackboxLagrangianModel(types, width=24), seed=3)
    q, qd, qdd = random_states(len(types), B=32)
    H = m.mass_matrix(q, qd)
    assert H.shape == (32, len(types), len(types))
    assert rel_err(H, finite_difference_hessian(m, q, qd)) < 1e-5
    assert rel_err(H, H.transpose(-1, -2)) < 1e-12
    # the black box gives no positive definite H: the structure DeLaN adds is what ensures it
    assert bool((torch.linalg.eigvalsh(H)[:, 0] < 0).any())
    # and its torque is Euler-Lagrange: d/dt dL/dqd (central difference in time along the
    # motion) - dL/dq + friction
    h = 1e-5
    qq, vv = q.clone().requires_grad_(), qd.clone().requires_grad_()
    dLdq, p = torch.autograd.grad(m.lagrangian(qq, vv).sum(), (qq, vv))

    def momentum(x, v):
        v = v.clone().requires_grad_()
        return torch.autograd.grad(m.lagrangian(x, v).sum(), v)[0]

    pdot = (momentum(q + h * qd, qd + h * qdd) - momentum(q - h * qd, qd - h * qdd)) / (2 * h)
    assert rel_err(m.inverse(q, qd, qdd), pdot - dLdq + m.friction(qd)) < 1e-6
    with pytest.raises(NotImplementedError, match='total_energy'):
        m.energy(q, qd)


@pytest.mark.parametrize('kind', KINDS)
@pytest.mark.parametrize('types', [['revolute'] * 2, TYPES])
def test_forward_inverts_inverse(kind, types):
    m = randomised(build_model(kind, types, width=24), seed=4)
    q, qd, qdd = random_states(len(types))
    tau = m.inverse(q, qd, qdd)
    H = m.mass_matrix(q, qd) if kind == 'blackbox_lagrangian' else m.mass_matrix(q)
    tol = max(1e-10, 1e-14 * float(torch.linalg.cond(H.detach()).max()))
    assert rel_err(m.forward_dynamics(q, qd, tau), qdd) < tol
    # under no_grad (what delan-eval and rollouts do): the same values, no graph
    with torch.no_grad():
        qdd_ng, tau_ng = m.forward_dynamics(q, qd, tau), m.inverse(q, qd, qdd)
    assert not qdd_ng.requires_grad and not tau_ng.requires_grad
    assert rel_err(tau_ng, tau) < 1e-14 and rel_err(qdd_ng, qdd) < tol


class ForwardModel(torch.nn.Module):
    """``forward_dynamics`` as the module call, for ``torch.func.functional_call``."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, q, qd, tau):
        return self.m.forward_dynamics(q, qd, tau)


@pytest.mark.parametrize(
    'kind,name', [(KINDS[0], 'layers.0.weight'), (KINDS[1], 'delan.weights.0')]
)
def test_training_gradients_equal_finite_differences(kind, name):
    """Parameter gradients through the autograd derivatives (the inverse loss) and through the
    forward model (the forward loss, from a state that itself depends on the weights, as in a
    rollout)."""
    m = randomised(build_model(kind, ['revolute', 'prismatic'], width=5), seed=5)
    q, qd, qdd = random_states(2, B=3)
    w = dict(m.named_parameters())[name].detach().clone().requires_grad_()
    tau = m.inverse(q, qd, qdd).detach()
    fm = ForwardModel(m)
    assert torch.autograd.gradcheck(
        lambda w: torch.func.functional_call(m, {name: w}, (q, qd, qdd)), (w,)
    )
    assert torch.autograd.gradcheck(
        lambda w: torch.func.functional_call(fm, {'m.' + name: w}, (q + 0.1 * w.sum(), qd, tau)),
        (w,),
    )


# -- checkpoints ----------------------------------------------------------------------------------
@pytest.mark.parametrize('kind', KINDS)
def test_checkpoint_round_trip(tmp_path, kind):
    m = randomised(build_model(kind, TYPES, width=16, friction=True), seed=6)
    path = str(tmp_path / 'm.pt')
    save_model(m, path, {'joint_names': ['a', 'b', 'c']})
    loaded, meta = load_model(path, expected_joint_names=['a', 'b', 'c'])
    assert meta['model_kind'] == kind and meta['hyperparameters'] == m.config()
    assert isinstance(loaded, type(m)) and not loaded.training
    q, qd, qdd = random_states(3, B=7)
    with torch.no_grad():
        tau = m.inverse(q, qd, qdd)
        assert torch.equal(loaded.inverse(q, qd, qdd), tau)
        assert torch.equal(loaded.forward_dynamics(q, qd, tau), m.forward_dynamics(q, qd, tau))
        assert torch.equal(loaded.total_energy(q, qd), m.total_energy(q, qd))
        assert torch.equal(loaded.friction(qd), m.friction(qd))


# -- real training on the analytic 2-link arm ---------------------------------------------------
def nmse(model, arrays):
    q, qd, qdd = (torch.as_tensor(arrays[k]) for k in ('q', 'qd', 'qdd'))
    with torch.no_grad():
        err = model.inverse(q, qd, qdd).numpy() - arrays['tau']
    return float(np.mean(np.mean(err**2, 0) / np.var(arrays['tau'], 0)))


@pytest.fixture(scope='module')
def trained(two_link, two_link_data):
    """Each variant after 400 seeded steps on 6 trajectories: ``{kind: (before, model)}``."""
    from delan_learning.training import TrainConfig, Trainer

    data = Dataset.from_arrays(two_link.make_data(range(6)))
    out = {}
    for kind in KINDS:
        torch.manual_seed(0)
        trainer = Trainer(build_model(kind, data.joint_types, width=32), TrainConfig(lr=1e-2))
        trainer.train_steps(data, 1, batch_size=128, lr=0.0)  # sets the scales, no update
        model = trainer.model
        before = nmse(model.double(), two_link_data['test'])
        model.float()
        for lr in (1e-2, 5e-3, 2.5e-3, 1e-3):
            trainer.train_steps(data, 100, batch_size=128, lr=lr)
        out[kind] = (before, model.double().eval())
    return out


@pytest.mark.parametrize('kind', KINDS)
def test_training_fits_held_out_torques(trained, two_link_data, kind):
    before, model = trained[kind]
    after = nmse(model, two_link_data['test'])
    assert before > 0.5 and after < 0.05 and after < 0.05 * before, (before, after)


class Frictionless(torch.nn.Module):
    """A model's own dynamics with its friction cancelled and no torque applied."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward_dynamics(self, q, qd, tau):
        return self.m.forward_dynamics(q, qd, self.m.friction(qd))


def energy_drift(model, arrays, steps, dt, frictionless=True, starts=32):
    """``E(t) - E(0)`` ``(starts, steps)`` of zero-torque RK4 rollouts from recorded states."""
    idx = np.linspace(0, len(arrays['q']) - 1, starts).astype(int)
    q0, qd0 = (torch.as_tensor(arrays[k][idx]) for k in ('q', 'qd'))
    plant = Frictionless(model) if frictionless else model
    tau = torch.zeros(starts, steps, q0.shape[1], dtype=q0.dtype)
    with torch.no_grad():
        q, qd = ro.rollout(plant, q0, qd0, tau, torch.full((starts, steps), dt), 'rk4')
        E0 = model.total_energy(q0, qd0)
        E = model.total_energy(q.flatten(0, 1), qd.flatten(0, 1)).view(starts, steps)
    return E - E0[:, None], E0


@pytest.mark.parametrize('kind', KINDS)
def test_learned_forward_model_conserves_its_energy(trained, two_link_data, kind):
    """Zero torque, no friction: the learned dynamics keep their own energy (RK4 at 1 ms over
    50 ms); with the learned friction left in, they lose it.

    The Hamiltonian model does so from every start. The black-box Lagrangian's does from
    most: from a few its free fall reaches states where its learned H is nearly singular,
    where accelerations explode and the integration with them (what DeLaN's positive definite
    H rules out; bench/bench_variants.py measures it over longer horizons)."""
    model = trained[kind][1]
    test = two_link_data['test']
    drift, E0 = energy_drift(model, test, steps=50, dt=1e-3)
    scale = float(E0.std())  # the energy varies by this much over the test states
    worst = drift.abs().nan_to_num(float('inf')).max(1).values / scale  # per start
    if kind == 'hamiltonian':
        assert float(worst.max()) < 1e-6, worst
    else:
        assert float(worst.median()) < 1e-6 and float((worst < 1e-6).double().mean()) >= 0.8
    lossy, _ = energy_drift(model, test, steps=50, dt=1e-3, frictionless=False)
    assert float(lossy[:, -1].max()) < 0.0 and float(lossy[:, -1].abs().mean()) > 1e-3 * scale


# -- the command lines ----------------------------------------------------------------------------
@pytest.fixture(scope='module')
def cli_files(tmp_path_factory, two_link):
    d = tmp_path_factory.mktemp('variants_cli')
    save_npz(d / 'train.npz', two_link.make_data(range(3), duration=4.0))
    save_npz(d / 'test.npz', two_link.make_data([40], duration=4.0))
    return d


def test_cli_trains_and_scores_a_hamiltonian_model(cli_files):
    """``delan-train --model hamiltonian`` as a user runs it (with the forward loss too, which
    trains through its autograd forward model); ``delan-eval`` reads the checkpoint and scores
    its torque, its forward model and 5-step rollouts."""
    from test_delan_cli import run

    out = cli_files / 'ham.pt'
    r = run(
        'delan-train',
        *('--data', cli_files / 'train.npz', '--out', out, '--model', 'hamiltonian'),
        *('--loss', 'both', '--horizon', 3, '--max-steps', 60, '--batch', 64, '--lr', 1e-2),
        *('--width', 16, '--quiet'),
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary['model_kind'] == 'hamiltonian' and summary['steps'] == 60
    assert summary['val_rollout']['horizon_steps'] == 3
    e = run(
        'delan-eval',
        *('--checkpoint', out, '--data', cli_files / 'test.npz', '--forward', '--horizon', 5),
    )
    assert e.returncode == 0, e.stderr
    res = json.loads(e.stdout)
    assert res['model_kind'] == 'hamiltonian' and res['rollout']['horizon_steps'] == 5
    assert res['inverse']['nmse_mean'] < 0.5, res['inverse']
    assert np.isfinite(res['forward']['nmse_mean']) and np.isfinite(res['rollout']['q_rms_mean'])


def test_cli_blackbox_lagrangian_in_process(cli_files, capsys):
    out = str(cli_files / 'bb.pt')
    opts = '--model blackbox_lagrangian --epochs 8 --batch 64 --width 16 --no-friction --quiet'
    assert train_main(['--data', str(cli_files / 'train.npz'), '--out', out] + opts.split()) == 0
    assert json.loads(capsys.readouterr().out)['model_kind'] == 'blackbox_lagrangian'
    model, meta = load_model(out)
    assert meta['hyperparameters']['friction'] is False and not model.use_friction
    argv = [
        '--checkpoint',
        out,
        '--data',
        str(cli_files / 'test.npz'),
        '--forward',
        '--horizon',
        '3',
    ]
    assert eval_main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    assert res['model_kind'] == 'blackbox_lagrangian' and res['rollout']['horizon_steps'] == 3
    assert res['inverse']['nmse_mean'] < 1.0 and 'forward' in res
