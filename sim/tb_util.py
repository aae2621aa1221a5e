"""Helpers shared by the cocotb testbenches (they run inside the simulator, launched by
sim/harness.py): settings from environment variables, traffic (idle/backpressure) profiles,
clock and reset, a word-level handshake recorder, test cases (golden or synthetic) and
mismatch reports that name the case, word index and both values in hex.

Environment variables read here (set through run_rtl(env=...)):
  TB_GOLDEN_DIR   a `gradblock golden` directory; without it synthetic cases are generated
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
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time

from gradblock.codec import zrle

CLOCK_NS = 10


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


def traffic_profiles(default: str = "0:0,0.3:0,0:0.5,0.6:0.7") -> list[tuple[float, float]]:
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


def traffic_test(func, default: str = "0:0,0.3:0,0:0.5,0.6:0.7"):
    """`func(dut, traffic)` as one cocotb test per traffic profile of TB_TRAFFIC (read when the
    test module is imported, inside the simulator): `<func>/traffic=idle0.3_bp0.5`, ...
    A profile that fails is reported on its own and the other profiles still run."""
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


IDLE_INPUTS = ("s_tvalid", "cfg_valid")


async def start(dut, reset_cycles: int = 3) -> None:
    """Start the clock and apply a synchronous reset. Input valids are dropped first: a value
    left by an earlier test would otherwise be taken on the first cycle after reset."""
    for name in IDLE_INPUTS:
        if hasattr(dut, name):
            getattr(dut, name).value = 0
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, reset_cycles)
    dut.rst.value = 0
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


# ------------------------------------------------------------------ cases
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


def golden_cases(directory: str | Path, stage: str) -> list[CodecCase]:
    """The cases of a `gradblock golden` directory that include `stage` ("encode"/"decode")."""
    from gradblock.refmodel.golden_format import load_golden
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
        cases = golden_cases(gdir, stage)
    elif env_str("TB_SYNTHETIC", "edge") == "long":
        cases = long_cases()
    else:
        lgs = [int(x) for x in env_str("TB_LMAX_LOG2", ",".join(map(str, default_lmax))).split(",")]
        cases = synthetic_cases(lgs, seed=env_int("TB_CASE_SEED", 1))
    wanted = [c for c in env_str("TB_CASES").split(",") if c]
    if wanted:
        names = {c.name for c in cases}
        unknown = sorted(set(wanted) - names)
        if unknown:
            raise ValueError(f"TB_CASES names unknown cases: {unknown}")
        cases = [c for c in cases if c.name in wanted]
    lo, hi = env_int("TB_MIN_N", 0), env_int("TB_MAX_N", 2**32)
    return [c for c in cases if lo <= c.n <= hi]


# ------------------------------------------------------------------ reports
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
