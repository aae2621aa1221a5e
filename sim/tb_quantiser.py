"""cocotb testbench of hw/quantiser.sv against golden vectors: grad_bits -> quantised, quant_sat,
quant_nan (m_tuser = {passthrough, nan, sat}), under random backpressure, across a mid-stream
reset, and at full rate."""
from __future__ import annotations

import random

import cocotb
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiStreamFrame

from sim import tb_datapath_common as tbc

MODULE = "quantiser"


def configure(dut, case) -> None:
    meta = case.meta
    dut.cfg_m.value = int(meta["M"])
    dut.cfg_k.value = int(meta["k_shift"]) & 0xFFFFFFFF
    dut.cfg_range_bits.value = int(meta["range_bits"])


def passthrough(dut, n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.getrandbits(len(dut.s_tuser)) for _ in range(n)]


async def run_case(dut, src, snk, case, seed: int = 0):
    configure(dut, case)
    words = case.arrays["grad_bits"].tolist()
    user = passthrough(dut, len(words), seed)
    await src.send(AxiStreamFrame(tdata=words, tuser=user))
    rx = await snk.recv()
    return rx, user


def check(case, rx, user) -> None:
    a = case.arrays
    n = len(a["grad_bits"])
    tuser = rx.tuser if isinstance(rx.tuser, list) else [rx.tuser] * len(rx.tdata)
    tbc.check_words(case.name, "quantised", a["quantised"].view("uint32"), rx.tdata)
    tbc.check_words(case.name, "quant_sat", a["quant_sat"], [u & 1 for u in tuser], 1)
    tbc.check_words(case.name, "quant_nan", a["quant_nan"], [(u >> 1) & 1 for u in tuser], 1)
    tbc.check_words(case.name, "passthrough", user, [u >> 2 for u in tuser], 32)
    assert len(rx.tdata) == n


@cocotb.test()
async def golden_cases(dut):
    """Every case, every pause ratio on input and output."""
    src, snk = tbc.source(dut, "s"), tbc.sink(dut, "m")
    await tbc.start(dut)
    cases = tbc.nonempty(tbc.load_cases(MODULE))
    for salt, ratio in enumerate(tbc.pause_ratios()):
        tbc.set_pauses([src, snk], ratio, salt)
        for i, case in enumerate(cases):
            rx, user = await run_case(dut, src, snk, case, seed=salt * 100 + i)
            check(case, rx, user)


@cocotb.test()
async def reset_mid_stream(dut):
    """A reset with words in flight, then a clean run of a case that must match exactly."""
    src, snk = tbc.source(dut, "s"), tbc.sink(dut, "m")
    await tbc.start(dut)
    case = tbc.medium_case(tbc.nonempty(tbc.load_cases(MODULE)))
    tbc.set_pauses([src, snk], 0.3, 7)
    configure(dut, case)
    await src.send(AxiStreamFrame(tdata=case.arrays["grad_bits"].tolist(),
                                  tuser=passthrough(dut, case.meta["n"], 1)))
    await ClockCycles(dut.clk, max(3, case.meta["n"] // 3))
    await tbc.reset(dut)
    await ClockCycles(dut.clk, 2)
    assert snk.empty(), "sink kept output from before the reset"
    tbc.set_pauses([src, snk], 0.0, 0)
    rx, user = await run_case(dut, src, snk, case, seed=2)
    check(case, rx, user)
    await ClockCycles(dut.clk, 2)
    assert int(dut.m_tvalid.value) == 0, "a word left in the pipeline after the last one"


@cocotb.test()
async def throughput(dut):
    """Unthrottled: one word per cycle in and out."""
    src, snk = tbc.source(dut, "s"), tbc.sink(dut, "m")
    mon = tbc.monitor(dut, "s")
    await tbc.start(dut)
    case = tbc.medium_case(tbc.nonempty(tbc.load_cases(MODULE)))
    rx, user = await run_case(dut, src, snk, case)
    tx = await mon.recv()
    check(case, rx, user)
    n = case.meta["n"]
    for stream, frame in (("in", tx), ("out", rx)):
        cycles = tbc.frame_cycles(frame)
        tbc.record_metric(MODULE, stream, case.name, n, cycles)
        assert cycles == n, f"{stream}: {n} words took {cycles} cycles, expected {n}"
