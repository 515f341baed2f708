"""Structure of the DeLaN model with random weights: SPD mass matrix, exact derivatives,
energy balance, inverse/forward consistency; and the MLP baseline's interface."""

import copy

import pytest
import torch

from delan_common.dynamics import COULOMB_SMOOTHING
from delan_learning.lagrangian import DelanModel
from delan_learning.mlp import MlpInverseModel
from delan_learning.models import build_model
from delan_testing.models import random_delan

LAYOUTS = [
    (['revolute', 'revolute'], False),
    (['revolute', 'prismatic', 'continuous'], False),
    (['revolute'] * 7, False),
    (['revolute', 'prismatic', 'continuous'], True),
]


def random_model(joint_types, shared=False, seed=0, dtype=torch.float64, width=32):
    """A DeLaN whose every weight, bias and scale is random (not the near-flat initialisation)."""
    return random_delan(
        joint_types,
        seed=seed,
        std=0.5,
        scales=(0.7, 3.0),
        dtype=dtype,
        width=width,
        depth=2,
        shared_trunk=shared,
    )


def random_states(n, B=16, seed=1, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, n, generator=g, dtype=dtype) * 1.5 for _ in range(3)]


def rel_err(a, b):
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


@pytest.mark.parametrize('types,shared', LAYOUTS)
def test_mass_matrix_symmetric_positive_definite(types, shared):
    m = random_model(types, shared)
    q, _, _ = random_states(len(types), B=64)
    H = m.mass_matrix(q)
    assert torch.equal(H, H.transpose(-1, -2)) or rel_err(H, H.transpose(-1, -2)) < 1e-14
    eig = torch.linalg.eigvalsh(H)
    assert bool((eig > 0).all()), eig.min()
    # far outside any data range too
    assert bool((torch.linalg.eigvalsh(m.mass_matrix(q * 100)) > 0).all())


@pytest.mark.parametrize('types,shared', LAYOUTS)
def test_forward_inverts_inverse(types, shared):
    m = random_model(types, shared)
    q, qd, qdd = random_states(len(types))
    tau = m.inverse(q, qd, qdd)
    # random weights give badly conditioned H; allow for float64 rounding times cond(H)
    tol = max(1e-10, 1e-14 * float(torch.linalg.cond(m.mass_matrix(q).detach()).max()))
    assert rel_err(m.forward_dynamics(q, qd, tau), qdd) < tol
    # and the other way round
    assert rel_err(m.inverse(q, qd, m.forward_dynamics(q, qd, tau)), tau) < tol


def test_a_non_finite_state_gives_a_nan_row_not_an_exception():
    """A rollout that diverged in one window must not stop the others (delan-eval --horizon)."""
    m = random_model(['revolute'] * 3)
    q, qd, tau = random_states(3, B=5)
    good = m.forward_dynamics(q, qd, tau)
    q[2, 1] = float('inf')
    qd[3, 0] = float('nan')
    qdd = m.forward_dynamics(q, qd, tau)
    assert torch.isnan(qdd[2]).all() and torch.isnan(qdd[3]).all()
    keep = [0, 1, 4]
    assert torch.allclose(qdd[keep], good[keep], rtol=1e-12, atol=0.0)


def autograd_terms(m, q, qd):
    """c, g and dH/dt from plain autograd on H(q) and V(q), one state at a time."""
    cs, gs, hdots = [], [], []
    for qb, qdb in zip(q, qd):
        J = torch.autograd.functional.jacobian(lambda x: m.mass_matrix(x[None])[0], qb)
        Hdot = torch.einsum('ijk,k->ij', J, qdb)
        quad = torch.einsum('i,ijk,j->k', qdb, J, qdb)
        cs.append(Hdot @ qdb - 0.5 * quad)
        gs.append(torch.autograd.functional.jacobian(lambda x: m.potential(x[None])[0], qb))
        hdots.append(Hdot)
    return torch.stack(cs), torch.stack(gs), torch.stack(hdots)


