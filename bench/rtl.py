"""Table 4: the RTL's throughput in cycles per word and the simulators' speed.

Each testbench's `throughput` cocotb test (unthrottled streams) is run through sim.harness on
Icarus Verilog and on Verilator; the testbench writes its cycle counts to TB_METRICS. The
datapath testbenches read vectors written here by sim.datapath_vectors. Builds are cached
under sim_build/ by the harness; the first run of each simulator compiles (minutes), so the
table is optional (--rtl, on by default in the full run, off with --quick).
"""
from __future__ import annotations

import importlib.util
import json
import re
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace
from pathlib import Path

from .context import BenchContext, Unavailable, optional_module, require
from .tables import Table

HW_DIR = Path(__file__).resolve().parent.parent / "hw"
SIMULATORS = ("icarus", "verilator")
CLOCK_NS = 10          # the testbenches' clock period


@dataclass(frozen=True)
class RtlBench:
    toplevel: str
    test_module: str
    needs_vectors: bool                  # datapath testbenches read golden-format vectors
    sources: tuple[str, ...] = ()        # hw/ modules; empty: found from the instantiations
    parameters: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    golden_env: str = "TB_GOLDEN_DIRS"   # how a datapath testbench is told where vectors are


BENCHES = (RtlBench("quantiser", "gradblock.sim.tb_quantiser", True),
           RtlBench("ef_add", "gradblock.sim.tb_ef_add", True),
           RtlBench("block_l1", "gradblock.sim.tb_block_l1", True),
           RtlBench("topk_select", "gradblock.sim.tb_topk_select", True),
           RtlBench("compress_top", "gradblock.sim.tb_compress_top", True),
           RtlBench("zrle_encoder", "gradblock.sim.tb_zrle_encoder", False),
           RtlBench("zrle_decoder", "gradblock.sim.tb_zrle_decoder", False))


def benches() -> list[RtlBench]:
    """BENCHES, with sources, HDL parameters and testbench settings (which must match the
    parameters) taken from `gradblock verify`'s registry, sim.verify.REGISTRY, for the blocks
    it lists; the others are built with their defaults and found sources."""
    try:
        registry = list(optional_module("gradblock.sim.verify").REGISTRY.values())
    except (Unavailable, AttributeError):
        registry = []
    out = []
    for b in BENCHES:
        entry = next((m for m in registry if m.toplevel == b.toplevel), None)
        if entry is not None:
            b = replace(b, sources=tuple(entry.sources), parameters=dict(entry.parameters),
                        env=dict(entry.env), golden_env=getattr(entry, "golden_env", b.golden_env))
        out.append(b)
    return out


def hw_dependencies(toplevel: str, hw_dir: Path = HW_DIR) -> list[str]:
    """The toplevel and every hw/ module it instantiates, transitively (dependencies first),
    as the one resolver, gradblock.hw.deps, finds them."""
    from gradblock.hw import deps
    if not (hw_dir / f"{toplevel}.sv").is_file():
        raise Unavailable(f"hw/{toplevel}.sv not present")
    return list(reversed(deps.module_closure(toplevel, hw_dir)))


def read_metrics(path: Path) -> list[dict]:
    """TB_METRICS as written by either testbench helper: one JSON list, or JSON lines."""
    if not path.is_file():
        return []
    text = path.read_text().strip()
    if not text:
        return []
    try:
        data = json.loads(text)
        return data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


@dataclass(frozen=True)
class Throughput:
    case: str
    stream: str
    words: int               # words that crossed the stream
    cycles: int
    ideal_cycles: int        # what a zero-latency one-word-per-cycle design needs


# codec records carry both sides of a case: (module) -> (input side, output side) names
CODEC_SIDES = {"zrle_encoder": (("n", "values in"), ("frame_words", "frame out")),
               "zrle_decoder": (("frame_words", "frame in"), ("n", "values out"))}


def throughputs(records: list[dict]) -> list[Throughput]:
    """Rows of the cycles table. Datapath records measure one stream each (its words and the
    span of its beats; the ideal is one word per cycle). Codec records measure a whole case
    against the testbench's own ideal streaming design; the row names the busier side, the
    bound of a one-word-per-cycle design."""
    out = []
    for rec in records:
        case = str(rec.get("case", rec.get("pattern", "?")))
        if "stream" in rec:
            words = int(rec["words"])
            out.append(Throughput(case, str(rec["stream"]), words, int(rec["cycles"]), words))
            continue
        sides = CODEC_SIDES.get(rec.get("module"))
        if sides is None or "ideal_cycles" not in rec:
            raise ValueError(f"unrecognised throughput record {rec}")
        (k_in, name_in), (k_out, name_out) = sides
        words, name = max((int(rec[k_in]), name_in), (int(rec[k_out]), name_out))
        out.append(Throughput(case, f"{name} (busier side)", words, int(rec["cycles"]),
                              int(rec["ideal_cycles"])))
    return out


