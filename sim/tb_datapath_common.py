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

import cocotb
from cocotb.simtime import convert
from cocotb.triggers import ClockCycles, RisingEdge, SimTimeoutError, with_timeout
from cocotbext.axi import (AxiStreamBus, AxiStreamFrame, AxiStreamMonitor, AxiStreamSink,
                           AxiStreamSource)

from gradblock.refmodel.golden_format import load_npz, read_manifest
from gradblock.sim import tb_util
from gradblock.sim.duts import stage_of

CLOCK_NS = tb_util.CLOCK_NS
DEFAULT_TRAFFIC = "0:0,0.3:0,0:0.5,0.6:0.7"



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


def load_cases(module: str, stage: str | None = None) -> list[Case]:
    """Every case whose "stages" lists `stage` (default: the module's, sim/duts.py), from all
    golden directories, narrowed by TB_CASES and TB_MIN_N/TB_MAX_N. An empty selection is an
    error, never a pass."""
    stage = stage_of(module) if stage is None else stage
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


def traffic_test(func):
    """Register the cocotb test `func(dut, traffic)` once per TB_TRAFFIC profile (verilog-axis
    TestFactory style, with cocotb 2's parametrize): tests named `<func>/traffic=idle<p>_bp<q>`,
    each passing or failing on its own."""
    return tb_util.traffic_test(func, DEFAULT_TRAFFIC)


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
                      traffic: tuple[float, float], skip=None) -> None:
    """Run `run_case(case)` for every case under one traffic profile, layer after layer
    without reset. `run_case` raises AssertionError on a mismatch and may return a remark
    string, or a Refused when the build cannot hold the case and duly refused it.
    A failure is recorded, the DUT is reset, and the loop goes on, so every case gets a
    verdict; TB_CASE_RESULTS receives one record per case (tagged with the profile) and the
    test fails at the end if any case did. `skip(case)` may return a reason to leave a case out.
    Each profile is its own cocotb test (traffic_test), so one failing profile hides no other."""
    p_in, p_out = traffic
    verdict: dict[str, tuple[str, str]] = {}
    failures = []
    set_traffic(inputs, outputs, p_in, p_out, salt=int(p_in * 1000) * 7 + int(p_out * 1000))
    for case in cases:
        reason = skip(case) if skip else None
        if reason:
            verdict[case.name] = ("skip", reason)
            continue
        try:
            note = await run_case(case)
            if isinstance(note, Refused):
                verdict[case.name] = ("skip", str(note))
            else:     # a str is a remark for the verdict
                verdict[case.name] = ("pass", note if isinstance(note, str) else "")
        except AssertionError as e:
            detail = f"traffic {p_in}:{p_out}: {e}"
            verdict[case.name] = ("fail", detail)
            failures.append(detail)
            dut._log.error(detail)
            await reset(dut)
            drain(*outputs)
    tb_util.write_case_results(module, verdict)
    if failures:
        raise AssertionError(f"{len(failures)} of {len(cases)} cases failed under traffic "
                             f"{p_in}:{p_out}; first: {failures[0]}")
    if not any(v[0] == "pass" for v in verdict.values()):
        raise AssertionError(f"no case could run: {sorted(set(v[1] for v in verdict.values()))}")


# ------------------------------------------------------------------ throughput
def frame_cycles(frame) -> int:
    """Clock cycles from a frame's first to its last beat, both included (cocotbext-axi stamps
    frames in simulator steps)."""
    span_ns = convert(frame.sim_time_end - frame.sim_time_start, "step", to="ns")
    return round(span_ns / CLOCK_NS) + 1


def record_metric(module: str, stream: str, case: str, words: int, cycles: int) -> None:
    tb_util.write_metrics({"module": module, "stream": stream, "case": case, "words": words,
                           "cycles": cycles,
                           "cycles_per_word": round(cycles / words, 4) if words else None,
                           "sim": cocotb.SIM_NAME})


