"""cocotb testbench of hw/momentum.sv (docs/spec.md §7.2): (r, u, q) and m_fix -> (r, u'),
sat_momentum, against the numpy reference (refmodel.momentum.velocity_update), under random
idle/backpressure, across a mid-stream reset, and at full rate.

The vectors are made here from the reference: corner values (u = -2^31, +-QMAX, half-way
products, sums just past +-QMAX) and random words, each case with its own m_fix, so the
configuration also changes between layers. TB_MOMENTUM_SEED picks the random words.
"""
from __future__ import annotations

import os

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiStreamFrame

from gradblock.refmodel.momentum import scale_velocity, velocity_update
from gradblock.refmodel.quantiser import QMAX
from gradblock.sim.benches import tb_util

MODULE = "momentum"
M_FIX_VALUES = (0, 1, 32768, 58982, 65535)


def _case(name: str, r, u, q, m_fix: int) -> tb_util.Case:
    r, u, q = (np.asarray(a, dtype=np.int64).astype(np.int32) for a in (r, u, q))
    u_new, sat = velocity_update(u, q, m_fix)
    flags = (np.abs(scale_velocity(u, m_fix) + q.astype(np.int64)) > QMAX).astype(np.uint8)
    arrays = {"residual_in": r, "velocity_in": u, "quantised": q, "velocity": u_new,
              "momentum_sat": flags}
    return tb_util.Case(name, {"n": int(r.size), "m_fix": m_fix, "sat_momentum": sat}, arrays)


def make_cases(seed: int) -> list[tb_util.Case]:
    rng = np.random.default_rng(seed)
    corner_u = [-2**31, -QMAX, QMAX, 0, 1, -1, 3, -3, 5, -5, 2**30, -2**30, 65535, -65536]
    corner_q = [QMAX, -QMAX, 0, 1, -1, QMAX, -QMAX, 2**31 - 2**15, -(2**31 - 2**15), 7, -7, 0,
                2**30, -2**30]
    cases = []
    for m_fix in M_FIX_VALUES:
        n = len(corner_u)
        cases.append(_case(f"corners_m{m_fix}", rng.integers(-2**31, 2**31, n), corner_u,
                           corner_q, m_fix))
    for i, n in enumerate((1, 2, 17, 64, 257)):
        m_fix = int(rng.integers(0, 65536))
        big = rng.integers(-2**31, 2**31, (3, n))
        small = rng.integers(-2**20, 2**20, (3, n))
        r, u, q = np.where(rng.random((3, n)) < 0.5, big, small)
        cases.append(_case(f"random{i}_n{n}_m{m_fix}", r, u, q, m_fix))
    return cases


class Bench(tb_util.StageBench):
    module = MODULE

    def frame(self, case: tb_util.Case, seed: int = 0) -> AxiStreamFrame:
        a = case.arrays
        r, u, q = (a[k].view("uint32").tolist() for k in ("residual_in", "velocity_in",
                                                          "quantised"))
        self.dut.m_fix.value = case.meta["m_fix"]     # the pipeline is empty between cases
        return AxiStreamFrame(tdata=[(ri << 64) | (ui << 32) | qi for ri, ui, qi in zip(r, u, q)])

    def check(self, case: tb_util.Case, rx, sent) -> None:
        a = case.arrays
        tuser = tb_util.user_words(rx)
        tb_util.check_words(case.name, "residual passed through", a["residual_in"].view("uint32"),
                            [w >> 32 for w in rx.tdata])
        tb_util.check_words(case.name, "velocity", a["velocity"].view("uint32"),
                            [w & 0xFFFFFFFF for w in rx.tdata])
        tb_util.check_words(case.name, "momentum_sat", a["momentum_sat"], tuser, 1)
        tb_util.check_value(case.name, "sat_momentum", case.meta["sat_momentum"], sum(tuser))


def _cases() -> list[tb_util.Case]:
    return make_cases(tb_util.env_int("TB_MOMENTUM_SEED", 11))


