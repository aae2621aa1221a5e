"""Golden vectors for the RTL testbenches: writer, loader and checker (format: docs/golden.md).

A golden directory holds `manifest.json` plus, per case, `<case>.npz` and `<case>/<array>.hex`
($readmemh-ready: one lowercase hex word per line, 8 digits; 16 for block_norms).
Cases are computed with the fastest bit-exact backend (gradblock.commands.backend) and
checked against the numpy reference by `check_golden`.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gradblock.codec import errors as frame_errors
from gradblock.codec import zrle
from gradblock.refmodel import compress as ref_compress
from gradblock.refmodel.quantiser import QMAX, NonFiniteError, QuantConfig, quantise
from gradblock.refmodel.selection import block_layout, resolve_k

FORMAT = "gradblock-golden"
VERSION = 1
MANIFEST = "manifest.json"
ALL_STAGES = ("quantiser", "feedback", "norms", "select", "encode", "decode", "top")
QUANTISER_ONLY = ("quantiser",)
ARRAY_DTYPES = {
    "grad_bits": np.uint32, "residual_in": np.int32, "quantised": np.int32,
    "quant_sat": np.uint8, "quant_nan": np.uint8, "accumulated": np.int32,
    "feedback_sat": np.uint8, "block_norms": np.uint64, "selected": np.int64,
    "payload": np.int32, "residual_out": np.int32, "frame": np.uint32,
}
QUANTISER_ARRAYS = ("grad_bits", "quantised", "quant_sat", "quant_nan")
HEX_DIGITS = {name: 16 if name == "block_norms" else 8 for name in ARRAY_DTYPES}


class GoldenError(Exception):
    """A golden directory is missing, unreadable or not in this format."""


@dataclass
class GoldenCase:
    name: str
    meta: dict
    arrays: dict


def arrays_for(stages) -> tuple[str, ...]:
    """Arrays a case carries: all of them, or the quantiser's four in a quantiser-only case."""
    return QUANTISER_ARRAYS if tuple(stages) == QUANTISER_ONLY else tuple(ARRAY_DTYPES)


# ------------------------------------------------------------------------------ case inputs

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
    return specs


def real_specs(source: str, seed: int, quick: bool, compress_layer,
               data_dir: str | None = None) -> tuple[list[CaseSpec], dict]:
    from .realgrads import RealGradConfig, capture_real_gradients

    cfg = RealGradConfig.for_golden(source, seed, quick, data_dir)
    rg = capture_real_gradients(cfg, compress_layer)
    specs, names = [], set()
    for cap in rg.steps:
        stem = "real_" + cap.param.replace(".", "_")
        name = f"{stem}_s{cap.step}"
        prev = f"{stem}_s{cap.step - 1}"
        specs.append(CaseSpec(
            name, f"{rg.model} {cap.param} {tuple(cap.grad.shape)} gradient at training step "
            f"{cap.step} on {rg.dataset}, error-feedback residual carried from training",
            cap.grad, cap.residual_in, R=cfg.R, k=cfg.k, layer_id=cap.layer_id, kind="real",
            residual_from=prev if prev in names else None,
            source={"dataset": rg.dataset, "model": rg.model, "param": cap.param,
                    "step": cap.step, "seed": seed}))
        names.add(name)
    info = {"dataset": rg.dataset, "model": rg.model, "torch": rg.torch_version,
            "losses": [round(v, 6) for v in rg.losses]}
    return specs, info


# ------------------------------------------------------------------------------ computing

def derive_flags(grad_bits: np.ndarray, range_bits: int):
    """Per-element quantiser flags: (sat, nan). sat is |x| > R by the bit rule, NaN excluded
    (a NaN has its own flag and is not clamped)."""
    mag = grad_bits & np.uint32(0x7FFFFFFF)
    nan = mag > np.uint32(0x7F800000)
    sat = (mag > np.uint32(range_bits)) & ~nan
    return sat.astype(np.uint8), nan.astype(np.uint8)


def feedback_flags(residual_in: np.ndarray, quantised: np.ndarray) -> np.ndarray:
    s = residual_in.astype(np.int64) + quantised.astype(np.int64)
    return (np.abs(s) > QMAX).astype(np.uint8)


