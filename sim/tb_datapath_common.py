"""Shared pieces of the datapath cocotb testbenches (tb_quantiser, tb_ef_add, tb_block_l1,
tb_topk_select, tb_compress_top): golden case loading, AXI-Stream endpoints with random
idle/backpressure, the per-case golden loop, word-for-word comparison, throughput records.

Settings come from the environment, with the conventions of sim/tb_util.py (so that
`gradblock verify` drives these testbenches like the codec ones):
  TB_GOLDEN_DIR     a golden directory (manifest.json + <case>.npz)
  TB_GOLDEN_DIRS    more of them, os.pathsep-separated (e.g. the shared set + datapath extras)
  TB_CASES          comma-separated case names to keep (default: every case listing the stage)
  TB_MIN_N/TB_MAX_N keep only cases with TB_MIN_N <= n <= TB_MAX_N
  TB_TRAFFIC        "in:out,..." idle probability on inputs, backpressure probability on outputs
  TB_METRICS        JSON list the throughput measurements are appended to
  TB_CASE_RESULTS   JSON list of per-case pass/fail/skip records
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cocotb.simtime import convert
from cocotb.triggers import ClockCycles, RisingEdge, SimTimeoutError, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamMonitor, AxiStreamSink, AxiStreamSource

from gradblock.refmodel.golden_format import load_npz, read_manifest
from gradblock.sim import tb_util

CLOCK_NS = tb_util.CLOCK_NS
DEFAULT_TRAFFIC = "0:0,0.3:0,0:0.5,0.6:0.7"

# RTL module -> the golden manifest's stage name
STAGE_OF = {"quantiser": "quantiser", "ef_add": "feedback", "block_l1": "norms",
            "topk_select": "select", "compress_top": "top"}


@dataclass
class Case:
    name: str
    meta: dict
    arrays: dict


# ------------------------------------------------------------------ cases
def golden_dirs() -> list[Path]:
    raw = [os.environ.get("TB_GOLDEN_DIR", "")] + os.environ.get("TB_GOLDEN_DIRS", "").split(
        os.pathsep)
    dirs = [Path(d) for d in raw if d]
    if not dirs:
        raise RuntimeError("neither TB_GOLDEN_DIR nor TB_GOLDEN_DIRS is set: "
                           "no golden vectors to check against")
    for d in dirs:
        if not (d / "manifest.json").is_file():
            raise FileNotFoundError(f"{d}: no manifest.json (not a golden vector directory)")
    return dirs


def load_cases(module: str) -> list[Case]:
    """Every case whose "stages" lists this module's stage, from all golden directories,
    narrowed by TB_CASES and TB_MIN_N/TB_MAX_N. An empty selection is an error, never a pass."""
    stage = STAGE_OF[module]
    wanted = {c for c in os.environ.get("TB_CASES", "").split(",") if c}
    lo, hi = tb_util.env_int("TB_MIN_N", 0), tb_util.env_int("TB_MAX_N", 2**32)
    cases, seen = [], set()
    for d in golden_dirs():
        for meta in read_manifest(d)["cases"]:       # validated against the golden schema
            seen.add(meta["name"])
            if stage not in meta["stages"] or (wanted and meta["name"] not in wanted):
                continue
            if not lo <= meta["n"] <= hi:
                continue
            cases.append(Case(meta["name"], meta, load_npz(d, meta)))
    unknown = sorted(wanted - seen)
    if unknown:
        raise ValueError(f"TB_CASES names unknown cases: {unknown}")
    if not cases:
        raise RuntimeError(f"no golden case lists stage {stage!r} within the selection "
                           f"(TB_CASES={sorted(wanted) or 'all'}, n in [{lo}, {hi}])")
    return cases


def nonempty(cases: list[Case]) -> list[Case]:
    """Cases with at least one element: an empty layer has no beat to carry tlast, so there is
    nothing to stream through a single stage (compress_top handles n = 0 itself)."""
    return [c for c in cases if c.meta["n"] > 0]


def medium_case(cases: list[Case], limit: int = 512) -> Case:
    """The largest case of at most `limit` elements (the smallest one if none is that small):
    long enough to have words in flight everywhere, short enough for every simulator."""
    small = [c for c in cases if c.meta["n"] <= limit]
    return max(small, key=lambda c: c.meta["n"]) if small else min(cases, key=lambda c: c.meta["n"])


# ------------------------------------------------------------------ clock, reset, endpoints
async def start(dut) -> None:
    """Clock running, reset applied and released. Create the AXI-Stream endpoints first: they
    drive tvalid/tready low, which the first edge after reset samples."""
    await tb_util.start(dut, reset_cycles=4)


async def reset(dut, cycles: int = 4) -> None:
    dut.rst.value = 1
    await ClockCycles(dut.clk, cycles)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


def source(dut, prefix: str):
    bus = AxiStreamBus.from_prefix(dut, prefix)
    ep = AxiStreamSource(bus, dut.clk, dut.rst, byte_lanes=1)
    tb_util.quiet(ep)
    return ep


def sink(dut, prefix: str):
    bus = AxiStreamBus.from_prefix(dut, prefix)
    ep = AxiStreamSink(bus, dut.clk, dut.rst, byte_lanes=1)
    tb_util.quiet(ep)
    return ep


def monitor(dut, prefix: str):
    bus = AxiStreamBus.from_prefix(dut, prefix)
    ep = AxiStreamMonitor(bus, dut.clk, dut.rst, byte_lanes=1)
    tb_util.quiet(ep)
    return ep


def traffic() -> list[tuple[float, float]]:
    return tb_util.traffic_profiles(DEFAULT_TRAFFIC)


def set_traffic(inputs, outputs, p_in: float, p_out: float, salt: int) -> None:
    """Random idle cycles on the sources, random tready-low cycles on the sinks, each endpoint
    with its own pattern; a probability of 0 removes pausing."""
    for i, (ep, p) in enumerate([(e, p_in) for e in inputs] + [(e, p_out) for e in outputs]):
        if p > 0:
            ep.set_pause_generator(tb_util.pause_generator(p, random.Random(salt * 97 + i)))
        else:
            ep.clear_pause_generator()
            ep.pause = False     # clearing the generator leaves its last value in place


def no_traffic(endpoints) -> None:
    set_traffic(endpoints, [], 0.0, 0.0, 0)


async def recv(endpoint, words: int, what: str):
    """The next frame from a sink or monitor, or a failure (not a hang) when it does not come
    within a generous bound: 50 cycles per expected word plus 5000."""
    limit = (50 * words + 5000) * CLOCK_NS
    try:
        return await with_timeout(endpoint.recv(), limit, "ns")
    except SimTimeoutError:
        raise AssertionError(f"{what}: no complete frame of {words} words within {limit} ns "
                             "(stalled, or tlast lost)") from None


def drain(*sinks) -> None:
    """Drop frames a sink completed before a reset or a failure."""
    for s in sinks:
        while not s.empty():
            s.recv_nowait()


# ------------------------------------------------------------------ checks
def check_words(case: str, what: str, expected, actual, width: int = 32) -> None:
    """Word-for-word comparison; the failure names the case, the first differing word index
    and both values in hex (and how many words differ in all)."""
    mask = (1 << width) - 1
    exp = [int(x) & mask for x in np.asarray(list(expected) if isinstance(expected, range)
                                             else expected).reshape(-1).tolist()]
    act = [int(x) & mask for x in actual]
    digits = (width + 3) // 4
    common = min(len(exp), len(act))
    bad = [i for i in range(common) if exp[i] != act[i]]
    if bad:
        i = bad[0]
        raise AssertionError(f"case {case}: {what} word {i}: expected 0x{exp[i]:0{digits}x}, "
                             f"actual 0x{act[i]:0{digits}x} ({len(bad)} of {common} words differ"
                             + (f"; {len(act)} words received, {len(exp)} expected)"
                                if len(exp) != len(act) else ")"))
    if len(exp) != len(act):
        raise AssertionError(f"case {case}: {what}: {len(act)} words received, {len(exp)} "
                             f"expected (the first {common} agree)")


def check_value(case: str, what: str, expected: int, actual: int) -> None:
    if int(expected) != int(actual):
        raise AssertionError(f"case {case}: {what}: expected {int(expected)} "
                             f"(0x{int(expected):x}), actual {int(actual)} (0x{int(actual):x})")


def user_words(frame) -> list[int]:
    """Per-beat tuser of a received frame (cocotbext-axi folds a constant tuser to one int)."""
    return frame.tuser if isinstance(frame.tuser, list) else [frame.tuser] * len(frame.tdata)


class Refused(str):
    """run_case's answer for a case this build cannot hold (it checked the refusal itself):
    recorded as a skip, with the reason, since the case's outputs were not compared."""


