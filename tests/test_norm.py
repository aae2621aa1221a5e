"""The L2 block norm (docs/spec.md §2.3): its definition held against Python integers, its bound,
bit-exactness of every numba and torch entry point against the numpy reference (hypothesis:
ties, |a| at QMAX, short last blocks, every block size's shift), the named error, golden
vectors that carry the norm kind (an older directory reads as L1), the CLI and the shim."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradblock.fastpath import fast, momentum_numba
from gradblock.refmodel import compress, momentum
from gradblock.refmodel.plan import message_plan
from gradblock.refmodel.quantiser import QMAX
from gradblock.refmodel.selection import block_layout, block_norms, norm_shift
from gradblock.refmodel.validation import MAX_BLOCK_SIZE, NormError, check_norm

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def python_norms(acc: np.ndarray, B: int, norm: str) -> list[int]:
    """The spec's formula in Python integers (no fixed width anywhere)."""
    flat = [abs(int(v)) for v in acc.reshape(-1)]
    s = (int(B).bit_length() >> 1) if norm == "l2" else None
    terms = flat if s is None else [(v >> s) ** 2 for v in flat]
    return [sum(terms[j:j + B]) for j in range(0, len(terms), B)]


def test_shift_and_bound_for_every_bit_length():
    """s = bit_length(B) >> 1 keeps B (QMAX >> s)^2 below 2^63 for the largest B of every bit
    length up to the limit, and one less shift would not (so it is the least shift that holds
    for every block size of that bit length)."""
    assert [norm_shift("l2", b) for b in (1, 2, 7, 8, 31, 32, 127, 128, 400, 511, 512, 2047,
                                          2048, 2**31 - 1, 2**31)] == \
        [0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 5, 5, 6, 15, 16]
    assert norm_shift("l2", MAX_BLOCK_SIZE) == 16 and norm_shift("l1", 7) == -1
    for L in range(1, 33):
        B = min(2**L - 1, MAX_BLOCK_SIZE)
        s = norm_shift("l2", B)
        assert B * (QMAX >> s) ** 2 < 2**63, L
        if L >= 2:
            assert B * (QMAX >> (s - 1)) ** 2 >= 2**63, L


def test_worked_example_of_the_spec():
    """docs/spec.md §2.3: B = 3, blocks (1000, -1000, 1000) and (2900, 0, 1)."""
    acc = np.array([[1000, -1000, 1000], [2900, 0, 1]], dtype=np.int32)
    lay = block_layout(acc.shape)
    assert block_norms(acc, lay, "l1").tolist() == [3000, 2901]
    assert block_norms(acc, lay, "l2").tolist() == [750000, 2102500]
    assert fast.block_norms(acc, lay, "l2").tolist() == [750000, 2102500]
    one = np.array([QMAX], dtype=np.int32)
    assert block_norms(one, block_layout((1,)), "l2").tolist() == [(2**31 - 1) ** 2]


def test_norms_near_two_to_the_63():
    """A block of 2047 elements at |a| = QMAX: 2047 (2^26 - 1)^2, within 0.05 % of 2^63, exact
    in numpy, numba and torch (and ranked as an unsigned value)."""
    torch = pytest.importorskip("torch", reason="the torch norms are part of the check")
    from gradblock.torchstep.selection import block_norms as t_norms
    acc = np.full((2, 2047), QMAX, dtype=np.int32)
    acc[1, 5] = -QMAX
    acc[0, 9] = QMAX - 32
    lay = block_layout(acc.shape)
    want = python_norms(acc, 2047, "l2")
    assert want[1] == 2047 * (2**26 - 1) ** 2 > 0.9995 * 2**63
    assert block_norms(acc, lay, "l2").tolist() == want
    assert fast.block_norms(acc, lay, "l2").tolist() == want
    assert t_norms(torch.from_numpy(acc), lay, "l2").tolist() == want
    assert fast.select_blocks(block_norms(acc, lay, "l2"), 1).tolist() == [1]


@st.composite
def layers(draw):
    """A gradient, a residual (with |values| at QMAX and ties among whole blocks likely), a
    block size override or None, and k."""
    shape = draw(st.sampled_from([(1,), (9,), (4, 5), (6, 2, 3), (3, 17), (2, 40), (5, 1)]))
    n = int(np.prod(shape))
    block = draw(st.none() | st.integers(1, n + 3))
    mags = st.sampled_from([0, 1, 2, 31, 32, 33, 2**16 - 1, 2**16, QMAX - 1, QMAX]) | \
        st.integers(0, QMAX)
    base = draw(st.lists(mags, min_size=1, max_size=4))
    vals = [base[i % len(base)] for i in range(n)] if draw(st.booleans()) else \
        draw(st.lists(mags, min_size=n, max_size=n))
    signs = draw(st.lists(st.sampled_from([-1, 1]), min_size=n, max_size=n))
    residual = (np.array(vals, dtype=np.int64) * signs).astype(np.int32).reshape(shape)
    scale = draw(st.sampled_from([0.0, 1e-6, 0.5, 20.0]))
    grad = (np.asarray(draw(st.lists(st.floats(-1, 1, width=32), min_size=n, max_size=n)),
                       dtype=np.float32) * np.float32(scale)).reshape(shape)
    k = draw(st.sampled_from([1, 2, 3, 0.5]))
    return grad, residual, block, k


