"""cocotb testbench for hw/crc32_lanes.sv: after every cycle the running CRC must equal
zlib.crc32 of the little-endian bytes of every word absorbed since the last init (lanes
0..count-1 of each en cycle, in lane order), and crc_next must show it in the cycle the words are
offered. W is the build's own (tb_util.hdl_parameter).

DATA_REG = 1 builds (the registered data term): a cycle's words are in crc_next from the next
cycle and in crc from the one after, so crc_next never depends on the cycle's own inputs, and a
reset drops the words still in the stage. The model (Model) carries that one-cycle stage."""
from __future__ import annotations

import random

import cocotb
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge

from gradblock.codec.zrle import crc32_words as zlib_crc     # zlib.crc32 of the LE bytes
from gradblock.sim.benches import tb_util as tb


def pack(words, w: int, junk: random.Random | None = None) -> int:
    """Words in lanes 0.. of a W-lane bus; lanes above them hold junk (they must be ignored)."""
    value = 0
    for lane in range(w):
        if lane < len(words):
            word = words[lane]
        else:
            word = junk.getrandbits(32) if junk else 0
        value |= (word & 0xFFFFFFFF) << (32 * lane)
    return value


def data_reg() -> int:
    """The build's DATA_REG (the HDL default 0 when the build leaves it out)."""
    try:
        return tb.hdl_parameter("DATA_REG")
    except RuntimeError:
        return 0


class Model:
    """What crc and crc_next must show, with `stages` (DATA_REG) cycles between a cycle's
    inputs and crc_next: `offer` a cycle's inputs, read `crc_next()`, then `edge()` (or
    `reset()`) at the clock edge; `crc()` after it."""

    def __init__(self, stages: int):
        self.stages = stages
        self.absorbed: list[int] = []
        self.stage: list[tuple[bool, list[int]]] = [(False, [])] * stages
        self.now: tuple[bool, list[int]] = (False, [])

    def offer(self, init: bool, en: bool, words: list[int]) -> None:
        self.now = (bool(init), list(words) if en else [])

    def _applied(self) -> list[int]:
        init, words = self.stage[0] if self.stages else self.now
        return ([] if init else self.absorbed) + words

    def crc_next(self) -> int:
        return zlib_crc(self._applied())

    def crc(self) -> int:
        return zlib_crc(self.absorbed)

    def edge(self) -> None:
        self.absorbed = self._applied()
        if self.stages:
            self.stage = self.stage[1:] + [self.now]

    def reset(self) -> None:
        self.absorbed = []
        self.stage = [(False, [])] * self.stages


async def start_crc(dut) -> None:
    """tb.start with init, en and count driven low first: the edge after the reset's release
    takes them (at DATA_REG = 1 into the stage)."""
    dut.init.value = 0
    dut.en.value = 0
    dut.count.value = 0
    await tb.start(dut)


async def settle(dut, want: int | None = None) -> None:
    """Call in the cycle of the last words: idle edges until they are in crc (1 + DATA_REG of
    them), returning after a falling edge. With `want` and DATA_REG = 1, crc_next must show it
    in the cycle after the words, one cycle before crc."""
    await RisingEdge(dut.clk)               # the last words are taken here
    dut.en.value = 0
    dut.init.value = 0
    if data_reg():
        if want is not None:
            await ReadOnly()
            got = int(dut.crc_next.value)
            assert got == want, f"crc_next 0x{got:08X} a cycle after the words, want 0x{want:08X}"
        await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)


