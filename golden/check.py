"""Checking a golden directory: recompute every case with the numpy reference and compare every
array, the manifest's numbers and the hex files (docs/golden.md)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gradblock.codec import errors as frame_errors
from gradblock.codec import zrle
from gradblock.refmodel import compress as ref_compress
from gradblock.refmodel import momentum as ref_momentum
from gradblock.golden.format import case_norm
from gradblock.golden.format import (ARRAY_DTYPES, HEX_DIGITS, MAX_FILE_BYTES,
                                              MOMENTUM_STAGE, QUANTISER_ONLY, GoldenCase,
                                              GoldenError, arrays_for, hex_text, load_exchange,
                                              load_golden, read_case_file)
from gradblock.refmodel.quantiser import NonFiniteError, QuantConfig, quantise
from gradblock.refmodel.selection import block_layout, resolve_k

from .compute import derive_flags, feedback_flags, momentum_flags
from . import plain
from .format import plain_files, read_manifest
from .exchange import check_exchange


@dataclass
class CheckResult:
    name: str
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


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
    if MOMENTUM_STAGE in meta["stages"]:
        return _reference_momentum(meta, arrays, grad, residual, sat, nan, layout, scalars,
                                   problems)
    st = ref_compress.compress_layer(grad, residual, R=cfg, k=meta["k_req"],
                                     block_size=meta["block_size"], layer_id=meta["layer_id"],
                                     lmax_log2=meta["lmax_log2"], norm=case_norm(meta))
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


def _reference_momentum(meta, arrays, grad, residual, sat, nan, layout, scalars, problems):
    """A momentum case recomputed with refmodel.momentum.momentum_layer."""
    m_fix = meta["m_fix"]
    velocity = arrays["velocity_in"].reshape(grad.shape)
    st = ref_momentum.momentum_layer(grad, residual, velocity, ref_momentum.MomentumConfig(m_fix),
                                     R=QuantConfig.from_bits(meta["range_bits"]), k=meta["k_req"],
                                     block_size=meta["block_size"], layer_id=meta["layer_id"],
                                     lmax_log2=meta["lmax_log2"], mask=meta["momentum_mask"],
                                     norm=case_norm(meta))
    fb = feedback_flags(residual.reshape(-1), st.velocity.reshape(-1))
    ms = momentum_flags(velocity.reshape(-1), st.q.reshape(-1), m_fix)
    for what, flags, count in (("quant_sat", sat, st.sat_quant), ("feedback_sat", fb,
                                                                   st.sat_feedback),
                               ("momentum_sat", ms, st.sat_momentum)):
        if int(flags.sum()) != count:
            problems.append(f"{what} flags sum to {int(flags.sum())}, reference counts {count}")
    if st.k_eff != resolve_k(meta["k_req"], layout.n_blocks):
        problems.append("k_eff disagrees with resolve_k")
    scalars.update(k_eff=st.k_eff, sat_quant=st.sat_quant, sat_feedback=st.sat_feedback,
                   frame_words=int(st.frame.size), sat_momentum=st.sat_momentum,
                   masked=st.masked)
    ref = {"grad_bits": arrays["grad_bits"], "residual_in": arrays["residual_in"],
           "quantised": st.q.reshape(-1), "quant_sat": sat, "quant_nan": nan,
           "accumulated": st.acc.reshape(-1), "feedback_sat": fb, "block_norms": st.norms,
           "selected": st.selected, "payload": st.payload.reshape(-1),
           "residual_out": st.residual_out.reshape(-1), "frame": st.frame,
           "velocity_in": arrays["velocity_in"], "velocity": st.velocity.reshape(-1),
           "momentum_sat": ms, "velocity_out": st.velocity_out.reshape(-1)}
    return ref, scalars


def _first_difference(a: np.ndarray, b: np.ndarray) -> str:
    if a.shape != b.shape:
        return f"shape {a.shape} != reference {b.shape}"
    i = int(np.argmax(a != b))
    return f"{int((a != b).sum())} element(s) differ, first at {i}: {a[i]} != reference {b[i]}"


def check_case(golden_dir: Path, case: GoldenCase, residual_outs: dict,
               velocity_outs: dict | None = None) -> CheckResult:
    velocity_outs = {} if velocity_outs is None else velocity_outs
    meta, arrays, problems = case.meta, case.arrays, []
    # load_golden has validated the entry against the schema and the npz members against it
    stages = tuple(meta["stages"])
    expected = arrays_for(stages)
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
        elif "velocity_in" in arrays and (src not in velocity_outs or not np.array_equal(
                velocity_outs[src], arrays["velocity_in"])):
            problems.append(f"velocity_in differs from {src}'s velocity_out")
    for key in expected:
        rel = meta["hex"][key]
        try:
            text = read_case_file(golden_dir, rel, f"{case.name}.hex.{key}",
                                  arrays[key].size * (HEX_DIGITS[key] + 1)).decode("ascii",
                                                                                    "replace")
        except GoldenError as e:
            problems.append(str(e))
            continue
        want = hex_text(arrays[key], HEX_DIGITS[key])
        if text != want:
            got_lines, want_lines = text.splitlines(), want.splitlines()
            bad = next((i for i, (g, w) in enumerate(zip(got_lines, want_lines)) if g != w),
                       min(len(got_lines), len(want_lines)))
            problems.append(f"{rel}: differs from the npz at line {bad + 1} "
                            f"({len(got_lines)} lines, expected {len(want_lines)})")
    for rel, digest in (meta.get("sha256") or {}).items():
        try:
            data = read_case_file(golden_dir, rel, f"{case.name}.sha256", MAX_FILE_BYTES)
        except GoldenError as e:
            problems.append(str(e))
            continue
        if hashlib.sha256(data).hexdigest() != digest:
            problems.append(f"{rel}: changed since gradblock wrote it (sha256 differs)")
    problems += _plain_problems(golden_dir, meta, arrays)
    return CheckResult(case.name, problems)


def _plain_problems(golden_dir: Path, meta: dict, arrays: dict) -> list[str]:
    """The case's params.txt / params.svh (golden/plain.py), where it has them, against the
    text its manifest entry and arrays give."""
    if plain.params_name(meta["name"]) not in (meta.get("sha256") or {}):
        return []                         # written before the plain bench's files existed
    problems = []
    for rel, want in plain_files(meta, arrays).items():
        try:
            text = read_case_file(golden_dir, rel, f"{meta['name']}.params", MAX_FILE_BYTES)
        except GoldenError as e:
            problems.append(str(e))
            continue
        if text.decode("ascii", "replace") != want:
            problems.append(f"{rel}: differs from the manifest entry and arrays")
    return problems


def _file_problems(golden_dir: Path, case: GoldenCase) -> list[str]:
    """An exchange case's hex files against its npz, and every file against its sha256."""
    problems = []
    for key in arrays_for(case.meta["stages"]):
        rel = case.meta["hex"][key]
        try:
            text = read_case_file(golden_dir, rel, f"{case.name}.hex.{key}",
                                  case.arrays[key].size * (HEX_DIGITS[key] + 1))
        except GoldenError as e:
            problems.append(str(e))
            continue
        if text.decode("ascii", "replace") != hex_text(case.arrays[key], HEX_DIGITS[key]):
            problems.append(f"{rel}: differs from the npz")
    for rel, digest in (case.meta.get("sha256") or {}).items():
        try:
            data = read_case_file(golden_dir, rel, f"{case.name}.sha256", MAX_FILE_BYTES)
        except GoldenError as e:
            problems.append(str(e))
            continue
        if hashlib.sha256(data).hexdigest() != digest:
            problems.append(f"{rel}: changed since gradblock wrote it (sha256 differs)")
    return problems + _plain_problems(golden_dir, case.meta, case.arrays)


