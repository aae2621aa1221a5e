"""cocotb testbench of hw/block_l1.sv against golden vectors: accumulated -> block_norms (each
with its block index, tlast on the last block), under random idle/backpressure, across a
mid-stream reset, and at full rate."""
from __future__ import annotations

import cocotb
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiStreamFrame

from gradblock.sim import tb_datapath_common as tbc

MODULE = "block_l1"
MASK64 = (1 << 64) - 1


class Bench:
    def __init__(self, dut):
        self.dut = dut
        self.src, self.snk = tbc.source(dut, "s"), tbc.sink(dut, "m")

    def send(self, case) -> None:
        self.dut.cfg_block_size.value = int(case.meta["block_size"])
        words = case.arrays["accumulated"].view("uint32").tolist()
        self.src.send_nowait(AxiStreamFrame(tdata=words))

    async def run_case(self, case):
        self.send(case)
        nb = case.meta["n_blocks"]
        rx = await tbc.recv(self.snk, case.meta["n"], f"case {case.name}: block norms")
        tbc.check_words(case.name, "block_norms", case.arrays["block_norms"],
                        [w & MASK64 for w in rx.tdata], 64)
        tbc.check_words(case.name, "block index", range(nb), [w >> 64 for w in rx.tdata], 32)
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
    """A reset inside a block, then a clean run that must match exactly (neither the partial
    norm nor the block index may survive)."""
    tb = Bench(dut)
    await tbc.start(dut)
    case = tbc.medium_case(tbc.nonempty(tbc.load_cases(MODULE)))
    tbc.set_traffic([tb.src], [tb.snk], 0.3, 0.3, 7)
    tb.send(case)
    await ClockCycles(dut.clk, max(3, case.meta["n"] // 3))
    await tbc.reset(dut)
    await ClockCycles(dut.clk, 2)
    tbc.drain(tb.snk)      # norms of blocks finished before the reset are legitimate
    tbc.no_traffic([tb.src, tb.snk])
    await tb.run_case(case)


@cocotb.test()
async def throughput(dut):
    """Unthrottled: one element per cycle in; with one-element blocks also one norm per cycle."""
    tb = Bench(dut)
    mon = tbc.monitor(dut, "s")
    await tbc.start(dut)
    cases = tbc.nonempty(tbc.load_cases(MODULE))
    unit = [c for c in cases if c.meta["block_size"] == 1]
    for case in [tbc.medium_case(cases)] + ([tbc.medium_case(unit)] if unit else []):
        rx = await tb.run_case(case)
        tx = await tbc.recv(mon, case.meta["n"], "input monitor")
        n, nb, bs = case.meta["n"], case.meta["n_blocks"], case.meta["block_size"]
        cycles_in, cycles_out = tbc.frame_cycles(tx), tbc.frame_cycles(rx)
        tbc.record_metric(MODULE, "in", case.name, n, cycles_in)
        tbc.record_metric(MODULE, f"out (block_size {bs})", case.name, nb, cycles_out)
        assert cycles_in == n, f"in: {n} words took {cycles_in} cycles"
        if bs == 1:
            assert cycles_out == nb, f"out: {nb} norms took {cycles_out} cycles"
