"""Table 4: the RTL blocks' throughput in cycles per word and the simulators' speed (4b); the
engines' tables (4c, 4d) come from bench.rtl_engines.

Each testbench's `throughput` cocotb test (unthrottled streams) is run through sim.harness on
Icarus Verilog and on Verilator; the testbench writes its cycle counts to TB_METRICS. The
datapath testbenches read vectors written here by golden.datapath. Builds are cached
in the user cache by the harness (sim/harness.py: --build-dir / $GRADBLOCK_SIM_BUILD / ~/.cache/gradblock); the first run of each simulator compiles (minutes), so the
table is optional (--rtl, on by default in the full run, off with --quick).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from gradblock.sim.duts import DUTS

from . import rtl_engines
from .context import BenchContext, Unavailable, optional_module, require
from .rtl_runner import SIMULATORS, RtlBench, add_speed_row, run_throughput, speed_table
from .tables import Table

HW_DIR = Path(__file__).resolve().parent.parent / "hw"
# table 4's blocks, in its order; what each one is (top level, testbench, the reference build's
# parameters, whether it reads vectors) is the DUT table's, sim/duts.py
BENCHED = ("quantiser", "ef_add", "block_l1", "topk_select", "compress_top", "zrle_encoder",
           "zrle_decoder")


def benches() -> list[RtlBench]:
    """BENCHED as the DUT table (sim.duts.DUTS) describes them: sources, HDL parameters and
    testbench settings (which must match the parameters) are those `gradblock verify` uses."""
    return [rtl_engines.bench_of(DUTS[name]) for name in BENCHED]


def hw_dependencies(toplevel: str, hw_dir: Path = HW_DIR) -> list[str]:
    """The toplevel and every hw/ module it instantiates, transitively (dependencies first),
    as the one resolver, gradblock.hw.deps, finds them."""
    from gradblock.hw import deps
    if not (hw_dir / f"{toplevel}.sv").is_file():
        raise Unavailable(f"hw/{toplevel}.sv not present")
    return list(reversed(deps.module_closure(toplevel, hw_dir)))


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


def _words_through(records: list[dict]) -> int:
    """Payload values the throughput test pushed through the block."""
    total = 0
    for rec in records:
        if rec.get("stream", "in").startswith("in"):
            total += int(rec.get("words", rec.get("n", 0)))
    return total


def _vectors(work: Path) -> Path:
    """The datapath testbenches' corner-case vectors (golden.datapath' default kind:
    small, so a cocotb run takes seconds)."""
    write_cases = require(optional_module("gradblock.golden.datapath"), "write_cases")
    out = work / "vectors"
    write_cases(out)
    return out


def run(ctx: BenchContext) -> list[Table]:
    cyc = Table("rtl", "4. RTL: cycles per word (unthrottled streams)",
                ["simulator", "module", "case", "stream", "words", "cycles", "ideal cycles",
                 "cycles/word", "words/cycle", "of ideal"])
    speed = speed_table()
    if not ctx.rtl:
        reason = "RTL simulations skipped (run with --rtl; on by default without --quick)"
        cyc.skip(["icarus, verilator", "all"], reason)
        speed.skip(["icarus, verilator", "all"], reason)
        return [cyc, speed, *rtl_engines.run(ctx, speed)]
    with tempfile.TemporaryDirectory(prefix="gradblock-bench-rtl-") as tmp:
        work = Path(tmp)
        vectors, why_no_vectors = ctx.attempt("rtl: datapath vectors", lambda: _vectors(work))
        benched, why_no_table = ctx.attempt("rtl: the DUT table", benches)
        if benched is None:
            cyc.unmeasured(["icarus, verilator", "all"], why_no_table)
            speed.unmeasured(["icarus, verilator", "all"], why_no_table)
            benched = []
        for sim in SIMULATORS:
            for bench in benched:
                if bench.needs_vectors and vectors is None:
                    got, cell = None, why_no_vectors
                else:
                    got, cell = ctx.attempt(f"rtl {sim} {bench.toplevel}",
                                            lambda bench=bench, sim=sim: run_throughput(
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
                add_speed_row(speed, sim, bench.toplevel, result, _words_through(records))
                ctx.log(f"rtl {sim} {bench.toplevel}: {len(records)} records, "
                        f"{result.seconds:.1f} s")
    cyc.notes.append("cycle counts are the testbenches' own (TB_METRICS) from their `throughput` "
                     "test: no idle input cycles, no backpressure. Datapath rows are one stream "
                     "each (its words, the span of its beats; ideal: one word per cycle). Codec "
                     "rows are a whole case, counted on its busier side (values or frame words), "
                     "against the testbench's ideal: a zero-latency design moving one word per "
                     "cycle on each side, which for the encoder still waits for the end of each "
                     "run because L precedes the literals. 'of ideal' = ideal cycles / cycles. "
                     "The engines (layers in external memory) are in tables 4c and 4d")
    return [cyc, speed, *rtl_engines.run(ctx, speed)]
