"""Momentum correction with factor masking (docs/spec.md §7): the numpy reference against the
spec's worked example and a pure-Python oracle, then numba and torch (CPU; CUDA where present)
against the reference bit for bit, on hypothesis inputs and on real gradients carried over
several training steps, with the same errors first."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradblock.refmodel import momentum as ref
from gradblock.refmodel.compress import compress_layer
from gradblock.refmodel.quantiser import QMAX, NonFiniteError, QuantConfig
from gradblock.refmodel.validation import ShapeError

numba_path = pytest.importorskip("gradblock.fastpath.momentum_numba",
                                 reason="numba is not installed")
torch = pytest.importorskip("torch", reason="torch is not installed")
from gradblock.torchstep import momentum as tmom  # noqa: E402  (needs torch)

M09 = ref.MomentumConfig.from_float(0.9)
FIELDS = ("payload", "residual_out", "velocity_out")


# ------------------------------------------------------------------ the contract itself
def oracle_mul(u: int, m_fix: int) -> int:
    """mul(m, u) of spec §7.2 with Python integers: round half away from zero of u*m_fix/2**16."""
    mag = (abs(u) * m_fix + 2**15) // 2**16
    return mag if u >= 0 else -mag


def clamp(v: int) -> int:
    return max(-QMAX, min(QMAX, v))


def test_spec_worked_example():
    g1 = np.array([[0.5, -0.25], [1.0, 0.001], [9.0, 9.5]], np.float32)
    r1 = np.array([[0, 5], [-7, 0], [100, 0]], np.int32)
    u1 = np.array([[2**30, 0], [0, 0], [2000000000, QMAX]], np.int32)
    s1 = ref.momentum_layer(g1, r1, u1, 0.9, R=10.0, k=1)
    assert s1.q.tolist() == [[107374182, -53687091], [214748365, 214748],
                             [1932735283, 2040109465]]
    assert s1.velocity.tolist() == [[1073735270, -53687091], [214748365, 214748], [QMAX, QMAX]]
    assert s1.acc.tolist() == [[1073735270, -53687086], [214748358, 214748], [QMAX, QMAX]]
    assert s1.norms.tolist() == [1127422356, 214963106, 4294967294]
    assert s1.selected.tolist() == [2]
    assert (s1.sat_quant, s1.sat_momentum, s1.sat_feedback, s1.masked) == (0, 2, 1, True)
    assert s1.velocity_out.tolist() == [[1073735270, -53687091], [214748365, 214748], [0, 0]]
    assert s1.residual_out.tolist() == [[1073735270, -53687086], [214748358, 214748], [0, 0]]

    g2 = np.array([[0.5, -0.25], [1.0, 0.001], [0.0, 0.0]], np.float32)
    s2 = ref.momentum_layer(g2, s1.residual_out, s1.velocity_out, 0.9, R=10.0, k=1)
    assert s2.velocity.tolist() == [[1073729371, -102005145], [408020583, 408020], [0, 0]]
    assert s2.acc.tolist() == [[2147464641, -155692231], [622768941, 622768], [0, 0]]
    assert s2.norms.tolist() == [2303156872, 623391709, 0]
    assert s2.payload.tolist() == [[2147464641, -155692231], [0, 0], [0, 0]]
    assert s2.residual_out.tolist() == [[0, 0], [622768941, 622768], [0, 0]]
    assert s2.velocity_out.tolist() == [[0, 0], [408020583, 408020], [0, 0]]
    assert (s2.sat_quant, s2.sat_momentum, s2.sat_feedback) == (0, 0, 0)
    assert [f"{int(w):08X}" for w in s2.frame] == [
        "5A524C45", "00000801", "00000000", "00000006", "41200000", "00000000", "00000002",
        "7FFFB5C1", "F6B85339", "00000004", "00000000", "00000002", "F3FCCF0C"]


@pytest.mark.parametrize("m,m_fix", [(0.9, 58982), (0.0, 0), (0.5, 32768), (0.99, 64881),
                                     (2**-17, 0), (3 * 2**-17, 2), (1 - 2**-16, 65535)])
def test_m_to_q016(m, m_fix):
    assert ref.MomentumConfig.from_float(m).m_fix == m_fix


@pytest.mark.parametrize("m", [1.0, -0.1, 1.5, math.nan, math.inf, 0.99999999, True, "0.9", None])
def test_bad_m_is_refused(m):
    with pytest.raises(ref.MomentumError):
        ref.MomentumConfig.from_float(m)


@pytest.mark.parametrize("m_fix", [-1, 65536, 0.5, True])
def test_bad_m_fix_is_refused(m_fix):
    with pytest.raises(ref.MomentumError):
        ref.MomentumConfig(m_fix)


def test_local_and_global_momentum_together_are_refused():
    with pytest.raises(ref.MomentumConflictError, match="--momentum 0"):
        ref.check_momentum_pair(0.9, 0.9)
    ref.check_momentum_pair(0.9, 0.0)
    ref.check_momentum_pair(0.0, 0.9)
    ref.check_momentum_pair(None, 0.9)


int32s = st.integers(-2**31, 2**31 - 1)


@given(st.lists(int32s, min_size=1, max_size=40), st.lists(int32s, min_size=40, max_size=40),
       st.integers(0, 65535))
def test_velocity_update_matches_python_integers(u, q, m_fix):
    u_a = np.array(u, np.int32)
    q_a = np.array(q[:len(u)], np.int32)
    out, sat = ref.velocity_update(u_a, q_a, m_fix)
    want = [oracle_mul(a, m_fix) + b for a, b in zip(u, q)]
    assert out.tolist() == [clamp(v) for v in want]
    assert sat == sum(abs(v) > QMAX for v in want)
    assert all(abs(oracle_mul(a, m_fix)) <= abs(a) for a in u)      # never grows the velocity


def test_product_extremes():
    u = np.array([-2**31, -QMAX, QMAX, 1, -1, 0], np.int32)
    assert ref.scale_velocity(u, 65535).tolist() == [-(2**31 - 2**15), -(QMAX - 2**15) - 0,
                                                      QMAX - 2**15, 1, -1, 0]
    assert ref.scale_velocity(np.array([1, 3, -3, 5], np.int32), 32768).tolist() == [1, 2, -2, 3]


def test_m_zero_and_zero_velocity_is_plain_error_feedback(rng):
    g = rng.normal(0, 2, (6, 5)).astype(np.float32)
    r = rng.integers(-2**30, 2**30, (6, 5), dtype=np.int32)
    st_m = ref.momentum_layer(g, r, None, 0.0, k=2)
    st_p = compress_layer(g, r, k=2)
    for f in ("payload", "residual_out", "frame", "norms", "selected"):
        np.testing.assert_array_equal(getattr(st_m, f), getattr(st_p, f))
    np.testing.assert_array_equal(st_m.velocity, st_p.q)
    assert st_m.sat_feedback == st_p.sat_feedback


def test_masking_rules(rng):
    g = rng.normal(0, 1, (4, 3)).astype(np.float32)
    u = rng.integers(-2**28, 2**28, (4, 3), dtype=np.int32)
    sparse = ref.momentum_layer(g, None, u, 0.9, k=1)
    sent = np.zeros(4, bool)
    sent[sparse.selected] = True
    assert sparse.masked
    assert not sparse.velocity_out[sent].any()
    np.testing.assert_array_equal(sparse.velocity_out[~sent], sparse.velocity[~sent])
    # the whole layer sent: ordinary momentum, nothing masked
    dense = ref.momentum_layer(g, None, u, 0.9, k=4)
    assert not dense.masked and not dense.residual_out.any()
    np.testing.assert_array_equal(dense.velocity_out, dense.velocity)
    np.testing.assert_array_equal(dense.payload, dense.velocity)
    # masking switched off
    off = ref.momentum_layer(g, None, u, 0.9, k=1, mask=False)
    assert not off.masked
    np.testing.assert_array_equal(off.velocity_out, off.velocity)
    np.testing.assert_array_equal(off.payload, sparse.payload)


def test_inputs_are_not_modified(rng):
    g = rng.normal(0, 1, (5, 4)).astype(np.float32)
    r = rng.integers(-9, 9, (5, 4), dtype=np.int32)
    u = rng.integers(-2**30, 2**30, (5, 4), dtype=np.int32)
    copies = [a.copy() for a in (g, r, u)]
    ref.momentum_layer(g, r, u, 0.9)
    numba_path.momentum_layer(g, r, u, 0.9)
    tmom.momentum_layer(torch.from_numpy(g), torch.from_numpy(r), torch.from_numpy(u), 0.9)
    for a, c in zip((g, r, u), copies):
        np.testing.assert_array_equal(a, c)


# ------------------------------------------------------------------ backends agree
def run_all(g, r, u, m, **kw):
    """The three backends on the same inputs; torch on CPU. Returns reference, numba, torch."""
    a = ref.momentum_layer(g, r, u, m, **kw)
    b = numba_path.momentum_layer(g, r, u, m, **kw)
    tt = lambda x: None if x is None else torch.from_numpy(x)  # noqa: E731
    c = tmom.momentum_layer(tt(g), tt(r), tt(u), m, **kw)
    return a, b, c


def assert_same(a, b, c, device_note=""):
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(b, f), getattr(a, f), err_msg=f"numba {f}")
        np.testing.assert_array_equal(getattr(c, f).cpu().numpy(), getattr(a, f),
                                      err_msg=f"torch{device_note} {f}")
    np.testing.assert_array_equal(b.frame, a.frame, err_msg="numba frame")
    np.testing.assert_array_equal(c.frame.cpu().numpy().view(np.uint32), a.frame,
                                  err_msg=f"torch{device_note} frame")
    for x in (b, c):
        assert (x.k_eff, x.sat_quant, x.sat_momentum, x.sat_feedback, x.masked) == \
            (a.k_eff, a.sat_quant, a.sat_momentum, a.sat_feedback, a.masked)
        assert np.asarray(x.selected if isinstance(x.selected, np.ndarray)
                          else x.selected.cpu().numpy()).tolist() == a.selected.tolist()
    np.testing.assert_array_equal(b.velocity, a.velocity)
    np.testing.assert_array_equal(b.acc, a.acc)
    np.testing.assert_array_equal(b.norms, a.norms)


floats = st.one_of(st.floats(-30, 30, width=32), st.sampled_from([0.0, -0.0, 10.0, -10.0,
                                                                   math.inf, -math.inf, 1e-45]))


@st.composite
def layer_case(draw):
    shape = draw(st.sampled_from([(0,), (1,), (7,), (3, 4), (5, 1, 3), (2, 3, 2, 2), (0, 3)]))
    n = math.prod(shape)
    g = np.array(draw(st.lists(floats, min_size=n, max_size=n)), np.float32).reshape(shape)
    big = st.integers(-QMAX, QMAX)
    r = np.array(draw(st.lists(big, min_size=n, max_size=n)), np.int32).reshape(shape)
    u = np.array(draw(st.lists(int32s, min_size=n, max_size=n)), np.int32).reshape(shape)
    m = ref.MomentumConfig(draw(st.sampled_from([0, 1, 32768, 58982, 65535])
                               | st.integers(0, 65535)))
    k = draw(st.sampled_from([1, 2, 5, 0.3, 0.99]))
    block_size = draw(st.sampled_from([None, None, 1, 2, 5]))
    mask = draw(st.booleans())
    R = draw(st.sampled_from([10.0, 1.0, 0.5]))
    return g, r, u, m, dict(k=k, block_size=block_size, mask=mask, R=R, layer_id=3)


@given(layer_case())
def test_backends_agree(case):
    g, r, u, m, kw = case
    assert_same(*run_all(g, r, u, m, **kw))


@given(layer_case())
def test_backends_agree_from_zero_state(case):
    g, _, _, m, kw = case
    assert_same(*run_all(g, None, None, m, **kw))


def _error_of(fn):
    try:
        fn()
    except Exception as e:       # noqa: BLE001 - the class is what is compared
        return type(e)
    return None


BAD_INPUTS = {
    "m": lambda g, r, u: (g, r, u, 1.0, {}),
    "velocity dtype": lambda g, r, u: (g, r, u.astype(np.int64), 0.9, {}),
    "velocity shape": lambda g, r, u: (g, r, u.reshape(-1), 0.9, {}),
    "residual dtype": lambda g, r, u: (g, r.astype(np.float32), u, 0.9, {}),
    "range": lambda g, r, u: (g, r, u, 0.9, {"R": -1.0}),
    "gradient dtype": lambda g, r, u: (g.astype(np.float64), r, u, 0.9, {}),
    "NaN before residual shape": lambda g, r, u: (_with_nan(g), r.reshape(-1), u, 0.9, {}),
    "residual shape": lambda g, r, u: (g, r.reshape(-1), u, 0.9, {}),
    "k": lambda g, r, u: (g, r, u, 0.9, {"k": 0}),
    "block size": lambda g, r, u: (g, r, u, 0.9, {"block_size": 0}),
    "NaN before k": lambda g, r, u: (_with_nan(g), r, u, 0.9, {"k": -2}),
    "lmax": lambda g, r, u: (g, r, u, 0.9, {"lmax_log2": 0}),
    "velocity before NaN": lambda g, r, u: (_with_nan(g), r, u[:1], 0.9, {}),
}


def _with_nan(g):
    g = g.copy()
    g.reshape(-1)[3] = np.nan
    return g


@pytest.mark.parametrize("what", sorted(BAD_INPUTS))
def test_backends_raise_the_same_error_first(what, rng):
    g = rng.normal(0, 1, (3, 4)).astype(np.float32)
    r = np.zeros((3, 4), np.int32)
    u = np.ones((3, 4), np.int32)
    g, r, u, m, kw = BAD_INPUTS[what](g, r, u)
    want = _error_of(lambda: ref.momentum_layer(g, r, u, m, **kw))
    assert want is not None, f"{what}: the reference accepted it"
    assert _error_of(lambda: numba_path.momentum_layer(g, r, u, m, **kw)) is want
    t = lambda x: torch.from_numpy(np.ascontiguousarray(x))  # noqa: E731
    assert _error_of(lambda: tmom.momentum_layer(t(g), t(r), t(u), m, **kw)) is want
    expected = {"m": ref.MomentumError, "velocity dtype": TypeError, "residual dtype": TypeError,
                "velocity shape": ShapeError, "residual shape": ShapeError,
                "velocity before NaN": ShapeError, "NaN before residual shape": NonFiniteError,
                "NaN before k": NonFiniteError, "gradient dtype": TypeError}
    if what in expected:
        assert want is expected[what]


# ------------------------------------------------------------------ real gradients
@pytest.fixture(scope="module")
def digits_model():
    from gradblock.shim.setup.data import load_dataset
    from gradblock.shim.setup.models import build_model
    try:
        ds = load_dataset("digits", None)
    except Exception as e:       # noqa: BLE001
        pytest.skip(f"digits data set unavailable: {e}")
    return ds, build_model("conv64", ds.num_classes, ds.in_shape, seed=0)


def test_real_gradients_over_training_steps(digits_model):
    """Six steps of local-momentum training (plain SGD on the average, spec §7.3) on real
    data: at every step and layer the three backends agree on the same (g, r, u), and the
    state carried forward is the reference's."""
    import torch.nn.functional as F

    from gradblock.refmodel.quantiser import average

    ds, model = digits_model
    qcfg = QuantConfig.from_range(1.0)
    state = {n: (np.zeros(tuple(p.shape), np.int32), np.zeros(tuple(p.shape), np.int32))
             for n, p in model.named_parameters()}
    sat_total = 0
    for step in range(6):
        idx = np.arange(step * 32, (step + 1) * 32)
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(torch.from_numpy(ds.x_train[idx])),
                        torch.from_numpy(ds.y_train[idx])).backward()
        with torch.no_grad():
            for layer_id, (name, p) in enumerate(model.named_parameters()):
                g = p.grad.detach().numpy().astype(np.float32, copy=True)
                r, u = state[name]
                a, b, c = run_all(g, r, u, M09, R=qcfg, k=0.25, layer_id=layer_id)
                assert_same(a, b, c)
                sat_total += a.sat_momentum
                state[name] = (a.residual_out, a.velocity_out)
                p.sub_(torch.from_numpy(np.float32(0.05) * average(a.payload, 1, qcfg)))
    assert any(u.any() for _, u in state.values()), "no velocity carried: nothing was tested"
    assert sat_total == 0, "velocity saturated at R = 1 on this model: the test lost its point"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@given(layer_case())
