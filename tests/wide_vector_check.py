"""Run by tests/test_wide_vectors.py in a child process whose NUMBA_CPU_FEATURES asks for
512-bit vectors: every lean numba entry point (compress_message, compress_step,
compress_layers; 1 and 2 threads) and the numba ZRLE decoder against the numpy reference, on
real ResNet-20 gradients (step 2, so the residual is nonzero) and on seeded random layouts
(block sizes 1, small, larger than an undo unit; saturating residuals; special floats; NaNs).

Exits 0 and prints one JSON line of counts; any difference raises (exit 1, the traceback on
stderr). Not a test module itself: it must not share the parent's numba configuration.
"""
from __future__ import annotations

import json
import math
import sys

import numba
import numpy as np

from gradblock.codec import zrle_numba
from gradblock.codec.zrle import DEFAULT_LMAX_LOG2
from gradblock.fastpath import fast
from gradblock.refmodel import compress
from gradblock.refmodel.plan import UNDO_UNIT
from gradblock.refmodel.quantiser import QMAX, NonFiniteError
from gradblock.fastpath.vector_width import WIDE_TUNING

R_VALUES = [10.0, 1.0, 1e-3, 0.05, 3e38, float(QMAX)]
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 1.17549435e-38, 3.4e38, -3.4e38,
                     10.0, -10.0, 5.0, -2.5], dtype=np.float32)


def check_wide_codegen() -> None:
    """numba really compiles 512-bit code in this process (an uncached probe)."""
    if WIDE_TUNING not in (numba.config.CPU_FEATURES or "").split(","):
        raise AssertionError(f"numba.config.CPU_FEATURES lacks {WIDE_TUNING}")

    @numba.njit(cache=False)
    def probe(a, b):
        for i in range(a.size):
            a[i] = (a[i] * b[i]) >> 3
    probe(np.ones(64, np.int64), np.ones(64, np.int64))
    asm = next(iter(probe.inspect_asm().values()))
    if "zmm" not in asm:
        raise AssertionError("the probe loop was not vectorised with 512-bit registers")


def compare_all(grads, residuals, R, k, block_size, label) -> int:
    """Every lean entry point against the reference on one message; returns the layers run."""
    shapes = [g.shape for g in grads]
    ref = [compress.compress_layer(g, r, R=R, k=k, block_size=block_size[i], layer_id=i)
           for i, (g, r) in enumerate(zip(grads, residuals))]
    want_msg = np.concatenate([s.frame for s in ref]) if ref else np.zeros(0, np.uint32)
    want_res = [s.residual_out.reshape(-1) for s in ref]

    plan = fast.message_plan(shapes, k=k, block_size=block_size)
    flat_g = np.concatenate([g.reshape(-1) for g in grads])
    for threads in (1, 2):
        flat_r = np.concatenate([r.reshape(-1) for r in residuals])
        msg, info = fast.compress_message(flat_g, flat_r, plan, R, n_threads=threads,
                                          min_parallel=0)
        expect(np.array_equal(msg, want_msg), f"{label}: compress_message x{threads} frames")
        expect(np.array_equal(flat_r, np.concatenate(want_res) if want_res else flat_r),
               f"{label}: compress_message x{threads} residuals")
        expect(list(info.sat_quant) == [s.sat_quant for s in ref] and
               list(info.sat_feedback) == [s.sat_feedback for s in ref],
               f"{label}: compress_message x{threads} saturation counts")
        rs = [r.copy() for r in residuals]
        msg, _ = fast.compress_layers(grads, rs, R=R, k=k, block_size=block_size,
                                      n_threads=threads, min_parallel=0 if threads > 1 else 1 << 21)
        expect(np.array_equal(msg, want_msg), f"{label}: compress_layers x{threads} frames")
        expect(all(np.array_equal(a.reshape(-1), b) for a, b in zip(rs, want_res)),
               f"{label}: compress_layers x{threads} residuals")
    for i, (g, r, s) in enumerate(zip(grads, residuals, ref)):
        for parallel in (False, 2):
            rr = r.copy()
            out = np.zeros(fast.max_step_words(s.layout.n, s.layout.block_size, s.k_eff) + 1,
                           np.uint32)
            info = fast.compress_step(g, rr, R, k, block_size[i], i, DEFAULT_LMAX_LOG2, out, 1,
                                     parallel=parallel)
            expect(np.array_equal(out[1:1 + info.n_words], s.frame) and
                   np.array_equal(rr.reshape(-1), want_res[i]),
                   f"{label}: compress_step layer {i} parallel={parallel}")
    if ref:
        frames = zrle_numba.decode_message(want_msg, [g.size for g in grads])
        expect(all(np.array_equal(f.values, s.payload.reshape(-1)) for f, s in zip(frames, ref)),
               f"{label}: numba decode_message payloads")
    return len(grads)


