"""cocotb testbench of hw/quantiser.sv against golden vectors: grad_bits -> quantised, quant_sat,
quant_nan (m_tuser = {passthrough, nan, sat}, the passthrough random and checked too), under
random idle/backpressure, across a mid-stream reset, and at full rate."""
from __future__ import annotations

import random

import cocotb
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiStreamFrame

from gradblock.sim import tb_datapath_common as tbc

MODULE = "quantiser"


class Bench:
    def __init__(self, dut):
        self.dut = dut
        self.src, self.snk = tbc.source(dut, "s"), tbc.sink(dut, "m")
        self.user_bits = len(dut.s_tuser)

    def configure(self, case) -> None:
        m = case.meta
        self.dut.cfg_m.value = int(m["M"])
        self.dut.cfg_k.value = int(m["k_shift"]) & 0xFFFFFFFF
        self.dut.cfg_range_bits.value = int(m["range_bits"])

    def send(self, case, seed: int):
        self.configure(case)
        rng = random.Random(seed)
        user = [rng.getrandbits(self.user_bits) for _ in range(case.meta["n"])]
        self.src.send_nowait(AxiStreamFrame(tdata=case.arrays["grad_bits"].tolist(), tuser=user))
        return user

    async def run_case(self, case, seed: int = 0):
        user = self.send(case, seed)
        rx = await tbc.recv(self.snk, case.meta["n"], f"case {case.name}: quantiser output")
        a = case.arrays
        tuser = tbc.user_words(rx)
        tbc.check_words(case.name, "quantised", a["quantised"].view("uint32"), rx.tdata)
        tbc.check_words(case.name, "quant_sat", a["quant_sat"], [u & 1 for u in tuser], 1)
        tbc.check_words(case.name, "quant_nan", a["quant_nan"], [(u >> 1) & 1 for u in tuser], 1)
        tbc.check_words(case.name, "passthrough", user, [u >> 2 for u in tuser], self.user_bits)
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
    """A reset with words in flight, then a clean run of a case that must match exactly."""
    tb = Bench(dut)
    await tbc.start(dut)
    case = tbc.medium_case(tbc.nonempty(tbc.load_cases(MODULE)))
    tbc.set_traffic([tb.src], [tb.snk], 0.3, 0.3, 7)
    tb.send(case, 1)
    await ClockCycles(dut.clk, max(3, case.meta["n"] // 3))
    await tbc.reset(dut)
    await ClockCycles(dut.clk, 2)
    assert tb.snk.empty(), "the sink holds a complete frame from before the reset"
    tbc.no_traffic([tb.src, tb.snk])
    await tb.run_case(case, 2)
    await ClockCycles(dut.clk, 2)
    assert dut.m_tvalid.value == 0, "a word left in the pipeline after the last one"


@cocotb.test()
async def throughput(dut):
    """Unthrottled: one word per cycle in and out."""
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