@pytest.mark.parametrize('types,shared', LAYOUTS)
def test_analytic_derivatives_equal_autograd(types, shared):
    m = random_model(types, shared)
    q, qd, qdd = random_states(len(types), B=6)
    c_ref, g_ref, hdot_ref = autograd_terms(m, q, qd)
    assert rel_err(m.coriolis(q, qd), c_ref) < 1e-8
    assert rel_err(m.gravity(q), g_ref) < 1e-8
    assert rel_err(m.mass_matrix_rate(q, qd), hdot_ref) < 1e-8
    H = m.mass_matrix(q)
    tau_ref = (H @ qdd[..., None])[..., 0] + c_ref + g_ref + m.friction(qd)
    assert rel_err(m.inverse(q, qd, qdd), tau_ref) < 1e-8
    terms = m.dynamics(q, qd)
    assert rel_err(terms.c, c_ref) < 1e-8 and rel_err(terms.g, g_ref) < 1e-8


@pytest.mark.parametrize('types,shared', LAYOUTS)
def test_power_balance(types, shared):
    """qd^T (tau - tau_f) equals dE/dt, with dE/dt from autograd of E = T + V."""
    m = random_model(types, shared)
    q, qd, qdd = random_states(len(types), B=32)
    qq, qqd = q.clone().requires_grad_(), qd.clone().requires_grad_()
    T, V = m.energy(qq, qqd)
    dEdq, dEdqd = torch.autograd.grad((T + V).sum(), (qq, qqd))
    dEdt = (dEdq * qd).sum(-1) + (dEdqd * qdd).sum(-1)
    power = (qd * (m.inverse(q, qd, qdd) - m.friction(qd))).sum(-1)
    assert rel_err(power, dEdt) < 1e-8
    assert rel_err(m.energy_rate(q, qd, qdd), dEdt) < 1e-8
    assert bool((T >= 0).all())


def test_friction_form_and_sign():
    m = random_model(['revolute', 'prismatic'])
    viscous, coulomb = m.friction_coefficients()
    assert bool((viscous >= 0).all()) and bool((coulomb >= 0).all())
    qd = torch.linspace(-3, 3, 61, dtype=torch.float64)[:, None].repeat(1, 2)
    expected = viscous * qd + coulomb * torch.tanh(qd / COULOMB_SMOOTHING)
    assert rel_err(m.friction(qd), expected) < 1e-14
    assert bool(((m.friction(qd) * qd) >= 0).all())  # dissipative
    with torch.no_grad():
        m.friction_raw.fill_(-50.0)  # coefficients can go to zero but not below
    assert bool((torch.stack(m.friction_coefficients()) >= 0).all())


def test_friction_switch_off():
    torch.manual_seed(0)
    m = DelanModel(['revolute'] * 3, friction=False).double()
    assert not any('friction' in n for n, _ in m.named_parameters())
    q, qd, qdd = random_states(3)
    assert torch.equal(m.friction(qd), torch.zeros_like(qd))
    assert (
        rel_err(
            m.inverse(q, qd, qdd),
            (m.mass_matrix(q) @ qdd[..., None])[..., 0] + m.coriolis(q, qd) + m.gravity(q),
        )
        < 1e-10
    )


def test_float32_and_batch_shapes():
    m64 = random_model(['revolute'] * 3)
    m = copy.deepcopy(m64).float()
    q, qd, qdd = random_states(3, B=5, dtype=torch.float32)
    tau = m.inverse(q, qd, qdd)
    assert tau.dtype == torch.float32 and tau.shape == (5, 3)
    assert m.mass_matrix(q).shape == (5, 3, 3)
    T, V = m.energy(q, qd)
    assert T.shape == (5,) and V.shape == (5,)
    tau64 = m64.inverse(q.double(), qd.double(), qdd.double())
    assert rel_err(tau.double(), tau64) < 1e-5  # same weights, float32 rounding only
    cond = float(torch.linalg.cond(m64.mass_matrix(q.double()).detach()).max())
    assert rel_err(m.forward_dynamics(q, qd, tau).double(), qdd.double()) < max(1e-4, 1e-6 * cond)


def test_evaluation_needs_no_autograd():
    m = random_model(['revolute'] * 2)
    q, qd, qdd = random_states(2)
    with torch.no_grad():
        tau = m.inverse(q, qd, qdd)
    assert not tau.requires_grad
    assert rel_err(tau, m.inverse(q, qd, qdd)) < 1e-14