def compute_case(spec: CaseSpec, compress_layer, residual_override: np.ndarray | None = None
                 ) -> tuple[dict, dict]:
    """(manifest entry without file names, arrays) for one case."""
    grad = spec.grad_f32()
    cfg = QuantConfig.from_range(spec.R)
    bits = grad.reshape(-1).view(np.uint32).copy()
    layout = block_layout(grad.shape, spec.block_size)
    sat, nan = derive_flags(bits, cfg.range_bits)
    meta = {"name": spec.name, "kind": spec.kind, "description": spec.description,
            "stages": list(spec.stages), "shape": [int(d) for d in grad.shape],
            "n": int(grad.size), "layer_id": int(spec.layer_id), "range": float(cfg.range),
            "range_bits": cfg.range_bits, "M": cfg.M, "k_shift": cfg.k,
            "lmax_log2": int(spec.lmax_log2), "block_size": layout.block_size,
            "n_blocks": layout.n_blocks, "k_req": spec.k}
    if tuple(spec.stages) == QUANTISER_ONLY:
        # NaN has no code in the software contract; the RTL emits 0, which is Q(+0).
        q = quantise(np.where(nan.astype(bool), np.float32(0), grad.reshape(-1)), cfg)
        meta.update(k_eff=None, sat_quant=int(sat.sum()), sat_feedback=None, frame_words=None)
        arrays = {"grad_bits": bits, "quantised": q.q, "quant_sat": sat, "quant_nan": nan}
        if q.saturated != int(sat.sum()):
            raise AssertionError(f"{spec.name}: saturation flags {int(sat.sum())} != "
                                 f"reference count {q.saturated}")
        return meta, arrays
    if nan.any():
        raise ValueError(f"{spec.name}: NaN is allowed only in quantiser-only cases")
    residual = residual_override if residual_override is not None else spec.residual
    if residual is None:
        residual = np.zeros(grad.shape, np.int32)
    residual = np.asarray(residual, np.int32).reshape(grad.shape)
    st = compress_layer(grad, residual, R=cfg, k=spec.k, block_size=spec.block_size,
                        layer_id=spec.layer_id, lmax_log2=spec.lmax_log2, where=spec.name)
    fb = feedback_flags(residual.reshape(-1), st.q.reshape(-1))
    if int(sat.sum()) != st.sat_quant or int(fb.sum()) != st.sat_feedback:
        raise AssertionError(f"{spec.name}: flag sums ({int(sat.sum())}, {int(fb.sum())}) != "
                             f"counts ({st.sat_quant}, {st.sat_feedback})")
    lead = tuple(int(b) for b in st.selected[:len(spec.expect_selected)])
    if lead != spec.expect_selected or spec.expect_k_eff not in (None, st.k_eff):
        raise AssertionError(f"{spec.name}: selected {lead}, k_eff {st.k_eff}; the case is "
                             f"built for {spec.expect_selected}, {spec.expect_k_eff}")
    meta.update(k_eff=int(st.k_eff), sat_quant=int(st.sat_quant),
                sat_feedback=int(st.sat_feedback), frame_words=int(st.frame.size))
    if spec.residual_from:
        meta["residual_from"] = spec.residual_from
    if spec.source:
        meta["source"] = dict(spec.source)
    arrays = {"grad_bits": bits, "residual_in": residual.reshape(-1).copy(),
              "quantised": st.q.reshape(-1), "quant_sat": sat, "quant_nan": nan,
              "accumulated": st.acc.reshape(-1), "feedback_sat": fb,
              "block_norms": st.norms, "selected": st.selected,
              "payload": st.payload.reshape(-1), "residual_out": st.residual_out.reshape(-1),
              "frame": st.frame}
    return meta, {k: np.ascontiguousarray(v, dtype=ARRAY_DTYPES[k]) for k, v in arrays.items()}


# ------------------------------------------------------------------------------ hex files

def hex_text(arr: np.ndarray, digits: int) -> str:
    """One lowercase hex word per line, two's complement for signed values."""
    a = np.asarray(arr).reshape(-1)
    if digits == 16:
        vals = a.astype(np.uint64)
    elif a.dtype.kind == "i" and a.dtype.itemsize <= 4:
        vals = a.astype(np.int32).view(np.uint32)
    else:
        if a.size and (int(a.min()) < 0 or int(a.max()) >= 2**32):
            raise ValueError("values outside 0..2^32-1 cannot be written as 8 hex digits")
        vals = a.astype(np.uint32)
    fmt = f"{{:0{digits}x}}".format
    return "".join(fmt(v) + "\n" for v in vals.tolist())


