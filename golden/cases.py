"""The golden case catalogue: what each case is built to exercise (docs/golden.md).

Synthetic cases are built from a seed (ties, saturation, LMAX splits, special floats, ranges, a
NaN quantiser-only case, multi-step residuals); real cases are layers of a small CNN captured
during a few training steps: they need the trained models, so gradblock.realgrads (above the
golden package) builds them as CaseSpecs and hands them to the generator. Each case is a
CaseSpec; gradblock.golden.compute turns specs into arrays and gradblock.golden.format writes
them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gradblock.codec import zrle
from gradblock.golden.format import ALL_STAGES, MOMENTUM_STAGE, QUANTISER_ONLY
from gradblock.refmodel.momentum import MomentumConfig
from gradblock.refmodel.quantiser import QMAX

# a momentum case streams through the velocity stage and everything after error feedback
# (compress_top has no velocity input, the feedback stage adds Q(g), not u')
MOMENTUM_STAGES = (MOMENTUM_STAGE, "norms", "select", "encode", "decode")


@dataclass
class CaseSpec:
    """What to compute: a gradient (float32, or uint32 bits), a residual, the parameters."""

    name: str
    description: str
    grad: np.ndarray
    residual: np.ndarray | None = None      # None: zeros, or the residual_from case's output
    R: float = 10.0
    k: int | float = 1
    block_size: int | None = None
    layer_id: int = 0
    lmax_log2: int = zrle.DEFAULT_LMAX_LOG2
    kind: str = "synthetic"
    stages: tuple[str, ...] = ALL_STAGES
    residual_from: str | None = None
    source: dict = field(default_factory=dict)
    expect_selected: tuple[int, ...] = ()   # the selection's leading blocks, as described
    expect_k_eff: int | None = None
    # momentum correction (docs/spec.md §7): m_fix set makes the case a momentum_layer step;
    # residual_from then carries the velocity too
    m_fix: int | None = None
    velocity: np.ndarray | None = None      # None: zeros, or the residual_from case's output
    momentum_mask: bool = True
    norm: str = "l1"                        # block norm kind, docs/spec.md §2.3

    def grad_f32(self) -> np.ndarray:
        g = np.asarray(self.grad)
        return g.view(np.float32) if g.dtype == np.uint32 else g.astype(np.float32)


def _bits(*words) -> np.ndarray:
    return np.array(words, dtype=np.uint32).view(np.float32)


def _with_norm_ties(rng, n_blocks: int, block: int, groups: list[tuple[list[int], float]],
                    base_scale: float) -> np.ndarray:
    """Blocks whose |values| are permutations (random signs) of one base block scaled per
    group, so blocks of a group have exactly equal L1 norms after quantisation."""
    base = rng.uniform(0.05, 1.0, block).astype(np.float32)
    out = np.empty((n_blocks, block), np.float32)
    scale_of = np.full(n_blocks, np.float32(base_scale), np.float32)
    for members, scale in groups:
        scale_of[members] = np.float32(scale)
    for b in range(n_blocks):
        vals = rng.permutation(base) * scale_of[b]
        out[b] = np.where(rng.random(block) < 0.5, -vals, vals)
    return out


def _runs_payload(n: int, runs: list[tuple[int, int]], rng) -> np.ndarray:
    """A float32 vector that is zero except for nonzero runs (start, length)."""
    g = np.zeros(n, np.float32)
    for start, length in runs:
        mag = rng.uniform(0.01, 5.0, length).astype(np.float32)
        g[start:start + length] = np.where(rng.random(length) < 0.5, -mag, mag)
    return g


def synthetic_specs(seed: int) -> list[CaseSpec]:
    rng = np.random.default_rng(seed)
    specs = []

    # --- selection ties: equal norms resolved to the lower block index
    g = _with_norm_ties(rng, 64, 27, [([5, 17, 40], 2.0)], 1.0)
    specs.append(CaseSpec("tie_break_k1", "blocks 5, 17, 40 share the largest L1 norm; k = 1 "
                          "selects block 5", g.reshape(64, 3, 3, 3), k=1, expect_selected=(5,)))
    g = _with_norm_ties(rng, 48, 12, [([9, 3], 3.0), ([33, 1, 20], 2.0)], 1.0)
    specs.append(CaseSpec("tie_break_k4", "two blocks tie for the largest norm and three tie "
                          "for the next across the k = 4 cut: selects 3, 9, 1, 20",
                          g.reshape(48, 12), k=4, expect_selected=(3, 9, 1, 20)))
    g = _with_norm_ties(rng, 16, 12, [], 1.0)
    specs.append(CaseSpec("tie_all_equal", "all 16 blocks have equal norms; k = 5 selects "
                          "blocks 0..4", g, k=5, expect_selected=(0, 1, 2, 3, 4)))

    # --- quantiser saturation and infinities (R = 10)
    R = np.float32(10.0)
    edge = np.array([R, -R, np.nextafter(R, np.float32(np.inf)), -np.nextafter(R, np.float32(0)),
                     np.nextafter(R, np.float32(0)), 2 * R, -2 * R, np.inf, -np.inf,
                     np.float32(3e38), np.float32(-3e38), np.float32(1e20)], np.float32)
    g = rng.normal(0, 6.0, 8 * 32).astype(np.float32)
    g[rng.choice(g.size, edge.size, replace=False)] = edge
    specs.append(CaseSpec("quant_saturation_inf", "|x| > R, x = ±R, next floats around R, "
                          "±Inf and huge finite values mixed with N(0, 6) at R = 10",
                          g.reshape(8, 32), k=2))

    # --- error-feedback saturation: residuals near ±QMAX pushed past it
    g = rng.uniform(-10.0, 10.0, (16, 16)).astype(np.float32)
    r = rng.integers(-1000, 1000, (16, 16)).astype(np.int64)
    r[::2] += QMAX - 500_000_000
    r[1::2] -= QMAX - 500_000_000
    r[0, :4] = [QMAX, -QMAX, QMAX, -QMAX]
    g[0, :4] = [np.float32(1e-6), np.float32(-1e-6), np.float32(-1e-6), np.float32(1e-6)]
    specs.append(CaseSpec("feedback_saturation", "residuals within 5e8 of ±QMAX plus large "
                          "gradients: r + Q(g) leaves the int32 range in both directions",
                          g, np.clip(r, -QMAX, QMAX).astype(np.int32), k=3))

    # --- degenerate layers
    z = np.zeros((32, 9), np.float32)
    z[::3] = np.float32(-0.0)
    specs.append(CaseSpec("all_zero", "all ±0 gradient and zero residual: one (n, 0) token; "
                          "k = 1 selects block 0 (all norms tie at 0)", z, expect_selected=(0,)))
    specs.append(CaseSpec("one_element", "a single element (1-D, one block of 1)",
                          np.array([3.25], np.float32)))

    # --- literal runs around LMAX (k = all blocks, so the payload is the accumulated value)
    for lmax_log2, n, runs, note in (
            (2, 64, [(0, 4), (6, 5), (13, 8), (23, 9), (34, 1), (36, 3), (41, 4)],
             "runs of LMAX = 4, 5, 8, 9, 1, 3 and 4; starts nonzero, ends in zeros"),
            (3, 96, [(0, 8), (10, 9), (21, 16), (40, 17), (60, 1), (80, 16)],
             "runs of LMAX = 8, 9, 16, 17, 1, and a final run of exactly 2 LMAX with no zeros "
             "after it"),
            (8, 1280, [(0, 256), (300, 257), (600, 512), (1200, 1), (1203, 77)],
             "default LMAX = 256: runs of 256, 257, 512, 1, 77")):
        g = _runs_payload(n, runs, rng).reshape(-1, 16)
        specs.append(CaseSpec(f"lmax{lmax_log2}_runs", f"lmax_log2 = {lmax_log2}: {note}", g,
                              k=g.shape[0], lmax_log2=lmax_log2))
    g = _runs_payload(48, [(40, 8)], rng)
    g[:40] = 0
    specs.append(CaseSpec("lmax3_ends_on_full_run", "lmax_log2 = 3: 40 zeros then exactly "
                          "LMAX nonzeros, the last token has L = LMAX and no trailing zeros",
                          g, k=48, lmax_log2=3))

    # --- special float classes and exact rounding ties (R = 10: M = 0xCCCCCCCC, k = 4)
    lsb = np.float32(10.0 / QMAX)
    special = np.concatenate([
        _bits(0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF,
              0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3A83126F, 0x40A00000),
        np.array([2.0, -2.0, 6.0, -6.0, 4.0, 0.5 * lsb, 1.5 * lsb, 2.5 * lsb, lsb, -lsb],
                 np.float32),
        (rng.uniform(0, 3, 38) * lsb).astype(np.float32)])
    specs.append(CaseSpec("special_floats", "±0, ±smallest and ±largest subnormal, ±smallest "
                          "normal, ±max finite, exact half-LSB ties (2.0 rounds up to even, "
                          "6.0 down), values within a few LSB of 0", special.reshape(6, 10),
                          k=3))

    # --- block-size override with a short last block
    g = rng.normal(0, 1, 100).astype(np.float32)
    g[98:] = np.float32(9.0)
    specs.append(CaseSpec("short_last_block", "10x10 with block_size 7: 15 blocks, the last "
                          "holds 2 elements and has the largest norm", g.reshape(10, 10), k=3,
                          block_size=7, expect_selected=(14,)))
    g = rng.normal(0, 1, 50).astype(np.float32)
    specs.append(CaseSpec("short_last_block_1d", "1-D of 50 with block_size 8: 7 blocks, the "
                          "last holds 2", g, k=2, block_size=8))

    # --- k as a fraction
    specs.append(CaseSpec("k_fraction", "k = 0.1 of 40 blocks -> 4", rng.normal(0, 1, (40, 5))
                          .astype(np.float32), k=0.1, expect_k_eff=4))
    specs.append(CaseSpec("k_fraction_float_product", "k = 0.07 of 100 blocks: 0.07 * 100 = "
                          "7.000000000000001 in float64, so k_eff = ceil(...) = 8",
                          rng.normal(0, 1, (100, 4)).astype(np.float32), k=0.07,
                          expect_k_eff=8))

    # --- other ranges (M, k change with R)
    for name, R, scale, note in (
            ("range_1", 1.0, 0.4, "R = 1"),
            ("range_0p01", 0.01, 0.004, "R = 0.01 (not exact in float32)"),
            ("range_pow2", 0.25, 0.1, "R = 0.25, a power of two: M = 2^32 - 2"),
            ("range_huge", 1e30, 1e22, "R = 1e30: shifts t >= 58 round small values to 0"),
            ("range_tiny", 1e-30, 1e-30, "R = 1e-30: k < 0, shifts t <= 0 saturate")):
        g = rng.normal(0, scale, (24, 2, 2, 2)).astype(np.float32)
        g.reshape(-1)[:4] = [np.float32(R), np.float32(-R), np.float32(scale * 0.01),
                             _bits(0x00000003)[0]]
        specs.append(CaseSpec(name, note, g, rng.integers(-2**20, 2**20, g.shape).astype(
            np.int32), R=R, k=0.25, layer_id=3))

    # --- NaN: quantiser only (the software raises; the RTL outputs 0 with its nan flag)
    g = rng.normal(0, 3, 64).astype(np.float32)
    nan_bits = [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7FBFFFFF]
    g[[3, 10, 11, 40, 63]] = _bits(*nan_bits)
    g[[5, 6]] = [np.inf, -np.inf]
    g[7] = np.float32(12.0)
    specs.append(CaseSpec("nan_quantiser_only", "quiet and signalling NaNs of both signs next "
                          "to ±Inf and |x| > R: code 0 with the nan flag, not counted saturated",
                          g.reshape(4, 16), stages=QUANTISER_ONLY))

    # --- several steps: each residual_in is the previous step's residual_out
    prev = None
    for s in range(3):
        g = rng.normal(0, 0.5, (32, 3, 3)).astype(np.float32)
        specs.append(CaseSpec(f"multistep_s{s}", f"step {s} of 3 on one 32x3x3 layer, "
                              "k = 0.25; residual carried from the previous step"
                              if s else "step 0 of 3 on one 32x3x3 layer, k = 0.25, zero "
                              "residual", g, k=0.25, layer_id=5, residual_from=prev))
        prev = f"multistep_s{s}"

    # --- a generic conv layer with a random residual
    specs.append(CaseSpec("random_conv", "64x3x3x3 N(0, 2) gradient with a random residual, "
                          "k = 8", rng.normal(0, 2, (64, 3, 3, 3)).astype(np.float32),
                          rng.integers(-2**28, 2**28, (64, 3, 3, 3)).astype(np.int32), k=8,
                          layer_id=1))

    # --- zero runs of LMAX - 1, LMAX and LMAX + 1 between literal runs of the same lengths, and a
    # frame that ends on a zero run of exactly LMAX (functional bins zrle.zero_run_at_lmax,
    # zrle.run_at_lmax; sim/functional_bins.py)
    # (last, so the random draws of the cases above stay what they were)
    g = _runs_payload(48, [(0, 2), (6, 3), (12, 4), (21, 5), (30, 14)], rng)
    specs.append(CaseSpec("lmax2_zero_runs_at_lmax", "lmax_log2 = 2: zero runs of 4, 3, 5, 4 "
                          "and a final 4 (LMAX = 4) between literal runs of 2, 3, 4, 5, 14",
                          g.reshape(-1, 16), k=3, lmax_log2=2))

    # --- many short blocks apart: 30 tokens, each two literals then a zero run, more than the
    # encoder's 16-entry token queue holds, so under frame back-pressure the queue fills, the
    # beats behind a blocked gap fill the register slice in front of the encoder, and the
    # next gap beat waits (compress_engine's C_GAP stall)
    g = rng.uniform(-0.01, 0.01, (96, 2)).astype(np.float32)
    picked = np.arange(0, 90, 3)
    g[picked] = (rng.uniform(1.0, 5.0, (picked.size, 2))
                 * np.where(rng.random((picked.size, 2)) < 0.5, -1, 1)).astype(np.float32)
    specs.append(CaseSpec("many_gaps", "96 blocks of 2, k = 30 picks every third: 30 runs of "
                          "two literals, each followed by a zero run", g, k=30))
    return specs


def momentum_specs(seed: int) -> list[CaseSpec]:
    """Momentum correction with factor masking: several carried steps, velocity and feedback
    saturation, rounding ties of mul(m, u), masking off, a layer sent whole, m = 0."""
    rng = np.random.default_rng(seed + 7)
    m09 = MomentumConfig.from_float(0.9).m_fix
    specs, prev = [], None
    for s in range(4):
        g = rng.normal(0, 1.0, (24, 8)).astype(np.float32)
        specs.append(CaseSpec(
            f"momentum_multistep_s{s}", f"momentum step {s} of 4, m = 0.9 (m_fix {m09}), k = 2 "
            "of 24 blocks, residual and velocity carried; sent blocks' velocity zeroed"
            if s else f"momentum step 0 of 4, m = 0.9 (m_fix {m09}), k = 2 of 24 blocks, zero "
            "residual and velocity", g, k=2, layer_id=9, stages=MOMENTUM_STAGES,
            residual_from=prev, m_fix=m09))
        prev = f"momentum_multistep_s{s}"
    # |mul(m, u) + Q(g)| and |r + u'| past QMAX in both directions; u = -2^31 scaled
    g = rng.uniform(-10.0, 10.0, (8, 16)).astype(np.float32)
    u = rng.integers(-1000, 1000, (8, 16)).astype(np.int64)
    u[::2] += QMAX - 100_000_000
    u[1::2] -= QMAX - 100_000_000
    u[0, :3] = [-2**31, QMAX, -QMAX]
    r = rng.integers(-2**30, 2**30, (8, 16)).astype(np.int64)
    r[:, :4] = [QMAX, -QMAX, QMAX - 5, -QMAX + 5]
    specs.append(CaseSpec("momentum_saturation", "m = 65535/65536, velocities within 1e8 of "
                          "±QMAX (and -2^31) plus |g| up to R: the velocity and then r + u' "
                          "leave the int32 range in both directions", g,
                          np.clip(r, -2**31, QMAX).astype(np.int32), k=3, layer_id=2,
                          stages=MOMENTUM_STAGES, m_fix=65535,
                          velocity=u.clip(-2**31, QMAX).astype(np.int32)))
    # exact half-way products: m = 1/2 on odd velocities rounds away from zero
    u = (rng.integers(-2**20, 2**20, (6, 10)) * 2 + 1).astype(np.int32)
    specs.append(CaseSpec("momentum_half_way", "m = 1/2 (m_fix 32768) on odd velocities: every "
                          "product is a tie, rounded away from zero", rng.normal(0, 0.01, (6, 10))
                          .astype(np.float32), k=2, stages=MOMENTUM_STAGES, m_fix=32768,
                          velocity=u))
    u = rng.integers(-2**26, 2**26, (16, 9)).astype(np.int32)
    g = rng.normal(0, 0.5, (16, 9)).astype(np.float32)
    specs.append(CaseSpec("momentum_unmasked", "factor masking off: the sent blocks keep their "
                          "velocity", g, k=4, stages=MOMENTUM_STAGES, m_fix=m09, velocity=u,
                          momentum_mask=False))
    specs.append(CaseSpec("momentum_whole_layer", "k = every block: the layer is sent whole and "
                          "keeps its velocity (ordinary momentum, nothing masked)", g, k=16,
                          stages=MOMENTUM_STAGES, m_fix=m09, velocity=u))
    specs.append(CaseSpec("momentum_m_zero", "m = 0: u' = Q(g), the step is plain error "
                          "feedback with the velocity masked", g, k=4,
                          stages=MOMENTUM_STAGES, m_fix=0, velocity=u))
    return specs


def l2_specs(seed: int) -> list[CaseSpec]:
    """The L2 block norm (docs/spec.md §2.3): a layer L1 and L2 rank apart, ties, |a| = QMAX
    with B = 1 (s = 0), a block whose norm comes within 0.05 % of 2^63, a random conv layer and a
    momentum step. Their own generator, so adding them changes no other case."""
    rng = np.random.default_rng(seed + 22)
    specs = []
    g = rng.normal(0, 0.05, (8, 6)).astype(np.float32)
    g[2] = 1.0
    g[5] = [4.0, 0.01, -0.01, 0.01, -0.01, 0.01]
    specs.append(CaseSpec("l2_differs_from_l1", "B = 6 (s = 1): block 2 holds six 1.0s (L1 6, "
                          "the L1 pick), block 5 one 4.0 and five 0.01s (L2 picks it)", g,
                          k=1, norm="l2", expect_selected=(5,)))
    g = _with_norm_ties(rng, 48, 12, [([9, 3], 3.0), ([33, 1, 20], 2.0)], 1.0)
    specs.append(CaseSpec("l2_tie_break_k4", "equal L2 norms (permuted magnitudes): two blocks "
                          "tie for the largest, three for the next across the k = 4 cut: "
                          "selects 3, 9, 1, 20", g.reshape(48, 12), k=4, norm="l2",
                          expect_selected=(3, 9, 1, 20)))
    g = rng.uniform(-10.0, 10.0, 64).astype(np.float32)
    r = rng.integers(-2**30, 2**30, 64).astype(np.int64)
    r[::4] = QMAX
    r[1::4] = -QMAX
    specs.append(CaseSpec("l2_unit_blocks_qmax", "1-D, B = 1 so s = 0: |a| up to QMAX, norms up "
                          "to (2^31 - 1)^2, saturated elements tie (lower index first), k = 6",
                          g, np.clip(r, -QMAX, QMAX).astype(np.int32), k=6, norm="l2"))
    # bit_length 9, s = 4: 511 * (2^27 - 1)^2 < 2^63. 511, not 2047 (within 0.05 %, in
    # tests/test_norm.py): the layer fits the RTL builds' N_MAX of 2048 (3 * 511 elements)
    B = 511
    g = np.zeros((3, B), np.float32)
    r = np.where(rng.random((3, B)) < 0.5, -QMAX, QMAX).astype(np.int64)
    r[1, 7] = QMAX - 16                       # one shifted magnitude less: block 1 ranks last
    specs.append(CaseSpec("l2_near_2p63", "3 blocks of 511 at |a| = QMAX: each L2 norm is "
                          "511 * (2^27 - 1)^2 > 0.998 * 2^63 (blocks 0 and 2 tie), block 1 "
                          "one shifted step less; k = 2 selects 0, 2", g, r.astype(np.int32),
                          k=2, norm="l2", expect_selected=(0, 2)))
    specs.append(CaseSpec("l2_random_conv", "32x3x3x3 N(0, 2) gradient with a random residual, "
                          "k = 5, L2", rng.normal(0, 2, (32, 3, 3, 3)).astype(np.float32),
                          rng.integers(-2**28, 2**28, (32, 3, 3, 3)).astype(np.int32), k=5,
                          layer_id=4, norm="l2"))
    m09 = MomentumConfig.from_float(0.9).m_fix
    specs.append(CaseSpec("l2_momentum", "momentum step, m = 0.9, k = 2 of 24 blocks of 8, "
                          "blocks ranked by the L2 norm, velocity masked on the sent blocks",
                          rng.normal(0, 1.0, (24, 8)).astype(np.float32),
                          rng.integers(-2**24, 2**24, (24, 8)).astype(np.int32), k=2,
                          stages=MOMENTUM_STAGES, m_fix=m09,
                          velocity=rng.integers(-2**26, 2**26, (24, 8)).astype(np.int32),
                          norm="l2"))
    return specs
