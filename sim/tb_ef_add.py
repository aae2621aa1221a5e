"""cocotb testbench of hw/ef_add.sv against golden vectors: (residual_in, quantised) ->
accumulated, feedback_sat, under random idle/backpressure, across a mid-stream reset, and at
full rate."""
from __future__ import annotations

import cocotb
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiStreamFrame

from gradblock.sim import tb_datapath_common as tbc

MODULE = "ef_add"


class Bench:
    def __init__(self, dut):
        self.dut = dut
        self.src, self.snk = tbc.source(dut, "s"), tbc.sink(dut, "m")

    def send(self, case) -> None:
        r = case.arrays["residual_in"].view("uint32").astype("uint64")
        q = case.arrays["quantised"].view("uint32").astype("uint64")
        self.src.send_nowait(AxiStreamFrame(tdata=((r << 32) | q).tolist()))

    async def run_case(self, case):
        self.send(case)
        rx = await tbc.recv(self.snk, case.meta["n"], f"case {case.name}: ef_add output")
        a = case.arrays
        tuser = tbc.user_words(rx)
        tbc.check_words(case.name, "accumulated", a["accumulated"].view("uint32"), rx.tdata)
        tbc.check_words(case.name, "feedback_sat", a["feedback_sat"], tuser, 1)
        tbc.check_value(case.name, "sat_feedback", case.meta["sat_feedback"], sum(tuser))
        return rx


@cocotb.test()
async def golden_cases(dut):
    """Every case, every traffic profile, one layer after another."""
    tb = Bench(dut)
    await tbc.start(dut)
    await tbc.golden_loop(dut, MODULE, tbc.load_cases(MODULE), tb.run_case, [tb.src], [tb.snk],
                          skip=lambda c: None if c.meta["n"] else "empty layer: no beat to send")


@cocotb.test()
async def reset_mid_stream(dut):
    """A reset with pairs in flight, then a clean run that must match exactly."""
    tb = Bench(dut)
    await tbc.start(dut)
    case = tbc.medium_case(tbc.nonempty(tbc.load_cases(MODULE)))
    tbc.set_traffic([tb.src], [tb.snk], 0.3, 0.3, 7)
    tb.send(case)
    await ClockCycles(dut.clk, max(3, case.meta["n"] // 3))
    await tbc.reset(dut)
    await ClockCycles(dut.clk, 2)
    assert tb.snk.empty(), "the sink holds a complete frame from before the reset"
    tbc.no_traffic([tb.src, tb.snk])
    await tb.run_case(case)
    await ClockCycles(dut.clk, 2)
    assert dut.m_tvalid.value == 0, "a word left in the pipeline after the last one"


@cocotb.test()
async def throughput(dut):
    """Unthrottled: one pair per cycle in, one word per cycle out."""
    tb = Bench(dut)
    mon = tbc.monitor(dut, "s")
    await tbc.start(dut)
    case = tbc.medium_case(tbc.nonempty(tbc.load_cases(MODULE)))
    rx = await tb.run_case(case)
    tx = await tbc.recv(mon, case.meta["n"], "input monitor")
    n = case.meta["n"]
    for stream, frame in (("in", tx), ("out", rx)):
        cycles = tbc.frame_cycles(frame)
        tbc.record_metric(MODULE, stream, case.name, n, cycles)
        assert cycles == n, f"{stream}: {n} words took {cycles} cycles, expected {n}"