def read_hex(path: Path, digits: int) -> list[int]:
    """Parse a hex file strictly: every line exactly `digits` lowercase hex digits."""
    out = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise GoldenError(f"{path}: cannot read ({e.strerror or e})") from None
    for i, line in enumerate(lines, 1):
        if len(line) != digits or line.lower() != line or \
                any(c not in "0123456789abcdef" for c in line):
            raise GoldenError(f"{path}:{i}: {line!r} is not {digits} lowercase hex digits")
        out.append(int(line, 16))
    return out


# ------------------------------------------------------------------------------ writing

def _remove_previous(out_dir: Path) -> None:
    """Delete the case files an earlier manifest in out_dir names (and nothing else)."""
    path = out_dir / MANIFEST
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(old, dict) or old.get("format") != FORMAT:
        return
    for case in old.get("cases", []):
        name = case.get("name")
        if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
            continue
        (out_dir / f"{name}.npz").unlink(missing_ok=True)
        case_dir = out_dir / name
        if case_dir.is_dir():
            shutil.rmtree(case_dir)


def write_case(out_dir: Path, meta: dict, arrays: dict) -> dict:
    name = meta["name"]
    np.savez_compressed(out_dir / f"{name}.npz", **arrays)
    (out_dir / name).mkdir(exist_ok=True)
    hexes = {}
    for key, arr in arrays.items():
        rel = f"{name}/{key}.hex"
        (out_dir / rel).write_text(hex_text(arr, HEX_DIGITS[key]))
        hexes[key] = rel
    return {**meta, "npz": f"{name}.npz", "hex": hexes}


def generate_golden(out_dir: str | Path, *, quick: bool = False, real_source: str = "digits",
                    seed: int = 0, data_dir: str | None = None, progress: bool = True,
                    backend_choice: str | None = None) -> dict:
    """Write every case to out_dir and return the manifest."""
    from tqdm import tqdm

    from .commands import backend

    be = backend(backend_choice)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    specs = synthetic_specs(seed)
    r_specs, real_info = real_specs(real_source, seed, quick, be.compress_layer, data_dir)
    specs += r_specs
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise AssertionError("duplicate golden case names")
    _remove_previous(out_dir)
    outputs, cases = {}, []
    for spec in tqdm(specs, desc="golden cases", unit="case", disable=not progress):
        override = None
        if spec.residual_from:
            prev = outputs[spec.residual_from]
            if spec.residual is not None and not np.array_equal(
                    np.asarray(spec.residual).reshape(-1), prev):
                raise AssertionError(f"{spec.name}: captured residual differs from "
                                     f"{spec.residual_from}'s residual_out")
            override = prev
        meta, arrays = compute_case(spec, be.compress_layer, override)
        if "residual_out" in arrays:
            outputs[spec.name] = arrays["residual_out"]
        cases.append(write_case(out_dir, meta, arrays))
    manifest = {"format": FORMAT, "version": VERSION,
                "generator": f"gradblock.golden ({be.name}; numpy {np.__version__}; "
                             f"torch {real_info['torch']})",
                "seed": seed, "quick": quick, "real_source": real_source,
                "real_training": real_info, "cases": cases}
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


# ------------------------------------------------------------------------------ loading

def _read_manifest(golden_dir: Path) -> dict:
    path = golden_dir / MANIFEST
    if not golden_dir.is_dir():
        raise GoldenError(f"{golden_dir}: no such directory")
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise GoldenError(f"{path}: missing (generate with `gradblock golden {golden_dir}`)") \
            from None
    except (OSError, ValueError) as e:
        raise GoldenError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise GoldenError(f"{path}: format is not {FORMAT!r}")
    if manifest.get("version") != VERSION:
        raise GoldenError(f"{path}: version {manifest.get('version')!r}, this reader reads "
                          f"{VERSION}")
    if not isinstance(manifest.get("cases"), list):
        raise GoldenError(f"{path}: 'cases' is not a list")
    return manifest


