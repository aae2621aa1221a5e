"""cocotb testbench of hw/compress_engine.sv: golden (grad_bits, residual_in) -> ZRLE frame, with
the residual in a cocotbext-axi AxiRam and checked word for word against residual_out after
every layer (and the words around it checked untouched). Random idle cycles on the gradient
stream and on every AXI channel of the memory, backpressure on the frame; configuration errors;
resets in either pass; cycles per layer against the budget n + 2 * (selected elements) + O(k).

Momentum cases (golden stage "momentum", docs/spec.md §7) run with cfg_momentum_en: the velocity
sits behind the second master port (m_axi_vel, an AxiRam of its own on the same memory, as two
masters behind an interconnect, with its own random pauses) and is checked word for word against
velocity_out after every layer, guards around it untouched, sat_momentum counted. A case whose
residual_from is the case just run starts from what that layer left in memory (the multistep
chains), not from a reload. Every other layer runs with momentum off, and the velocity port must
not raise a single request during it.

Build parameters come from the runner's record (tb_util.hdl_parameter): K_MAX, LMAX_LOG2_MAX,
ADDR_W. A case the build cannot hold (k_eff > K_MAX, lmax_log2 > LMAX_LOG2_MAX) must be refused
with its code without touching memory.

Lanes (issue 31): W is read from the DUT's gradient stream (32 bits a lane), and every test runs
at that W: the gradient source and both AxiRams are W words wide (element i in beat i / W, lane
i % W; the stream has no tkeep, the engine counts by n), the bases are aligned to a beat (4W
bytes) and a base aligned to 4 but not to a beat is refused, and the guard words around each
region (not beat aligned at its end) check the write strobes.
"""
from __future__ import annotations

import numpy as np

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from gradblock.hw.sv_constants import codes, package_constants
from gradblock.golden.format import case_norm
from gradblock.sim.benches import tb_util
from gradblock.sim.benches.tb_util import hdl_parameter as param   # the build's, from the runner
from gradblock.sim.duts import DUTS
from gradblock.sim import functional_bins
from gradblock.sim.functional_bins import record as record_bins

# cfg_norm per norm kind (gradblock_pkg::NORM_L1 / NORM_L2; docs/spec.md §2.3)
NORM_L1 = package_constants()["NORM_L1"]
NORM_BIT = {"l1": NORM_L1, "l2": package_constants()["NORM_L2"]}

MODULE = "compress_engine"
# the engine runs the golden "top" stage, and the "momentum" stage with momentum on (sim/duts.py)
_ERR = codes("ENGINE_ERR_")          # hw/gradblock_pkg.sv, the codes the RTL compiles
ERR_OK = 0
ERR_ADDR, ERR_BLOCK_SIZE, ERR_N_BLOCKS, ERR_K, ERR_K_MAX, ERR_LMAX, ERR_RANGE, ERR_M, \
    ERR_TLAST, ERR_AXI, ERR_VEL_ADDR, ERR_VEL_OVERLAP = (_ERR[k] for k in (
        "RES_ADDR", "BLOCK_SIZE_ZERO", "N_BLOCKS_MISMATCH", "K_ZERO", "K_OVER_K_MAX",
        "LMAX_RANGE", "RANGE_INVALID", "M_BELOW_HALF", "TLAST_MISPLACED", "MEMORY", "VEL_ADDR",
        "VEL_OVERLAP"))
ERR_NAME = {v: k for k, v in _ERR.items()}


def _lanes() -> int:
    """W, the build's lanes: the gradient stream's width over 32 (1 where the top has no such
    port, e.g. the AXI4-Lite wrapper's bench importing this module)."""
    sig = getattr(getattr(cocotb, "top", None), "s_grad_tdata", None)
    return len(sig) // 32 if sig is not None else 1


W = _lanes()
BEAT = 4 * W                        # bytes a beat: the bases' alignment


def _frame_lanes() -> int:
    """Words a frame beat carries: m_frame_tkeep's width (1 where the frame is one word a
    beat without tkeep)."""
    sig = getattr(getattr(cocotb, "top", None), "m_frame_tkeep", None)
    return len(sig) if sig is not None else 1


FRAME_LANES = _frame_lanes()
GUARD_WORDS = 16                    # checked-untouched words before and after each region
GUARD = 0xA5C3_5A3C
VEL_GUARD = 0x3C5A_C3A5
# a base that is not 4 KiB aligned (a beat aligned one), so bursts must split at the boundary
BASE = 0x1000 * 3 - BEAT * 5
VEL_PORT = "m_axi_vel"
# with momentum off the velocity base is not looked at: an unaligned one must not be refused
UNUSED_VEL_BASE = 2


