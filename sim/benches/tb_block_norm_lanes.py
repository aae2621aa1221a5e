"""cocotb testbench of hw/block_norm_lanes.sv (the norm stage at W elements a cycle, issue 31)
against the numpy reference norms (refmodel.selection.block_norms, docs/spec.md §2.3), W from
the build (tb_util.hdl_parameter). The input is a W-lane element stream aligned to memory
(element i in beat i/W, lane i%W; cocotbext-axi with one 32-bit word per "byte" lane, so only
the layer's last beat has a partial s_tkeep, a run from lane 0); the output is block_l1's, one
{index, norm} beat per block, m_tlast on the layer's last block.

Tests:
  golden_cases      golden 'norms' cases (TB_GOLDEN_DIR / TB_GOLDEN_DIRS: accumulated ->
                    block_norms, L1 or L2 as the case's "norm" says), one test per traffic
                    profile (TB_TRAFFIC: random input gaps and output backpressure)
  boundary_cases    synthetic layers of every block boundary position: block size B from 1 to
                    2W + 1 with every n mod W, L1 and L2, plus B >= n, B = 2^32 - 1, layers
                    shorter than a beat, and extreme values (2^31 - 1, -(2^31 - 1), -2^31) in
                    random lanes and whole layers of them; one test per traffic profile
  reset_mid_layer   a reset with beats in flight (a block size below W, where beats are split
                    and s_tready held low, and one above it), then a clean layer that must match
  keep_violation    planted (only with TB_PLANT_KEEP_VIOLATION=1): a partial s_tkeep on a beat
                    that is not the layer's last, which the RTL's assertion must report
  throughput        no throttling: B >= W takes one beat a cycle on a long layer (>= 0.99 beats
                    a cycle; the last beat may cost one more cycle when it closes two blocks);
                    B = 1 puts out one norm a cycle (TB_METRICS)
"""
from __future__ import annotations

import math
import os

import numpy as np
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamMonitor, AxiStreamSource

import cocotb

from gradblock.golden.format import case_norm
from gradblock.hw.sv_constants import package_constants
from gradblock.refmodel.selection import BlockLayout, block_norms
from gradblock.sim.benches import tb_util as tb
from gradblock.sim.functional_bins import lane_norm_observed
from gradblock.sim.functional_bins import record as record_bins

MODULE = "block_norm_lanes"
# cfg_norm per norm kind (gradblock_pkg::NORM_L1 / NORM_L2; docs/spec.md §2.3)
NORM_BIT = {"l1": package_constants()["NORM_L1"], "l2": package_constants()["NORM_L2"]}
MASK64 = (1 << 64) - 1
QMAX = 2**31 - 1
EXTREMES = np.array([QMAX, -QMAX, -2**31, 0, 1, -1], dtype=np.int64)


def lanes() -> int:
    return tb.hdl_parameter("W")


def lane_stream(dut, cls, prefix: str = "s"):
    """A cocotbext-axi endpoint on a W-lane bus: its byte lanes are s_tkeep's bits, so a
    "byte" is one 32-bit word and a frame's tdata is the element list."""
    ep = cls(AxiStreamBus.from_prefix(dut, prefix), dut.clk, dut.rst)
    tb.quiet(ep)
    return ep