def check_golden(golden_dir: str | Path) -> list[CheckResult]:
    """Recompute every case with the numpy reference and compare every array, the manifest's
    numbers and the hex files. One CheckResult per case, in manifest order."""
    golden_dir = Path(golden_dir)
    results, residual_outs, velocity_outs = [], {}, {}
    for case in load_golden(golden_dir):
        try:
            results.append(check_case(golden_dir, case, residual_outs, velocity_outs))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            results.append(CheckResult(case.name, [f"malformed manifest entry or arrays: "
                                                   f"{type(e).__name__}: {e}"]))
        if "residual_out" in case.arrays:
            residual_outs[case.name] = case.arrays["residual_out"]
        if "velocity_out" in case.arrays:
            velocity_outs[case.name] = case.arrays["velocity_out"]
    for case in load_exchange(golden_dir):
        results.append(CheckResult(case.name, check_exchange(case.meta, case.arrays)
                                   + _file_problems(golden_dir, case)))
    manifest = read_manifest(golden_dir)
    if plain.CASE_LIST in manifest.get("files", {}):        # the plain bench's case list
        want = plain.case_list(manifest["cases"], manifest.get("exchange", []))
        try:
            got = read_case_file(golden_dir, plain.CASE_LIST, plain.CASE_LIST, MAX_FILE_BYTES)
            problems = [] if got.decode("ascii", "replace") == want else [
                f"{plain.CASE_LIST}: differs from the manifest's case list"]
        except GoldenError as e:
            problems = [str(e)]
        if problems:                    # reported as one more result only when it fails
            results.append(CheckResult(plain.CASE_LIST, problems))
    return results