async def golden_loop(dut, module: str, cases: list[Case], run_case, inputs, outputs,
                      skip=None) -> None:
    """Run `run_case(case)` (which raises AssertionError on a mismatch and may return a remark
    string, or a Refused when the build cannot hold the case and duly refused it) for every
    case under
    every traffic profile, layer after layer without reset. A failure is recorded, the DUT is
    reset, and the loop goes on, so every case gets a verdict; TB_CASE_RESULTS receives one
    record per case and the test fails at the end if any case did.
    `skip(case)` may return a reason to leave a case out."""
    verdict: dict[str, tuple[str, str]] = {}
    failures = []
    for salt, (p_in, p_out) in enumerate(traffic()):
        set_traffic(inputs, outputs, p_in, p_out, salt)
        for case in cases:
            reason = skip(case) if skip else None
            if reason:
                verdict[case.name] = ("skip", reason)
                continue
            if verdict.get(case.name, ("pass",))[0] == "fail":
                continue
            try:
                note = await run_case(case)
                if isinstance(note, Refused):
                    verdict.setdefault(case.name, ("skip", str(note)))
                else:     # a str is a remark for the verdict
                    verdict.setdefault(case.name, ("pass", note if isinstance(note, str) else ""))
            except AssertionError as e:
                detail = f"traffic {p_in}:{p_out}: {e}"
                verdict[case.name] = ("fail", detail)
                failures.append(detail)
                dut._log.error(detail)
                await reset(dut)
                drain(*outputs)
    tb_util.write_case_results(module, verdict)
    if failures:
        raise AssertionError(f"{len(failures)} of {len(cases)} cases failed; first: {failures[0]}")
    if not any(v[0] == "pass" for v in verdict.values()):
        raise AssertionError(f"no case could run: {sorted(set(v[1] for v in verdict.values()))}")


# ------------------------------------------------------------------ throughput
def frame_cycles(frame) -> int:
    """Clock cycles from a frame's first to its last beat, both included (cocotbext-axi stamps
    frames in simulator steps)."""
    span_ns = convert(frame.sim_time_end - frame.sim_time_start, "step", to="ns")
    return round(span_ns / CLOCK_NS) + 1


def record_metric(module: str, stream: str, case: str, words: int, cycles: int) -> None:
    import cocotb
    tb_util.write_metrics({"module": module, "stream": stream, "case": case, "words": words,
                           "cycles": cycles,
                           "cycles_per_word": round(cycles / words, 4) if words else None,
                           "sim": cocotb.SIM_NAME})
