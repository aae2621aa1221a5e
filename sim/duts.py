"""The one table of RTL devices under test: for each block with a cocotb testbench, its top
level, its reference build's HDL parameters, the golden stages it checks and its testbench.

Everything that builds or runs a block reads it: the RTL tests (tests/test_rtl_*.py), `gradblock
verify` (sim/verify.py; REGISTRY is the table's golden-checking entries), the datapath
testbenches (which stage's golden cases to load: `stage_of`) and the benchmark tables
(bench/rtl.py, bench/rtl_engines.py). Sources are never listed: they come from the one
resolver, hw/deps.py, so a block that gains a helper module needs no edit here.

To add a block: append a Dut to DUTS (and see docs/hw.md, "Adding a block to verify").
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from gradblock.hw import deps


def _frozen(mapping: Mapping | None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Dut:
    name: str                     # table key, shown in `gradblock verify`'s table
    toplevel: str                 # HDL top level; its files come from hw/deps.py
    test_module: str              # cocotb module, e.g. "gradblock.sim.tb_zrle_encoder"
    stage: str | None = None      # golden stage a case must list to apply ("encode", ...);
    #                               None: the testbench makes its own cases (not in verify)
    more_stages: tuple[str, ...] = ()   # further golden stages it runs (any one applies)
    testcase: str = "golden_cases"      # the cocotb test that runs the golden cases
    arrays: tuple[str, ...] = ()        # golden arrays the testbench reads
    # HDL parameters of the reference build (verify, the benchmark); the runner tells the TB
    parameters: Mapping = field(default_factory=dict)
    env: Mapping = field(default_factory=dict)
    golden_env: str = "TB_GOLDEN_DIR"   # variable through which the testbench gets the directory
    needs_vectors: bool = True    # the testbench has no cases of its own: golden vectors only

    def __post_init__(self):
        object.__setattr__(self, "parameters", _frozen(self.parameters))
        object.__setattr__(self, "env", _frozen(self.env))

    @property
    def stages(self) -> tuple[str, ...]:
        """Every golden stage the testbench runs (a case listing any one applies)."""
        return (self.stage, *self.more_stages) if self.stage else ()

    @property
    def sources(self) -> tuple[str, ...]:
        """File stems of hw/ the top level needs, packages first (hw/deps.py)."""
        return tuple(deps.names(self.toplevel))

    def missing(self) -> list[str]:
        """Files this entry needs that do not exist (empty when it can run)."""
        missing = []
        try:
            deps.names(self.toplevel)
        except deps.RtlDependencyError as exc:
            missing.append(str(exc))
        if importlib.util.find_spec(self.test_module) is None:
            missing.append(self.test_module)
        return missing

    def run(self, sim: str, parameters: Mapping | None = None, **kwargs):
        """sim.harness.run_rtl of this top level and testbench; `parameters` None: the
        reference build's (pass {} for the HDL defaults). Other keywords go to run_rtl."""
        from .harness import run_rtl
        sources = kwargs.pop("sources", None)
        return run_rtl(self.toplevel, sources, self.test_module, sim,
                       parameters=dict(self.parameters if parameters is None else parameters),
                       **kwargs)


def _tb(name: str) -> str:
    return f"gradblock.sim.tb_{name}"


# In `gradblock verify`'s order (REGISTRY keeps it).
DUTS: dict[str, Dut] = {d.name: d for d in [
    # codec: without a golden directory the testbenches make synthetic cases
    Dut("crc32_word", "crc32_word", _tb("crc32"), needs_vectors=False),
    Dut("zrle_encoder", "zrle_encoder", _tb("zrle_encoder"), "encode", testcase="encode_cases",
        arrays=("payload", "frame"), parameters={"LMAX_LOG2_MAX": 8}, needs_vectors=False),
    Dut("zrle_decoder", "zrle_decoder", _tb("zrle_decoder"), "decode", testcase="decode_cases",
        arrays=("frame", "payload"), parameters={"QUEUE_AW": 4}, needs_vectors=False),
    # datapath blocks (their testbenches read TB_GOLDEN_DIR / TB_GOLDEN_DIRS, sim/tb_util.py)
    Dut("quantiser", "quantiser", _tb("quantiser"), "quantiser",
        arrays=("grad_bits", "quantised", "quant_sat", "quant_nan")),
    Dut("ef_add", "ef_add", _tb("ef_add"), "feedback",
        arrays=("residual_in", "quantised", "accumulated", "feedback_sat")),
    Dut("momentum", "momentum", _tb("momentum"), "momentum",
        arrays=("residual_in", "velocity_in", "quantised", "velocity", "momentum_sat")),
    Dut("block_l1", "block_l1", _tb("block_l1"), "norms", arrays=("accumulated", "block_norms")),
    Dut("topk_select", "topk_select", _tb("topk_select"), "select",
        arrays=("block_norms", "selected"), parameters={"K_MAX": 128}),
    Dut("compress_top", "compress_top", _tb("compress_top"), "top",
        arrays=("grad_bits", "residual_in", "frame", "residual_out"),
        parameters={"N_MAX": 65536, "K_MAX": 32, "LMAX_LOG2_MAX": 8}),
    # residual in an AxiRam; K_MAX 128 holds every golden case's k_eff (docs/hw.md, engines);
    # momentum cases run with the velocity behind the second port
    Dut("compress_engine", "compress_engine", _tb("compress_engine"), "top",
        more_stages=("momentum",),
        arrays=("grad_bits", "residual_in", "frame", "residual_out", "velocity_in",
                "velocity_out"),
        parameters={"ADDR_W": 32, "K_MAX": 128, "LMAX_LOG2_MAX": 8}),
    # the golden "exchange" list: N worker frames -> int64 sums in an AxiRam (docs/hw.md)
    Dut("aggregate_engine", "aggregate_engine", _tb("aggregate_engine"), "exchange",
        arrays=("frames", "sums"), parameters={"ADDR_W": 32, "MAX_BURST": 16}),
    # compress_engine behind its PeakRDL AXI4-Lite register block (hw/csr/, docs/registers.md):
    # Verilator only (Icarus 11 lacks the block's unpacked structs), so not in verify; its
    # files are hw/csr's plus the engine's: run(sources=gradblock.hw.csr.generate.sources())
    Dut("compress_engine_axil", "compress_engine_axil", _tb("compress_engine_axil"),
        parameters={"ADDR_W": 32, "K_MAX": 128, "LMAX_LOG2_MAX": 8}),
]}


def stage_of(name: str) -> str:
    """The golden stage a block's testbench checks (the manifest's "stages" name)."""
    stage = DUTS[name].stage
    if stage is None:
        raise KeyError(f"{name} checks no golden stage")
    return stage


def verified() -> dict[str, Dut]:
    """The entries `gradblock verify` runs: those that check a golden stage, in table order."""
    return {n: d for n, d in DUTS.items() if d.stage is not None}
