"""cocotb testbench of hw/ef_add.sv against golden vectors: (residual_in, quantised) ->
accumulated, feedback_sat, under random backpressure, across a mid-stream reset, and at full
rate."""
from __future__ import annotations

import cocotb
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiStreamFrame

from sim import tb_datapath_common as tbc

MODULE = "ef_add"


def pairs(case) -> list[int]:
    r = case.arrays["residual_in"].view("uint32").astype("uint64")
    q = case.arrays["quantised"].view("uint32").astype("uint64")
    return ((r << 32) | q).tolist()


async def run_case(src, snk, case):
    await src.send(AxiStreamFrame(tdata=pairs(case)))
    return await snk.recv()


def check(case, rx) -> None:
    a = case.arrays
    tuser = rx.tuser if isinstance(rx.tuser, list) else [rx.tuser] * len(rx.tdata)
    tbc.check_words(case.name, "accumulated", a["accumulated"].view("uint32"), rx.tdata)
    tbc.check_words(case.name, "feedback_sat", a["feedback_sat"], tuser, 1)
    tbc.check_value(case.name, "sat_feedback", case.meta["sat_feedback"], sum(tuser))


@cocotb.test()
async def golden_cases(dut):
    """Every case, every pause ratio on input and output."""
    src, snk = tbc.source(dut, "s"), tbc.sink(dut, "m")
    await tbc.start(dut)
    cases = tbc.nonempty(tbc.load_cases(MODULE))
    for salt, ratio in enumerate(tbc.pause_ratios()):
        tbc.set_pauses([src, snk], ratio, salt)
        for case in cases:
            check(case, await run_case(src, snk, case))


@cocotb.test()
async def reset_mid_stream(dut):
    """A reset with pairs in flight, then a clean run that must match exactly."""
    src, snk = tbc.source(dut, "s"), tbc.sink(dut, "m")
    await tbc.start(dut)
    case = tbc.medium_case(tbc.nonempty(tbc.load_cases(MODULE)))
    tbc.set_pauses([src, snk], 0.3, 7)
    await src.send(AxiStreamFrame(tdata=pairs(case)))
    await ClockCycles(dut.clk, max(3, case.meta["n"] // 3))
    await tbc.reset(dut)
    await ClockCycles(dut.clk, 2)
    assert snk.empty(), "sink kept output from before the reset"
    tbc.set_pauses([src, snk], 0.0, 0)
    check(case, await run_case(src, snk, case))
    await ClockCycles(dut.clk, 2)
    assert int(dut.m_tvalid.value) == 0, "a word left in the pipeline after the last one"


@cocotb.test()
async def throughput(dut):
    """Unthrottled: one pair per cycle in, one word per cycle out."""
    src, snk, mon = tbc.source(dut, "s"), tbc.sink(dut, "m"), tbc.monitor(dut, "s")
    await tbc.start(dut)
    case = tbc.medium_case(tbc.nonempty(tbc.load_cases(MODULE)))
    rx = await run_case(src, snk, case)
    tx = await mon.recv()
    check(case, rx)
    n = case.meta["n"]
    for stream, frame in (("in", tx), ("out", rx)):
        cycles = tbc.frame_cycles(frame)
        tbc.record_metric(MODULE, stream, case.name, n, cycles)
        assert cycles == n, f"{stream}: {n} words took {cycles} cycles, expected {n}"
