"""Edge-case vectors for the datapath RTL, written in the golden-vector format with the numpy
reference (refmodel/, codec/zrle.py).

`gradblock golden` writes the shared golden set; this module adds the corners the datapath RTL
needs beyond it: every float32 class through the quantiser (NaN included, which the software
refuses), unusual ranges R (so k is large, small or negative), residuals at the int32 limits,
blocks that do not divide n, norm ties, k above the block count, and LMAX splits. They are
written through the same format module as the shared set (gradblock.golden.format:
npz, hex files, checksummed manifest), so they pass `gradblock golden --check` like any other,
and the cocotb testbenches read either directory the same way (format.load_golden).

    write_cases(directory, "edge")   # small corner cases, seconds on any simulator
    write_cases(directory, "layer")  # a real conv layer size (36864 elements)
    write_cases(directory, "sweep")  # random bit patterns through the quantiser, five ranges
"""
from __future__ import annotations

import numpy as np

from gradblock.codec.zrle import encode_frame
from gradblock.golden.format import QUANTISER_ARRAYS, QUANTISER_ONLY, write_golden
from gradblock.refmodel.quantiser import QMAX, QuantConfig, quantise
from gradblock.refmodel.selection import (apply_selection, block_layout, block_norms, error_feedback,
                                resolve_k, select_blocks)

GENERATOR = "gradblock.golden.datapath"
ALL_STAGES = ["quantiser", "feedback", "norms", "select", "encode", "top"]


def _f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def _bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.uint32).view(np.float32)


def quantise_with_nan(grad: np.ndarray, cfg: QuantConfig):
    """The RTL quantiser's view: NaN gives code 0 and a nan flag (the reference raises)."""
    flat = grad.reshape(-1)
    bits = flat.view(np.uint32)
    nan = np.isnan(flat)
    q = quantise(np.where(nan, np.float32(0), flat), cfg).q.astype(np.int32)
    sat = ((bits & np.uint32(0x7FFFFFFF)) > np.uint32(cfg.range_bits)) & ~nan
    return q, sat.astype(np.uint8), nan.astype(np.uint8)


def make_case(name: str, grad: np.ndarray, residual: np.ndarray | None = None, *, R: float = 10.0,
              block_size: int | None = None, k: int | float = 1, layer_id: int = 0,
              lmax_log2: int = 8, stages=None, description: str = "") -> tuple[dict, dict]:
    """(manifest entry, arrays) for one layer, every intermediate from the numpy reference."""
    grad = np.asarray(grad, dtype=np.float32)
    shape = grad.shape
    n = grad.size
    residual = (np.zeros(n, dtype=np.int32) if residual is None
                else np.asarray(residual, dtype=np.int32).reshape(-1))
    if residual.size != n:
        raise ValueError(f"case {name}: residual has {residual.size} elements, gradient {n}")
    cfg = QuantConfig.from_range(R)
    q, qsat, qnan = quantise_with_nan(grad, cfg)
    if not qnan.any():   # the plain reference must agree wherever it is defined
        ref = quantise(grad.reshape(-1), cfg)
        assert np.array_equal(ref.q, q) and ref.saturated == int(qsat.sum())
    acc, sat_fb = error_feedback(residual, q)
    layout = block_layout(shape, block_size)
    norms = block_norms(acc, layout)
    k_eff = resolve_k(k, layout.n_blocks)
    selected = select_blocks(norms, k_eff)
    payload, residual_out = apply_selection(acc, selected, layout)
    frame = encode_frame(payload, layer_id, cfg.range, lmax_log2)
    feedback_sat = (np.abs(residual.astype(np.int64) + q.astype(np.int64)) > QMAX).astype(np.uint8)
    arrays = {
        "grad_bits": grad.reshape(-1).view(np.uint32).copy(), "residual_in": residual,
        "quantised": q, "quant_sat": qsat, "quant_nan": qnan, "accumulated": acc,
        "feedback_sat": feedback_sat, "block_norms": norms.astype(np.uint64),
        "selected": selected.astype(np.int64), "payload": payload.reshape(-1),
        "residual_out": residual_out.reshape(-1), "frame": frame.astype(np.uint32),
    }
    meta = {
        "name": name, "kind": "synthetic", "description": description,
        "stages": list(stages or ALL_STAGES), "shape": list(shape), "n": n,
        "layer_id": layer_id, "range": cfg.range, "range_bits": cfg.range_bits, "M": cfg.M,
        "k_shift": cfg.k, "lmax_log2": lmax_log2, "block_size": layout.block_size,
        "n_blocks": layout.n_blocks, "k_req": k, "k_eff": k_eff, "sat_quant": int(qsat.sum()),
        "sat_feedback": int(sat_fb), "frame_words": int(frame.size),
    }
    if tuple(meta["stages"]) == QUANTISER_ONLY:
        # a quantiser-only case carries the quantiser's arrays only: the later stages of a
        # NaN input have no reference value
        meta.update(k_eff=None, sat_feedback=None, frame_words=None)
        arrays = {k: arrays[k] for k in QUANTISER_ARRAYS}
    return meta, arrays


