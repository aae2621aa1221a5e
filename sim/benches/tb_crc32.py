"""cocotb testbench for hw/crc32_word.sv: the running CRC must equal zlib.crc32 of the
little-endian bytes of every word absorbed since the last init, after every cycle, and crc_next
must show that value one cycle sooner (in the cycle the word is offered)."""
from __future__ import annotations

import random
import zlib

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge

from gradblock.sim.benches import tb_util as tb


def zlib_crc(words) -> int:
    return zlib.crc32(np.asarray(words, dtype="<u4").tobytes()) & 0xFFFFFFFF


async def check_against_zlib(dut, absorbed, where: str):
    await FallingEdge(dut.clk)          # registered output settled after the edge
    got = int(dut.crc.value)
    want = zlib_crc(absorbed)
    assert got == want, (f"{where}: crc 0x{got:08X}, zlib 0x{want:08X} over {len(absorbed)} "
                         f"words (last 0x{absorbed[-1] if absorbed else 0:08X})")


@cocotb.test()
async def known_values(dut):
    """The spec's worked example: 12 frame words give t1 = 0x455EB0ED; nothing absorbed gives 0."""
    await tb.start(dut)
    dut.init.value = 0
    dut.en.value = 0
    await check_against_zlib(dut, [], "after reset")
    words = [0x5A524C45, 0x00000801, 7, 5, 0x41200000, 2, 2, 5, 0xFFFFFFFF, 1, 0, 2]
    for i, w in enumerate(words):
        await RisingEdge(dut.clk)
        dut.init.value = int(i == 0)
        dut.en.value = 1
        dut.data.value = w
    await RisingEdge(dut.clk)
    dut.en.value = 0
    dut.init.value = 0
    await FallingEdge(dut.clk)
    assert int(dut.crc.value) == 0x455EB0ED, f"spec example CRC 0x{int(dut.crc.value):08X} != 0x455EB0ED"


@cocotb.test()
async def random_streams(dut):
    """Random words with idle cycles, restarts (init alone and init with a word) and a reset."""
    await tb.start(dut)
    rng = random.Random(tb.env_int("TB_SEED", 7))
    absorbed: list[int] = []
    dut.init.value = 0
    dut.en.value = 0
    await RisingEdge(dut.clk)
    for cycle in range(3000):
        init = rng.random() < 0.02
        en = rng.random() < 0.7
        word = rng.choice([0, 0xFFFFFFFF, rng.getrandbits(32), rng.getrandbits(8)])
        dut.init.value = int(init)
        dut.en.value = int(en)
        dut.data.value = word
        if cycle == 1500:                   # synchronous reset acts like init, ignoring en
            dut.rst.value = 1
        else:
            await ReadOnly()                # crc_next: this cycle's init/en/data applied
            got = int(dut.crc_next.value)
            want = zlib_crc(([] if init else absorbed) + ([word] if en else []))
            assert got == want, (f"cycle {cycle}: crc_next 0x{got:08X}, zlib 0x{want:08X} "
                                 f"(init {int(init)}, en {int(en)})")
        await RisingEdge(dut.clk)
        if cycle == 1500:
            dut.rst.value = 0
            absorbed = []
        else:
            if init:
                absorbed = []
            if en:
                absorbed.append(word)
        await check_against_zlib(dut, absorbed, f"cycle {cycle}")
    dut.en.value = 0
    dut.init.value = 0
    await ClockCycles(dut.clk, 2)
