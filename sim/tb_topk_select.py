"""cocotb testbench of hw/topk_select.sv against golden vectors: block_norms -> selected (rank
order), under random backpressure, with the pairs in shuffled order, with k outside 1..K_MAX
(clamped, cfg_err), across a mid-stream reset, and at full rate.

TB_K_MAX must match the K_MAX the RTL was built with. A case whose k_eff exceeds K_MAX is still
run: the RTL raises cfg_err and must return the first K_MAX indices of the reference ranking.
"""
from __future__ import annotations

import os
import random

import numpy as np

import cocotb
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiStreamFrame

from refmodel.selection import select_blocks
from sim import tb_datapath_common as tbc

MODULE = "topk_select"


def k_max() -> int:
    value = os.environ.get("TB_K_MAX")
    if not value:
        raise RuntimeError("TB_K_MAX is not set: the testbench must know the RTL's K_MAX")
    return int(value)


def pairs(norms, order=None) -> list[int]:
    order = range(len(norms)) if order is None else order
    return [(int(i) << 64) | int(norms[i]) for i in order]


async def select(dut, src, snk, norms, k: int, order=None):
    dut.cfg_k.value = k
    await src.send(AxiStreamFrame(tdata=pairs(norms, order)))
    rx = await snk.recv()
    err = int(dut.cfg_err.value)     # combinational from cfg_k, settled long ago
    return rx, err


def expected(norms, k: int) -> tuple[np.ndarray, int]:
    """Reference ranking cut at the RTL's clamped k, and whether cfg_err must be raised."""
    kmax = k_max()
    k_rtl = min(max(k, 1), kmax)
    return select_blocks(np.asarray(norms, dtype=np.uint64), min(k_rtl, len(norms))), int(
        k < 1 or k > kmax)


def check(name, rx, err, norms, k) -> None:
    sel, want_err = expected(norms, k)
    tbc.check_words(name, f"selected (k {k}, K_MAX {k_max()})", sel, rx.tdata, 32)
    tbc.check_value(name, f"cfg_err (k {k})", want_err, err)


@cocotb.test()
async def golden_cases(dut):
    """Every case (pairs in index order), every pause ratio; the reference's own `selected`
    must agree with the ranking the check uses."""
    src, snk = tbc.source(dut, "s"), tbc.sink(dut, "m")
    await tbc.start(dut)
    cases = tbc.nonempty(tbc.load_cases(MODULE))
    for salt, ratio in enumerate(tbc.pause_ratios()):
        tbc.set_pauses([src, snk], ratio, salt)
        for case in cases:
            norms, k = case.arrays["block_norms"], int(case.meta["k_eff"])
            rx, err = await select(dut, src, snk, norms, k)
            kmax = k_max()
            tbc.check_words(case.name, "selected", case.arrays["selected"][:kmax], rx.tdata, 32)
            tbc.check_value(case.name, "cfg_err", int(k > kmax), err)


@cocotb.test()
async def shuffled_order(dut):
    """Pairs arriving out of index order: ties must still go to the lower index."""
    src, snk = tbc.source(dut, "s"), tbc.sink(dut, "m")
    await tbc.start(dut)
    rng = random.Random(5)
    for case in tbc.nonempty(tbc.load_cases(MODULE)):
        norms, k = case.arrays["block_norms"], int(case.meta["k_eff"])
        order = list(range(len(norms)))
        rng.shuffle(order)
        rx, err = await select(dut, src, snk, norms, k, order)
        check(case.name + " (shuffled)", rx, err, norms, k)


@cocotb.test()
async def k_out_of_range(dut):
    """k = 0 and k > K_MAX raise cfg_err and behave as the nearest legal k."""
    src, snk = tbc.source(dut, "s"), tbc.sink(dut, "m")
    await tbc.start(dut)
    case = max(tbc.nonempty(tbc.load_cases(MODULE)), key=lambda c: c.meta["n_blocks"])
    norms = case.arrays["block_norms"]
    for k in (0, k_max(), k_max() + 1, 2**32 - 1):
        rx, err = await select(dut, src, snk, norms, k)
        check(case.name, rx, err, norms, k)


@cocotb.test()
async def reset_mid_stream(dut):
    """Resets while pairs arrive and while indices leave, then a clean run."""
    src, snk = tbc.source(dut, "s"), tbc.sink(dut, "m")
    await tbc.start(dut)
    case = max(tbc.nonempty(tbc.load_cases(MODULE)), key=lambda c: c.meta["n_blocks"])
    norms, k = case.arrays["block_norms"], int(case.meta["k_eff"])
    for wait in (max(1, len(norms) // 2), len(norms) + 1):
        tbc.set_pauses([src, snk], 0.3, wait)
        dut.cfg_k.value = k
        await src.send(AxiStreamFrame(tdata=pairs(norms)))
        await ClockCycles(dut.clk, wait)
        await tbc.reset(dut)
        await ClockCycles(dut.clk, 2)
        while not snk.empty():    # a run that finished before the reset is legitimately there
            snk.recv_nowait()
        tbc.set_pauses([src, snk], 0.0, 0)
        rx, err = await select(dut, src, snk, norms, k)
        check(case.name + f" (after reset at cycle {wait})", rx, err, norms, k)


@cocotb.test()
async def throughput(dut):
    """Unthrottled: one pair per cycle in, one index per cycle out."""
    src, snk, mon = tbc.source(dut, "s"), tbc.sink(dut, "m"), tbc.monitor(dut, "s")
    await tbc.start(dut)
    case = max(tbc.nonempty(tbc.load_cases(MODULE)), key=lambda c: c.meta["n_blocks"])
    norms, k = case.arrays["block_norms"], int(case.meta["k_eff"])
    rx, err = await select(dut, src, snk, norms, k)
    tx = await mon.recv()
    check(case.name, rx, err, norms, k)
    for stream, frame, words in (("in", tx, len(norms)), ("out", rx, len(rx.tdata))):
        cycles = tbc.frame_cycles(frame)
        tbc.record_metric(MODULE, stream, case.name, words, cycles)
        assert cycles == words, f"{stream}: {words} words took {cycles} cycles"