async def vector_cases(dut, traffic):
    """Every case under one traffic profile, layer after layer, m_fix changing between."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    await tb_util.golden_loop(dut, MODULE, _cases(), tb.run_case, [tb.src], [tb.snk], traffic)


vector_cases = tb_util.traffic_test(vector_cases)


async def golden_cases(dut, traffic):
    """Every golden case listing the momentum stage (`gradblock golden`; `gradblock verify`),
    layer after layer, m_fix from each case's manifest entry."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    await tb_util.golden_loop(dut, MODULE, tb_util.load_cases(MODULE), tb.run_case, [tb.src],
                              [tb.snk], traffic,
                              skip=lambda c: None if c.meta["n"] else "empty layer: no beat to send")


# only with golden vectors given (gradblock verify sets TB_GOLDEN_DIR); the built-in vectors
# above need none
if os.environ.get("TB_GOLDEN_DIR") or os.environ.get("TB_GOLDEN_DIRS"):
    golden_cases = tb_util.traffic_test(golden_cases)
else:
    del golden_cases


@cocotb.test()
async def reset_mid_stream(dut):
    """A reset with elements in flight, then a clean run that must match exactly."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    case = max(_cases(), key=lambda c: c.meta["n"])
    tb_util.set_traffic([tb.src], [tb.snk], 0.3, 0.3, 7)
    tb.send(case)
    await ClockCycles(dut.clk, max(3, case.meta["n"] // 3))
    await tb_util.reset(dut)
    await ClockCycles(dut.clk, 2)
    assert tb.snk.empty(), "the sink holds a complete frame from before the reset"
    tb_util.no_traffic([tb.src, tb.snk])
    await tb.run_case(case)
    await ClockCycles(dut.clk, 2)
    assert dut.m_tvalid.value == 0, "a word left in the pipeline after the last one"


@cocotb.test()
async def throughput(dut):
    """Unthrottled: one element per cycle in, one per cycle out."""
    tb = Bench(dut)
    mon = tb_util.monitor(dut, "s")
    await tb_util.start_streams(dut)
    case = max(_cases(), key=lambda c: c.meta["n"])
    rx = await tb.run_case(case)
    tx = await tb_util.recv(mon, case.meta["n"], "input monitor")
    tb.check_rate(case, tx, rx)


def boundary_cases() -> list[tb_util.Case]:
    """Sums mul(m, u) + q exactly at the clamp's edges: +-QMAX and one past (+-2^31), one
    inside, and the extremes (|v| near 2^32), for m_fix 0, 1, 32768 and 65535, and the
    rounding edge of mul (|u| * m_fix + 2^15 landing exactly on a multiple of 2^16)."""
    cases = []
    targets = [QMAX - 1, QMAX, QMAX + 1, QMAX + 2, -QMAX + 1, -QMAX, -QMAX - 1, -QMAX - 2, 0]
    for m_fix in (0, 1, 32768, 65535):
        us, qs = [], []
        for u in (0, 1, -1, 3, -3, 2**16, -2**16, 2**31 - 1, -2**31, 12345, -12345):
            mul = int(scale_velocity(np.array([u], np.int64), m_fix)[0])
            for v in targets:
                q = v - mul
                if -2**31 <= q < 2**31:
                    us.append(u)
                    qs.append(q)
        us += [-2**31, 2**31 - 1, -2**31, 2**31 - 1]   # the widest sums both ways
        qs += [-2**31, 2**31 - 1, 2**31 - 1, -2**31]
        # |u| * m_fix + 2^15 = k 2^16 exactly (round half away from zero) and one below
        if m_fix:
            for k in (1, 2, 7, 1000):
                for du in (0, -1, 1):
                    u = (k * 2**16 - 2**15) // m_fix + du
                    if 0 <= u < 2**31:
                        us += [u, -u]
                        qs += [0, 0]
        n = len(us)
        cases.append(_case(f"bounds_m{m_fix}", np.arange(n) * 7919 - 2**30, us, qs, m_fix))
    return cases


@cocotb.test()
async def clamp_boundaries(dut):
    """boundary_cases() under idle cycles and backpressure: the clamp's compares and the
    saturation flag exactly at +-QMAX and +-2^31, and mul's rounding edge."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    await tb_util.golden_loop(dut, MODULE, boundary_cases(), tb.run_case, [tb.src], [tb.snk],
                              (0.3, 0.3))