def is_momentum(case) -> bool:
    return "momentum" in case.meta["stages"]


def vel_base_for(max_n: int) -> int:
    """The velocity region: past the residual's (and its guards) in the one address space, on
    another 4 KiB page, not page aligned either."""
    end = BASE + 4 * (max_n + 2 * GUARD_WORDS)
    return (end // 4096 + 2) * 4096 - BEAT * 7


def config_of(case, base: int = BASE, vel_base: int = UNUSED_VEL_BASE) -> dict:
    m = case.meta
    mom = is_momentum(case)
    return {"n": m["n"], "block_size": m["block_size"], "n_blocks": m["n_blocks"],
            "k": m["k_eff"], "m": m["M"], "k_shift": m["k_shift"] & 0xFFFFFFFF,
            "range_bits": m["range_bits"], "layer_id": m["layer_id"],
            "lmax_log2": m["lmax_log2"], "norm": NORM_BIT[case_norm(m)],
            "res_base": base, "momentum_en": int(mom),
            "m_fix": m["m_fix"] if mom else 0, "momentum_mask": int(mom and m["momentum_mask"]),
            "vel_base": vel_base if mom else UNUSED_VEL_BASE}


def expected_error(cfg: dict) -> int:
    """The code the RTL must report for this configuration (docs/hw.md, compress_engine): the
    velocity first (spec §7.4), then the residual, then their overlap, then the layer
    parameters (tb_util.layer_config_error, shared with compress_top)."""
    n = cfg["n"]
    top = 2 ** param("ADDR_W")
    res, vel = cfg["res_base"], cfg["vel_base"]
    if cfg["momentum_en"] and (vel % BEAT or vel + 4 * n > top):
        return ERR_VEL_ADDR
    if res % BEAT or res + 4 * n > top:
        return ERR_ADDR
    if cfg["momentum_en"] and n and vel < res + 4 * n and res < vel + 4 * n:
        return ERR_VEL_OVERLAP
    failed = tb_util.layer_config_error(cfg, param("K_MAX"), param("LMAX_LOG2_MAX"))
    return ERR_OK if failed is None else _ERR[failed]


def selected_elements(case) -> int:
    """Elements in the selected blocks: what pass 2 reads and zeroes."""
    n, bs = case.meta["n"], case.meta["block_size"]
    return sum(min(bs, n - int(j) * bs) for j in case.arrays["selected"].reshape(-1))


def fixed_cycles(case) -> int:
    """The budget's O(k_eff + latency) part: pipeline fill and drain, per-block set-up (96
    since the register slices and links of the ECP5 clock work; 64 before). At W > 1 a block
    may take a partial beat at each end and the lane blocks (block_norm_lanes, the lane
    encoder's packer) are deeper, while n / W leaves little slack: 10 k_eff + 128 (measured:
    108-120 cycles besides ceil(n / W) + ceil(S / W) on the small golden layers)."""
    if W == 1:
        return 8 * case.meta["k_eff"] + 96
    return 10 * case.meta["k_eff"] + 128


def cycle_budget(case) -> int:
    """ceil(n / W) + 2 * ceil(selected elements / W) + O(k_eff + latency): the documented bound
    (docs/hw.md; n + 2 * selected + ... at W = 1). (Pass 2 goes at the frame's width: a build
    whose frame is one word a beat has 2 * selected there.)"""
    return (-(-case.meta["n"] // W) + 2 * -(-selected_elements(case) // FRAME_LANES)
            + fixed_cycles(case))


def line_rate_case(case) -> bool:
    """Where the issue's >= 0.95 W elements/cycle applies: the selected blocks hold at most 2 %
    of the layer (k_eff * B <= 2 % of n) and the fixed part is at most 1 % of n / W, so the
    budget itself is at most 1.05 n / W. (The fixed part is the clock's price: the 150 MHz
    pipeline is deeper; a 1728-element layer spends ~6 % of its cycles there at W = 1.)"""
    n = case.meta["n"]
    return (50 * selected_elements(case) <= n and 100 * W * fixed_cycles(case) <= n
            and FRAME_LANES == W)      # (pass 2 at W words a cycle)


class Engine(tb_util.AxiEngineBench):
    def __init__(self, dut, cases):
        max_n = max(c.meta["n"] for c in cases)
        self.vel_base = vel_base_for(max_n)
        top = self.vel_base + 4 * (max_n + GUARD_WORDS) + 4096
        super().__init__(dut, 1 << max(16, top.bit_length()), {VEL_PORT: None})
        # a word per byte lane: W lanes of 32 bits (no tkeep: the engine counts by n, and the
        # last beat's lanes past n carry whatever the source pads with)
        self.src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_grad"), dut.clk, dut.rst,
                                   byte_lanes=W)
        tb_util.quiet(self.src)
        # the frame: dense W-word beats, tkeep a bit a word (the sink's lanes come from it)
        if hasattr(dut, "m_frame_tkeep"):
            self.frame = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_frame"), dut.clk,
                                       dut.rst)
            tb_util.quiet(self.frame)
        else:
            self.frame = tb_util.sink(dut, "m_frame")
        self.inputs.insert(0, self.src)
        self.outputs = [self.frame]
        self.carried: str | None = None     # the case whose outputs memory holds, exactly

    def config(self, case, base: int = BASE) -> dict:
        return config_of(case, base, self.vel_base)

    def _load(self, base: int, words, guard: int) -> None:
        g = np.full(GUARD_WORDS, guard, np.uint32).tobytes()
        data = np.asarray(words).view(np.uint32)
        self.ram.write(base - 4 * GUARD_WORDS, g)
        self.ram.write(base, data.tobytes())
        self.ram.write(base + 4 * data.size, g)

    def load_residual(self, case, base: int, cfg: dict | None = None) -> None:
        """The case's residual (and, for a momentum config, its velocity) with guard words."""
        self._load(base, case.arrays["residual_in"], GUARD)
        if cfg and cfg["momentum_en"]:
            self._load(cfg["vel_base"], case.arrays["velocity_in"], VEL_GUARD)

    def residual(self, base: int, n: int) -> np.ndarray:
        return np.frombuffer(self.ram.read(base, 4 * n), np.uint32)

    async def configure(self, cfg: dict) -> int:
        """Present the config until it is taken; returns the cycle of the handshake."""
        return await self.present_config({name: cfg[name] for name in (
            "n", "block_size", "n_blocks", "k", "m", "k_shift", "range_bits", "layer_id",
            "lmax_log2", "res_base", "momentum_en", "m_fix", "momentum_mask", "vel_base")}
            | {"norm": cfg.get("norm", NORM_L1)})

    def status(self) -> dict:
        d = self.dut
        return {"err_code": int(d.err_code.value), "sat_quant": int(d.sat_quant_count.value),
                "sat_feedback": int(d.sat_feedback_count.value), "nan": int(d.nan_count.value),
                "sat_momentum": int(d.sat_momentum_count.value)}

    def check_carried(self, case, cfg: dict) -> None:
        """Memory left by the previous layer is this step's input (the golden chain)."""
        n = case.meta["n"]
        tb_util.check_words(case.name, f"residual carried from {self.carried}",
                            case.arrays["residual_in"].view(np.uint32),
                            self.residual(cfg["res_base"], n))
        if cfg["momentum_en"]:
            tb_util.check_words(case.name, f"velocity carried from {self.carried}",
                                case.arrays["velocity_in"].view(np.uint32),
                                self.residual(cfg["vel_base"], n))

    async def run_layer(self, case, cfg: dict | None = None, grad=None, load: bool = True):
        """One layer: residual (and velocity) into memory unless `load` is false, config,
        gradient in, frame out, done. Returns (frame, status, cycles from the config handshake
        to done)."""
        cfg = cfg or self.config(case)
        n, base = cfg["n"], cfg["res_base"]
        if load:
            self.load_residual(case, base, cfg)
        else:
            self.check_carried(case, cfg)
        self.requests[VEL_PORT] = 0
        before = self.done_seen
        start = await self.configure(cfg)
        if n:
            for part in (grad if grad is not None else [case.arrays["grad_bits"].tolist()]):
                await self.src.send(AxiStreamFrame(tdata=part))
        frame = await self.recv_frame(case.meta["frame_words"] + 2 * n, f"case {case.name}")
        await self.wait_done(before, 20 * n + 2000, f"case {case.name}")
        return frame, self.status(), self.done_cycle - start

    async def recv_frame(self, words: int, what: str):
        """The next frame, checked dense (every beat full but the last, whose words are a run
        from lane 0), then compacted to its words."""
        sink = self.frame

        class Whole:               # tb_util.recv's endpoint, the frame not compacted
            @staticmethod
            async def recv():
                return await sink.recv(compact=False)

        frame = await tb_util.recv(Whole, words, f"{what}: frame")
        keep = [int(k) for k in frame.tkeep] or [1] * len(frame.tdata)   # no tkeep: a word a beat
        kept = sum(keep)
        lanes = FRAME_LANES
        assert len(keep) % lanes == 0 and keep == [1] * kept + [0] * (len(keep) - kept) \
            and len(keep) - kept < lanes, \
            f"{what}: frame not dense in {lanes}-word beats: tkeep {keep}"
        frame.compact()
        return frame

    def check_region(self, case, what: str, expected, base: int, guard: int) -> None:
        n = case.meta["n"]
        tb_util.check_words(case.name, f"{what} memory", np.asarray(expected).view(np.uint32),
                            self.residual(base, n))
        for where, addr in (("before", base - 4 * GUARD_WORDS), ("after", base + 4 * n)):
            tb_util.check_words(case.name, f"memory {where} the {what}", [guard] * GUARD_WORDS,
                                self.residual(addr, GUARD_WORDS))

    def check(self, case, frame, status, err=ERR_OK, cfg: dict | None = None) -> None:
        cfg = cfg or self.config(case)
        a = case.arrays
        tb_util.check_words(case.name, "frame", a["frame"], frame.tdata)
        self.check_region(case, "residual", a["residual_out"], cfg["res_base"], GUARD)
        tb_util.check_value(case.name, "err_code", err, status["err_code"])
        tb_util.check_value(case.name, "sat_quant", case.meta["sat_quant"], status["sat_quant"])
        tb_util.check_value(case.name, "sat_feedback", case.meta["sat_feedback"],
                            status["sat_feedback"])
        tb_util.check_value(case.name, "nan count", int(a["quant_nan"].sum()), status["nan"])
        if cfg["momentum_en"]:
            self.check_region(case, "velocity", a["velocity_out"], cfg["vel_base"], VEL_GUARD)
            tb_util.check_value(case.name, "sat_momentum", case.meta["sat_momentum"],
                                status["sat_momentum"])
        else:
            tb_util.check_value(case.name, "cycles with a velocity port request (momentum off)", 0,
                                self.requests[VEL_PORT])
            tb_util.check_value(case.name, "sat_momentum (momentum off)", 0, status["sat_momentum"])

    async def refused(self, case, cfg: dict, err: int, what: str) -> None:
        """A bad configuration: its code, done right away, no input taken, memory untouched
        (both regions), no request on either port."""
        self.carried = None
        base = cfg["res_base"] - cfg["res_base"] % BEAT
        vel = cfg["vel_base"] - cfg["vel_base"] % BEAT
        # an overlapping velocity would overwrite the residual just loaded: load it alone
        loads_vel = cfg["momentum_en"] and err != ERR_VEL_OVERLAP
        self.load_residual(case, base, {**cfg, "vel_base": vel} if loads_vel else None)
        self.clear_counts()
        before = self.done_seen
        await self.configure(cfg)
        await self.wait_done(before, 12, f"case {case.name} ({what})")   # the check: 8 cycles
        await ClockCycles(self.dut.clk, 2)
        tb_util.check_value(case.name, f"err_code ({what})", err, self.status()["err_code"])
        assert self.dut.s_grad_tready.value == 0, f"case {case.name} ({what}): input taken"
        assert self.frame.empty(), f"case {case.name} ({what}): frame produced after refusal"
        for port, beats in self.port_beats.items():
            assert not any(beats.values()), f"case {case.name} ({what}): {port} traffic {beats}"
        tb_util.check_words(case.name, f"residual memory ({what})",
                            case.arrays["residual_in"].view(np.uint32),
                            self.residual(base, case.meta["n"]))
        if loads_vel:
            tb_util.check_words(case.name, f"velocity memory ({what})",
                                case.arrays["velocity_in"].view(np.uint32),
                                self.residual(vel, case.meta["n"]))
        record_bins(f"engine.err.{ERR_NAME[err]}")     # seen, and refused as it must be