# ------------------------------------------------------------------ cases
def norms_case(name: str, values, block_size: int, norm: str) -> tb.Case:
    """A layer `values` (int32) with its reference norms."""
    acc = np.asarray(values, dtype=np.int64).astype(np.int32)
    n = int(acc.size)
    nb = -(-n // block_size) if n else 0
    norms = block_norms(acc, BlockLayout(n, block_size, nb), norm)
    meta = {"name": name, "n": n, "block_size": block_size, "n_blocks": nb, "norm": norm}
    return tb.Case(name, meta, {"accumulated": acc, "block_norms": norms})


def random_values(rng, n: int) -> np.ndarray:
    """Full-range int32 with the extremes in a quarter of the positions (random lanes)."""
    v = rng.integers(-2**31, 2**31, size=n, dtype=np.int64)
    pick = rng.random(n) < 0.25
    v[pick] = rng.choice(EXTREMES, size=int(pick.sum()))
    return v


def boundary_layers(w: int, seed: int = 31) -> list[tb.Case]:
    """Every block boundary position: B = 1 .. 2W + 1 with n = every residue mod W (several
    blocks, n not a multiple of B for most), both norms; then B >= n, the largest B, layers
    shorter than one beat, and layers of extreme values only."""
    rng = np.random.default_rng(seed)
    cases = []
    for bs in range(1, 2 * w + 2):
        for r in range(w):
            n = w * math.ceil((2 * bs + 2 * w) / w) + r
            for norm in ("l1", "l2"):
                cases.append(norms_case(f"b{bs}_n{n}_{norm}", random_values(rng, n), bs, norm))
    n = 3 * w + 1
    for norm in ("l1", "l2"):
        for bs in (n - 1, n, n + 1, 2**32 - 1):
            cases.append(norms_case(f"whole_b{bs}_n{n}_{norm}", random_values(rng, n), bs, norm))
        for short in sorted({1, max(1, w - 1)}):
            for bs in (1, 2, 5):
                cases.append(norms_case(f"short_n{short}_b{bs}_{norm}",
                                       random_values(rng, short), bs, norm))
        for value in (-2**31, QMAX, -QMAX):
            for bs in (1, w, 2 * w + 1):
                cases.append(norms_case(f"all{value}_b{bs}_{norm}",
                                       np.full(4 * w + 3, value), bs, norm))
    return cases


# ------------------------------------------------------------------ the bench
class Bench:
    def __init__(self, dut):
        self.dut = dut
        self.w = lanes()
        self.src = lane_stream(dut, AxiStreamSource)
        self.snk = tb.sink(dut, "m")

    async def send(self, case: tb.Case) -> None:
        """Configuration for the layer, one edge (the DUT registers what it derives from
        cfg_block_size: its interface rule), then its elements."""
        self.dut.cfg_block_size.value = int(case.meta["block_size"])
        self.dut.cfg_norm.value = NORM_BIT[case_norm(case.meta)]
        await RisingEdge(self.dut.clk)
        self.src.send_nowait(AxiStreamFrame(
            tdata=np.asarray(case.arrays["accumulated"]).reshape(-1).view("uint32").tolist()))

    async def run_case(self, case: tb.Case):
        await self.send(case)
        nb = int(case.meta["n_blocks"])
        rx = await tb.recv(self.snk, case.meta["n"], f"case {case.name}: {MODULE} output")
        tb.check_words(case.name, "block_norms", case.arrays["block_norms"],
                       [int(x) & MASK64 for x in rx.tdata], 64)
        tb.check_words(case.name, "block index", range(nb), [int(x) >> 64 for x in rx.tdata], 32)
        # checked: the lane positions this layer put through (TB_BINS, sim/functional_bins.py)
        record_bins(*lane_norm_observed(int(case.meta["n"]), int(case.meta["block_size"]),
                                        self.w))
        return rx


def _skip_empty(case: tb.Case):
    return None if case.meta["n"] else "empty layer: no beat to send"


async def golden_cases(dut, traffic):
    """Every golden 'norms' case under this traffic profile, one layer after another."""
    bench = Bench(dut)
    await tb.start_streams(dut)
    await tb.golden_loop(dut, MODULE, tb.load_cases(MODULE), bench.run_case, [bench.src],
                         [bench.snk], traffic, skip=_skip_empty)


async def boundary_cases(dut, traffic):
    """The synthetic boundary cases under this traffic profile."""
    bench = Bench(dut)
    await tb.start_streams(dut)
    await tb.golden_loop(dut, MODULE, boundary_layers(bench.w), bench.run_case, [bench.src],
                         [bench.snk], traffic, skip=_skip_empty)


async def reset_mid_layer(dut):
    """A reset with beats in flight, for a block size below W (beats split, s_tready held low
    while they are) and one above it; then a clean layer that must match exactly, and nothing
    left in the pipeline after it."""
    bench = Bench(dut)
    w = bench.w
    await tb.start_streams(dut)
    rng = np.random.default_rng(5)
    for bs in sorted({1, max(1, w // 2 - 1), 3 * w + 1}):
        for norm in ("l1", "l2"):
            layer = norms_case(f"reset_b{bs}_{norm}", random_values(rng, 40 * w + 3), bs, norm)
            clean = norms_case(f"after_reset_b{bs}_{norm}", random_values(rng, 12 * w + 1),
                              bs, norm)
            tb.set_traffic([bench.src], [bench.snk], 0.3, 0.3, 7 + bs)
            await bench.send(layer)
            await ClockCycles(dut.clk, 25)
            await tb.reset_endpoints_idle(dut, bench.src, bench.snk)
            tb.drain(bench.snk)
            tb.no_traffic([bench.src, bench.snk])
            await bench.run_case(clean)
            await ClockCycles(dut.clk, 2)
            await ReadOnly()
            assert dut.m_tvalid.value == 0, "a norm left in the pipeline after the last one"
            await RisingEdge(dut.clk)


async def throughput(dut):
    """Unthrottled: one beat a cycle in with B >= W (block ends in every lane over the layer),
    one norm a cycle out with B = 1 (TB_METRICS)."""
    bench = Bench(dut)
    w = bench.w
    mon = lane_stream(dut, AxiStreamMonitor)
    await tb.start_streams(dut)
    rng = np.random.default_rng(9)
    n = tb.env_int("TB_RATE_N", 512 * w + w - 1)
    for bs in sorted({w, 3 * w + 1}):
        case = norms_case(f"rate_b{bs}_n{n}", random_values(rng, n), bs, "l2")
        await bench.run_case(case)
        tx = await tb.recv(mon, n, "input monitor")
        beats, cycles = -(-n // w), tb.frame_cycles(tx)
        tb.record_metric(MODULE, f"in beats (W {w}, block_size {bs})", case.name, beats, cycles)
        # the last beat may close two blocks (the regular one and the short last one)
        assert cycles <= beats + 1, f"in: {beats} beats took {cycles} cycles (B {bs}, W {w})"
        assert beats / cycles >= 0.99, f"in: {beats / cycles:.4f} beats a cycle"
    case = norms_case(f"rate_b1_n{n}", random_values(rng, n), 1, "l1")
    rx = await bench.run_case(case)
    await tb.recv(mon, n, "input monitor")
    cycles = tb.frame_cycles(rx)
    tb.record_metric(MODULE, f"out norms (W {w}, block_size 1)", case.name, n, cycles)
    assert cycles == n, f"out: {n} norms took {cycles} cycles"


async def keep_violation(dut):
    """Lane 0 alone on a beat without s_tlast (the lane convention forbids it): the RTL's
    assertion must say so (tests/test_rtl_block_norm_lanes.py reads the log)."""
    await tb.start_streams(dut)
    dut.cfg_block_size.value = 3
    dut.cfg_norm.value = NORM_BIT["l1"]
    dut.m_tready.value = 1
    await RisingEdge(dut.clk)
    dut.s_tdata.value = 5
    dut.s_tkeep.value = 1
    dut.s_tlast.value = 0
    dut.s_tvalid.value = 1
    await ReadOnly()
    assert dut.s_tready.value == 1, "the planted beat would not be taken"
    await RisingEdge(dut.clk)                   # taken here
    dut.s_tvalid.value = 0
    await ClockCycles(dut.clk, 2)


for _f in (golden_cases, boundary_cases, reset_mid_layer, throughput):
    _f.__qualname__ = _f.__name__
golden_cases = tb._named(tb.traffic_test(golden_cases), "golden_cases", __name__)
boundary_cases = tb._named(tb.traffic_test(boundary_cases), "boundary_cases", __name__)
reset_mid_layer = tb._named(cocotb.test(reset_mid_layer), "reset_mid_layer", __name__)
throughput = tb._named(cocotb.test(throughput), "throughput", __name__)
keep_violation.__qualname__ = "keep_violation"
# W = 1 has no lanes to leave out (block_l1 itself)
keep_violation = tb._named(cocotb.test(skip=not os.environ.get("TB_PLANT_KEEP_VIOLATION"))(
    keep_violation), "keep_violation", __name__)