def check_nan(grads, residuals, R, k, block_size, label) -> None:
    """A NaN in the last layer: the reference's error class and index, nothing modified."""
    grads = [g.copy() for g in grads]
    last = grads[-1].reshape(-1)
    at = last.size - 1 - last.size // 3
    last[at] = np.nan
    with_nan = np.isnan(last)
    plan = fast.message_plan([g.shape for g in grads], k=k, block_size=block_size)
    flat_g = np.concatenate([g.reshape(-1) for g in grads])
    for threads in (1, 2):
        flat_r = np.concatenate([r.reshape(-1) for r in residuals])
        keep = flat_r.copy()
        try:
            fast.compress_message(flat_g, flat_r, plan, R, n_threads=threads, min_parallel=0)
        except NonFiniteError as e:
            expect(e.first_index == int(np.argmax(with_nan)) and
                   f"layer {len(grads) - 1}" in str(e), f"{label}: NaN error {e}")
        else:
            raise AssertionError(f"{label}: no NonFiniteError for a NaN")
        expect(np.array_equal(flat_r, keep), f"{label}: residual touched by a NaN step x{threads}")


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(f"differs from the reference: {what}")


def random_layout(rng):
    """(grads, residuals, R, k, block sizes) of a random message: 1-6 layers of 0-3 dims."""
    count = int(rng.integers(1, 7))
    shapes, blocks = [], []
    for _ in range(count):
        kind = rng.integers(0, 5)
        if kind == 0:                                   # blocks of one element
            shapes.append((int(rng.integers(1, 300)),))
            blocks.append(1)
        elif kind == 1:                                 # blocks larger than an undo unit
            shapes.append((int(rng.integers(1, 4)), UNDO_UNIT + int(rng.integers(1, 900))))
            blocks.append(None)
        else:
            nd = int(rng.integers(1, 4))
            shapes.append(tuple(int(d) for d in rng.integers(1, 24, nd)))
            blocks.append(None if rng.random() < 0.6 else int(rng.integers(1, 40)))
    R = float(rng.choice(R_VALUES))
    k = int(rng.integers(1, 6)) if rng.random() < 0.5 else float(rng.uniform(0.01, 0.9))
    grads, residuals = [], []
    for s in shapes:
        n = math.prod(s)
        scale = R * float(rng.choice([1e-6, 0.01, 0.3, 1.0, 4.0]))
        with np.errstate(over="ignore"):
            g = (rng.standard_normal(n) * scale).astype(np.float32)
        if rng.random() < 0.5:
            at = rng.integers(0, n, max(1, n // 8))
            g[at] = rng.choice(SPECIALS, at.size)
        if rng.random() < 0.3:                          # raw bit patterns, NaNs made zero
            bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
            g = bits.view(np.float32).copy()
            g[np.isnan(g)] = 0
        if rng.random() < 0.5:
            r = rng.choice(np.array([QMAX, -QMAX, QMAX - 3, -QMAX + 3, 0, 1], np.int32), n)
        else:
            r = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
        grads.append(g.reshape(s))
        residuals.append(r.reshape(s))
    return grads, residuals, R, k, blocks


def real_case():
    """ResNet-20's gradients (real when torch and Fashion-MNIST are present) and the
    residual its step 1 leaves."""
    from gradblock.bench.gradients import make_workload
    w = make_workload("resnet20")
    step1 = [compress.compress_layer(g, None, R=10.0, k=0.01, layer_id=i)
             for i, g in enumerate(w.grads)]
    return w, [s.residual_out for s in step1]


def main() -> int:
    cases = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    check_wide_codegen()
    w, residuals = real_case()
    blocks = [None] * len(w.grads)
    layers = compare_all(w.grads, residuals, 10.0, 0.01, blocks, "resnet20")
    check_nan(w.grads, residuals, 10.0, 0.01, blocks, "resnet20")
    rng = np.random.default_rng(1212)
    for c in range(cases):
        grads, res, R, k, bs = random_layout(rng)
        layers += compare_all(grads, res, R, k, bs, f"random case {c}")
        if c % 4 == 0:
            check_nan(grads, res, R, k, bs, f"random case {c}")
    print(json.dumps({"gradients": w.source, "random_cases": cases, "layers": layers,
                      "cpu_features_tail": numba.config.CPU_FEATURES.split(",")[-1]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
