"""The one library of the cocotb testbenches (they run inside the simulator, launched by
sim/harness.py): settings from environment variables, traffic (idle/backpressure) profiles,
clock and reset, a word-level handshake recorder, test cases (the codec's golden or synthetic
ones; golden vectors of a stage), AXI-Stream endpoints, the per-case golden loop, mismatch
reports that name the case, word index and both values in hex, throughput and per-case records,
the single-stage testbench (StageBench) and the AXI4-master engine bench (AxiEngineBench).

Environment variables read here (set through run_rtl(env=...); `gradblock verify` drives every
testbench through them):
  TB_GOLDEN_DIR   a `gradblock golden` directory (manifest.json + <case>.npz); without it the
                  codec testbenches generate synthetic cases
  TB_GOLDEN_DIRS  more of them, os.pathsep-separated (e.g. the shared set + datapath extras)
  TB_SYNTHETIC    which synthetic cases: "edge" (default: the token grammar's edge cases for
                  each TB_LMAX_LOG2) or "long" (a 36864-element layer)
  TB_CASES        comma-separated case names to keep (default: all)
  TB_MIN_N, TB_MAX_N  keep only cases with TB_MIN_N <= n <= TB_MAX_N (long cases apart)
  TB_TRAFFIC      profiles "in:out,in:out,...": probability of an idle input cycle and of a
                  backpressure (tready low) output cycle; default "0:0,0.3:0,0:0.5,0.6:0.7"
  TB_LMAX_LOG2    comma-separated lmax_log2 values for synthetic cases (default 1,2,3,8)
  TB_METRICS      JSON file the testbench writes measurements to (cycle counts)
  TB_CASE_RESULTS JSON file the testbench writes one pass/fail/skip record per case to
                  (what `gradblock verify` tabulates)
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import cocotb
from cocotb.clock import Clock
from cocotb.simtime import convert
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, SimTimeoutError, with_timeout
from cocotb.utils import get_sim_time
from cocotbext.axi import (AxiBus, AxiRam, AxiStreamBus, AxiStreamFrame, AxiStreamMonitor,
                           AxiStreamSink, AxiStreamSource)

from gradblock.codec import zrle
from gradblock.golden.format import load_npz, read_manifest
from gradblock.sim.duts import stage_of

CLOCK_NS = 10
DEFAULT_TRAFFIC = "0:0,0.3:0,0:0.5,0.6:0.7"
RESET_CYCLES = 4          # the stream testbenches' reset (start_streams, reset)


# ------------------------------------------------------------------ settings
def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    try:
        return int(raw) if raw else default
    except ValueError as exc:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from exc


def hdl_parameter(name: str, dut=None) -> int:
    """The value of HDL parameter `name` the design was built with: the runner's record of the
    build (sim.harness passes the parameters it built with), else the DUT's own handle (a
    parameter left at its default). Never a hand-kept copy."""
    built = json.loads(os.environ.get("GRADBLOCK_HDL_PARAMETERS", "") or "{}")
    if name in built:
        return int(built[name])
    dut = cocotb.top if dut is None else dut
    handle = getattr(dut, name, None)
    if handle is None:
        raise RuntimeError(f"HDL parameter {name} is neither in the runner's build record nor "
                           f"visible on the DUT {dut._name}")
    return int(handle.value)


def wanted_cases() -> set[str]:
    """The case names TB_CASES keeps (empty: every case)."""
    return {c for c in env_str("TB_CASES").split(",") if c}


def n_bounds() -> tuple[int, int]:
    """(TB_MIN_N, TB_MAX_N): the element counts a case may have."""
    return env_int("TB_MIN_N", 0), env_int("TB_MAX_N", 2**32)


def traffic_profiles(default: str = DEFAULT_TRAFFIC) -> list[tuple[float, float]]:
    """(input idle probability, output backpressure probability) pairs from TB_TRAFFIC."""
    out = []
    for item in env_str("TB_TRAFFIC", default).split(","):
        try:
            a, b = (float(x) for x in item.split(":"))
        except ValueError as exc:
            raise ValueError(f"TB_TRAFFIC entries look like 0.3:0.5, got {item!r}") from exc
        if not (0 <= a < 1 and 0 <= b < 1):
            raise ValueError(f"TB_TRAFFIC probabilities must be in [0, 1), got {item!r}")
        out.append((a, b))
    return out


def traffic_test(func, default: str = DEFAULT_TRAFFIC):
    """`func(dut, traffic)` as one cocotb test per traffic profile of TB_TRAFFIC (read when the
    test module is imported, inside the simulator; verilog-axis TestFactory style, with cocotb
    2's parametrize): `<func>/traffic=idle0.3_bp0.5`, ... A profile that fails is reported on
    its own and the other profiles still run."""
    params = [cocotb.Param((a, b), f"idle{a}_bp{b}") for a, b in traffic_profiles(default)]
    return cocotb.test(cocotb.parametrize(traffic=params)(func))


def pause_generator(probability: float, rng: random.Random):
    """Endless stream of pause flags: True (idle / not ready) with the given probability."""
    while True:
        yield probability > 0 and rng.random() < probability


def quiet(*drivers) -> None:
    """cocotbext-axi logs every frame, payload and all (at INFO, and at WARNING when a reset
    flushes one); keep only errors. Its use of the deprecated task.kill() is not ours to fix."""
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.axi")
    for d in drivers:
        d.log.setLevel(logging.ERROR)


def set_traffic(inputs, outputs, p_in: float, p_out: float, salt: int) -> None:
    """Random idle cycles on the sources, random tready-low cycles on the sinks, each endpoint
    with its own pattern; a probability of 0 removes pausing."""
    for i, (ep, p) in enumerate([(e, p_in) for e in inputs] + [(e, p_out) for e in outputs]):
        if p > 0:
            ep.set_pause_generator(pause_generator(p, random.Random(salt * 97 + i)))
        else:
            ep.clear_pause_generator()
            ep.pause = False     # clearing the generator leaves its last value in place


def no_traffic(endpoints) -> None:
    set_traffic(endpoints, [], 0.0, 0.0, 0)


IDLE_INPUTS = ("s_tvalid", "cfg_valid")


async def start(dut, reset_cycles: int = 3) -> None:
    """Start the clock and apply a synchronous reset. Input valids are dropped first: a value
    left by an earlier test would otherwise be taken on the first cycle after reset."""
    for name in IDLE_INPUTS:
        if hasattr(dut, name):
            getattr(dut, name).value = 0
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    await reset(dut, reset_cycles)


async def start_streams(dut) -> None:
    """start() for the stream testbenches (datapath, engines): clock running, a RESET_CYCLES
    reset applied and released. Create the AXI-Stream endpoints first: they drive tvalid/tready
    low, which the first edge after reset samples."""
    await start(dut, reset_cycles=RESET_CYCLES)


async def reset(dut, cycles: int = RESET_CYCLES) -> None:
    """Synchronous reset: rst high for `cycles` cycles, released, one more edge."""
    dut.rst.value = 1
    await ClockCycles(dut.clk, cycles)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


async def reset_endpoints_idle(dut, *endpoints, cycles: int = 2) -> None:
    """A reset in the middle of traffic: rst high for `cycles` cycles, the testbench's
    endpoints cleared (what they held belongs to the aborted frame), and the output stream
    seen idle (m_tvalid low) on the first edge after the release."""
    dut.rst.value = 1
    await ClockCycles(dut.clk, cycles)
    dut.rst.value = 0
    for ep in endpoints:
        ep.clear()
    await RisingEdge(dut.clk)
    await ReadOnly()
    assert dut.m_tvalid.value == 0, "m_tvalid high right after reset"
    await RisingEdge(dut.clk)


# ------------------------------------------------------------------ handshake recorder
def cycle_now() -> int:
    """Number of the current clock cycle, from simulation time (the same for every coroutine
    woken by one edge, unlike a counter that depends on their order)."""
    return int(get_sim_time("ns")) // CLOCK_NS


class WordRecorder:
    """Records every valid&ready handshake on <prefix>_tdata/_tvalid/_tready[/_tlast] with its
    clock cycle (see `cycle_now`), so tests can check order, count and timing independently of
    the sink."""

    def __init__(self, dut, prefix: str):
        self.clk = dut.clk
        self.data = getattr(dut, f"{prefix}_tdata")
        self.valid = getattr(dut, f"{prefix}_tvalid")
        self.ready = getattr(dut, f"{prefix}_tready")
        self.last = getattr(dut, f"{prefix}_tlast", None)
        self.words: list[int] = []
        self.lasts: list[bool] = []
        self.cycles: list[int] = []
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            await RisingEdge(self.clk)
            if self.valid.value == 1 and self.ready.value == 1:
                self.words.append(int(self.data.value))
                self.lasts.append(bool(self.last is not None and self.last.value == 1))
                self.cycles.append(cycle_now())

    def clear(self):
        self.words.clear()
        self.lasts.clear()
        self.cycles.clear()


# ------------------------------------------------------------------ codec cases
@dataclass
class CodecCase:
    """One frame and its payload: what the encoder must turn the payload into and the decoder
    must turn the frame back into."""
    name: str
    payload: np.ndarray          # int32
    frame: np.ndarray            # uint32
    layer_id: int
    range_bits: int
    lmax_log2: int
    meta: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.payload.size)


def make_case(name: str, payload, lmax_log2: int, layer_id: int = 0, R: float = 10.0) -> CodecCase:
    payload = np.asarray(payload, dtype=np.int32).reshape(-1)
    frame = zrle.encode_frame(payload, layer_id, R, lmax_log2)
    return CodecCase(name, payload, frame, layer_id, zrle.range_bits(R), lmax_log2)


def synthetic_cases(lmax_log2_values, seed: int = 1) -> list[CodecCase]:
    """Edge cases of the token grammar for each lmax_log2, plus random sparse payloads."""
    rng = np.random.default_rng(seed)
    extremes = np.array([1, -1, 2**31 - 1, -2**31, -2**31 + 1, 0x5A524C45], dtype=np.int64)

    def nz(k):
        v = rng.integers(-2**31, 2**31, size=k, dtype=np.int64)
        v[v == 0] = 7
        if k:
            v[rng.integers(0, k, size=max(1, k // 8))] = rng.choice(extremes, size=max(1, k // 8))
        return v.astype(np.int32)

    cases = []
    for lg in lmax_log2_values:
        L = 1 << lg
        z = lambda k: np.zeros(k, dtype=np.int32)  # noqa: E731
        patterns = {
            "empty": z(0),
            "one_zero": z(1),
            "one_literal": nz(1),
            "all_zero": z(37),
            "dense_exact_lmax": nz(L),
            "dense_lmax_plus1": nz(L + 1),
            "dense_long": nz(3 * L + 2),
            "lmax_then_zeros": np.concatenate([nz(L), z(3)]),
            "zeros_lmax_zeros": np.concatenate([z(2), nz(L), z(1), nz(2 * L), z(5)]),
            "alternating": np.where(np.arange(41) % 2 == 0, nz(41), 0).astype(np.int32),
            "pairs": np.where((np.arange(40) // 2) % 2 == 0, nz(40), 0).astype(np.int32),
            "trailing_literal": np.concatenate([z(9), nz(3)]),
        }
        for density in (0.05, 0.5, 0.95):
            n = int(rng.integers(50, 400))
            mask = rng.random(n) < density
            patterns[f"random_d{int(density * 100)}"] = np.where(mask, nz(n), 0).astype(np.int32)
        # block structure as coarse selection produces it: whole blocks kept, the rest zero
        # (with the odd exact zero inside a kept block)
        keep = np.repeat(rng.random(12) < 0.3, 24) & (rng.random(12 * 24) > 0.05)
        patterns["blocks"] = np.where(keep, nz(12 * 24), 0).astype(np.int32)
        for pname, p in patterns.items():
            layer = int(rng.integers(0, 2**32))
            R = float(rng.choice([10.0, 0.5, 3.0e4, 1e-30]))
            cases.append(make_case(f"{pname}_lg{lg}", p, lg, layer, R))
    return cases


def long_cases(seed: int = 3) -> list[CodecCase]:
    """A layer-sized payload (64x64x3x3 = 36864 elements) as coarse selection leaves it: 8 of
    64 filters of 576 kept (a few exact zeros inside), the rest zero."""
    rng = np.random.default_rng(seed)
    n_blocks, block = 64, 576
    vals = rng.integers(-2**31, 2**31, size=n_blocks * block, dtype=np.int64)
    vals[vals == 0] = 1
    vals[rng.random(vals.size) < 0.01] = 0
    keep = np.zeros(n_blocks, dtype=bool)
    keep[rng.choice(n_blocks, size=8, replace=False)] = True
    sparse = np.where(np.repeat(keep, block), vals, 0).astype(np.int32)
    return [make_case("conv64x64x3x3_k8", sparse, 8, 12, 10.0)]


def codec_golden_cases(directory: str | Path, stage: str) -> list[CodecCase]:
    """The cases of a `gradblock golden` directory that include `stage` ("encode"/"decode")."""
    from gradblock.golden.format import load_golden
    out = []
    for gc in load_golden(directory):
        arrays, meta = gc.arrays, gc.meta
        if stage not in meta.get("stages", ()):
            continue
        out.append(CodecCase(gc.name, np.asarray(arrays["payload"], dtype=np.int32).reshape(-1),
                             np.asarray(arrays["frame"], dtype=np.uint32).reshape(-1),
                             int(meta["layer_id"]), int(meta["range_bits"]),
                             int(meta["lmax_log2"]), dict(meta)))
    return out


def selected_cases(stage: str, default_lmax=(1, 2, 3, 8)) -> list[CodecCase]:
    """Cases named by the environment: golden (TB_GOLDEN_DIR, those with `stage`) or
    synthetic, filtered by TB_CASES and TB_MIN_N/TB_MAX_N."""
    gdir = env_str("TB_GOLDEN_DIR")
    if gdir:
        cases = codec_golden_cases(gdir, stage)
    elif env_str("TB_SYNTHETIC", "edge") == "long":
        cases = long_cases()
    else:
        lgs = [int(x) for x in env_str("TB_LMAX_LOG2", ",".join(map(str, default_lmax))).split(",")]
        cases = synthetic_cases(lgs, seed=env_int("TB_CASE_SEED", 1))
    wanted = wanted_cases()
    if wanted:
        names = {c.name for c in cases}
        unknown = sorted(set(wanted) - names)
        if unknown:
            raise ValueError(f"TB_CASES names unknown cases: {unknown}")
        cases = [c for c in cases if c.name in wanted]
    lo, hi = n_bounds()
    return [c for c in cases if lo <= c.n <= hi]


# ------------------------------------------------------------------ golden vectors of a stage
@dataclass
class Case:
    name: str
    meta: dict
    arrays: dict


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
    wanted = wanted_cases()
    lo, hi = n_bounds()
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


def layer_config_error(cfg: dict, k_max: int, lmax_log2_max: int) -> str | None:
    """The RTL's configuration-error model for the layer parameters compress_top and
    compress_engine share (docs/hw.md), in the order the RTL checks them: the package name
    of the first failing check without its prefix (`TOP_ERR_` / `ENGINE_ERR_`), e.g.
    "BLOCK_SIZE_ZERO"; None when every check passes. Each block checks its own parameters
    (N_MAX, the memory addresses) before these."""
    n, bs, nb, k, rb = cfg["n"], cfg["block_size"], cfg["n_blocks"], cfg["k"], cfg["range_bits"]
    if bs == 0:
        return "BLOCK_SIZE_ZERO"
    if nb != (-(-n // bs) if n else 0):
        return "N_BLOCKS_MISMATCH"
    if n and k == 0:
        return "K_ZERO"
    if min(k, nb) > k_max:
        return "K_OVER_K_MAX"
    if not 1 <= cfg["lmax_log2"] <= min(24, lmax_log2_max):
        return "LMAX_RANGE"
    if rb >> 31 or (rb >> 23) & 0xFF == 0xFF or rb == 0:
        return "RANGE_INVALID"
    if cfg["m"] < 2**31:
        return "M_BELOW_HALF"
    return None


def medium_case(cases: list[Case], limit: int = 512) -> Case:
    """The largest case of at most `limit` elements (the smallest one if none is that small):
    long enough to have words in flight everywhere, short enough for every simulator."""
    small = [c for c in cases if c.meta["n"] <= limit]
    return max(small, key=lambda c: c.meta["n"]) if small else min(cases, key=lambda c: c.meta["n"])


@contextlib.contextmanager
def memory_fails_once(ram: AxiRam, side: str):
    """Inside the block, the first `side` ("read" or "write") access of `ram` fails and the
    rest are served: cocotbext-axi's AxiRam answers SLVERR when its backing store raises
    (DECERR would set the same bit 1 of rresp/bresp the engines read). Yields the list of the
    addresses asked, so the caller can check one was."""
    iface = ram.read_if if side == "read" else ram.write_if
    name = "_" + side
    healthy = getattr(iface, name)
    hits = []

    async def failing(address, *rest):
        hits.append(address)
        if len(hits) == 1:
            raise RuntimeError("injected memory error")
        return await healthy(address, *rest)

    setattr(iface, name, failing)
    try:
        yield hits
    finally:
        delattr(iface, name)                # the class's own method again


# ------------------------------------------------------------------ AXI-Stream endpoints
def source(dut, prefix: str):
    bus = AxiStreamBus.from_prefix(dut, prefix)
    ep = AxiStreamSource(bus, dut.clk, dut.rst, byte_lanes=1)
    quiet(ep)
    return ep


def sink(dut, prefix: str):
    bus = AxiStreamBus.from_prefix(dut, prefix)
    ep = AxiStreamSink(bus, dut.clk, dut.rst, byte_lanes=1)
    quiet(ep)
    return ep


def monitor(dut, prefix: str):
    bus = AxiStreamBus.from_prefix(dut, prefix)
    ep = AxiStreamMonitor(bus, dut.clk, dut.rst, byte_lanes=1)
    quiet(ep)
    return ep


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


# ------------------------------------------------------------------ checks and reports
def first_mismatch(case: str, what: str, expected, actual) -> str | None:
    """None when the word lists agree, else a message with the case, word index and hex values."""
    exp = [int(x) & 0xFFFFFFFF for x in expected]
    act = [int(x) & 0xFFFFFFFF for x in actual]
    for i, (e, a) in enumerate(zip(exp, act)):
        if e != a:
            return (f"case {case}: {what} word {i} expected 0x{e:08X} got 0x{a:08X} "
                    f"({len(exp)} words expected, {len(act)} received)")
    if len(exp) != len(act):
        i = min(len(exp), len(act))
        nxt = (f"expected 0x{exp[i]:08X} missing" if len(exp) > len(act)
               else f"unexpected extra 0x{act[i]:08X}")
        return (f"case {case}: {what} has {len(act)} words, expected {len(exp)} "
                f"(word {i}: {nxt})")
    return None


def _append_json(var: str, records: list[dict]) -> None:
    path = env_str(var)
    if not path:
        return
    p = Path(path)
    data = json.loads(p.read_text()) if p.is_file() else []
    data += records
    p.write_text(json.dumps(data, indent=1))


def write_metrics(record: dict) -> None:
    """Append measurements to TB_METRICS (a JSON list) when it is set."""
    _append_json("TB_METRICS", [record])


def write_case_results(module: str, results: dict[str, tuple[str, str]]) -> None:
    """Append {module, case, status ("pass"/"fail"/"skip"), detail} records to TB_CASE_RESULTS
    when it is set; `results` maps case name -> (status, detail)."""
    _append_json("TB_CASE_RESULTS", [{"module": module, "case": name, "status": st, "detail": d}
                                     for name, (st, d) in results.items()])


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


# ------------------------------------------------------------------ the per-case golden loop
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
    write_case_results(module, verdict)
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
    write_metrics({"module": module, "stream": stream, "case": case, "words": words,
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
        await start_streams(dut)
        await golden_loop(dut, stage, load_cases(stage), tb.run_case, [tb.src], [tb.snk],
                          traffic,
                          skip=lambda c: None if c.meta["n"] else "empty layer: no beat to send")

    async def reset_mid_stream(dut):
        """A reset with words in flight, then a clean run of a case that must match exactly."""
        tb = bench_cls(dut)
        await start_streams(dut)
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
        await start_streams(dut)
        for case in tb.throughput_cases(nonempty(load_cases(stage))):
            rx = await tb.run_case(case)
            tx = await recv(mon, case.meta["n"], "input monitor")
            tb.check_rate(case, tx, rx)

    for f in (golden_cases, reset_mid_stream, throughput):
        f.__qualname__ = f.__name__
        f.__module__ = module
    return {"golden_cases": _named(traffic_test(golden_cases, DEFAULT_TRAFFIC),
                                   "golden_cases", module),
            "reset_mid_stream": _named(cocotb.test(reset_mid_stream), "reset_mid_stream", module),
            "throughput": _named(cocotb.test(throughput), "throughput", module)}


# ------------------------------------------------------------------ AXI4-master engines
# What the two engine testbenches share: an AXI4 master DUT with its memory in a cocotbext-axi
# AxiRam (pauses on all five channels come from the traffic profile), a cycle counter, the cycles
# of every `done` pulse, AXI handshakes per channel, and the configuration handshake.
#
# A DUT with more than one master port (compress_engine's m_axi_vel for the velocity) names the
# others in `extra_ports`, prefix -> memory size, or None to share the first port's memory (one
# address space, as two masters behind an interconnect): each gets an AxiRam in `self.rams` (its
# own AXI slave: channels, pauses and counts are per port), its channels paused like
# the first port's, its handshakes counted in `self.port_beats[prefix]`, and the cycles on which it
# asked for anything (arvalid, awvalid or wvalid high) in `self.requests[prefix]`.
class AxiEngineBench:
    """Subclasses add their streams to `self.inputs` (sources paused by the traffic profile)
    and may extend `on_cycle` (called once per rising edge, after the common counts)."""

    def __init__(self, dut, mem_bytes: int, extra_ports: dict[str, int | None] | None = None):
        self.dut = dut
        self.rams: dict[str, AxiRam] = {}
        self.mem_channels = []
        for prefix, size in {"m_axi": mem_bytes, **(extra_ports or {})}.items():
            shared = {"mem": self.rams["m_axi"].mem} if size is None else {"size": size}
            ram = AxiRam(AxiBus.from_prefix(dut, prefix), dut.clk, dut.rst, **shared)
            channels = [ram.read_if.ar_channel, ram.read_if.r_channel,
                        ram.write_if.aw_channel, ram.write_if.w_channel,
                        ram.write_if.b_channel]
            quiet(ram.read_if, ram.write_if, *channels)
            self.rams[prefix] = ram
            self.mem_channels += channels
        self.ram = self.rams["m_axi"]
        self.inputs = list(self.mem_channels)
        dut.cfg_valid.value = 0
        self.done_seen = self.done_cycle = self.cycle = 0
        # AXI handshakes per channel (valid & ready at a rising edge), for the throughput records
        self.port_beats = {prefix: dict.fromkeys(("ar", "r", "aw", "w"), 0)
                           for prefix in self.rams}
        self.requests = dict.fromkeys(self.rams, 0)     # counted for the extra ports only
        self._handshakes = [(prefix, ch, getattr(dut, f"{prefix}_{ch}valid"),
                             getattr(dut, f"{prefix}_{ch}ready"))
                            for prefix in self.rams for ch in ("ar", "r", "aw", "w")]
        self._requests = [(prefix, [getattr(dut, f"{prefix}_{ch}valid") for ch in ("ar", "aw", "w")])
                          for prefix in self.rams if prefix != "m_axi"]
        cocotb.start_soon(self._count())

    @property
    def beats(self) -> dict[str, int]:
        """Handshakes per channel of the first port (m_axi)."""
        return self.port_beats["m_axi"]

    @beats.setter
    def beats(self, value: dict[str, int]) -> None:
        self.port_beats["m_axi"] = value

    def clear_counts(self) -> None:
        """Zero the handshake and request counts of every port."""
        for prefix in self.rams:
            self.port_beats[prefix] = dict.fromkeys(self.port_beats[prefix], 0)
            self.requests[prefix] = 0

    async def _count(self):
        while True:
            await RisingEdge(self.dut.clk)
            self.cycle += 1
            if self.dut.done.value == 1:
                self.done_seen += 1
                self.done_cycle = self.cycle
            for prefix, ch, valid, ready in self._handshakes:
                if valid.value == 1 and ready.value == 1:
                    self.port_beats[prefix][ch] += 1
            for prefix, valids in self._requests:
                if any(v.value == 1 for v in valids):
                    self.requests[prefix] += 1
            self.on_cycle()

    def on_cycle(self) -> None:
        """Per-cycle checks of a subclass (none here)."""

    async def present_config(self, fields: dict[str, int], limit: int = 1000) -> int:
        """Drive cfg_<name> = value for every field, hold cfg_valid until the DUT takes it;
        returns the cycle of the handshake."""
        d = self.dut
        for name, value in fields.items():
            getattr(d, f"cfg_{name}").value = value
        d.cfg_valid.value = 1
        for _ in range(limit):
            await RisingEdge(d.clk)
            if d.cfg_ready.value == 1:
                break
        else:
            raise AssertionError(f"cfg_ready did not rise within {limit} cycles")
        taken = self.cycle
        d.cfg_valid.value = 0
        return taken

    async def wait_done(self, before: int, cycles: int, what: str) -> None:
        """Until `done` has pulsed more than `before` times, at most `cycles` cycles."""
        for _ in range(cycles):
            if self.done_seen > before:
                return
            await RisingEdge(self.dut.clk)
        raise AssertionError(f"{what}: done did not pulse within {cycles} cycles")
