"""cocotb testbench of hw/block_l1.sv against golden vectors: accumulated -> block_norms, L1 or
L2 as the case's "norm" says (each
with its block index, tlast on the last block); the tests (every traffic profile, a reset
inside a block, full rate) are tb_datapath_common.stage_tests."""
from __future__ import annotations

from cocotbext.axi import AxiStreamFrame

from gradblock.hw.sv_constants import package_constants
from gradblock.refmodel.golden_format import case_norm
from gradblock.sim import tb_datapath_common as tbc

# cfg_norm per norm kind (gradblock_pkg::NORM_L1 / NORM_L2; docs/spec.md §2.3)
NORM_BIT = {"l1": package_constants()["NORM_L1"], "l2": package_constants()["NORM_L2"]}

MASK64 = (1 << 64) - 1


class Bench(tbc.StageBench):
    module = "block_l1"
    reset_clears_output = False    # norms of blocks finished before a reset are legitimate

    def frame(self, case, seed: int) -> AxiStreamFrame:
        self.dut.cfg_block_size.value = int(case.meta["block_size"])
        self.dut.cfg_norm.value = NORM_BIT[case_norm(case.meta)]
        return AxiStreamFrame(tdata=case.arrays["accumulated"].view("uint32").tolist())

    def check(self, case, rx, sent) -> None:
        nb = case.meta["n_blocks"]
        tbc.check_words(case.name, "block_norms", case.arrays["block_norms"],
                        [w & MASK64 for w in rx.tdata], 64)
        tbc.check_words(case.name, "block index", range(nb), [w >> 64 for w in rx.tdata], 32)

    def throughput_cases(self, cases):
        """The medium case, and a one-element-block case (one norm per cycle out) if any."""
        unit = [c for c in cases if c.meta["block_size"] == 1]
        return [tbc.medium_case(cases)] + ([tbc.medium_case(unit)] if unit else [])

    def check_rate(self, case, tx, rx) -> None:
        n, nb, bs = case.meta["n"], case.meta["n_blocks"], case.meta["block_size"]
        cycles_in, cycles_out = tbc.frame_cycles(tx), tbc.frame_cycles(rx)
        tbc.record_metric(self.module, "in", case.name, n, cycles_in)
        tbc.record_metric(self.module, f"out (block_size {bs})", case.name, nb, cycles_out)
        assert cycles_in == n, f"in: {n} words took {cycles_in} cycles"
        if bs == 1:
            assert cycles_out == nb, f"out: {nb} norms took {cycles_out} cycles"


globals().update(tbc.stage_tests(Bench, __name__))
