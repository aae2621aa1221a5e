"""Functional coverage bins for `gradblock verify --coverage`.

Two sources, both measured, neither assumed:

* stimulus bins: a golden case counts for a bin only if the block that the bin is about ran
  it and passed (bit-exact against the reference) in this verify run. The bin is decided
  from the case's own arrays: e.g. `quantiser.saturate_pos` is hit when a case that passed on
  `quantiser`, `compress_top` or `compress_engine` has an element flagged in quant_sat whose
  input is positive.
* RTL bins read from Verilator's toggle points (coverage.dat): back-pressure on an AXI channel
  is a 1->0 toggle of the ready the engine receives (AR, AW, W) or of the valid it receives
  mid-stream (R, B: the memory paused), on the engine's own port.

`bins(golden_dir, passed, points)` returns {bin name: hit}. Bins the verify flow cannot reach
by construction (decoder error codes that no golden case carries, reset in every state,
ERR_MEMORY) are listed and left unhit; docs/hw.md ("Coverage") says which other test reaches
each of them.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

# blocks that compute each stage (a case passing on any of them exercised the stage)
QUANT = ("quantiser", "compress_top", "compress_engine")
FEEDBACK = ("ef_add", "compress_top", "compress_engine")
MOMENTUM = ("momentum", "compress_engine")
SELECT = ("topk_select", "compress_top", "compress_engine")
ENCODE = ("zrle_encoder", "compress_top", "compress_engine")
DECODE = ("zrle_decoder",)
EXCHANGE = ("aggregate_engine",)

FRAME_ERRORS = ("BAD_MAGIC", "BAD_VERSION", "BAD_LMAX", "BAD_RANGE", "LITERAL_RUN_TOO_LONG",
                "ZERO_LITERAL", "EMPTY_TOKEN", "EARLY_ZERO_LENGTH", "SPLIT_LITERAL_RUN",
                "OVERRUN", "TRUNCATED", "TOKEN_COUNT_MISMATCH", "CRC_MISMATCH", "SIZE_MISMATCH")
EXCHANGE_ERRORS = ("CRC_MISMATCH", "LAYER_ID_MISMATCH", "RANGE_MISMATCH", "TRUNCATED",
                   "SIZE_MISMATCH")
AXI_PORTS = {"compress_engine": ("m_axi_", "m_axi_vel_"), "aggregate_engine": ("m_axi_",)}


def _ran(passed: dict[str, set[str]], blocks, case: str) -> bool:
    return any(case in passed.get(b, ()) for b in blocks)


def _zero_runs(payload: np.ndarray) -> list[int]:
    z = np.concatenate([[0], (payload == 0).astype(np.int8), [0]])
    d = np.diff(z)
    return list((np.flatnonzero(d == -1) - np.flatnonzero(d == 1)).tolist())


def stimulus_bins(golden: Path, passed: dict[str, set[str]]) -> dict[str, bool]:
    from gradblock.golden.format import load_exchange, load_golden
    hit = {name: False for name in (
        "quantiser.saturate_pos", "quantiser.saturate_neg", "quantiser.nan_input",
        "ef_add.saturate_pos", "ef_add.saturate_neg",
        "momentum.saturate_pos", "momentum.saturate_neg", "momentum.on", "momentum.off_masked",
        "momentum.m_fix_zero", "momentum.m_fix_max", "momentum.m_fix_mid",
        "topk.tie_at_k_cut", "topk.k_equals_1", "topk.k_equals_n_blocks",
        "zrle.run_at_lmax", "zrle.run_over_lmax", "zrle.lmax_min_build", "zrle.frame_ends_on_run",
        "zrle.empty_layer")}
    for e in FRAME_ERRORS:
        hit[f"decoder.err.{e}"] = False
    for e in EXCHANGE_ERRORS:
        hit[f"aggregate.err.{e}"] = False
    hit["aggregate.ok"] = False
    for case in load_golden(golden):
        name, meta = case.name, case.meta
        try:
            a = np.load(golden / meta["npz"])
        except (OSError, KeyError):
            continue
        if "quant_sat" in a and _ran(passed, QUANT, name):
            sat = a["quant_sat"].astype(bool)
            sign = (a["grad_bits"] >> 31).astype(bool)
            hit["quantiser.saturate_pos"] |= bool((sat & ~sign).any())
            hit["quantiser.saturate_neg"] |= bool((sat & sign).any())
            hit["quantiser.nan_input"] |= bool(a["quant_nan"].astype(bool).any())
        if "feedback_sat" in a and _ran(passed, FEEDBACK, name) and "top" in meta["stages"]:
            sat = a["feedback_sat"].astype(bool)
            acc = a["accumulated"]
            hit["ef_add.saturate_pos"] |= bool((sat & (acc > 0)).any())
            hit["ef_add.saturate_neg"] |= bool((sat & (acc < 0)).any())
        if "momentum_sat" in a and _ran(passed, MOMENTUM, name):
            sat = a["momentum_sat"].astype(bool)
            v = a["velocity"]
            hit["momentum.saturate_pos"] |= bool((sat & (v > 0)).any())
            hit["momentum.saturate_neg"] |= bool((sat & (v < 0)).any())
            m = int(meta.get("m_fix", -1))
            hit["momentum.on"] |= m > 0
            hit["momentum.off_masked"] |= bool(meta.get("masked")) or m == 0
            hit["momentum.m_fix_zero"] |= m == 0
            hit["momentum.m_fix_max"] |= m == 65535
            hit["momentum.m_fix_mid"] |= 0 < m < 65535
        if "block_norms" in a and "selected" in a and _ran(passed, SELECT, name):
            norms, sel = a["block_norms"], a["selected"]
            k = len(sel)
            if 0 < k < len(norms):
                cut = norms[sel].min()
                rest = np.delete(norms, sel)
                hit["topk.tie_at_k_cut"] |= bool((rest == cut).any())
            hit["topk.k_equals_1"] |= k == 1
            hit["topk.k_equals_n_blocks"] |= k == len(norms) and k > 1
        if "payload" in a and _ran(passed, ENCODE, name) and _ran(passed, DECODE, name):
            lmax = 1 << int(meta.get("lmax_log2", 8))
            runs = _zero_runs(a["payload"])
            hit["zrle.run_at_lmax"] |= lmax in runs
            hit["zrle.run_over_lmax"] |= any(r > lmax for r in runs)
            hit["zrle.lmax_min_build"] |= int(meta.get("lmax_log2", 8)) <= 2
            hit["zrle.frame_ends_on_run"] |= bool(len(a["payload"]) and a["payload"][-1] == 0)
            hit["zrle.empty_layer"] |= int(meta.get("n", 1)) == 0
        err = meta.get("error") or meta.get("decode_error")
        if err and _ran(passed, DECODE, name):
            hit[f"decoder.err.{err.get('name') if isinstance(err, dict) else err}"] = True
    for case in load_exchange(golden):
        if not _ran(passed, EXCHANGE, case.name):
            continue
        err = case.meta.get("error")
        if err:
            hit[f"aggregate.err.{err['name']}"] = True
        else:
            hit["aggregate.ok"] = True
        hit["zrle.empty_layer"] |= int(case.meta.get("n", 1)) == 0
    return hit


def axi_bins(points) -> dict[str, bool]:
    """Back-pressure on every AXI channel of the engines, from the toggle points: AR, AW, W
    stalled (the memory's ready fell 1->0), R and B paused (the memory's valid fell 1->0)."""
    toggles = {}
    for pt, n in points.items():
        if pt.kind == "toggle":
            toggles[(pt.module, pt.comment)] = toggles.get((pt.module, pt.comment), 0) + n
    out = {}
    for mod, prefixes in AXI_PORTS.items():
        for pre in prefixes:
            for ch, sig in (("ar", "arready"), ("aw", "awready"), ("w", "wready"),
                            ("r", "rvalid"), ("b", "bvalid")):
                key = (mod, f"{pre}{sig}:1->0")
                out[f"{mod}.{pre}{ch}.stalled"] = toggles.get(key, 0) > 0
        for sig in ("m_frame_tready", "s_grad_tvalid", "s_tvalid"):
            if (mod, f"{sig}:1->0") in toggles:
                out[f"{mod}.{sig}.stalled"] = toggles[(mod, f"{sig}:1->0")] > 0
    return out


# reached by other tests, not by the golden set that `verify` runs (docs/hw.md, Coverage)
NOT_IN_VERIFY = ("engine.err.ERR_MEMORY", "reset.in_every_state")


def bins(golden: Path, passed: dict[str, set[str]], points) -> dict[str, bool]:
    out = stimulus_bins(Path(golden), passed)
    out.update(axi_bins(points))
    for name in NOT_IN_VERIFY:
        out[name] = False
    return out
