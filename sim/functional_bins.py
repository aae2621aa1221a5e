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

* testbench bins (`DEDICATED` below): what a cocotb test provoked and observed, written by
  the testbench itself with `record(...)` into the JSON-lines file named by TB_BINS, and only
  after the check that the DUT answered as it must (e.g. `decode_errors` records
  `decoder.err.CRC_MISMATCH` for a corrupted frame whose status carried exactly that code and
  word). `gradblock verify --coverage` runs the blocks' dedicated tests (sim/verify.py,
  DEDICATED_TESTS) under the same coverage build with TB_BINS set; a test that fails records
  nothing after its failing check and fails verify.

`bins(golden_dir, passed, points, recorded)` returns {bin name: hit}; every bin is listed
whether hit or not, so a bin that nothing reaches any more shows as missed.
"""
from __future__ import annotations

import json
import os
import re
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
    """Lengths of the runs of zeros (of `payload == 0`, i.e. of nonzero runs, given a mask)."""
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
        "zrle.run_at_lmax", "zrle.run_over_lmax", "zrle.zero_run_at_lmax", "zrle.lmax_min_build",
        "zrle.frame_ends_on_run",
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
            lits = _zero_runs(a["payload"] == 0)     # nonzero runs: what LMAX bounds (L)
            zeros = _zero_runs(a["payload"])
            hit["zrle.run_at_lmax"] |= lmax in lits
            hit["zrle.run_over_lmax"] |= any(r > lmax for r in lits)
            hit["zrle.zero_run_at_lmax"] |= lmax in zeros
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


# ------------------------------------------------------------------ testbench bins
BINS_ENV = "TB_BINS"           # the JSON-lines file a testbench appends its observed bins to
HW_DIR = Path(__file__).resolve().parent.parent / "hw"
# blocks whose main FSM (`typedef enum ... state_t`) must see a reset in every state: their
# `reset_in_every_state` cocotb test records reset.<block>.<STATE>
RESET_FSMS = ("compress_top", "compress_engine", "aggregate_engine")


# Which block's dedicated cocotb tests record each family of testbench bins (sim/verify.py's
# DEDICATED_TESTS must run them; tests/test_coverage.py checks both ways)
BIN_SOURCES: dict[str, tuple[str, tuple[str, ...]]] = {
    "decoder.err.": ("zrle_decoder", ("decode_errors",)),
    "engine.err.": ("compress_engine", ("config_errors", "misplaced_tlast", "memory_errors")),
    "top.err.": ("compress_top", ("config_errors", "misplaced_tlast")),
    "aggregate.err.": ("aggregate_engine", ("config_errors", "memory_errors")),
    "reset.compress_top.": ("compress_top", ("reset_in_every_state",)),
    "reset.compress_engine.": ("compress_engine", ("reset_in_every_state",)),
    "reset.aggregate_engine.": ("aggregate_engine", ("reset_in_every_state",)),
    "lanes.norm.": ("block_norm_lanes", ("boundary_cases",)),
    "lanes.enc.": ("zrle_lane_encoder", ("lane_sweep",)),
}


def source_of(name: str) -> tuple[str, tuple[str, ...]]:
    """(block, cocotb tests) that record testbench bin `name` (BIN_SOURCES)."""
    for prefix, src in BIN_SOURCES.items():
        if name.startswith(prefix):
            return src
    raise KeyError(f"no testbench records {name}")


def record(*names: str, path: str | None = None) -> None:
    """Called by a testbench after it has checked what it observed: append these bins to the
    file named by TB_BINS (nothing when it is unset, e.g. under pytest's own runs)."""
    path = path or os.environ.get(BINS_ENV, "")
    if not path or not names:
        return
    with open(path, "a") as fh:
        for n in names:
            fh.write(json.dumps({"bin": n}) + "\n")


def read_recorded(paths) -> set[str]:
    """The bins recorded in these TB_BINS files (missing files: none)."""
    out: set[str] = set()
    for p in paths:
        p = Path(p)
        if not p.is_file():
            continue
        for line in p.read_text().splitlines():
            line = line.strip()
            if line:
                out.add(json.loads(line)["bin"])
    return out


def fsm_states(block: str, hw_dir: Path = HW_DIR) -> list[str]:
    """The states of hw/<block>.sv's `typedef enum ... {...} state_t`, in declaration order."""
    text = re.sub(r"//[^\n]*", "", (Path(hw_dir) / f"{block}.sv").read_text())
    m = re.search(r"typedef\s+enum\b[^{]*\{([^}]*)\}\s*state_t\s*;", text)
    if not m:
        raise ValueError(f"hw/{block}.sv declares no `typedef enum ... state_t`")
    return [re.split(r"\s*=", s.strip())[0] for s in m.group(1).split(",") if s.strip()]


async def reset_in_every_state(dut, block: str, start, recover, limit: int, flush=None,
                               signal: str = "state") -> list[str]:
    """The cocotb driver of a `reset_in_every_state` test: for each state S of hw/<block>.sv's
    state_t, `start()` (a coroutine function) begins a layer in the background (not for the
    first state, IDLE: nothing runs), the FSM register `signal` is watched on every falling
    edge for up to `limit` cycles, and rst is raised as soon as it holds S, so that the rising
    edge that samples rst finds the FSM in S. While rst is high, `flush()` drops what the
    testbench's sources still hold (a cocotbext-axi source resumes its queue after a reset).
    Then `recover()` must run an exact layer (it
    raises otherwise); only after that is reset.<block>.<S> recorded. A state not reached
    within `limit` is reset anyway, recovered from and left unrecorded (the bin shows missed).
    Returns the states reached."""
    from cocotb import start_soon
    from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge
    states = fsm_states(block)
    fsm = getattr(dut, signal)
    reached = []
    for want, name in enumerate(states):
        task = start_soon(start()) if want else None
        hit = False
        for _ in range(limit):
            await FallingEdge(dut.clk)
            if int(fsm.value) == want:
                hit = True
                break
        dut.rst.value = 1
        await ClockCycles(dut.clk, 3)
        if task is not None and not task.done():
            task.cancel()
        if flush is not None:
            flush()
        dut.cfg_valid.value = 0
        dut.rst.value = 0
        await RisingEdge(dut.clk)
        await recover()
        if hit:
            record(f"reset.{block}.{name}")
            reached.append(name)
        dut._log.info("reset in %s: %s", name, "reached, exact layer after" if hit
                      else "never reached in this layer")
    return reached


def _codes(prefix: str) -> list[str]:
    from gradblock.hw.sv_constants import codes
    return list(codes(prefix))


# ------------------------------------------------------------------ lane positions (issue 31)
def norm_lanes() -> int:
    """W of block_norm_lanes' reference build (sim/duts.py): the build verify measures."""
    from .duts import DUTS
    return int(DUTS["block_norm_lanes"].parameters["W"])


def lane_norm_bins(w: int) -> list[str]:
    """block_norm_lanes' lane-position bins at W = w: a block closing in each lane (on a beat
    that is not the layer's last), several blocks closing in one beat, a block closing in
    every lane of one beat, and the layer's last beat keeping each of 1..w lanes."""
    return ([f"lanes.norm.close_lane{lane}" for lane in range(w)]
            + ["lanes.norm.closes_several", "lanes.norm.closes_every_lane"]
            + [f"lanes.norm.last_keep{k}" for k in range(1, w + 1)])


def lane_norm_observed(n: int, block_size: int, w: int) -> set[str]:
    """The lane_norm_bins a layer of n elements in blocks of block_size puts through
    block_norm_lanes at W = w (element i in beat i // w, lane i % w; a block closes at its
    last element, the layer's last element closing the short last block). The bench records
    them only after the layer's norms matched."""
    if n <= 0 or block_size <= 0:
        return set()
    ends = sorted({min(j + block_size, n) - 1 for j in range(0, n, block_size)})
    last_beat = (n - 1) // w
    out, per_beat = set(), {}
    for e in ends:
        per_beat[e // w] = per_beat.get(e // w, 0) + 1
        if e // w != last_beat:
            out.add(f"lanes.norm.close_lane{e % w}")
    for beat, count in per_beat.items():
        if count >= 2:
            out.add("lanes.norm.closes_several")
        if count == w:
            out.add("lanes.norm.closes_every_lane")
    out.add(f"lanes.norm.last_keep{(n - 1) % w + 1}")
    return out


def encoder_lanes() -> int:
    """W of zrle_lane_encoder's reference build (sim/duts.py)."""
    from .duts import DUTS
    return int(DUTS["zrle_lane_encoder"].parameters["W"])


def lane_run_bins(w: int) -> list[str]:
    """zrle_lane_encoder's lane-position bins at W = w: a token's zero run starting and ending
    in each lane, its literals starting and ending in each lane, literals crossing a beat
    boundary, and a zero run made of kept zero words and a zero-run beat together."""
    return ([f"lanes.enc.{what}_lane{lane}" for what in ("zero_start", "zero_end",
                                                          "lit_start", "lit_end")
             for lane in range(w)]
            + ["lanes.enc.lit_cross_beat", "lanes.enc.zero_mixed"])


def lane_run_observed(beats, lmax: int, w: int) -> set[str]:
    """The lane_run_bins an encoder input (beats as the bench plans them: ("zero", count) or
    ("data", start_lane, [words])) puts through zrle_lane_encoder at W = w, with the frame's
    tokens (codec.zrle.tokens at this LMAX): a word's lane is its lane in its beat; the words of
    a zero-run beat have none. The bench records them only after the frame matched."""
    from gradblock.codec.zrle import tokens
    lane_of, beat_of, words = [], [], []
    for b, beat in enumerate(beats):
        if beat[0] == "zero":
            lane_of += [-1] * beat[1]
            words += [0] * beat[1]
            beat_of += [b] * beat[1]
        else:
            lane_of += [beat[1] + i for i in range(len(beat[2]))]
            words += list(beat[2])
            beat_of += [b] * len(beat[2])
    if not words:
        return set()
    payload = np.array(words, dtype=np.uint32).view(np.int32)
    out: set[str] = set()

    def at(what: str, i: int) -> None:
        if lane_of[i] >= 0:
            out.add(f"lanes.enc.{what}_lane{lane_of[i] % w}")

    for z, L, s in zip(*tokens(payload, lmax)):
        z, L, s = int(z), int(L), int(s)
        if z:
            at("zero_start", s - z)
            at("zero_end", s - 1)
            kinds = {lane_of[i] >= 0 for i in range(s - z, s)}
            if len(kinds) == 2:
                out.add("lanes.enc.zero_mixed")
        if L:
            at("lit_start", s)
            at("lit_end", s + L - 1)
            if beat_of[s] != beat_of[s + L - 1]:
                out.add("lanes.enc.lit_cross_beat")
    return out


def dedicated_bins(recorded: set[str], hw_dir: Path = HW_DIR) -> dict[str, bool]:
    """The bins only dedicated cocotb tests reach, each hit when a testbench recorded it:
    every frame error on the decoder (decode_errors), every compress_engine and compress_top
    error code (config_errors, misplaced_tlast, memory_errors), aggregate_engine's
    configuration and memory errors, a reset in every state of each RESET_FSMS block,
    block_norm_lanes' lane positions (boundary_cases) and zrle_lane_encoder's (lane_sweep),
    each at its reference build's W."""
    names = [f"decoder.err.{e}" for e in FRAME_ERRORS]
    names += [f"engine.err.{e}" for e in _codes("ENGINE_ERR_")]
    names += [f"top.err.{e}" for e in _codes("TOP_ERR_")]
    names += [f"aggregate.err.{e}" for e in _codes("AGG_ERR_") if e not in EXCHANGE_ERRORS]
    names += [f"reset.{b}.{s}" for b in RESET_FSMS for s in fsm_states(b, hw_dir)]
    names += lane_norm_bins(norm_lanes())
    names += lane_run_bins(encoder_lanes())
    return {n: n in recorded for n in names}


def bins(golden: Path, passed: dict[str, set[str]], points,
         recorded: set[str] | None = None, hw_dir: Path = HW_DIR) -> dict[str, bool]:
    """hw_dir: the RTL the runs were built from (verify --coverage builds from a snapshot)."""
    out = stimulus_bins(Path(golden), passed)
    out.update(axi_bins(points))
    for name, hit in dedicated_bins(set(recorded or ()), hw_dir).items():
        out[name] = out.get(name, False) or hit
    return out
