"""The one table of RTL devices under test: for each block with a cocotb testbench, its top
level, its reference build and named build variants (HDL parameters), the golden stages it
checks, its testbench (sim/benches/), the cocotb tests a full run must include, the dedicated
runs `gradblock verify --coverage` makes, and the runs that judge its mutants.

Everything that builds or runs a block reads it: the RTL tests (tests/test_rtl_*.py), `gradblock
verify` (sim/verify.py; REGISTRY is the table's golden-checking entries, DEDICATED_TESTS its
`dedicated` runs), `gradblock mutate` (sim/mutation.py; CHECKS is built from `mutation` and
`mutates`), the lint test (every build in the table is linted), the FuseSoC cores (sim/cores.py:
a core's `sim` target runs its DUT's testbench), the datapath testbenches (which stage's golden
cases to load: `stage_of`) and the benchmark tables (bench/rtl.py, bench/rtl_engines.py).
Sources are never listed: they come from the one resolver, hw/deps.py, so a block that gains a
helper module needs no edit here.

To add a block: append a Dut to DUTS (only name, toplevel and test_module are required; every
other field has a default that means "none"), and see docs/hw.md, "Adding a block to verify".
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from gradblock.hw import deps


BENCHES_DIR = Path(__file__).resolve().parent / "benches"
TB_LIBRARY = BENCHES_DIR / "tb_util.py"      # the testbenches' one helper library


def _frozen(mapping: Mapping | None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Run:
    """One run of a DUT's cocotb tests beside its golden run.

    vectors: "golden": every golden directory the caller has (TB_GOLDEN_DIRS); "each": one run
    per directory (TB_GOLDEN_DIR: the codec testbenches read one); "edge": golden/datapath.py's
    edge cases only; None: the testbench makes its own cases.
    parameters: None: the DUT's reference build; {} the HDL defaults; else those parameters."""
    tests: str                              # comma-separated cocotb test names
    vectors: str | None = "golden"
    parameters: Mapping | None = None
    env: Mapping = field(default_factory=dict)

    def __post_init__(self):
        if self.vectors not in ("golden", "each", "edge", None):
            raise ValueError(f"Run.vectors must be golden, each, edge or None: {self.vectors!r}")
        if self.parameters is not None:
            object.__setattr__(self, "parameters", _frozen(self.parameters))
        object.__setattr__(self, "env", _frozen(self.env))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.strip() for t in self.tests.split(",") if t.strip())


@dataclass(frozen=True)
class Dut:
    name: str                     # table key, shown in `gradblock verify`'s table
    toplevel: str                 # HDL top level; its files come from hw/deps.py
    test_module: str              # cocotb module, e.g. "gradblock.sim.benches.tb_zrle_encoder"
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
    # every cocotb test a full run of the testbench must include (the RTL tests check it)
    tests: tuple[str, ...] = ()
    # named build variants the tests use beside the reference build (linted like it)
    builds: Mapping = field(default_factory=dict)
    # `gradblock verify --coverage`: the non-golden tests it runs after the golden cases
    dedicated: tuple[Run, ...] = ()
    # `gradblock mutate`: the runs that judge a mutant of each file in `mutates`
    # (default: the top level's own file)
    mutation: tuple[Run, ...] = ()
    mutates: tuple[str, ...] = ()
    # "package.module:function" returning the HDL files in compile order, for a top level whose
    # files are not all hw/*.sv (hw/csr's generated block); None: hw/deps.py resolves them
    sources_fn: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "parameters", _frozen(self.parameters))
        object.__setattr__(self, "env", _frozen(self.env))
        object.__setattr__(self, "builds", _frozen({k: _frozen(v) for k, v in self.builds.items()}))
        if self.mutation and not self.mutates:
            object.__setattr__(self, "mutates", (self.toplevel,))

    def build(self, name: str) -> dict:
        """The parameters of build variant `name`: the reference build's, overridden by it."""
        return {**self.parameters, **self.builds[name]}

    @property
    def bench_path(self) -> Path:
        """The testbench's file (sim/benches/tb_<name>.py)."""
        return BENCHES_DIR / f"{self.test_module.rsplit('.', 1)[-1]}.py"

    @property
    def stages(self) -> tuple[str, ...]:
        """Every golden stage the testbench runs (a case listing any one applies)."""
        return (self.stage, *self.more_stages) if self.stage else ()

    def source_files(self) -> list[Path]:
        """The HDL files the top level needs, in compile order (packages first)."""
        if self.sources_fn is None:
            return deps.sources(self.toplevel)
        module, _, func = self.sources_fn.partition(":")
        return [Path(p) for p in getattr(importlib.import_module(module), func)()]

    @property
    def sources(self) -> tuple[str, ...]:
        """File stems the top level needs, packages first (hw/deps.py, or sources_fn)."""
        if self.sources_fn is None:
            return tuple(deps.names(self.toplevel))
        return tuple(p.stem for p in self.source_files())

    def missing(self) -> list[str]:
        """Files this entry needs that do not exist (empty when it can run)."""
        missing = []
        try:
            missing += [str(p) for p in self.source_files() if not p.is_file()]
        except (deps.RtlDependencyError, ImportError) as exc:
            missing.append(str(exc))
        if importlib.util.find_spec(self.test_module) is None:
            missing.append(self.test_module)
        return missing

    def run(self, sim: str, parameters: Mapping | None = None, **kwargs):
        """sim.harness.run_rtl of this top level and testbench; `parameters` None: the
        reference build's (pass {} for the HDL defaults). Other keywords go to run_rtl."""
        from .harness import run_rtl
        sources = kwargs.pop("sources", None)
        if sources is None and self.sources_fn is not None:
            sources = self.source_files()
        return run_rtl(self.toplevel, sources, self.test_module, sim,
                       parameters=dict(self.parameters if parameters is None else parameters),
                       **kwargs)