def load_golden(golden_dir: str | Path) -> list[GoldenCase]:
    """Every case of a golden directory: name, manifest entry and npz arrays."""
    golden_dir = Path(golden_dir)
    manifest = _read_manifest(golden_dir)
    cases = []
    for entry in manifest["cases"]:
        try:
            name, npz = entry["name"], entry["npz"]
        except (TypeError, KeyError):
            raise GoldenError(f"{golden_dir / MANIFEST}: a case entry lacks 'name' or 'npz'") \
                from None
        try:
            with np.load(golden_dir / npz, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except FileNotFoundError:
            raise GoldenError(f"{golden_dir / npz}: missing (case {name})") from None
        except (OSError, ValueError) as e:
            raise GoldenError(f"{golden_dir / npz}: unreadable ({e})") from None
        cases.append(GoldenCase(name, entry, arrays))
    return cases


# ------------------------------------------------------------------------------ checking

@dataclass
class CheckResult:
    name: str
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


META_KEYS = ("name", "kind", "description", "stages", "shape", "n", "layer_id", "range",
             "range_bits", "M", "k_shift", "lmax_log2", "block_size", "n_blocks", "k_req",
             "k_eff", "sat_quant", "sat_feedback", "frame_words", "npz", "hex")


def _reference_arrays(meta: dict, arrays: dict, problems: list[str]) -> tuple[dict, dict]:
    """Recompute a case from its inputs with the numpy reference: (arrays, scalar fields)."""
    cfg = QuantConfig.from_bits(meta["range_bits"])
    shape = tuple(meta["shape"])
    bits = arrays["grad_bits"]
    grad = bits.view(np.float32).reshape(shape)
    sat, nan = derive_flags(bits, cfg.range_bits)
    scalars = {"range": float(cfg.range), "M": cfg.M, "k_shift": cfg.k,
               "n": int(grad.size)}
    layout = block_layout(shape, meta["block_size"])
    scalars.update(block_size=layout.block_size, n_blocks=layout.n_blocks)
    if tuple(meta["stages"]) == QUANTISER_ONLY:
        if nan.any():
            try:
                quantise(grad, cfg)
                problems.append("reference quantise did not raise on NaN")
            except NonFiniteError as e:
                if (e.count, e.first_index) != (int(nan.sum()), int(np.argmax(nan))):
                    problems.append(f"NonFiniteError names {e.count} at {e.first_index}")
        q = quantise(np.where(nan.astype(bool), np.float32(0), grad.reshape(-1)), cfg)
        scalars.update(sat_quant=q.saturated, k_eff=None, sat_feedback=None, frame_words=None)
        return {"grad_bits": bits, "quantised": q.q, "quant_sat": sat, "quant_nan": nan}, scalars
    residual = arrays["residual_in"].reshape(shape)
    st = ref_compress.compress_layer(grad, residual, R=cfg, k=meta["k_req"],
                                     block_size=meta["block_size"], layer_id=meta["layer_id"],
                                     lmax_log2=meta["lmax_log2"])
    fb = feedback_flags(residual.reshape(-1), st.q.reshape(-1))
    if int(sat.sum()) != st.sat_quant:
        problems.append(f"quant_sat flags sum to {int(sat.sum())}, reference counts "
                        f"{st.sat_quant}")
    if int(fb.sum()) != st.sat_feedback:
        problems.append(f"feedback_sat flags sum to {int(fb.sum())}, reference counts "
                        f"{st.sat_feedback}")
    if st.k_eff != resolve_k(meta["k_req"], layout.n_blocks):
        problems.append("k_eff disagrees with resolve_k")
    scalars.update(k_eff=st.k_eff, sat_quant=st.sat_quant, sat_feedback=st.sat_feedback,
                   frame_words=int(st.frame.size))
    ref = {"grad_bits": bits, "residual_in": arrays["residual_in"],
           "quantised": st.q.reshape(-1), "quant_sat": sat, "quant_nan": nan,
           "accumulated": st.acc.reshape(-1), "feedback_sat": fb, "block_norms": st.norms,
           "selected": st.selected, "payload": st.payload.reshape(-1),
           "residual_out": st.residual_out.reshape(-1), "frame": st.frame}
    return ref, scalars


def _first_difference(a: np.ndarray, b: np.ndarray) -> str:
    if a.shape != b.shape:
        return f"shape {a.shape} != reference {b.shape}"
    i = int(np.argmax(a != b))
    return f"{int((a != b).sum())} element(s) differ, first at {i}: {a[i]} != reference {b[i]}"


def check_case(golden_dir: Path, case: GoldenCase, residual_outs: dict) -> CheckResult:
    meta, arrays, problems = case.meta, case.arrays, []
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        return CheckResult(case.name, [f"manifest entry lacks {missing}"])
    stages = tuple(meta["stages"])
    if not stages or any(s not in ALL_STAGES for s in stages):
        return CheckResult(case.name, [f"unknown stages {list(stages)}"])
    expected = arrays_for(stages)
    if sorted(arrays) != sorted(expected):
        return CheckResult(case.name, [f"npz holds {sorted(arrays)}, expected {sorted(expected)}"])
    if sorted(meta["hex"]) != sorted(expected):
        problems.append(f"manifest hex lists {sorted(meta['hex'])}, expected {sorted(expected)}")
    for key in expected:
        arr = arrays[key]
        if arr.dtype != ARRAY_DTYPES[key] or arr.ndim != 1:
            return CheckResult(case.name, [f"{key} is {arr.dtype} {arr.shape}, expected 1-D "
                                           f"{np.dtype(ARRAY_DTYPES[key]).name}"])
    if arrays["grad_bits"].size != int(np.prod(meta["shape"], dtype=np.int64)):
        return CheckResult(case.name, ["grad_bits size does not match the shape"])
    if stages != QUANTISER_ONLY and (arrays["quant_nan"].any()):
        problems.append("NaN in a case that exercises more than the quantiser")
    try:
        ref, scalars = _reference_arrays(meta, arrays, problems)
    except (ValueError, TypeError) as e:
        return CheckResult(case.name, problems + [f"reference rejects the inputs: {e}"])
    for key, want in scalars.items():
        if meta[key] != want:
            problems.append(f"manifest {key} = {meta[key]!r}, reference {want!r}")
    for key in expected:
        got, want = arrays[key], np.asarray(ref[key]).astype(ARRAY_DTYPES[key]).reshape(-1)
        if not np.array_equal(got, want):
            problems.append(f"{key}: {_first_difference(got, want)}")
    if "frame" in arrays:
        try:
            fr = zrle.decode_frame(arrays["frame"], meta["n"])
            if fr.n_words != arrays["frame"].size or not np.array_equal(fr.values,
                                                                         arrays["payload"]):
                problems.append("frame does not decode to exactly the payload")
        except frame_errors.FrameError as e:
            problems.append(f"frame does not decode: {e}")
    src = meta.get("residual_from")
    if src is not None:
        if src not in residual_outs:
            problems.append(f"residual_from {src!r} is not an earlier case")
        elif not np.array_equal(residual_outs[src], arrays["residual_in"]):
            problems.append(f"residual_in differs from {src}'s residual_out")
    for key in expected:
        rel = meta["hex"].get(key) if isinstance(meta["hex"], dict) else None
        if rel is None:
            continue
        try:
            text = (golden_dir / rel).read_text()
        except OSError as e:
            problems.append(f"{rel}: cannot read ({e.strerror or e})")
            continue
        want = hex_text(arrays[key], HEX_DIGITS[key])
        if text != want:
            got_lines, want_lines = text.splitlines(), want.splitlines()
            bad = next((i for i, (g, w) in enumerate(zip(got_lines, want_lines)) if g != w),
                       min(len(got_lines), len(want_lines)))
            problems.append(f"{rel}: differs from the npz at line {bad + 1} "
                            f"({len(got_lines)} lines, expected {len(want_lines)})")
    return CheckResult(case.name, problems)


def check_golden(golden_dir: str | Path) -> list[CheckResult]:
    """Recompute every case with the numpy reference and compare every array, the manifest's
    numbers and the hex files. One CheckResult per case, in manifest order."""
    golden_dir = Path(golden_dir)
    results, residual_outs = [], {}
    for case in load_golden(golden_dir):
        try:
            results.append(check_case(golden_dir, case, residual_outs))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            results.append(CheckResult(case.name, [f"malformed manifest entry or arrays: "
                                                   f"{type(e).__name__}: {e}"]))
        if "residual_out" in case.arrays:
            residual_outs[case.name] = case.arrays["residual_out"]
    return results


# ------------------------------------------------------------------------------ reporting

def summary_table(cases: list[GoldenCase] | list[dict], results: list[CheckResult] | None = None
                  ) -> str:
    metas = [c.meta if isinstance(c, GoldenCase) else c for c in cases]
    status = {r.name: ("ok" if r.ok else "FAIL") for r in results or []}
    head = (f"{'case':<28} {'kind':<9} {'shape':<15} {'n':>6} {'R':>9} {'k_eff':>9} "
            f"{'satQ':>5} {'satF':>5} {'words':>6} {'ratio':>7}" + ("  check" if results else ""))
    lines = [head, "-" * len(head)]

    def cell(m, key):                      # a malformed entry shows "?" instead of crashing
        v = m.get(key, "?") if isinstance(m, dict) else "?"
        return "-" if v is None else v

    for m in metas:
        shape, n, words = cell(m, "shape"), cell(m, "n"), cell(m, "frame_words")
        shape = "x".join(str(d) for d in shape) if isinstance(shape, list) else str(shape)
        keff = cell(m, "k_eff")
        keff = f"{keff}/{cell(m, 'n_blocks')}" if keff != "-" else keff
        ratio = f"{n / words:.2f}" if isinstance(n, int) and isinstance(words, int) and words \
            else "-"
        R = cell(m, "range")
        R = f"{R:.3g}" if isinstance(R, (int, float)) else str(R)
        line = (f"{str(cell(m, 'name')):<28} {str(cell(m, 'kind')):<9} {shape:<15} {str(n):>6} "
                f"{R:>9} {str(keff):>9} {str(cell(m, 'sat_quant')):>5} "
                f"{str(cell(m, 'sat_feedback')):>5} {str(words):>6} {ratio:>7}")
        if results:
            line += f"  {status.get(cell(m, 'name'), '?')}"
        lines.append(line)
    return "\n".join(lines)


def golden_main(argv: list[str]) -> int:
    from .realgrads import REAL_SOURCES

    p = argparse.ArgumentParser(prog="gradblock golden",
                                description="write golden vectors for the RTL testbenches "
                                            "(docs/golden.md) and check them against the numpy "
                                            "reference")
    p.add_argument("out_dir", help="golden directory to write (or to check with --check)")
    p.add_argument("--quick", action="store_true",
                   help="synthetic cases plus a couple of small real layers (simulator tests)")
    p.add_argument("--real-source", choices=REAL_SOURCES, default="digits",
                   help="data for the real gradients (default digits)")
    p.add_argument("--data-dir", default=None, help="Fashion-MNIST IDX directory override")
    p.add_argument("--seed", type=int, default=0, help="seed for synthetic data and training")
    p.add_argument("--check", action="store_true",
                   help="only check an existing golden directory against the reference")
    p.add_argument("--no-check", action="store_true", help="skip the check after writing")
    try:
        args = p.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    from gradblock.shim.data import DatasetError

    from .commands import BackendError
    try:
        if args.check:
            cases = load_golden(args.out_dir)
        else:
            manifest = generate_golden(args.out_dir, quick=args.quick,
                                       real_source=args.real_source, seed=args.seed,
                                       data_dir=args.data_dir)
            cases = manifest["cases"]
            print(f"wrote {len(cases)} cases to {args.out_dir} ({manifest['generator']})")
        results = None if args.no_check and not args.check else check_golden(args.out_dir)
    except (GoldenError, DatasetError, BackendError, OSError) as e:
        print(f"gradblock golden: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"gradblock golden: the real-gradient cases need torch ({e}); install the "
              f"project's [torch] extra", file=sys.stderr)
        return 2
    print(summary_table(cases, results))
    if results is None:
        return 0
    bad = [r for r in results if not r.ok]
    for r in bad:
        for problem in r.problems:
            print(f"FAIL {r.name}: {problem}")
    print(f"check against the numpy reference: {len(results) - len(bad)} of {len(results)} "
          f"cases pass")
    return 1 if bad else 0
