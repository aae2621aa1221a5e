"""cocotb testbench of hw/block_l1.sv against golden vectors: accumulated -> block_norms, L1 or
L2 as the case's "norm" says (each
with its block index, tlast on the last block); the tests (every traffic profile, a reset
inside a block, full rate) are tb_util.stage_tests."""
from __future__ import annotations

from cocotbext.axi import AxiStreamFrame

from gradblock.hw.sv_constants import package_constants
from gradblock.golden.format import case_norm
from gradblock.sim.benches import tb_util

# cfg_norm per norm kind (gradblock_pkg::NORM_L1 / NORM_L2; docs/spec.md §2.3)
NORM_BIT = {"l1": package_constants()["NORM_L1"], "l2": package_constants()["NORM_L2"]}

MASK64 = (1 << 64) - 1


class Bench(tb_util.StageBench):
    module = "block_l1"
    reset_clears_output = False    # norms of blocks finished before a reset are legitimate

    def frame(self, case, seed: int) -> AxiStreamFrame:
        self.dut.cfg_block_size.value = int(case.meta["block_size"])
        self.dut.cfg_norm.value = NORM_BIT[case_norm(case.meta)]
        return AxiStreamFrame(tdata=case.arrays["accumulated"].view("uint32").tolist())

    def check(self, case, rx, sent) -> None:
        nb = case.meta["n_blocks"]
        tb_util.check_words(case.name, "block_norms", case.arrays["block_norms"],
                            [w & MASK64 for w in rx.tdata], 64)
        tb_util.check_words(case.name, "block index", range(nb), [w >> 64 for w in rx.tdata], 32)

    def throughput_cases(self, cases):
        """The medium case, and a one-element-block case (one norm per cycle out) if any."""
        unit = [c for c in cases if c.meta["block_size"] == 1]
        return [tb_util.medium_case(cases)] + ([tb_util.medium_case(unit)] if unit else [])

    def check_rate(self, case, tx, rx) -> None:
        n, nb, bs = case.meta["n"], case.meta["n_blocks"], case.meta["block_size"]
        cycles_in, cycles_out = tb_util.frame_cycles(tx), tb_util.frame_cycles(rx)
        tb_util.record_metric(self.module, "in", case.name, n, cycles_in)
        tb_util.record_metric(self.module, f"out (block_size {bs})", case.name, nb, cycles_out)
        assert cycles_in == n, f"in: {n} words took {cycles_in} cycles"
        if bs == 1:
            assert cycles_out == nb, f"out: {nb} norms took {cycles_out} cycles"


globals().update(tb_util.stage_tests(Bench, __name__))
