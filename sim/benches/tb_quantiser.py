"""cocotb testbench of hw/quantiser.sv against golden vectors: grad_bits -> quantised, quant_sat,
quant_nan (m_tuser = {passthrough, nan, sat}; the passthrough is random and checked too); the
tests (every traffic profile, a mid-stream reset, full rate) are tb_util.stage_tests."""
from __future__ import annotations

import random

import cocotb
from cocotbext.axi import AxiStreamFrame

from gradblock.sim.benches import tb_util


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


def config_cases() -> list[tb_util.Case]:
    """(M, k) driven directly rather than from a range R: k beyond what any float32 R gives
    (from_range yields -148 <= k <= 129), M at both ends of [2^31, 2^32), against the
    reference formula (refmodel.quantiser.quantise takes any QuantConfig). The inputs are the
    ones whose shift t = k - E lands at or below 0 there: zero, the smallest subnormals, a
    normal, the largest float and infinities."""
    import numpy as np

    from gradblock.refmodel.quantiser import QuantConfig, quantise
    bits = np.array([0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00000002, 0x00000003,
                     0x007FFFFF, 0x00800000, 0x3F800000, 0xBF800000, 0x7F7FFFFF, 0xFF7FFFFF,
                     0x7F800000, 0xFF800000, 0x33D6BF95, 0x00000010, 0x00000005,
                     0x80000007, 0x00000021], dtype=np.uint32)
    x = bits.view(np.float32)
    cases = []
    # odd M with k near -148: subnormals reach the shifter with t = k + 149 of 1..8, where the
    # round bit is P's own bit 0 and nothing lies below it (an exact tie rounds to even)
    for M in (2**31, 2**31 + 1, 2**32 - 3, 2**32 - 1):
        for k in (-200, -150, -149, -148, -146, -143, -141, 0, 1, 129, 130, 152, 200):
            cfg = QuantConfig(1.0, 0x00000001, M, k)
            q = quantise(x, cfg).q.astype(np.int32)
            sat = ((bits & np.uint32(0x7FFFFFFF)) > np.uint32(cfg.range_bits)).astype(np.uint8)
            cases.append(tb_util.Case(
                f"cfg_M{M:x}_k{k}", {"n": int(x.size), "M": M, "k_shift": k,
                                     "range_bits": cfg.range_bits},
                {"grad_bits": bits, "quantised": q, "quant_sat": sat,
                 "quant_nan": np.zeros(x.size, np.uint8)}))
    return cases


@cocotb.test()
async def config_extremes(dut):
    """config_cases() under idle cycles and backpressure: the shifter's clamp (t <= 0 with a
    nonzero mantissa saturates, t >= 63 rounds to 0) and the infinity flag at every k."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    await tb_util.golden_loop(dut, "quantiser", config_cases(), tb.run_case, [tb.src],
                              [tb.snk], (0.3, 0.3))