def test_parameters_get_gradients_through_derivatives():
    m = random_model(['revolute'] * 2).train()
    q, qd, qdd = random_states(2)
    m.inverse(q, qd, qdd).pow(2).mean().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and bool(torch.isfinite(p.grad).all()), name
        assert float(p.grad.abs().max()) > 0, name


def test_separate_networks_do_not_share_weights():
    """With shared_trunk=False the potential must not depend on network 0 and L not on 1."""
    m = random_model(['revolute'] * 2)
    q, _, _ = random_states(2)
    H0, V0 = m.mass_matrix(q), m.potential(q)
    with torch.no_grad():
        for w in m.weights:
            w[1].normal_()  # scramble the V network
    assert torch.equal(m.mass_matrix(q), H0) and not torch.equal(m.potential(q), V0)


def test_build_model_and_bad_arguments():
    assert isinstance(build_model('delan', ['revolute']), DelanModel)
    assert isinstance(build_model('mlp', ['revolute']), MlpInverseModel)
    with pytest.raises(ValueError, match='kind'):
        build_model('gp', ['revolute'])
    with pytest.raises(ValueError, match='type'):
        DelanModel(['revolute', 'ball'])
    with pytest.raises(ValueError, match='activation'):
        DelanModel(['revolute'], activation='relu')


def test_mlp_baseline_interface():
    torch.manual_seed(0)
    m = MlpInverseModel(['revolute', 'prismatic'], width=32).double().eval()
    q, qd, qdd = random_states(2, B=8)
    tau = m.inverse(q, qd, qdd)
    assert tau.shape == (8, 2)
    for call in (
        lambda: m.mass_matrix(q),
        lambda: m.coriolis(q, qd),
        lambda: m.gravity(q),
        lambda: m.friction(qd),
        lambda: m.energy(q, qd),
    ):
        with pytest.raises(NotImplementedError, match='black-box'):
            call()
    # numerical forward model: Newton on the inverse model
    with torch.no_grad():
        qdd_hat = m.forward_dynamics(q, qd, tau)
    assert rel_err(m.inverse(q, qd, qdd_hat), tau) < 1e-8


def test_training_gradients_equal_finite_differences():
    """The hand-written softplus/sigmoid backward and the analytic derivative passes give the
    right parameter gradients (what training relies on)."""
    from delan_learning.activations import _SoftplusAndSlope

    a = torch.randn(3, 5, dtype=torch.float64, requires_grad=True) * 3
    assert torch.autograd.gradcheck(
        lambda x: _SoftplusAndSlope.apply(x), (a.detach().requires_grad_(),)
    )
    m = random_model(['revolute', 'prismatic'], seed=4, width=6)
    q, qd, qdd = random_states(2, B=3)
    for name in ('weights.0', 'weights.1', 'head_weight', 'friction_raw'):
        p = dict(m.named_parameters())[name]

        def f(w, name=name):
            params = dict(m.named_parameters())
            params[name] = w
            return torch.func.functional_call(m, params, (q, qd, qdd))

        assert torch.autograd.gradcheck(f, (p.detach().clone().requires_grad_(),)), name


def test_initial_mass_matrix_follows_each_joints_inertia_scale():
    """A shoulder and a light wrist differ by orders of magnitude in torque per acceleration;
    the initial H starts near each joint's own scale (h_rel), not at one shared value."""
    torch.manual_seed(0)
    m = DelanModel(['revolute', 'revolute'], width=16).double()
    g = torch.Generator().manual_seed(1)
    q, qd, qdd = (torch.randn(500, 2, generator=g, dtype=torch.float64) for _ in range(3))
    tau = qdd * torch.tensor([4.0, 1e-2], dtype=torch.float64)
    m.init_scales(q, qd, qdd, tau)
    assert torch.allclose(
        m.h_rel[0] / m.h_rel[1], torch.tensor(4e2, dtype=m.h_rel.dtype), rtol=0.05
    )
    with torch.no_grad():
        H = m.mass_matrix(q[:20])
    ratio = H[:, 0, 0] / H[:, 1, 1]
    assert torch.all(ratio > 4e1) and torch.all(ratio < 4e3)
    assert torch.all(torch.linalg.eigvalsh(H)[:, 0] > 0)
