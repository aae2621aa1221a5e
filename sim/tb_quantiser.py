"""cocotb testbench of hw/quantiser.sv against golden vectors: grad_bits -> quantised, quant_sat,
quant_nan (m_tuser = {passthrough, nan, sat}; the passthrough is random and checked too); the
tests (every traffic profile, a mid-stream reset, full rate) are tb_util.stage_tests."""
from __future__ import annotations

import random

from cocotbext.axi import AxiStreamFrame

from gradblock.sim import tb_util


class Bench(tb_util.StageBench):
    module = "quantiser"

    def __init__(self, dut):
        super().__init__(dut)
        self.user_bits = len(dut.s_tuser)

    def frame(self, case, seed: int) -> AxiStreamFrame:
        m = case.meta
        self.dut.cfg_m.value = int(m["M"])
        self.dut.cfg_k.value = int(m["k_shift"]) & 0xFFFFFFFF
        self.dut.cfg_range_bits.value = int(m["range_bits"])
        rng = random.Random(seed)
        user = [rng.getrandbits(self.user_bits) for _ in range(m["n"])]
        return AxiStreamFrame(tdata=case.arrays["grad_bits"].tolist(), tuser=user)

    def check(self, case, rx, sent) -> None:
        a = case.arrays
        tuser = tb_util.user_words(rx)
        tb_util.check_words(case.name, "quantised", a["quantised"].view("uint32"), rx.tdata)
        tb_util.check_words(case.name, "quant_sat", a["quant_sat"], [u & 1 for u in tuser], 1)
        tb_util.check_words(case.name, "quant_nan", a["quant_nan"],
                            [(u >> 1) & 1 for u in tuser], 1)
        tb_util.check_words(case.name, "passthrough", sent.tuser, [u >> 2 for u in tuser],
                            self.user_bits)


globals().update(tb_util.stage_tests(Bench, __name__))
