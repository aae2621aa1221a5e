"""cocotb testbench of hw/topk_select.sv against golden vectors: block_norms -> selected (rank
order), under random idle/backpressure, with the pairs in shuffled order, with k outside
1..K_MAX (clamped, cfg_err), across mid-stream resets, at full rate, and on random layers
full of ties (random_ties: the in-flight corrections of the three-stage insert).

K_MAX is the build's own (tb_util.hdl_parameter). A case whose k_eff exceeds K_MAX is still
run: the RTL raises cfg_err and must return the first K_MAX indices of the reference ranking.
"""
from __future__ import annotations

import random

import numpy as np

import cocotb
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiStreamFrame

from gradblock.refmodel.selection import select_blocks
from gradblock.sim.benches import tb_util

MODULE = "topk_select"


def k_max() -> int:
    """The K_MAX this design was built with (from the runner, never a hand copy)."""
    return tb_util.hdl_parameter("K_MAX")


def pairs(norms, order=None) -> list[int]:
    order = range(len(norms)) if order is None else order
    return [(int(i) << 64) | int(norms[i]) for i in order]


def reference(norms, k: int) -> tuple[np.ndarray, int]:
    """The reference ranking cut at the RTL's clamped k, and whether cfg_err must be raised."""
    kmax = k_max()
    k_rtl = min(max(k, 1), kmax)
    return (select_blocks(np.asarray(norms, dtype=np.uint64), min(k_rtl, len(norms))),
            int(k < 1 or k > kmax))


class Bench:
    def __init__(self, dut):
        self.dut = dut
        self.src, self.snk = tb_util.source(dut, "s"), tb_util.sink(dut, "m")

    def send(self, norms, k: int, order=None) -> None:
        self.dut.cfg_k.value = k
        self.src.send_nowait(AxiStreamFrame(tdata=pairs(norms, order)))

    async def select(self, name, norms, k: int, order=None, expected=None):
        """Send, receive, compare with `expected` (default: the reference ranking)."""
        self.send(norms, k, order)
        rx = await tb_util.recv(self.snk, len(norms), f"case {name}: selected indices (k {k})")
        want, want_err = reference(norms, k)
        if expected is not None:
            want = expected
        tb_util.check_words(name, f"selected (k {k}, K_MAX {k_max()})", want, rx.tdata, 32)
        # cfg_err is combinational from cfg_k, which has been steady for the whole layer
        tb_util.check_value(name, f"cfg_err (k {k})", want_err, int(self.dut.cfg_err.value))
        return rx

    async def run_case(self, case):
        """The golden `selected` itself (cut at K_MAX) is the expected output."""
        k = int(case.meta["k_eff"])
        await self.select(case.name, case.arrays["block_norms"], k,
                          expected=case.arrays["selected"][:k_max()])
        return f"k_eff {k} > K_MAX {k_max()}: first {k_max()} checked" if k > k_max() else ""


@tb_util.traffic_test
async def golden_cases(dut, traffic):
    """Every case (pairs in index order) under this traffic profile, one layer after another."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    await tb_util.golden_loop(dut, MODULE, tb_util.load_cases(MODULE), tb.run_case, [tb.src],
                              [tb.snk], traffic,
                              skip=lambda c: None if c.meta["n"] else "empty layer: no block")


@cocotb.test()
async def shuffled_order(dut):
    """Pairs arriving out of index order: ties must still go to the lower index."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    rng = random.Random(5)
    for case in tb_util.nonempty(tb_util.load_cases(MODULE)):
        norms = case.arrays["block_norms"]
        order = list(range(len(norms)))
        rng.shuffle(order)
        await tb.select(case.name + " (shuffled)", norms, int(case.meta["k_eff"]), order)


# Norms {hi, lo} with hi (47 bits: norms are < 2^63, docs/spec.md) and lo (16 bits) each at 0,
# 1 or all ones: ties everywhere, and differences at both ends of both halves of the 96-bit
# compare key {norm, ~index} (upper half: norm bits 63..16, lower: 15..0 and the index).
TIE_NORMS = [(hi << 16) | lo for hi in (0, 1, 2**47 - 1) for lo in (0, 1, 0xFFFF)]