def _special_floats() -> np.ndarray:
    """Every float32 class and the rounding corners of docs/spec.md §6 (R = 10)."""
    bits = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000,
            0x41200000, 0xC1200000, 0x41200001, 0xC1200001, 0x411FFFFF, 0x40A00000,
            0x3A83126F, 0xBA83126F, 0x7F800000, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF,
            0x3F800000, 0xBF800000, 0x33D6BF95, 0x2F800000, 0x30000000, 0x30800000]
    # exact halves for M = 0xCCCCCCCC, k = 4: Q(2) = rhe(M / 8) = rhe(429496729.5) rounds up
    # to even, Q(6) = rhe(3M / 8) = rhe(1288490188.5) stays on the even value
    halves = [2.0, -2.0, 6.0, -6.0]
    return np.concatenate([_bits(bits), _f32(halves)])


def edge_cases(rng: np.random.Generator) -> list[tuple[dict, dict]]:
    cases = []
    special = _special_floats()
    cases.append(make_case(
        "dp_special_floats", special, rng.integers(-2**20, 2**20, special.size, dtype=np.int32),
        block_size=5, k=2, layer_id=7,
        description="zeros, subnormals, normals, +-R, +-R next ulp, +-Inf, max float, ties"))

    raw = rng.integers(0, 2**32, 192, dtype=np.uint64).astype(np.uint32)
    raw[((raw >> 23) & 0xFF) == 0xFF] &= np.uint32(0xFF7FFFFF)          # no NaN here
    resid = rng.integers(-2**31, 2**31, raw.size, dtype=np.int64).astype(np.int32)
    cases.append(make_case("dp_random_bits", _bits(raw), resid, block_size=24, k=3, layer_id=1,
                           description="random float32 bit patterns, full-range residuals"))

    nan_bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7FBFFFFF], np.uint32)
    mixed = np.concatenate([_bits(nan_bits), rng.normal(0, 3, 11).astype(np.float32)])
    rng.shuffle(mixed)
    cases.append(make_case("dp_nan", mixed, stages=["quantiser"],
                           description="NaNs (code 0, nan flag) among normal values"))

    for label, R, scale in (("small", 1e-3, 2e-3), ("huge", 3.0e38, 1e38), ("tiny", 1e-40, 1e-40),
                            ("one", 1.0, 1.0)):
        g = (rng.standard_normal(64) * scale).astype(np.float32)
        cases.append(make_case(f"dp_range_{label}", g, R=R, block_size=16, k=2, layer_id=3,
                               description=f"R = {R}: M, k far from the default"))

    n = 96
    g = rng.choice(_f32([10.0, -10.0, 9.99, -9.99, 20.0, -1e30, 0.0, 1e-3]), n).astype(np.float32)
    edges = np.array([QMAX, -QMAX, -2**31, QMAX - 1, 2**30, -2**30, 0, 1], dtype=np.int64)
    r = rng.choice(edges, n).astype(np.int32)
    cases.append(make_case("dp_feedback_limits", g, r, block_size=12, k=2, layer_id=4,
                           description="residuals at the int32 limits: feedback saturation"))

    # r + q exactly at the clamp's edges: +-QMAX and one past (+-2^31), one inside, and the
    # widest sums both ways (q = +-QMAX from g = +-R, 0 from g = 0)
    qv = {"p": 10.0, "m": -10.0, "z": 0.0}
    pairs = [("p", 1), ("p", 0), ("p", -1), ("p", 2), ("m", -1), ("m", 0), ("m", 1), ("m", -2),
             ("z", QMAX), ("z", -QMAX), ("z", -2**31), ("p", QMAX), ("m", -2**31), ("p", -2**31),
             ("m", QMAX), ("z", 0)]
    g = _f32([qv[a] for a, _ in pairs])
    r = np.array([b for _, b in pairs], dtype=np.int64).astype(np.int32)
    cases.append(make_case("dp_feedback_edges", g, r, block_size=4, k=2, layer_id=4,
                           description="r + q at +-QMAX, +-2^31 and the widest sums"))

    g = rng.standard_normal((7, 13)).astype(np.float32)
    for label, bs, k in (("short_tail", 10, 3), ("one", 1, 5), ("over_n", 1000, 1),
                         ("k_over", 40, 9)):
        cases.append(make_case(f"dp_blocks_{label}", g, block_size=bs, k=k, layer_id=5,
                               description=f"91 elements, block_size {bs}, k {k}"))

    # equal norms in every block, and equal norms in a shuffled order: ties to the lower index
    base = _f32([1.0, -2.0, 0.5, 0.0])
    tie = np.tile(base, 12)
    cases.append(make_case("dp_ties_all", tie, block_size=4, k=5, layer_id=6,
                           description="12 blocks, all norms equal"))
    tie2 = np.concatenate([np.tile(base, 3), np.tile(base * 2, 2), np.tile(base, 3),
                           np.tile(base * 2, 2)])
    cases.append(make_case("dp_ties_mixed", tie2, block_size=8, k=4, layer_id=6,
                           description="two norm levels, each repeated"))

    cases.append(make_case("dp_all_zero", np.zeros(37, np.float32), block_size=8, k=2,
                           description="all-zero layer: one (n, 0) token"))
    cases.append(make_case("dp_single", _f32([-3.25]), k=1, description="n = 1"))
    dense = rng.uniform(0.1, 9, 70).astype(np.float32) * rng.choice([-1, 1], 70).astype(np.float32)
    cases.append(make_case("dp_dense_lmax2", dense, block_size=10, k=4, lmax_log2=2,
                           description="dense payload split at LMAX = 4"))
    return cases


