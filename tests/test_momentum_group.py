"""Momentum correction through torchstep.compress_group (the path training uses) against the
per-layer reference refmodel.momentum.momentum_layer, bit for bit, over several steps with the
residual and velocity carried (hypothesis layers and real LeNet gradients)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradblock.refmodel import momentum as ref

torch = pytest.importorskip("torch", reason="torch is not installed")
from gradblock import torchstep as tc  # noqa: E402  (needs torch)


def u32(t):
    return t.cpu().numpy().view(np.uint32)


def run_both(shapes, ks, steps, m, mask, R=10.0):
    """`steps`: per step a list of float32 arrays. Asserts group == reference each step."""
    cfg = ref.MomentumConfig.from_float(m)
    ids = list(range(7, 7 + len(shapes)))
    plan = tc.plan_group(shapes, k=ks, layer_ids=ids, R=R)
    r_ref = [None] * len(shapes)
    u_ref = [None] * len(shapes)
    r_t, u_t = [None] * len(shapes), [None] * len(shapes)
    for grads in steps:
        out = tc.compress_group(plan, [torch.from_numpy(g) for g in grads], r_t, R=R,
                                velocities=u_t, m_fix=cfg.m_fix, mask=mask)
        refs = [ref.momentum_layer(g, r_ref[j], u_ref[j], cfg, R=R, k=ks[j], layer_id=ids[j],
                                   mask=mask) for j, g in enumerate(grads)]
        np.testing.assert_array_equal(u32(out.message), np.concatenate([s.frame for s in refs]))
        assert out.sat_quant == [s.sat_quant for s in refs]
        assert out.sat_feedback == [s.sat_feedback for s in refs]
        assert out.sat_momentum == [s.sat_momentum for s in refs]
        for j, s in enumerate(refs):
            np.testing.assert_array_equal(out.residuals[j].numpy(), s.residual_out)
            np.testing.assert_array_equal(out.velocities[j].numpy(), s.velocity_out)
        r_ref = [s.residual_out for s in refs]
        u_ref = [s.velocity_out for s in refs]
        r_t, u_t = out.residuals, out.velocities


shapes_st = st.lists(st.sampled_from([(5,), (4, 3), (3, 2, 2), (1,), (6, 1)]), min_size=1,
                     max_size=4)


@settings(max_examples=40, deadline=None)
@given(shapes=shapes_st, k=st.sampled_from([1, 2, 100]), m=st.sampled_from([0.0, 0.5, 0.9, 0.999]),
       mask=st.booleans(), scale=st.sampled_from([0.01, 3.0, 30.0]), seed=st.integers(0, 2**16),
       R=st.sampled_from([0.5, 10.0]))
def test_group_momentum_equals_reference(shapes, k, m, mask, scale, seed, R):
    rng = np.random.default_rng(seed)
    steps = [[(rng.standard_normal(s) * scale).astype(np.float32) for s in shapes]
             for _ in range(3)]
    run_both(shapes, [k] * len(shapes), steps, m, mask, R=R)


def test_group_momentum_real_gradients():
    from gradblock.shim.setup.models import build_model
    torch.manual_seed(0)
    model = build_model("lenet5", 10, (1, 28, 28), seed=0)
    params = list(model.parameters())
    x = torch.randn(64, 1, 28, 28)
    y = torch.randint(0, 10, (64,))
    steps = []
    for s in range(4):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[s * 16:(s + 1) * 16]), y[s * 16:(s + 1) * 16]).backward()
        steps.append([p.grad.detach().numpy().copy() for p in params])
        with torch.no_grad():
            for p in params:
                p -= 0.1 * p.grad
    run_both([tuple(p.shape) for p in params], [1] * len(params), steps, 0.9, True)


def test_velocities_without_m_fix_are_refused():
    plan = tc.plan_group([(3,)])
    with pytest.raises(ValueError, match="without m_fix"):
        tc.compress_group(plan, [torch.zeros(3)], [None], velocities=[None])
    with pytest.raises(TypeError, match="velocity must be int32"):
        tc.compress_group(plan, [torch.zeros(3)], [None], velocities=[torch.zeros(3)], m_fix=1)