def _tb(name: str) -> str:
    return f"gradblock.sim.benches.tb_{name}"


_STAGE_TESTS = ("golden_cases", "reset_mid_stream", "throughput")
_EDGE = Run("golden_cases", "edge")
_ENCODER_TESTS = "reset_mid_frame,config_clamp,ready_paths,throughput"


# In `gradblock verify`'s order (REGISTRY keeps it).
DUTS: dict[str, Dut] = {d.name: d for d in [
    # codec: without a golden directory the testbenches make synthetic cases
    Dut("crc32_word", "crc32_word", _tb("crc32"), needs_vectors=False,
        tests=("known_values", "random_streams"),
        mutation=(Run("known_values,random_streams", None, {}),)),
    Dut("zrle_encoder", "zrle_encoder", _tb("zrle_encoder"), "encode", testcase="encode_cases",
        arrays=("payload", "frame"), parameters={"LMAX_LOG2_MAX": 8}, needs_vectors=False,
        tests=("encode_cases", "reset_mid_frame", "config_clamp", "ready_paths", "throughput"),
        builds={"lmax3": {"LMAX_LOG2_MAX": 3}},
        dedicated=(Run("encode_cases,reset_mid_frame,config_clamp,ready_paths", None),),
        # the synthetic token-grammar edge cases for lmax_log2 1, 2, 3, 8 and every dedicated
        # test (tests/test_rtl_codec.py), then the golden frames of each vector directory; they
        # also judge the CRC's mutants (the encoder's frames carry it)
        mutation=(Run("encode_cases," + _ENCODER_TESTS, None, {"LMAX_LOG2_MAX": 8}),
                  Run("encode_cases", "each", {"LMAX_LOG2_MAX": 8})),
        mutates=("zrle_run_encoder", "crc32_word")),
    Dut("zrle_decoder", "zrle_decoder", _tb("zrle_decoder"), "decode", testcase="decode_cases",
        arrays=("frame", "payload"), parameters={"QUEUE_AW": 4}, needs_vectors=False,
        tests=("decode_cases", "decode_errors", "reset_mid_frame", "ready_paths", "throughput"),
        builds={"runs": {"RUN_OUT": 1}},
        dedicated=(Run("decode_cases,decode_errors,reset_mid_frame,ready_paths", None,
                       env={"TB_FUZZ": "200"}),)),
    # the W-lane decoder (issue 31): W frame words a cycle in, runs and literal chunks out
    Dut("zrle_lane_decoder", "zrle_lane_decoder", _tb("zrle_lane_decoder"), "decode",
        testcase="decode_cases", arrays=("frame", "payload"),
        parameters={"W": 4, "QUEUE_AW": 4}, needs_vectors=False,
        tests=("decode_cases", "decode_errors", "reset_mid_frame", "ready_paths", "throughput"),
        builds={"w1": {"W": 1}, "w4": {"W": 4}, "w16": {"W": 16}},
        dedicated=(Run("decode_cases,decode_errors,reset_mid_frame,ready_paths", None,
                       env={"TB_FUZZ": "200"}),),
        # its mutants judged at W = 4: the sharp pair first (frames cut at every lane, every
        # error code, fuzz), so a killed mutant stops there; then resets, ready path and rate
        mutation=(Run("decode_cases,decode_errors", None, {"W": 4, "QUEUE_AW": 4}),
                  Run("reset_mid_frame,ready_paths,throughput", None, {"W": 4, "QUEUE_AW": 4}))),
    # W-lane codec (issue 31): W words a cycle; the lane builds W 1, 4, 16
    Dut("crc32_lanes", "crc32_lanes", _tb("crc32_lanes"), parameters={"W": 4},
        needs_vectors=False, tests=("known_values", "random_streams", "long_streams"),
        # "r" builds: DATA_REG = 1, the registered data term (a cycle later)
        builds={"w1": {"W": 1}, "w4": {"W": 4}, "w16": {"W": 16},
                "w1r": {"W": 1, "DATA_REG": 1}, "w4r": {"W": 4, "DATA_REG": 1},
                "w16r": {"W": 16, "DATA_REG": 1}},
        # its mutants judged at W = 4 (the reference build), both modes, by every test against zlib
        mutation=(Run("known_values,random_streams,long_streams", None),
                  Run("known_values,random_streams,long_streams", None,
                      {"W": 4, "DATA_REG": 1}))),
    Dut("zrle_lane_encoder", "zrle_lane_encoder", _tb("zrle_lane_encoder"), "encode",
        testcase="encode_cases", arrays=("payload", "frame"),
        parameters={"W": 4, "LMAX_LOG2_MAX": 8}, needs_vectors=False,
        tests=("encode_cases", "lane_sweep", "ring_full", "random_cases", "reset_mid_frame",
               "config_clamp", "ready_paths", "throughput"),
        builds={"w1": {"W": 1}, "w4": {"W": 4}, "w16": {"W": 16}},
        dedicated=(Run("encode_cases,lane_sweep,ring_full,random_cases,reset_mid_frame,"
                       "config_clamp,ready_paths", None),),
        # its mutants judged at W = 4: the frame tests first (a killed mutant stops there),
        # then the ring, resets, the clamp, the ready paths and the rate
        mutation=(Run("encode_cases,lane_sweep,random_cases", None,
                      {"W": 4, "LMAX_LOG2_MAX": 8}),
                  Run("ring_full,reset_mid_frame,config_clamp,ready_paths,throughput", None,
                      {"W": 4, "LMAX_LOG2_MAX": 8}))),
    # datapath blocks (their testbenches read TB_GOLDEN_DIR / TB_GOLDEN_DIRS, sim/benches/tb_util.py)
    Dut("quantiser", "quantiser", _tb("quantiser"), "quantiser",
        arrays=("grad_bits", "quantised", "quant_sat", "quant_nan"),
        tests=_STAGE_TESTS + ("config_extremes",),
        # Icarus runs the 1-bit passthrough, Verilator the 32-bit one compress_top uses
        builds={"uw1": {"UW": 1}, "uw32": {"UW": 32}},
        dedicated=(_EDGE, Run("reset_mid_stream")),
        mutation=(Run(",".join(_STAGE_TESTS) + ",config_extremes", parameters={"UW": 1}),)),
    Dut("ef_add", "ef_add", _tb("ef_add"), "feedback",
        arrays=("residual_in", "quantised", "accumulated", "feedback_sat"),
        tests=_STAGE_TESTS, dedicated=(_EDGE, Run("reset_mid_stream")),
        mutation=(Run(",".join(_STAGE_TESTS), parameters={}),)),
    Dut("momentum", "momentum", _tb("momentum"), "momentum",
        arrays=("residual_in", "velocity_in", "quantised", "velocity", "momentum_sat"),
        tests=("golden_cases", "vector_cases", "reset_mid_stream", "throughput",
               "clamp_boundaries"),
        dedicated=(Run("vector_cases,reset_mid_stream", None),),
        mutation=(Run("golden_cases,vector_cases,reset_mid_stream,throughput,clamp_boundaries",
                      parameters={}),)),
    Dut("block_l1", "block_l1", _tb("block_l1"), "norms", arrays=("accumulated", "block_norms"),
        tests=_STAGE_TESTS, dedicated=(_EDGE, Run("reset_mid_stream")),
        mutation=(Run(",".join(_STAGE_TESTS), parameters={}),)),
    # the norm stage at W elements a cycle (issue 31; W = 1 is block_l1 itself): the golden
    # norms and its own cases of every block boundary position (lane, B < W, the short last block)
    Dut("block_norm_lanes", "block_norm_lanes", _tb("block_norm_lanes"), "norms",
        arrays=("accumulated", "block_norms"), parameters={"W": 4},
        tests=("golden_cases", "boundary_cases", "reset_mid_layer", "throughput"),
        builds={"w1": {"W": 1}, "w4": {"W": 4}, "w16": {"W": 16}},
        dedicated=(_EDGE, Run("boundary_cases,reset_mid_layer")),
        mutation=(Run("golden_cases,boundary_cases,reset_mid_layer,throughput",
                      parameters={"W": 4}),)),
    Dut("topk_select", "topk_select", _tb("topk_select"), "select",
        arrays=("block_norms", "selected"), parameters={"K_MAX": 128},
        tests=("golden_cases", "shuffled_order", "random_ties", "k_out_of_range",
               "reset_mid_stream", "throughput", "ready_after_reset"),
        # K_MAX 1 has its own g_one branch; 16 is the quick build
        builds={"k1": {"K_MAX": 1}, "k16": {"K_MAX": 16}},
        dedicated=(_EDGE, Run("shuffled_order,random_ties,k_out_of_range,reset_mid_stream")),
        mutation=(Run("golden_cases,shuffled_order,random_ties,k_out_of_range,reset_mid_stream,"
                      "throughput,ready_after_reset", parameters={"K_MAX": 16}),
                  Run("golden_cases,k_out_of_range", parameters={"K_MAX": 1}))),
    Dut("compress_top", "compress_top", _tb("compress_top"), "top",
        arrays=("grad_bits", "residual_in", "frame", "residual_out"),
        parameters={"N_MAX": 65536, "K_MAX": 32, "LMAX_LOG2_MAX": 8},
        tests=("golden_cases", "config_errors", "empty_layer", "misplaced_tlast",
               "reset_mid_stream", "reset_in_every_state", "throughput"),
        builds={"quick": {"N_MAX": 4096, "K_MAX": 16}, "large_k": {"N_MAX": 2048, "K_MAX": 128},
                "split_model": {"N_MAX": 4096, "K_MAX": 128},
                "lmax3": {"N_MAX": 2048, "K_MAX": 16, "LMAX_LOG2_MAX": 3}},
        dedicated=(_EDGE, Run("config_errors,empty_layer,misplaced_tlast,reset_mid_stream,"
                              "reset_in_every_state"))),
    # residual in an AxiRam; K_MAX 128 holds every golden case's k_eff (docs/hw.md, engines);
    # momentum cases run with the velocity behind the second port
    Dut("compress_engine", "compress_engine", _tb("compress_engine"), "top",
        more_stages=("momentum",),
        arrays=("grad_bits", "residual_in", "frame", "residual_out", "velocity_in",
                "velocity_out"),
        parameters={"ADDR_W": 32, "K_MAX": 128, "LMAX_LOG2_MAX": 8},
        tests=("golden_cases", "config_errors", "misplaced_tlast", "reset_mid_layer",
               "memory_errors", "empty_layer", "nan_inputs", "gap_stall", "reset_in_every_state",
               "throughput"),
        builds={"k32": {"K_MAX": 32}, "w4": {"W": 4}, "w16": {"W": 16}},
        dedicated=(_EDGE, Run("config_errors,misplaced_tlast,reset_mid_layer,memory_errors,"
                              "empty_layer,nan_inputs,gap_stall,reset_in_every_state"))),
    # the golden "exchange" list: N worker frames -> int64 sums in an AxiRam (docs/hw.md)
    Dut("aggregate_engine", "aggregate_engine", _tb("aggregate_engine"), "exchange",
        arrays=("frames", "sums"), parameters={"ADDR_W": 32, "MAX_BURST": 16},
        tests=("golden_cases", "config_errors", "config_edges", "reset_mid_layer",
               "memory_errors", "reset_in_every_state", "throughput"),
        builds={"w4": {"W": 4}, "w16": {"W": 16}},
        dedicated=(Run("config_errors,config_edges,reset_mid_layer,memory_errors,"
                       "reset_in_every_state"),),
        # its mutants judged at W = 4 (issue 31: the lane logic): the golden exchange cases
        # first (a killed mutant stops there), then the refused configurations, resets, memory
        # errors and the rate with its beat counts
        mutation=(Run("golden_cases", "golden", {"ADDR_W": 32, "MAX_BURST": 16, "W": 4}),
                  Run("config_errors,config_edges,reset_mid_layer,memory_errors,throughput",
                      "golden",
                      {"ADDR_W": 32, "MAX_BURST": 16, "W": 4}))),
    # compress_engine behind its PeakRDL AXI4-Lite register block (hw/csr/, docs/registers.md):
    # Verilator only (Icarus 11 refuses the generated block's SV), so not in verify; its
    # files are hw/csr's plus the engine's (gradblock.hw.csr.generate.sources())
    Dut("compress_engine_axil", "compress_engine_axil", _tb("compress_engine_axil"),
        parameters={"ADDR_W": 32, "K_MAX": 128, "LMAX_LOG2_MAX": 8},
        sources_fn="gradblock.hw.csr.generate:sources"),
    # aggregate_engine behind its register block, the same way (hw/csr/, docs/registers.md)
    Dut("aggregate_engine_axil", "aggregate_engine_axil", _tb("aggregate_engine_axil"),
        parameters={"ADDR_W": 32, "MAX_BURST": 16},
        sources_fn="gradblock.hw.csr.generate:aggregate_sources"),
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