def layer_cases(rng: np.random.Generator) -> list[tuple[dict, dict]]:
    """A real conv layer size (64x64x3x3 = 36864) with gradient-like values and a residual."""
    shape = (64, 64, 3, 3)
    scale = np.exp(rng.normal(-6, 1.5, (shape[0], 1, 1, 1)))         # per-filter magnitude
    g = (rng.standard_normal(shape) * scale).astype(np.float32)
    r = rng.integers(-2**24, 2**24, g.size, dtype=np.int32)
    return [make_case("dp_conv64", g, r, R=0.5, k=6, layer_id=11,
                      description="64x64x3x3 conv layer, per-filter scales, nonzero residual")]


def sweep_cases(rng: np.random.Generator) -> list[tuple[dict, dict]]:
    """Quantiser-only sweeps: 4096 uniformly random float32 bit patterns (every exponent, NaN
    and Inf included) per range R, R chosen so that k is small, large and negative."""
    cases = []
    for label, R in (("r10", 10.0), ("r1e-3", 1e-3), ("r3e38", 3.0e38), ("r1e-40", 1e-40),
                     ("r0p75", 0.75)):
        bits = rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)
        cases.append(make_case(f"dp_sweep_{label}", bits.view(np.float32), R=R,
                               stages=["quantiser"],
                               description=f"4096 random float32 bit patterns, R = {R}"))
    return cases


KINDS = {"edge": edge_cases, "layer": layer_cases, "sweep": sweep_cases}


def write_cases(directory, kind: str = "edge", seed: int = 12345) -> list[str]:
    """Write one kind of case as a golden directory (format.write_golden: staged beside
    `directory`, then swapped in); return the case names."""
    if kind not in KINDS:
        raise ValueError(f"case kind must be one of {sorted(KINDS)}, got {kind!r}")
    manifest = write_golden(directory, {"generator": f"{GENERATOR} ({kind}, seed {seed})",
                                        "seed": seed},
                            KINDS[kind](np.random.default_rng(seed)))
    return [m["name"] for m in manifest["cases"]]