def test_cuda_matches_reference(case):
    g, r, u, m, kw = case
    a = ref.momentum_layer(g, r, u, m, **kw)
    cu = lambda x: torch.from_numpy(x).cuda()  # noqa: E731
    c = tmom.momentum_layer(cu(g), cu(r), cu(u), m, **kw)
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(c, f).cpu().numpy(), getattr(a, f), err_msg=f)
    np.testing.assert_array_equal(c.frame.cpu().numpy().view(np.uint32), a.frame)
    assert (c.sat_quant, c.sat_momentum, c.sat_feedback) == (a.sat_quant, a.sat_momentum,
                                                             a.sat_feedback)


# ------------------------------------------------------------------ gradblock step
def _cli(*argv):
    from gradblock import cli
    return cli.main([str(a) for a in argv])


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_cli_step_with_velocity_two_steps(tmp_path, rng, monkeypatch, capsys, backend):
    """Two CLI steps carrying residual and velocity through files equal the reference."""
    monkeypatch.setenv("GRADBLOCK_BACKEND", backend)   # read by every command call
    grads = [rng.normal(0, 1, (6, 4)).astype(np.float32) for _ in range(2)]
    r, u = None, None
    for i, g in enumerate(grads):
        np.save(tmp_path / f"g{i}.npy", g)
        rin = "-" if i == 0 else tmp_path / f"r{i - 1}.npy"
        vin = ["--velocity", tmp_path / f"u{i - 1}.npy"] if i else []
        rc = _cli("step", tmp_path / f"g{i}.npy", rin, "--k", 2, "--local-momentum", 0.9,
                  *vin, "--frame", tmp_path / f"f{i}.bin", "--residual-out",
                  tmp_path / f"r{i}.npy", "--velocity-out", tmp_path / f"u{i}.npy")
        assert rc == 0, capsys.readouterr().err
        want = ref.momentum_layer(g, r, u, 0.9, k=2)
        r, u = want.residual_out, want.velocity_out
        np.testing.assert_array_equal(np.load(tmp_path / f"r{i}.npy"), r)
        np.testing.assert_array_equal(np.load(tmp_path / f"u{i}.npy"), u)
        np.testing.assert_array_equal(np.fromfile(tmp_path / f"f{i}.bin", "<u4"), want.frame)
    out = capsys.readouterr().out
    assert "velocity: m = 0.899993896 (m_fix 58982)" in out and "masked on the sent blocks" in out


