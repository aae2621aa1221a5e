"""cocotb testbench of hw/block_l1.sv against golden vectors: accumulated -> block_norms (with
their indices, tlast on the last block), under random backpressure, across a mid-stream reset,
and at full rate."""
from __future__ import annotations

import cocotb
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiStreamFrame

from sim import tb_datapath_common as tbc

MODULE = "block_l1"
MASK64 = (1 << 64) - 1


async def run_case(dut, src, snk, case):
    dut.cfg_block_size.value = int(case.meta["block_size"])
    await src.send(AxiStreamFrame(tdata=case.arrays["accumulated"].view("uint32").tolist()))
    return await snk.recv()


def check(case, rx) -> None:
    norms = [w & MASK64 for w in rx.tdata]
    indices = [w >> 64 for w in rx.tdata]
    tbc.check_words(case.name, "block_norms", case.arrays["block_norms"], norms, 64)
    tbc.check_words(case.name, "block index", range(case.meta["n_blocks"]), indices, 32)


@cocotb.test()
async def golden_cases(dut):
    """Every case, every pause ratio on input and output."""
    src, snk = tbc.source(dut, "s"), tbc.sink(dut, "m")
    await tbc.start(dut)
    cases = tbc.nonempty(tbc.load_cases(MODULE))
    for salt, ratio in enumerate(tbc.pause_ratios()):
        tbc.set_pauses([src, snk], ratio, salt)
        for case in cases:
            check(case, await run_case(dut, src, snk, case))


@cocotb.test()
async def reset_mid_stream(dut):
    """A reset inside a block, then a clean run that must match exactly (the partial norm and
    the block index must not survive)."""
    src, snk = tbc.source(dut, "s"), tbc.sink(dut, "m")
    await tbc.start(dut)
    case = tbc.medium_case(tbc.nonempty(tbc.load_cases(MODULE)))
    tbc.set_pauses([src, snk], 0.3, 7)
    dut.cfg_block_size.value = int(case.meta["block_size"])
    await src.send(AxiStreamFrame(tdata=case.arrays["accumulated"].view("uint32").tolist()))
    await ClockCycles(dut.clk, max(3, case.meta["n"] // 3))
    await tbc.reset(dut)
    await ClockCycles(dut.clk, 2)
    assert snk.empty(), "sink kept output from before the reset"
    tbc.set_pauses([src, snk], 0.0, 0)
    check(case, await run_case(dut, src, snk, case))


@cocotb.test()
async def throughput(dut):
    """Unthrottled: one element per cycle in; with one-element blocks also one norm per cycle out."""
    src, snk, mon = tbc.source(dut, "s"), tbc.sink(dut, "m"), tbc.monitor(dut, "s")
    await tbc.start(dut)
    cases = tbc.nonempty(tbc.load_cases(MODULE))
    unit = [c for c in cases if c.meta["block_size"] == 1]
    for case in [tbc.medium_case(cases)] + ([tbc.medium_case(unit)] if unit else []):
        rx = await run_case(dut, src, snk, case)
        tx = await mon.recv()
        check(case, rx)
        n, nb = case.meta["n"], case.meta["n_blocks"]
        cycles_in, cycles_out = tbc.frame_cycles(tx), tbc.frame_cycles(rx)
        tbc.record_metric(MODULE, "in", case.name, n, cycles_in)
        tbc.record_metric(MODULE, f"out (block_size {case.meta['block_size']})", case.name, nb,
                          cycles_out)
        assert cycles_in == n, f"in: {n} words took {cycles_in} cycles"
        if case.meta["block_size"] == 1:
            assert cycles_out == nb, f"out: {nb} norms took {cycles_out} cycles"