@SETTINGS
@given(layer=layers())
def test_l2_reference_matches_python_integers_and_numba_and_momentum(layer):
    grad, residual, block, k = layer
    ref = compress.compress_layer(grad, residual, R=10.0, k=k, block_size=block, norm="l2")
    B = ref.layout.block_size
    assert ref.norms.tolist() == python_norms(ref.acc, B, "l2")
    got = fast.compress_layer(grad, residual, R=10.0, k=k, block_size=block, norm="l2")
    for name in ("norms", "selected", "payload", "residual_out", "frame"):
        assert np.array_equal(getattr(ref, name), getattr(got, name)), name
    # the lean in-place step and a one-layer message, one and two threads
    r = residual.copy().reshape(-1)
    out = np.zeros(fast.max_step_words(ref.layout.n, B, ref.k_eff), np.uint32)
    info = fast.compress_step(grad, r, 10.0, k, block, 0, 8, out, norm="l2")
    assert np.array_equal(out[:info.n_words], ref.frame)
    assert np.array_equal(r, ref.residual_out.reshape(-1))
    plan = message_plan([grad.shape], k, block, None, 8, "l2")
    for threads in (1, 2):
        r = residual.copy().reshape(-1)
        msg, _ = fast.compress_message(grad.reshape(-1), r, plan, 10.0, n_threads=threads,
                                       min_parallel=1)
        assert np.array_equal(msg, ref.frame) and np.array_equal(r, ref.residual_out.reshape(-1))
    m_ref = momentum.momentum_layer(grad, residual, residual // 3, 0.9, R=10.0, k=k,
                                    block_size=block, norm="l2")
    m_nb = momentum_numba.momentum_layer(grad, residual, residual // 3, 0.9, R=10.0, k=k,
                                         block_size=block, norm="l2")
    assert m_ref.norms.tolist() == python_norms(m_ref.acc, B, "l2")
    assert np.array_equal(m_ref.frame, m_nb.frame) and np.array_equal(m_ref.norms, m_nb.norms)


@SETTINGS
@given(layer=layers())
def test_l2_torch_layer_group_and_momentum(layer):
    torch = pytest.importorskip("torch", reason="the torch step is under test")
    from gradblock.torchstep import group as tg
    from gradblock.torchstep import layer as tl
    from gradblock.torchstep import momentum as tm
    grad, residual, block, k = layer
    ref = compress.compress_layer(grad, residual, R=10.0, k=k, block_size=block, norm="l2")
    g, r = torch.from_numpy(grad), torch.from_numpy(residual)
    got = tl.compress_layer(g, r, R=10.0, k=k, block_size=block, norm="l2")
    assert np.array_equal(got.frame.numpy().view(np.uint32), ref.frame)
    assert got.selected.tolist() == ref.selected.tolist()
    plan = tg.plan_group([grad.shape, (3, 4)], k=k, block_size=[block, None], R=10.0, norm="l2")
    other = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    step = tg.compress_group(plan, [g, torch.from_numpy(other)], [r, None], R=10.0)
    want = np.concatenate([ref.frame, compress.compress_layer(other, None, R=10.0, k=k,
                                                              layer_id=1, norm="l2").frame])
    assert np.array_equal(step.message.numpy().view(np.uint32), want)
    m_ref = momentum.momentum_layer(grad, residual, None, 0.9, R=10.0, k=k, block_size=block,
                                    norm="l2")
    m_t = tm.momentum_layer(g, r, None, 0.9, R=10.0, k=k, block_size=block, norm="l2")
    assert np.array_equal(m_t.frame.numpy().view(np.uint32), m_ref.frame)


def test_l1_and_l2_pick_different_blocks():
    """The option is live: a block of many medium values (L1's pick) against one with a single
    large value (L2's), in every backend."""
    g = np.zeros((2, 6), np.float32)
    g[0] = 1.0
    g[1, 0] = 4.0
    for step in (compress.compress_layer, fast.compress_layer):
        assert step(g, None, R=10.0, norm="l1").selected.tolist() == [0]
        assert step(g, None, R=10.0, norm="l2").selected.tolist() == [1]