@pytest.mark.parametrize("extra,message", [
    (["--local-momentum", "1.0"], "[0, 1)"),
    (["--local-momentum", "x"], "not a number"),
    (["--local-momentum", "0.9"], "needs --velocity-out"),
    (["--velocity-out", "{tmp}/u.npy"], "needs --local-momentum"),
    (["--no-momentum-mask"], "needs --local-momentum"),
    (["--local-momentum", "0.9", "--velocity", "{tmp}/bad.npy", "--velocity-out",
      "{tmp}/u.npy"], "velocity shape"),
    (["--local-momentum", "0.9", "--velocity", "{tmp}/f64.npy", "--velocity-out",
      "{tmp}/u.npy"], "int32"),
    (["--local-momentum", "0.9", "--velocity-out", "{tmp}/r.npy"], "same file"),
])
def test_cli_step_velocity_errors(tmp_path, capsys, extra, message):
    np.save(tmp_path / "g.npy", np.ones((3, 2), np.float32))
    np.save(tmp_path / "bad.npy", np.zeros((2, 3), np.int32))
    np.save(tmp_path / "f64.npy", np.zeros((3, 2), np.float64))
    extra = [e.format(tmp=tmp_path) for e in extra]
    rc = _cli("step", tmp_path / "g.npy", "-", "--frame", tmp_path / "f.bin", "--residual-out",
              tmp_path / "r.npy", *extra)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2, err
    assert not (tmp_path / "u.npy").exists()