@cocotb.test()
async def known_values(dut):
    """The spec's worked example (12 frame words, t1 = 0x455EB0ED) absorbed in chunks of every
    size 1..W; nothing absorbed gives 0."""
    w = tb.hdl_parameter("W")
    await start_crc(dut)
    dut.init.value = 0
    dut.en.value = 0
    dut.count.value = 0
    await FallingEdge(dut.clk)
    assert int(dut.crc.value) == 0, f"after reset crc 0x{int(dut.crc.value):08X}"
    words = [0x5A524C45, 0x00000801, 7, 5, 0x41200000, 2, 2, 5, 0xFFFFFFFF, 1, 0, 2]
    junk = random.Random(1)
    for step in range(1, w + 1):
        chunks = [words[i:i + step] for i in range(0, len(words), step)]
        for i, chunk in enumerate(chunks):
            await RisingEdge(dut.clk)
            dut.init.value = int(i == 0)
            dut.en.value = 1
            dut.count.value = len(chunk)
            dut.data.value = pack(chunk, w, junk)
        await settle(dut, 0x455EB0ED)
        got = int(dut.crc.value)
        assert got == 0x455EB0ED, f"chunks of {step}: spec example CRC 0x{got:08X} != 0x455EB0ED"


@cocotb.test()
async def random_streams(dut):
    """Random counts (0..W, mostly 1..W) and words with idle cycles, restarts (init alone and
    init with words), junk in the lanes above count and resets in the middle (two, two cycles
    apart: at DATA_REG = 1 the second finds words in the stage)."""
    w = tb.hdl_parameter("W")
    await start_crc(dut)
    rng = random.Random(tb.env_int("TB_SEED", 7) + w)
    model = Model(data_reg())
    dut.init.value = 0
    dut.en.value = 0
    dut.count.value = 0
    await RisingEdge(dut.clk)
    cycles = 3000
    for cycle in range(cycles):
        init = rng.random() < 0.02
        en = rng.random() < 0.7
        count = rng.randint(1, w) if rng.random() < 0.9 else rng.choice([0, w])
        words = [rng.choice([0, 0xFFFFFFFF, rng.getrandbits(32), rng.getrandbits(8)])
                 for _ in range(count)]
        dut.init.value = int(init)
        dut.en.value = int(en)
        dut.count.value = count
        dut.data.value = pack(words, w, rng)
        model.offer(init, en, words)
        # synchronous reset acts like init, ignoring en (and the words in the stage)
        reset = cycle in (cycles // 2, cycles // 2 + 2)
        if reset:
            dut.rst.value = 1
        else:
            await ReadOnly()    # crc_next: this cycle's inputs (DATA_REG = 1: the last cycle's)
            got, want = int(dut.crc_next.value), model.crc_next()
            assert got == want, (f"cycle {cycle}: crc_next 0x{got:08X}, zlib 0x{want:08X} "
                                 f"(init {int(init)}, en {int(en)}, count {count})")
        await RisingEdge(dut.clk)
        if reset:
            dut.rst.value = 0
            model.reset()
        else:
            model.edge()
        await FallingEdge(dut.clk)
        got, want = int(dut.crc.value), model.crc()
        assert got == want, (f"cycle {cycle}: crc 0x{got:08X}, zlib 0x{want:08X} over "
                             f"{len(model.absorbed)} words")
    dut.en.value = 0
    dut.init.value = 0
    await ClockCycles(dut.clk, 2)


@cocotb.test()
async def long_streams(dut):
    """Whole frames' worth of words (a few thousand) in random chunk sizes, one init each: the
    CRC after the last chunk equals zlib's over the concatenation."""
    w = tb.hdl_parameter("W")
    await start_crc(dut)
    rng = random.Random(11 + w)
    dut.en.value = 0
    dut.init.value = 0
    for frame in range(3):
        words = [rng.getrandbits(32) for _ in range(rng.randint(1, 4000))]
        at, first = 0, True
        while at < len(words):
            step = min(rng.randint(1, w), len(words) - at)
            await RisingEdge(dut.clk)
            dut.init.value = int(first)
            dut.en.value = 1
            dut.count.value = step
            dut.data.value = pack(words[at:at + step], w, rng)
            at += step
            first = False
        await settle(dut, zlib_crc(words))
        got, want = int(dut.crc.value), zlib_crc(words)
        assert got == want, f"frame {frame} ({len(words)} words): crc 0x{got:08X}, zlib 0x{want:08X}"