def load_engine_cases():
    """Every golden case of the "top" stage, then every "momentum" one (each list in manifest
    order, so a chain of steps stays in order), narrowed by TB_CASES / TB_MIN_N / TB_MAX_N;
    an empty selection is an error."""
    cases, empty = [], []
    for stage in DUTS[MODULE].stages:
        try:
            cases += tb_util.load_cases(MODULE, stage)
        except RuntimeError as e:          # none of this stage in the selection
            empty.append(str(e))
    if not cases:
        raise RuntimeError("; ".join(empty))
    return cases


def fitting(cases, momentum: bool | None = None):
    """Cases this build runs (not refused, n > 0); momentum True/False keeps only those."""
    return [c for c in cases if expected_error(config_of(c, BASE, vel_base_for(c.meta["n"])))
            == ERR_OK and c.meta["n"] > 0 and momentum in (None, is_momentum(c))]


@tb_util.traffic_test
async def golden_cases(dut, traffic):
    """Every case, layer after layer without reset, under this traffic profile (idle cycles
    on the gradient and on all five memory channels, backpressure on the frame)."""
    cases = load_engine_cases()
    tb = Engine(dut, cases)
    await tb_util.start_streams(dut)

    async def run_case(case):
        cfg = tb.config(case)
        err = expected_error(cfg)
        if err:
            await tb.refused(case, cfg, err, f"err_code {err}")
            return tb_util.Refused(f"refused as it must be: err_code {err} (k_eff "
                                   f"{case.meta['k_eff']}, lmax_log2 {case.meta['lmax_log2']})")
        prev, tb.carried = tb.carried, None
        carry = prev is not None and case.meta.get("residual_from") == prev
        frame, status, _ = await tb.run_layer(case, cfg, load=not carry)
        tb.check(case, frame, status, cfg=cfg)
        tb.carried = case.name
        return f"memory carried from {prev}" if carry else ""

    await tb_util.golden_loop(dut, MODULE, cases, run_case, tb.inputs, tb.outputs, traffic)


