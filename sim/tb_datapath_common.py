"""Shared pieces of the datapath cocotb testbenches (tb_quantiser, tb_ef_add, tb_block_l1,
tb_topk_select, tb_compress_top): case loading, clock and reset, AXI-Stream endpoints with
random backpressure, word-for-word comparison, throughput records.

Environment (set by tests/test_rtl_datapath.py or `gradblock verify` through sim.harness):
  TB_GOLDEN_DIRS  golden-format directories (manifest.json + <case>.npz), os.pathsep-separated
  TB_CASES        comma-separated case names to run (default: every case listing the stage)
  TB_PAUSES       comma-separated pause probabilities applied to inputs and outputs (default 0,0.5)
  TB_METRICS      JSON-lines file; throughput measurements are appended to it
  TB_SEED         seed of the pause generators (default 1)
"""
from __future__ import annotations

import json
import logging
import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import cocotb
from cocotb.clock import Clock
from cocotb.simtime import convert
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamMonitor, AxiStreamSink, AxiStreamSource

CLOCK_NS = 10

# RTL module -> the golden manifest's stage name
STAGE_OF = {"quantiser": "quantiser", "ef_add": "feedback", "block_l1": "norms",
            "topk_select": "select", "compress_top": "top"}


@dataclass
class Case:
    name: str
    meta: dict
    arrays: dict


def _golden_dirs() -> list[Path]:
    raw = os.environ.get("TB_GOLDEN_DIRS", "")
    dirs = [Path(d) for d in raw.split(os.pathsep) if d]
    if not dirs:
        raise RuntimeError("TB_GOLDEN_DIRS is not set: no golden vectors to check against")
    for d in dirs:
        if not (d / "manifest.json").is_file():
            raise FileNotFoundError(f"{d}: no manifest.json (not a golden vector directory)")
    return dirs


def load_cases(module: str) -> list[Case]:
    """Every case whose "stages" lists this module's stage, from all golden directories,
    narrowed to TB_CASES when set. An empty selection is an error, never a silent pass."""
    stage = STAGE_OF[module]
    wanted = {c for c in os.environ.get("TB_CASES", "").split(",") if c}
    cases = []
    for d in _golden_dirs():
        manifest = json.loads((d / "manifest.json").read_text())
        if manifest.get("format") != "gradblock-golden":
            raise ValueError(f"{d}/manifest.json: format {manifest.get('format')!r}")
        for meta in manifest["cases"]:
            if stage not in meta["stages"] or (wanted and meta["name"] not in wanted):
                continue
            with np.load(d / meta["npz"], allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            cases.append(Case(meta["name"], meta, arrays))
    if not cases:
        raise RuntimeError(f"no golden case lists stage {stage!r}"
                           + (f" among {sorted(wanted)}" if wanted else ""))
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


def pause_ratios() -> list[float]:
    ratios = [float(x) for x in os.environ.get("TB_PAUSES", "0,0.5").split(",") if x]
    for r in ratios:
        if not 0.0 <= r < 1.0:
            raise ValueError(f"TB_PAUSES: pause probability {r} outside [0, 1)")
    return ratios


def pause_generator(ratio: float, salt: int):
    """Endless random pause pattern: True (hold off) with probability `ratio`."""
    rng = random.Random(int(os.environ.get("TB_SEED", "1")) * 1000003 + salt)
    while True:
        yield rng.random() < ratio


async def start(dut) -> None:
    """Clock running, reset applied for a few cycles and released. Create the AXI-Stream
    endpoints first: they drive tvalid/tready low, which the first edge after reset samples."""
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    await reset(dut)


async def reset(dut, cycles: int = 4) -> None:
    dut.rst.value = 1
    await ClockCycles(dut.clk, cycles)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


def _quiet(endpoint):
    # cocotbext-axi logs whole frames (at INFO, and at WARNING when a reset flushes one):
    # far too much for layer-sized frames; the testbenches report what matters themselves
    endpoint.log.setLevel(logging.ERROR)
    return endpoint


def source(dut, prefix: str):
    bus = AxiStreamBus.from_prefix(dut, prefix)
    return _quiet(AxiStreamSource(bus, dut.clk, dut.rst, byte_lanes=1))


def sink(dut, prefix: str):
    bus = AxiStreamBus.from_prefix(dut, prefix)
    return _quiet(AxiStreamSink(bus, dut.clk, dut.rst, byte_lanes=1))


def monitor(dut, prefix: str):
    bus = AxiStreamBus.from_prefix(dut, prefix)
    return _quiet(AxiStreamMonitor(bus, dut.clk, dut.rst, byte_lanes=1))


def set_pauses(endpoints, ratio: float, salt: int) -> None:
    """Same ratio, independent patterns, on every endpoint (ratio 0 removes pausing)."""
    for i, ep in enumerate(endpoints):
        if ratio > 0:
            ep.set_pause_generator(pause_generator(ratio, salt * 16 + i))
        else:
            ep.clear_pause_generator()


def check_words(case: str, what: str, expected, actual, width: int = 32) -> None:
    """Word-for-word comparison; the failure names the case, the first differing word index
    and both values in hex (and how many words differ in all)."""
    exp = [int(x) & ((1 << width) - 1) for x in np.asarray(expected).reshape(-1).tolist()]
    act = [int(x) & ((1 << width) - 1) for x in actual]
    digits = (width + 3) // 4
    if len(exp) != len(act):
        common = min(len(exp), len(act))
        first = next((i for i in range(common) if exp[i] != act[i]), common)
        raise AssertionError(f"case {case}: {what}: {len(act)} words, expected {len(exp)} "
                             f"(first difference at word {first})")
    bad = [i for i in range(len(exp)) if exp[i] != act[i]]
    if bad:
        i = bad[0]
        raise AssertionError(f"case {case}: {what} word {i}: expected 0x{exp[i]:0{digits}x}, "
                             f"actual 0x{act[i]:0{digits}x} ({len(bad)} of {len(exp)} words differ)")


def check_value(case: str, what: str, expected: int, actual: int) -> None:
    if int(expected) != int(actual):
        raise AssertionError(f"case {case}: {what}: expected {int(expected)} (0x{int(expected):x}), "
                             f"actual {int(actual)} (0x{int(actual):x})")


def frame_cycles(frame) -> int:
    """Clock cycles from a frame's first to its last beat, both included (cocotbext-axi stamps
    frames in simulator steps)."""
    span_ns = convert(frame.sim_time_end - frame.sim_time_start, "step", to="ns")
    return round(span_ns / CLOCK_NS) + 1


def record_metric(module: str, stream: str, case: str, words: int, cycles: int) -> None:
    path = os.environ.get("TB_METRICS")
    if not path:
        return
    line = {"module": module, "stream": stream, "case": case, "words": words, "cycles": cycles,
            "cycles_per_word": cycles / words if words else None,
            "sim": cocotb.SIM_NAME}
    with open(path, "a") as fh:
        fh.write(json.dumps(line) + "\n")
