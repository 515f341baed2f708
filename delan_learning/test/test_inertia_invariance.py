"""The mass matrix learned independent of the joints that move their subtree rigidly
(``inertia_invariant_joints``): exact in every implementation (torch, numpy, the compiled
kernel, a checkpoint), kept through training, and the potential still free to depend on them.
Which joints qualify is checked against Pinocchio in
delan_common/test/test_robot_descriptions.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from delan_learning.c_kernel import c_kernel
from delan_learning.checkpoint import load_model, save_model
from delan_learning.features import JointFeatures
from delan_learning.models import build_model, model_config
from delan_learning.numpy_delan import NumpyDelan
from delan_learning.training import TorqueNormalizer, TrainConfig, Trainer

TYPES = ['revolute', 'prismatic', 'continuous', 'revolute']


def _model(kind: str = 'delan', invariant=(0,), types=TYPES, seed: int = 0):
    torch.manual_seed(seed)
    m = build_model(kind, types, width=16, depth=2, inertia_invariant_joints=list(invariant))
    with torch.no_grad():  # a trained model's scales, not the unit ones
        m.h_scale.fill_(0.7)
        m.v_scale.fill_(3.0)
        # H and V far from their start (a residual's starts at zero), so that q moves them
        m.head_weight.copy_(torch.randn_like(m.head_weight))
    return m.double().eval()


def _moved(q: np.ndarray, joint: int, by: float) -> np.ndarray:
    out = q.copy()
    out[..., joint] += by
    return out


def _trained(m, steps: int = 30):
    """A few AdamW steps (with weight decay) on random data: every weight gets a gradient."""
    rng = np.random.default_rng(1)
    n = m.n_dof
    data = {k: rng.normal(size=(256, n)) for k in ('q', 'qd', 'qdd', 'tau')}
    cfg = TrainConfig(batch_size=64, lr=1e-2, weight_decay=1e-2, seed=0)
    trainer = Trainer(
        m.float().train(), cfg, TorqueNormalizer.from_torques(data['tau']), dtype=torch.float32
    )
    trainer.train_steps(data, steps)
    return m.double().eval()


def test_feature_columns_of_each_joint_type():
    f = JointFeatures(TYPES)
    # z = [sin q_a, cos q_a, q_p] with q_a = joints 0, 2, 3 and q_p = joint 1
    assert [f.columns(j) for j in range(4)] == [[0, 3], [6], [1, 4], [2, 5]]


@pytest.mark.parametrize('kind', ['delan', 'delan_residual'])
def test_mass_matrix_and_coriolis_ignore_the_joint_gravity_does_not(kind):
    m = _model(kind, invariant=(0, 1))
    rng = np.random.default_rng(0)
    q, qd = rng.normal(size=(2, 8, 4))
    with torch.no_grad():
        t = {k: torch.as_tensor(v) for k, v in {'q': q, 'qd': qd}.items()}
        H, c, g = m.mass_matrix(t['q']), m.coriolis(t['q'], t['qd']), m.gravity(t['q'])
        for joint, by in ((0, 1.3), (1, -0.2)):
            moved = torch.as_tensor(_moved(q, joint, by))
            torch.testing.assert_close(m.mass_matrix(moved), H, rtol=0, atol=1e-12)
            torch.testing.assert_close(m.coriolis(moved, t['qd']), c, rtol=0, atol=1e-12)
            assert (m.gravity(moved) - g).abs().max() > 1e-3  # V still sees the joint
        # a joint not named still moves H: the mask is not a blanket one
        assert (m.mass_matrix(torch.as_tensor(_moved(q, 2, 0.5))) - H).abs().max() > 1e-3


def test_training_keeps_the_masked_weights_at_zero_and_every_backend_agrees():
    m = _trained(_model())
    cols = m.features.columns(0)
    w = m.weights[0].detach()
    assert torch.count_nonzero(w[0, cols]) == 0  # the stored weights, as exported
    assert torch.count_nonzero(w[1, cols]) > 0  # the V network's are trained
    rng = np.random.default_rng(2)
    q, qd, qdd = rng.normal(size=(3, 5, 4))
    with torch.no_grad():
        ref = m.inverse(*(torch.as_tensor(x) for x in (q, qd, qdd))).numpy()
    backends = [NumpyDelan(m, use_c=False)] + ([NumpyDelan(m)] if c_kernel() else [])
    for fast in backends:
        np.testing.assert_allclose(fast.inverse(q, qd, qdd), ref, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(
            fast.mass_matrix(_moved(q, 0, 2.0)), fast.mass_matrix(q), rtol=0, atol=1e-12
        )


def test_checkpoint_keeps_the_invariance(tmp_path):
    m = _trained(_model())
    path = str(tmp_path / 'm.pt')
    save_model(m, path, {'joint_names': ['a', 'b', 'c', 'd']})
    loaded, meta = load_model(path)
    assert meta['hyperparameters']['inertia_invariant_joints'] == [0]
    assert loaded.inertia_invariant_joints == [0]
    q = np.random.default_rng(3).normal(size=(4, 4))
    with torch.no_grad():
        H = loaded.mass_matrix(torch.as_tensor(q))
        torch.testing.assert_close(
            loaded.mass_matrix(torch.as_tensor(_moved(q, 0, -0.9))), H, rtol=0, atol=1e-12
        )
        torch.testing.assert_close(H, m.mass_matrix(torch.as_tensor(q)))


def test_model_config_passes_it_to_delan_kinds_only_and_bad_values_are_refused():
    assert model_config('delan', 8, 1, inertia_invariant_joints=[0])[
        'inertia_invariant_joints'
    ] == [0]
    assert 'inertia_invariant_joints' not in model_config('delan', 8, 1)
    for kind in ('mlp', 'hamiltonian', 'blackbox_lagrangian'):
        assert 'inertia_invariant_joints' not in model_config(
            kind, 8, 1, inertia_invariant_joints=[0]
        )
    with pytest.raises(ValueError, match='joints 0 to 3'):
        build_model('delan', TYPES, inertia_invariant_joints=[4])
    with pytest.raises(ValueError, match='separate H and V networks'):
        build_model('delan', TYPES, shared_trunk=True, inertia_invariant_joints=[0])