@cocotb.test()
async def config_errors(dut):
    """Each configuration check refuses its config (memory untouched, no request on either
    port), the velocity's checks with a momentum case; a clean layer of each kind after."""
    cases = load_engine_cases()
    plain, mom = fitting(cases, False), fitting(cases, True)
    tb = Engine(dut, cases)
    await tb_util.start_streams(dut)
    top = 2 ** param("ADDR_W")
    runs = []
    if plain:
        case = tb_util.medium_case(plain, 256)
        nb = case.meta["n_blocks"]
        runs.append((case, [
            ("base not 4-aligned", {"res_base": BASE + 2}),
            ("base 4-aligned, not aligned to a beat", {"res_base": BASE + 4}),
            ("residual past the address space", {"res_base": top - 4}),
            ("block_size 0", {"block_size": 0}), ("n_blocks + 1", {"n_blocks": nb + 1}),
            ("n_blocks - 1", {"n_blocks": nb - 1}), ("k 0", {"k": 0}),
            ("k > K_MAX", {"k": param("K_MAX") + 1, "block_size": 1, "n_blocks": case.meta["n"]}),
            ("lmax_log2 0", {"lmax_log2": 0}),
            ("lmax_log2 above the build", {"lmax_log2": min(24, param("LMAX_LOG2_MAX")) + 1}),
            ("range Inf", {"range_bits": 0x7F800000}), ("M < 2^31", {"m": 0x7FFFFFFF})]))
    if mom:
        case = tb_util.medium_case(mom, 256)
        n = case.meta["n"]
        runs.append((case, [
            ("velocity base not 4-aligned", {"vel_base": tb.vel_base + 1}),
            ("velocity base 4-aligned, not aligned to a beat", {"vel_base": tb.vel_base + 4}),
            ("velocity past the address space", {"vel_base": top - 4}),
            # the velocity is checked first (spec §7.4), even before the residual's address
            ("velocity and residual base both bad", {"vel_base": tb.vel_base + 2,
                                                     "res_base": BASE + 2}),
            # (beat aligned: the beat of the residual's last word, the first word's)
            ("velocity over the residual's last word",
             {"vel_base": BASE + BEAT * ((n - 1) // W)}),
            ("velocity ending in the residual's first word",
             {"vel_base": BASE - BEAT * (-(-n // W) - 1)}),
            ("velocity on the residual", {"vel_base": BASE}),
            ("overlap reported before block_size 0", {"vel_base": BASE, "block_size": 0}),
            ("k 0 with momentum", {"k": 0})]))
    for case, bad in runs:
        good = tb.config(case)
        for what, change in bad:
            cfg = {**good, **change}
            err = expected_error(cfg)
            if err == ERR_OK:
                continue       # e.g. k > K_MAX on a case with fewer blocks than that
            if "past the address space" in what:
                # the RTL must not touch it (nothing there to check): the code, no traffic
                before = tb.done_seen
                tb.clear_counts()
                await tb.configure(cfg)
                await tb.wait_done(before, 12, what)   # the check: 8 cycles
                tb_util.check_value(case.name, f"err_code ({what})", err, tb.status()["err_code"])
                for port, beats in tb.port_beats.items():
                    assert not any(beats.values()), f"{what}: {port} traffic {beats}"
                continue
            await tb.refused(case, cfg, err, what)
        frame, status, _ = await tb.run_layer(case)
        tb.check(case, frame, status)


@cocotb.test()
async def misplaced_tlast(dut):
    """tlast one beat early: the layer is still counted by n and exact; err_code 9 (momentum
    off and on). (At W lanes the first part ends on a beat: the last beat comes after it.)"""
    cases = load_engine_cases()
    tb = Engine(dut, cases)
    await tb_util.start_streams(dut)
    for kind in (False, True):
        pool = [c for c in fitting(cases, kind) if c.meta["n"] >= W + 1]
        if not pool:
            continue
        case = tb_util.medium_case(pool, 256)
        g = case.arrays["grad_bits"].tolist()
        cut = (len(g) - 1) // W * W        # the start of the last beat
        frame, status, _ = await tb.run_layer(case, grad=[g[:cut], g[cut:]])
        tb.check(case, frame, status, err=ERR_TLAST)
        record_bins("engine.err.TLAST_MISPLACED")
        frame, status, _ = await tb.run_layer(case)
        tb.check(case, frame, status)


@cocotb.test()
async def reset_mid_layer(dut):
    """Resets in pass 1 and in pass 2 with bursts in flight on both ports, each followed by an
    exact layer (memory is reloaded: a layer cut short leaves it partly written, by design);
    a momentum layer and a plain one."""
    cases = load_engine_cases()
    tb = Engine(dut, cases)
    await tb_util.start_streams(dut)
    picks = [tb_util.medium_case(pool, 2048)
             for pool in (fitting(cases, False), fitting(cases, True))
             if pool]
    salt = 0
    for case in picks:
        n = case.meta["n"]
        cfg = tb.config(case)
        for when in ("pass 1", "pass 2"):
            salt += 1
            tb_util.set_traffic(tb.inputs, tb.outputs, 0.3, 0.3, salt)
            tb.load_residual(case, BASE, cfg)
            await tb.configure(cfg)
            cocotb.start_soon(tb.src.send(AxiStreamFrame(tdata=case.arrays["grad_bits"].tolist())))
            if when == "pass 1":
                await ClockCycles(dut.clk, max(4, n // 2))
            else:      # the first frame word leaving marks pass 2
                while not (dut.m_frame_tvalid.value == 1 and dut.m_frame_tready.value == 1):
                    await RisingEdge(dut.clk)
                await ClockCycles(dut.clk, 3)
            await tb_util.reset(dut)
            await ClockCycles(dut.clk, 2)
            tb_util.drain(tb.frame)
            assert dut.busy.value == 0, f"{case.name}: busy after a reset in {when}"
            for port in ("m_axi", VEL_PORT):
                assert all(getattr(dut, f"{port}_{ch}valid").value == 0 for ch in
                           ("ar", "aw", "w")), f"{case.name}: {port} requests pending after a " \
                                               f"reset in {when}"
            tb_util.no_traffic(tb.inputs + tb.outputs)
            frame, status, _ = await tb.run_layer(case)
            tb.check(case, frame, status)


@cocotb.test()
async def memory_errors(dut):
    """ERR_MEMORY: the memory answers one access with SLVERR (cocotbext-axi's AxiRam answers
    SLVERR when its backing store raises; DECERR sets the same rresp/bresp bit 1 the engine
    reads). A failed read and a failed write on the residual port, and on the velocity port of
    a momentum layer: the layer still ends (done, frame closed) with err_code ERR_MEMORY, and
    the next layer, on a healthy memory, is exact."""
    cases = load_engine_cases()
    tb = Engine(dut, cases)
    await tb_util.start_streams(dut)
    for momentum in (False, True):
        pool = fitting(cases, momentum)
        if not pool:
            continue
        case = tb_util.medium_case(pool, 256)
        for port in ("m_axi", VEL_PORT) if momentum else ("m_axi",):
            for side in ("read", "write"):
                with tb_util.memory_fails_once(tb.rams[port], side) as hits:
                    _, status, _ = await tb.run_layer(case)
                assert hits, f"{case.name}: no {side} on {port} to fail"
                tb_util.check_value(case.name, f"err_code after a failed {side} on {port}",
                                    ERR_AXI, status["err_code"])
                record_bins("engine.err.MEMORY")
                frame, status, _ = await tb.run_layer(case)
                tb.check(case, frame, status)


@cocotb.test()
async def empty_layer(dut):
    """n = 0 (momentum off and on): a frame of header and trailer only, err_code 0, done, and
    not one request on either memory port; then an exact layer."""
    from gradblock.codec.zrle import encode_frame
    cases = load_engine_cases()
    tb = Engine(dut, cases)
    await tb_util.start_streams(dut)
    for momentum in (False, True):
        pool = fitting(cases, momentum)
        if not pool:
            continue
        case = tb_util.medium_case(pool, 256)
        cfg = {**tb.config(case), "n": 0, "n_blocks": 0}
        assert expected_error(cfg) == ERR_OK, f"{case.name}: n = 0 refused by the model"
        tb.clear_counts()
        before = tb.done_seen
        await tb.configure(cfg)
        frame = await tb_util.recv(tb.frame, 7, f"{case.name} (n = 0): frame")
        await tb.wait_done(before, 200, f"{case.name} (n = 0)")
        rng = float(np.uint32(cfg["range_bits"]).view(np.float32))
        want = encode_frame(np.zeros(0, np.int32), cfg["layer_id"], rng, cfg["lmax_log2"])
        tb_util.check_words(case.name + " (n = 0)", "frame", want, frame.tdata)
        tb_util.check_value(case.name + " (n = 0)", "err_code", ERR_OK, tb.status()["err_code"])
        for port, beats in tb.port_beats.items():
            assert not any(beats.values()), f"n = 0: {port} traffic {beats}"
        frame, status, _ = await tb.run_layer(case)
        tb.check(case, frame, status)


@cocotb.test()
async def nan_inputs(dut):
    """NaN gradients (quiet and signalling, both signs) where a case's gradient is +-0: the
    quantiser gives 0 with its nan flag, so frame, residual and counters are the case's own,
    and nan_count counts them (the golden set carries NaN for the quantiser only: the
    software step raises on it)."""
    cases = load_engine_cases()
    tb = Engine(dut, cases)
    await tb_util.start_streams(dut)
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7FBFFFFF], np.uint32)
    ran = 0
    for momentum in (False, True):
        pool = [c for c in fitting(cases, momentum)
                if ((c.arrays["grad_bits"].view(np.uint32) & 0x7FFFFFFF) == 0).sum() >= 2
                and not c.arrays["quant_nan"].any()]
        if not pool:
            continue
        case = tb_util.medium_case(pool, 2048)
        g = case.arrays["grad_bits"].view(np.uint32).copy()
        where = np.flatnonzero((g & 0x7FFFFFFF) == 0)[:len(nans)]
        g[where] = nans[:where.size]
        frame, status, _ = await tb.run_layer(case, grad=[g.tolist()])
        flagged = case.arrays["quant_nan"].copy()
        flagged[where] = 1
        tb.check(tb_util.Case(case.name, case.meta, {**case.arrays, "quant_nan": flagged}),
                 frame, status)
        ran += 1
    assert ran, "no fitting case has a +-0 gradient element to turn into NaN"


@cocotb.test()
async def gap_stall(dut):
    """golden/cases.py's many_gaps layer (30 two-literal blocks, a zero run after each),
    computed here from its spec, under frame back-pressure on 90 % of the cycles: the
    encoder's 16-token queue fills, the beats behind a blocked gap fill the register slice in
    front of the encoder, and the next gap beat has to wait (pass 2's C_GAP stall, which the
    golden profiles, up to 70 %, do not reach). The layer must be exact."""
    from gradblock.golden.cases import synthetic_specs
    from gradblock.golden.compute import compute_case
    from gradblock.refmodel.compress import compress_layer
    spec = next(s for s in synthetic_specs(0) if s.name == "many_gaps")
    meta, arrays = compute_case(spec, compress_layer)
    case = tb_util.Case(spec.name, meta, arrays)
    tb = Engine(dut, [case])
    await tb_util.start_streams(dut)
    tb_util.set_traffic(tb.inputs, tb.outputs, 0.0, 0.9, 11)
    frame, status, _ = await tb.run_layer(case)
    tb.check(case, frame, status)


@cocotb.test()
async def reset_in_every_state(dut):
    """A reset in every state of the engine's FSM (state_t: the configuration checks, both
    passes and the steps between them), a momentum layer under traffic in flight on both
    ports (a plain one without momentum cases), each followed by an exact layer: records
    reset.compress_engine.<STATE> (sim/functional_bins.py)."""
    cases = load_engine_cases()
    tb = Engine(dut, cases)
    await tb_util.start_streams(dut)
    pool = fitting(cases, True) or fitting(cases, False)
    case = tb_util.medium_case(pool, 256)
    cfg = tb.config(case)
    n = case.meta["n"]

    async def start():
        tb_util.set_traffic(tb.inputs, tb.outputs, 0.3, 0.3, 5)
        tb.load_residual(case, BASE, cfg)
        await tb.configure(cfg)
        await tb.src.send(AxiStreamFrame(tdata=case.arrays["grad_bits"].tolist()))

    async def recover():
        await ClockCycles(dut.clk, 2)
        tb_util.drain(tb.frame)
        assert dut.busy.value == 0, f"{case.name}: busy after a reset"
        tb_util.no_traffic(tb.inputs + tb.outputs)
        frame, status, _ = await tb.run_layer(case)
        tb.check(case, frame, status)

    reached = await functional_bins.reset_in_every_state(
        dut, MODULE, start, recover, flush=tb.src.clear, limit=20 * n + 2000)
    assert reached, "no state reached"


@cocotb.test()
async def throughput(dut):
    """Unthrottled, memory one beat per cycle: cycles from the config handshake to done for
    the TB_THROUGHPUT_CASES (default 4) largest fitting cases of each kind (momentum off, on),
    asserted against the budget ceil(n / W) + 2 ceil(selected elements / W) + 8 k_eff + 96
    (10 k_eff + 128 at W > 1),
    and >= 0.95 W elements/cycle where the selected blocks hold at most 2 % of the layer and
    the fixed part at most 1 % of n / W (line_rate_case); elements per cycle and beats per
    port recorded."""
    cases = load_engine_cases()
    tb = Engine(dut, cases)
    await tb_util.start_streams(dut)
    tb_util.no_traffic(tb.inputs + tb.outputs)
    count = tb_util.env_int("TB_THROUGHPUT_CASES", 4)
    timed = []
    for kind in (False, True):
        timed += sorted(fitting(cases, kind), key=lambda c: -c.meta["n"])[:count]
    for case in timed:
        mom = is_momentum(case)
        tb.clear_counts()         # idle before the config: no handshakes
        frame, status, cycles = await tb.run_layer(case)
        tb.check(case, frame, status)
        n, sel = case.meta["n"], selected_elements(case)
        tb_util.write_metrics({"module": MODULE, "stream": f"layer (config to done), selected {sel}"
                               + (", momentum" if mom else ""),
                               "case": case.name, "words": n, "cycles": cycles, "lanes": W,
                               "frame_lanes": FRAME_LANES,
                               "cycles_per_word": round(cycles / n, 4), "sim": cocotb.SIM_NAME,
                               "selected": sel, "k_eff": case.meta["k_eff"], "momentum": mom,
                               "axi_beats": dict(tb.beats),
                               "vel_axi_beats": dict(tb.port_beats[VEL_PORT])})
        budget = cycle_budget(case)
        dut._log.info(f"{case.name}{' (momentum)' if mom else ''}: n {n}, selected elements "
                      f"{sel}, k_eff {case.meta['k_eff']}: {cycles} cycles (budget {budget}), "
                      f"{n / cycles:.4f} elements/cycle, velocity beats "
                      f"{tb.port_beats[VEL_PORT]}")
        assert cycles <= budget, (f"case {case.name}: {cycles} cycles, over the budget {budget} "
                                  f"(n {n} / W + 2 * {sel} selected / W + "
                                  f"{fixed_cycles(case)} fixed, W = {W})")
        if line_rate_case(case):      # k_eff * B <= 2 % of n: the issue's line-rate target
            assert n / cycles >= 0.95 * W, (f"case {case.name}: {n / cycles:.4f} elements/cycle "
                                            f"with {sel} of {n} elements selected "
                                            f"(< 0.95 W, W = {W})")