@cocotb.test()
async def random_ties(dut):
    """Random layers drawn from a few tied norms, in random order, with random k and random
    idle cycles on the input: every pattern of pairs and bubbles in the insert pipeline (a
    pair corrected for zero, one or two pairs still in flight, pairs that take no slot)."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    rng = random.Random(11)
    kmax = k_max()
    for layer in range(48):
        n = rng.randint(1, 3 * kmax + 6)
        norms = np.array([rng.choice(TIE_NORMS) for _ in range(n)], dtype=np.uint64)
        order = list(range(n))
        rng.shuffle(order)
        tb_util.set_traffic([tb.src], [tb.snk], rng.choice((0.0, 0.3, 0.7)), 0.3, layer + 1)
        await tb.select(f"random layer {layer} (n {n})", norms, rng.randint(1, kmax), order)
    tb_util.no_traffic([tb.src, tb.snk])


@cocotb.test()
async def k_out_of_range(dut):
    """k = 0 and k > K_MAX raise cfg_err and behave as the nearest legal k."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    case = max(tb_util.nonempty(tb_util.load_cases(MODULE)), key=lambda c: c.meta["n_blocks"])
    for k in (0, k_max(), k_max() + 1, 2**32 - 1):
        await tb.select(case.name, case.arrays["block_norms"], k)


@cocotb.test()
async def reset_mid_stream(dut):
    """Resets while pairs arrive and while indices leave, each followed by a clean run."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    case = max(tb_util.nonempty(tb_util.load_cases(MODULE)), key=lambda c: c.meta["n_blocks"])
    norms, k = case.arrays["block_norms"], int(case.meta["k_eff"])
    for when in ("input", "output"):
        tb_util.set_traffic([tb.src], [tb.snk], 0.3, 0.5, len(when))
        tb.send(norms, k)
        if when == "input":
            await ClockCycles(dut.clk, max(1, len(norms) // 2))
        else:     # wait for the first index to leave
            while not (dut.m_tvalid.value == 1 and dut.m_tready.value == 1):
                await ClockCycles(dut.clk, 1)
        await tb_util.reset(dut)
        await ClockCycles(dut.clk, 2)
        tb_util.drain(tb.snk)
        tb_util.no_traffic([tb.src, tb.snk])
        await tb.select(case.name + f" (after a reset during {when})", norms, k)


@cocotb.test()
async def throughput(dut):
    """Unthrottled: one pair per cycle in, one index per cycle out."""
    tb = Bench(dut)
    mon = tb_util.monitor(dut, "s")
    await tb_util.start_streams(dut)
    case = max(tb_util.nonempty(tb_util.load_cases(MODULE)), key=lambda c: c.meta["n_blocks"])
    norms, k = case.arrays["block_norms"], int(case.meta["k_eff"])
    rx = await tb.select(case.name, norms, k)
    tx = await tb_util.recv(mon, len(norms), "input monitor")
    for stream, frame, words in (("in", tx, len(norms)), ("out", rx, len(rx.tdata))):
        cycles = tb_util.frame_cycles(frame)
        tb_util.record_metric(MODULE, stream, case.name, words, cycles)
        assert cycles == words, f"{stream}: {words} words took {cycles} cycles"


@cocotb.test()
async def ready_after_reset(dut):
    """No dead cycle after a reset: in the first cycle after rst is released s_tready is
    already high (the flop's reset value), so a pair offered then is taken at once; then a
    clean selection."""
    from cocotb.triggers import ReadOnly, RisingEdge
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    for cycles in (1, tb_util.RESET_CYCLES):
        dut.rst.value = 1
        await ClockCycles(dut.clk, cycles)
        dut.rst.value = 0
        await ReadOnly()
        assert dut.s_tready.value == 1, (
            f"s_tready low in the first cycle after a {cycles}-cycle reset")
        await RisingEdge(dut.clk)
    case = max(tb_util.nonempty(tb_util.load_cases(MODULE)), key=lambda c: c.meta["n_blocks"])
    await tb.select(case.name, case.arrays["block_norms"], int(case.meta["k_eff"]))