@pytest.mark.parametrize("bad", ["L1", "l3", "", None, 2, b"l2"])
def test_bad_norm_is_a_named_error_everywhere(bad):
    g = np.ones((2, 3), np.float32)
    with pytest.raises(NormError, match="norm must be one of l1, l2"):
        check_norm(bad)
    for call in (lambda: compress.compress_layer(g, norm=bad),
                 lambda: fast.compress_layer(g, norm=bad),
                 lambda: message_plan([(2, 3)], norm=bad),
                 lambda: message_plan([], norm=bad),
                 lambda: momentum.momentum_layer(g, None, None, 0.9, norm=bad),
                 lambda: momentum_numba.momentum_layer(g, None, None, 0.9, norm=bad)):
        with pytest.raises(NormError):
            call()


def test_golden_cases_carry_the_norm_and_old_ones_read_as_l1(tmp_path):
    """A case entry's "norm" is validated; one without it (an older directory) is an L1 case,
    so it loads and the reference check recomputes it with L1."""
    from gradblock.golden.cases import l2_specs
    from gradblock.golden.check import check_golden
    from gradblock.golden.compute import compute_case
    from gradblock.golden.format import GoldenError, load_golden, write_golden
    specs = [s for s in l2_specs(0) if s.name in ("l2_differs_from_l1", "l2_tie_break_k4")]
    l1 = specs[0].__class__(**{**specs[0].__dict__, "name": "as_l1", "norm": "l1",
                               "expect_selected": ()})
    cases = [compute_case(s, compress.compress_layer) for s in specs + [l1]]
    assert [m["norm"] for m, _ in cases] == ["l2", "l2", "l1"]
    assert cases[0][1]["selected"].tolist()[0] == 5 and cases[2][1]["selected"].tolist()[0] == 2
    out = tmp_path / "g"
    write_golden(out, {"generator": "gradblock test", "seed": 0}, iter(cases), iter(()))
    assert all(r.ok for r in check_golden(out))
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["cases"][2]["norm"]                 # written before the option existed
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert all(r.ok for r in check_golden(out))
    manifest["cases"][0]["norm"] = "l1"              # an L2 case read as L1 no longer checks
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert not check_golden(out)[0].ok
    manifest["cases"][0]["norm"] = "L2"
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(GoldenError, match="norm"):
        load_golden(out)


def test_cli_step_norm(tmp_path):
    g = np.zeros((2, 6), np.float32)
    g[0] = 1.0
    g[1, 0] = 4.0
    np.save(tmp_path / "g.npy", g)
    run = [sys.executable, "-m", "gradblock.cli", "step", str(tmp_path / "g.npy"), "-",
           "--frame", str(tmp_path / "f.bin"), "--residual-out", str(tmp_path / "r.npy")]
    ok = subprocess.run(run + ["--norm", "l2"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "selected blocks (rank order): 1 (L2 " in ok.stdout
    frame = np.fromfile(tmp_path / "f.bin", dtype="<u4")
    assert np.array_equal(frame, compress.compress_layer(g, norm="l2").frame)
    bad = subprocess.run(run + ["--norm", "l3"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert "NormError: --norm: norm must be one of l1, l2, got 'l3'" in bad.stderr


def test_shim_coarse_compressor_carries_the_norm():
    """The coarse compressor ranks by the configured norm (its frames are the reference's) and
    its config, which checkpoints compare, names an L2 norm; an L1 config stays as before, so
    an older checkpoint resumes as L1."""
    torch = pytest.importorskip("torch", reason="the shim is torch")
    from gradblock.shim.compress.compressors import LayerInfo, WorkerState, build_compressor
    from gradblock.shim.setup.config import TrainConfig
    layers = [LayerInfo(0, "w", (2, 6))]
    g = np.zeros((2, 6), np.float32)
    g[0] = 1.0
    g[1, 0] = 4.0
    for norm in ("l1", "l2"):
        for host_fast in (True, False):            # the numba host path and the torch group
            for m in (0.0, 0.9):                   # with momentum correction too
                c = build_compressor("coarse", layers, 1, norm=norm, local_momentum=m)
                c.host_fast = host_fast
                assert ("norm" in c.config()) == (norm == "l2")
                (frame, _), = c.encode_many(layers, [torch.from_numpy(g)], WorkerState())
                want = compress.compress_layer(g, norm=norm, R=c.cfg.range,
                                               lmax_log2=c.lmax_log2)
                assert np.array_equal(frame.numpy().view(np.uint32), want.frame), \
                    (norm, host_fast, m)
    with pytest.raises(NormError):
        build_compressor("coarse", layers, 1, norm="l3")
    assert "norm" not in TrainConfig().run_config()
    assert TrainConfig(norm="l2").run_config()["norm"] == "l2"
    with pytest.raises(NormError, match="norm"):        # the contract's check, as everywhere
        TrainConfig(norm="L2").check()