def testcase_timing(results_xml: Path | None, testcase: str) -> tuple[float, float] | None:
    """(wall seconds, simulated ns) of one testcase from a cocotb results.xml (cocotb 2 keeps
    the simulated time in <property name="sim_time_duration"> with its unit beside it)."""
    if results_xml is None or not results_xml.is_file():
        return None
    scale = {"fs": 1e-6, "ps": 1e-3, "ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    for case in ET.parse(results_xml).getroot().iter("testcase"):
        if case.get("name") != testcase:
            continue
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        sim_ns = float(case.get("sim_time_ns", 0) or 0)
        if not sim_ns and "sim_time_duration" in props:
            sim_ns = float(props["sim_time_duration"]) * scale.get(props.get("sim_time_unit", "ns"), 1.0)
        return float(case.get("time", 0) or 0), sim_ns
    return None


def _words_through(records: list[dict]) -> int:
    """Payload values the throughput test pushed through the block."""
    total = 0
    for rec in records:
        if rec.get("stream", "in").startswith("in"):
            total += int(rec.get("words", rec.get("n", 0)))
    return total


def _run_one(bench: RtlBench, sim: str, vectors_dir: Path | None, work: Path):
    harness = optional_module("gradblock.sim.harness")
    run_rtl, hw_sources, available = require(harness, "run_rtl", "hw_sources",
                                             "simulator_available")
    why = available(sim)
    if why:
        raise Unavailable(why)
    spec = importlib.util.find_spec(bench.test_module)
    tb_file = f"{bench.test_module.replace('.', '/')}.py"
    if spec is None or spec.origin is None:
        raise Unavailable(f"{tb_file} not present")
    if not re.search(r"^async def throughput\(|stage_tests\(", Path(spec.origin).read_text(), re.M):
        raise Unavailable(f"{tb_file} has no `throughput` test")
    sources = hw_sources(bench.toplevel)      # hw/deps.py: packages first
    metrics = work / f"{bench.toplevel}-{sim}.json"
    env = {**bench.env, "TB_METRICS": str(metrics)}
    if bench.needs_vectors:
        env[bench.golden_env] = str(vectors_dir)
    result = run_rtl(bench.toplevel, sources, bench.test_module, sim,
                     parameters=bench.parameters, env=env,
                     testcase="throughput", run_name="bench-throughput", waves_on_failure=False)
    if result.error:
        raise RuntimeError(result.error.splitlines()[0])
    if not result.passed:
        failed = "; ".join(t.message.splitlines()[0] for t in result.tests if not t.passed
                           and t.message)
        raise RuntimeError(f"throughput test failed: {failed or 'see ' + str(result.run_dir)}")
    records = read_metrics(metrics)
    if not records:
        raise RuntimeError("throughput test wrote no metrics")
    return result, records


def _vectors(work: Path) -> Path:
    """The datapath testbenches' corner-case vectors (sim.datapath_vectors' default kind:
    small, so a cocotb run takes seconds)."""
    write_cases = require(optional_module("gradblock.sim.datapath_vectors"), "write_cases")
    out = work / "vectors"
    write_cases(out)
    return out


def run(ctx: BenchContext) -> list[Table]:
    cyc = Table("rtl", "4. RTL: cycles per word (unthrottled streams)",
                ["simulator", "module", "case", "stream", "words", "cycles", "ideal cycles",
                 "cycles/word", "words/cycle", "of ideal"])
    speed = Table("rtl_speed", "4b. RTL simulation speed",
                  ["simulator", "module", "build + run (s)", "test (s)", "simulated cycles",
                   "cycles/s", "words", "words/s"])
    if not ctx.rtl:
        reason = "RTL simulations skipped (run with --rtl; on by default without --quick)"
        cyc.skip(["icarus, verilator", "all"], reason)
        speed.skip(["icarus, verilator", "all"], reason)
        return [cyc, speed]
    with tempfile.TemporaryDirectory(prefix="gradblock-bench-rtl-") as tmp:
        work = Path(tmp)
        vectors, why_no_vectors = ctx.attempt("rtl: datapath vectors", lambda: _vectors(work))
        for sim in SIMULATORS:
            for bench in benches():
                if bench.needs_vectors and vectors is None:
                    got, cell = None, why_no_vectors
                else:
                    got, cell = ctx.attempt(f"rtl {sim} {bench.toplevel}",
                                            lambda bench=bench, sim=sim: _run_one(
                                                bench, sim, vectors, work))
                if got is None:
                    cyc.unmeasured([sim, bench.toplevel], cell)
                    speed.unmeasured([sim, bench.toplevel], cell)
                    continue
                result, records = got
                for t in throughputs(records):
                    cyc.add(sim, bench.toplevel, t.case, t.stream, t.words, t.cycles,
                            t.ideal_cycles, t.cycles / t.words, t.words / t.cycles,
                            t.ideal_cycles / t.cycles)
                timing = testcase_timing(result.results_xml, "throughput")
                words = _words_through(records)
                if timing and timing[0] > 0:
                    wall, sim_ns = timing
                    cycles = int(sim_ns / CLOCK_NS)
                    speed.add(sim, bench.toplevel, result.seconds, wall, cycles, cycles / wall,
                              words, words / wall)
                else:
                    speed.skip([sim, bench.toplevel], "results.xml has no timing for throughput")
                ctx.log(f"rtl {sim} {bench.toplevel}: {len(records)} records, "
                        f"{result.seconds:.1f} s")
    cyc.notes.append("cycle counts are the testbenches' own (TB_METRICS) from their `throughput` "
                     "test: no idle input cycles, no backpressure. Datapath rows are one stream "
                     "each (its words, the span of its beats; ideal: one word per cycle). Codec "
                     "rows are a whole case, counted on its busier side (values or frame words), "
                     "against the testbench's ideal: a zero-latency design moving one word per "
                     "cycle on each side, which for the encoder still waits for the end of each "
                     "run because L precedes the literals. 'of ideal' = ideal cycles / cycles")
    speed.notes.append("test (s): wall time of the throughput test from cocotb's results.xml; "
                       "build + run includes compiling when the build is stale; words = payload "
                       f"values (elements) through the block; simulated cycles at a {CLOCK_NS} ns "
                       f"clock")
    return [cyc, speed]
