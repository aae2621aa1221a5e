"""Computing golden cases: a CaseSpec -> (manifest entry, arrays) with a bit-exact backend, and
the whole golden directory written through gradblock.golden.format."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from gradblock.refmodel import momentum as ref_momentum
from gradblock.golden.format import ARRAY_DTYPES, QUANTISER_ONLY, write_golden
from gradblock.refmodel.quantiser import QMAX, QuantConfig, quantise
from gradblock.refmodel.selection import block_layout

from .cases import CaseSpec, l2_specs, momentum_specs, synthetic_specs
from .exchange import compute_exchange, exchange_specs


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


def momentum_flags(velocity_in: np.ndarray, quantised: np.ndarray, m_fix: int) -> np.ndarray:
    v = ref_momentum.scale_velocity(velocity_in, m_fix) + quantised.astype(np.int64)
    return (np.abs(v) > QMAX).astype(np.uint8)


def compute_momentum_case(spec: CaseSpec, meta: dict, grad: np.ndarray, residual: np.ndarray,
                          sat: np.ndarray, nan: np.ndarray, bits: np.ndarray,
                          velocity_override: np.ndarray | None = None) -> tuple[dict, dict]:
    """A momentum case (docs/spec.md §7) with the numpy reference momentum_layer."""
    velocity = velocity_override if velocity_override is not None else spec.velocity
    if velocity is None:
        velocity = np.zeros(grad.shape, np.int32)
    velocity = np.asarray(velocity, np.int32).reshape(grad.shape)
    st = ref_momentum.momentum_layer(grad, residual, velocity, ref_momentum.MomentumConfig(
        spec.m_fix), R=meta["range"], k=spec.k, block_size=spec.block_size,
        layer_id=spec.layer_id, lmax_log2=spec.lmax_log2, mask=spec.momentum_mask,
        where=spec.name, norm=spec.norm)
    fb = feedback_flags(residual.reshape(-1), st.velocity.reshape(-1))
    ms = momentum_flags(velocity.reshape(-1), st.q.reshape(-1), spec.m_fix)
    if (int(sat.sum()), int(fb.sum()), int(ms.sum())) != (st.sat_quant, st.sat_feedback,
                                                          st.sat_momentum):
        raise AssertionError(f"{spec.name}: flag sums disagree with the reference counts")
    meta.update(k_eff=int(st.k_eff), sat_quant=int(st.sat_quant),
                sat_feedback=int(st.sat_feedback), frame_words=int(st.frame.size),
                m_fix=int(spec.m_fix), momentum_mask=bool(spec.momentum_mask),
                masked=bool(st.masked), sat_momentum=int(st.sat_momentum))
    arrays = {"grad_bits": bits, "residual_in": residual.reshape(-1).copy(),
              "quantised": st.q.reshape(-1), "quant_sat": sat, "quant_nan": nan,
              "accumulated": st.acc.reshape(-1), "feedback_sat": fb,
              "block_norms": st.norms, "selected": st.selected,
              "payload": st.payload.reshape(-1), "residual_out": st.residual_out.reshape(-1),
              "frame": st.frame, "velocity_in": velocity.reshape(-1).copy(),
              "velocity": st.velocity.reshape(-1), "momentum_sat": ms,
              "velocity_out": st.velocity_out.reshape(-1)}
    return meta, arrays


def compute_case(spec: CaseSpec, compress_layer, residual_override: np.ndarray | None = None,
                 velocity_override: np.ndarray | None = None) -> tuple[dict, dict]:
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
            "n_blocks": layout.n_blocks, "k_req": spec.k, "norm": spec.norm}
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
    if spec.m_fix is not None:
        meta, arrays = compute_momentum_case(spec, meta, grad, residual, sat, nan, bits,
                                             velocity_override)
        if spec.residual_from:
            meta["residual_from"] = spec.residual_from
        return meta, {k: np.ascontiguousarray(v, dtype=ARRAY_DTYPES[k]) for k, v in arrays.items()}
    st = compress_layer(grad, residual, R=cfg, k=spec.k, block_size=spec.block_size,
                        layer_id=spec.layer_id, lmax_log2=spec.lmax_log2, where=spec.name,
                        norm=spec.norm)
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




def generate_golden(out_dir: str | Path, *, quick: bool = False, seed: int = 0,
                    progress: bool = True, compress_layer: Callable | None = None,
                    kernel_name: str = "numpy reference",
                    real_cases: Callable | None = None) -> dict:
    """Compute every case and write the golden directory (format.write_golden: into a
    temporary directory beside out_dir, then swapped in). Returns the manifest.

    `compress_layer` is the bit-exact kernel that computes the cases (default: the numpy
    reference; the CLI passes the backend registry's choice, named by `kernel_name`).
    `real_cases(compress_layer) -> (specs, info)` adds the cases that need trained models
    (gradblock.realgrads, above this package); without it the set is the synthetic,
    momentum, L2 and exchange cases only."""
    from tqdm import tqdm

    if compress_layer is None:
        from gradblock.refmodel.compress import compress_layer
    specs = synthetic_specs(seed) + momentum_specs(seed) + l2_specs(seed)
    real_info = None
    if real_cases is not None:
        r_specs, real_info = real_cases(compress_layer)
        specs += r_specs
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise AssertionError("duplicate golden case names")

    def computed():
        outputs, velocities = {}, {}
        for spec in tqdm(specs, desc="golden cases", unit="case", disable=not progress):
            override = v_override = None
            if spec.residual_from:
                prev = outputs[spec.residual_from]
                if spec.residual is not None and not np.array_equal(
                        np.asarray(spec.residual).reshape(-1), prev):
                    raise AssertionError(f"{spec.name}: captured residual differs from "
                                         f"{spec.residual_from}'s residual_out")
                override = prev
                v_override = velocities.get(spec.residual_from)
            meta, arrays = compute_case(spec, compress_layer, override, v_override)
            if "residual_out" in arrays:
                outputs[spec.name] = arrays["residual_out"]
            if "velocity_out" in arrays:
                velocities[spec.name] = arrays["velocity_out"]
            yield meta, arrays

    torch_note = f"; torch {real_info['torch']}" if real_info else "; no real-gradient cases"
    fields = {"generator": f"gradblock golden ({kernel_name}; numpy {np.__version__}"
                           f"{torch_note})",
              "seed": seed, "quick": quick,
              "real_source": real_info.get("source") if real_info else None,
              "real_training": {k: v for k, v in real_info.items() if k != "source"}
              if real_info else None}
    exchange = (compute_exchange(spec) for spec in exchange_specs(seed, quick))
    return write_golden(out_dir, fields, computed(), exchange)
