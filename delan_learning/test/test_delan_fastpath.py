"""The numpy fast path and the torch adapter implement the DynamicsModel protocol and agree
with the torch model (float64) on every term, for one state and for batches."""

import numpy as np
import pytest
import torch

from delan_common.dynamics import DynamicsModel
from delan_learning.c_kernel import c_kernel
from delan_learning.fastpath import dynamics_model
from delan_learning.friction import FRICTION_MODELS
from delan_learning.mlp import MlpInverseModel
from delan_learning.numpy_delan import NumpyDelan
from delan_learning.torch_dynamics import TorchDynamics
from delan_testing.models import random_delan

CASES = [
    (['revolute'] * 2, False, 'softplus'),
    (['revolute'] * 7, False, 'softplus'),
    (['revolute', 'prismatic', 'continuous'], False, 'softplus'),
    (['revolute'] * 3, True, 'softplus'),
    (['revolute', 'prismatic'], False, 'tanh'),
]
METHODS = {
    'inverse': 3,
    'forward': 3,
    'mass_matrix': 1,
    'coriolis': 2,
    'gravity': 1,
    'friction': 2,
    'energy': 2,
}


def model(types, shared, activation, depth=2, seed=0, friction_model='coulomb_viscous'):
    return random_delan(
        types,
        seed=seed,
        scales=(0.5, 4.0),
        width=24,
        depth=depth,
        shared_trunk=shared,
        activation=activation,
        friction_model=friction_model,
    )


def torch_term(m, name, *xs):
    ts = [torch.as_tensor(x) for x in xs]
    with torch.no_grad():
        fn = {'forward': m.forward_dynamics}.get(name) or getattr(m, name)
        out = fn(
            *(
                ts[:1]
                if name in ('mass_matrix', 'gravity')
                else ts[1:2]
                if name == 'friction'
                else ts[: METHODS[name]]
            )
        )
    return tuple(o.numpy() for o in out) if isinstance(out, tuple) else out.numpy()


def close(a, b, rtol=1e-10):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    scale = max(np.abs(b).max(), 1e-12)
    assert np.abs(a - b).max() <= rtol * scale, (np.abs(a - b).max(), scale)


@pytest.mark.parametrize('friction_model', FRICTION_MODELS)
@pytest.mark.parametrize('types,shared,activation', CASES)
def test_numpy_fast_path_equals_torch(types, shared, activation, friction_model):
    m = model(types, shared, activation, friction_model=friction_model)
    fast = NumpyDelan(m, joint_names=[f'j{i}' for i in range(len(types))])
    assert isinstance(fast, DynamicsModel)
    rng = np.random.default_rng(2)
    n = len(types)
    q, qd, x = (rng.normal(size=(11, n)) for _ in range(3))
    H = torch_term(m, 'mass_matrix', q)
    cond = np.linalg.cond(H).max()
    for name, n_args in METHODS.items():
        args = (q, qd, x)[:n_args] if name not in ('mass_matrix', 'gravity') else (q,)
        if name == 'friction':
            args = (qd,)
        ref = torch_term(m, name, q, qd, x)
        rtol = 1e-10 if name != 'forward' else max(1e-10, 1e-14 * cond)
        got = getattr(fast, name)(*args)
        if isinstance(ref, tuple):
            for a, b in zip(got, ref):
                close(a, b, rtol)
        else:
            close(got, ref, rtol)
        # one state (n,) gives the row of the batch result
        one = getattr(fast, name)(*(a[4] for a in args))
        if isinstance(ref, tuple):
            for a, b in zip(one, ref):
                close(a, b[4], rtol)
        else:
            close(one, ref[4], rtol)


@pytest.mark.parametrize('use_c', [False, True])
def test_single_state_inverse_paths_match_batched_path(use_c):
    """The one-state inverse (compiled kernel, or the hand-tuned numpy path for all-revolute
    softplus 2-layer models) against the generic batched numpy code."""
    if use_c and c_kernel() is None:
        pytest.skip('no C compiler: the numpy path serves one-state calls')
    m = model(['revolute'] * 7, False, 'softplus')
    fast = NumpyDelan(m, use_c=use_c)
    assert fast.backend == ('c' if use_c else 'numpy') and fast._single_ok
    rng = np.random.default_rng(5)
    for _ in range(5):
        q, qd, qdd = rng.normal(size=(3, 7)) * 2
        close(fast.inverse(q, qd, qdd), fast.inverse(q[None], qd[None], qdd[None])[0], 1e-12)
    # huge pre-activations: no overflow warning escapes, result still exact
    with torch.no_grad():
        m.biases[0].fill_(400.0)
    fast = NumpyDelan(m, use_c=use_c)
    q, qd, qdd = rng.normal(size=(3, 7))
    with np.errstate(over='raise', invalid='raise'):
        tau = fast.inverse(q, qd, qdd)
    assert np.isfinite(tau).all()
    close(tau, torch_term(m, 'inverse', q[None], qd[None], qdd[None])[0])


@pytest.mark.parametrize('friction_model', FRICTION_MODELS)
@pytest.mark.parametrize('types,shared,activation', CASES)
@pytest.mark.parametrize('depth', [1, 3])
def test_c_kernel_layouts(types, shared, activation, depth, friction_model):
    if c_kernel() is None:
        pytest.skip('no C compiler')
    m = model(types, shared, activation, depth=depth, friction_model=friction_model)
    fast = NumpyDelan(m)
    rng = np.random.default_rng(3)
    q, qd, qdd = rng.normal(size=(3, len(types)))
    close(fast.inverse(q, qd, qdd), torch_term(m, 'inverse', q[None], qd[None], qdd[None])[0])


def test_numpy_snapshot_is_independent_of_later_training():
    m = model(['revolute'] * 2, False, 'softplus')
    fast = NumpyDelan(m)
    q = np.array([0.3, -0.2])
    before = fast.gravity(q)
    with torch.no_grad():
        m.head_bias.add_(1.0)
        m.weights[0].mul_(2.0)
    assert np.array_equal(fast.gravity(q), before)


def test_torch_adapter_for_delan_and_mlp():
    m = model(['revolute'] * 3, False, 'softplus')
    adapter = TorchDynamics(m, joint_names=['a', 'b', 'c'])
    assert isinstance(adapter, DynamicsModel) and adapter.joint_names == ['a', 'b', 'c']
    rng = np.random.default_rng(0)
    q, qd, qdd = rng.normal(size=(3, 3))
    close(adapter.inverse(q, qd, qdd), NumpyDelan(m).inverse(q, qd, qdd))
    T, V = adapter.energy(q, qd)
    assert np.ndim(T) == 0 and np.ndim(V) == 0
    torch.manual_seed(0)
    mlp = MlpInverseModel(['revolute'] * 3, width=16).double()
    ad = dynamics_model(mlp, joint_names=['a', 'b', 'c'])
    assert isinstance(ad, TorchDynamics) and isinstance(ad, DynamicsModel)
    tau = ad.inverse(q, qd, qdd)
    assert tau.shape == (3,)
    close(ad.forward(q, qd, tau), qdd, 1e-8)  # Newton on the MLP
    with pytest.raises(NotImplementedError, match='black-box'):
        ad.mass_matrix(q)
    assert isinstance(dynamics_model(m), NumpyDelan)
    with pytest.raises(TypeError):
        NumpyDelan(mlp)
    with pytest.raises(ValueError, match='joint names'):
        NumpyDelan(m, joint_names=['only_one'])