# ------------------------------------------------------------------ single-stage testbenches
class StageBench:
    """The one testbench of a single datapath stage (quantiser, ef_add, block_l1): one input
    stream `s`, one output stream `m`, one beat per element in. A stage describes only what
    differs: `frame(case, seed)` (the input beats, configuration applied), `check(case, rx,
    sent)` (compare the output with the golden arrays) and, where it must, the reset and
    throughput expectations below. stage_tests() turns a subclass into the cocotb tests."""

    module = ""
    # a reset drops every output frame in flight; block_l1 instead keeps norms of blocks that
    # finished before the reset (legitimate output), so the sink is drained, not checked empty
    reset_clears_output = True

    def __init__(self, dut):
        self.dut = dut
        self.src, self.snk = source(dut, "s"), sink(dut, "m")

    def frame(self, case, seed: int) -> AxiStreamFrame:
        raise NotImplementedError

    def check(self, case, rx, sent: AxiStreamFrame) -> None:
        raise NotImplementedError

    def send(self, case, seed: int = 0) -> AxiStreamFrame:
        sent = self.frame(case, seed)
        self.src.send_nowait(sent)
        return sent

    async def run_case(self, case, seed: int = 0):
        sent = self.send(case, seed)
        rx = await recv(self.snk, case.meta["n"], f"case {case.name}: {self.module} output")
        self.check(case, rx, sent)
        return rx

    def throughput_cases(self, cases: list[Case]) -> list[Case]:
        return [medium_case(cases)]

    def check_rate(self, case, tx, rx) -> None:
        """Unthrottled: one beat per cycle in and out (a stage with other output counts
        overrides this)."""
        n = case.meta["n"]
        for stream, frame in (("in", tx), ("out", rx)):
            cycles = frame_cycles(frame)
            record_metric(self.module, stream, case.name, n, cycles)
            assert cycles == n, f"{stream}: {n} words took {cycles} cycles, expected {n}"


def _named(test, name: str, module: str):
    test.name, test.module = name, module
    return test


def stage_tests(bench_cls: type[StageBench], module: str) -> dict:
    """The cocotb tests of a single-stage testbench, for its module's globals():
    golden_cases (one test per traffic profile), reset_mid_stream and throughput. `module` is
    the test module's __name__ (cocotb names and filters tests by it)."""
    stage = bench_cls.module

    async def golden_cases(dut, traffic):
        """Every case under this traffic profile, one layer after another."""
        tb = bench_cls(dut)
        await start(dut)
        await golden_loop(dut, stage, load_cases(stage), tb.run_case, [tb.src], [tb.snk],
                          traffic,
                          skip=lambda c: None if c.meta["n"] else "empty layer: no beat to send")

    async def reset_mid_stream(dut):
        """A reset with words in flight, then a clean run of a case that must match exactly."""
        tb = bench_cls(dut)
        await start(dut)
        case = medium_case(nonempty(load_cases(stage)))
        set_traffic([tb.src], [tb.snk], 0.3, 0.3, 7)
        tb.send(case, 1)
        await ClockCycles(dut.clk, max(3, case.meta["n"] // 3))
        await reset(dut)
        await ClockCycles(dut.clk, 2)
        if tb.reset_clears_output:
            assert tb.snk.empty(), "the sink holds a complete frame from before the reset"
        else:
            drain(tb.snk)
        no_traffic([tb.src, tb.snk])
        await tb.run_case(case, 2)
        await ClockCycles(dut.clk, 2)
        assert dut.m_tvalid.value == 0, "a word left in the pipeline after the last one"

    async def throughput(dut):
        """Unthrottled streams: cycles per beat in and out (TB_METRICS)."""
        tb = bench_cls(dut)
        mon = monitor(dut, "s")
        await start(dut)
        for case in tb.throughput_cases(nonempty(load_cases(stage))):
            rx = await tb.run_case(case)
            tx = await recv(mon, case.meta["n"], "input monitor")
            tb.check_rate(case, tx, rx)

    for f in (golden_cases, reset_mid_stream, throughput):
        f.__qualname__ = f.__name__
        f.__module__ = module
    return {"golden_cases": _named(tb_util.traffic_test(golden_cases, DEFAULT_TRAFFIC),
                                   "golden_cases", module),
            "reset_mid_stream": _named(cocotb.test(reset_mid_stream), "reset_mid_stream", module),
            "throughput": _named(cocotb.test(throughput), "throughput", module)}
