"""Tables 4c and 4d: the engines, whose layers live in external memory (hw/compress_engine.sv,
hw/aggregate_engine.sv), on layers of the benchmark's workloads. Per layer: cycles from the configuration handshake to
`done`, AXI4 memory traffic counted on the channels by the testbench (AR and AW handshakes =
bursts, R and W handshakes = data beats), and the fp32 gradient rate at the clock the engine
reached on ECP5 (docs/ecp5.json, written by `gradblock synth --target ecp5 --json`).

compress_engine runs conv layers of the workloads, gradients (real unless --gradients synthetic)
and residual as the other tables use them (the residual is step 1's on the same gradient): per workload its largest conv
layer of at most LARGE_MAX_N elements and a shape not picked yet (the selected blocks hold 1-2 %
of it at k = 1 %: the line-rate regime) and the first workload's smallest conv layer of at least SMALL_MIN_N (a few %
selected: pass 2 shows). cocotb simulates a few thousand engine cycles per second, so larger
layers (the 2.36M-element 512x512x3x3 one) are signoff tests (tests/test_rtl_engines.py), not
bench rows.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gradblock.hw.ecp5 import RUNS as ECP5_RUNS
from gradblock.refmodel.compress import compress_layer
from gradblock.sim.duts import DUTS, Dut

from .context import BenchContext, optional_module, require
from .rtl_runner import SIMULATORS, RtlBench, add_speed_row, run_throughput
from .tables import Table

REPO_ROOT = Path(__file__).resolve().parent.parent
ECP5_JSON = REPO_ROOT / "docs" / "ecp5.json"
# the build placed and routed on ECP5 (hw/ecp5.py), so the cycles and the Fmax are one design
COMPRESS_PARAMETERS = dict(next(r.parameters for r in ECP5_RUNS if r.top == "compress_engine"))
LARGE_MAX_N = 40_000
SMALL_MIN_N = 2_000
AGGREGATE_PARAMETERS = dict(DUTS["aggregate_engine"].parameters)   # gradblock verify's build
AGGREGATE_WORKERS = 4
AGGREGATE_DENSE_K = 0.25     # a second exchange with more literals than the bench's k gives
LINE_RATE_SHARE = 0.02       # the issue's line-rate condition: k_eff * B <= 2 % of n ...
LINE_RATE_TARGET = 0.95      # ... then >= 0.95 elements per cycle
NO_FMAX = "no ECP5 figure"
BITS_PER_ELEMENT = 32        # fp32 gradient

COMPRESS_COLUMNS = ["simulator", "module", "case", "momentum", "n", "k_eff", "selected S", "S/n",
                    "cycles", "cycles/element", "elements/cycle", "AR bursts", "R beats",
                    "AW bursts", "W beats", "R beats/element", "W beats/element",
                    "velocity R beats", "velocity W beats", "Fmax (MHz)", "fp32 Gb/s at Fmax"]
# momentum correction (docs/spec.md §7) on the largest layer: m = 0.9 as training uses it
MOMENTUM_M = 0.9


# ------------------------------------------------------------------------- ECP5 clock
@dataclass(frozen=True)
class Fmax:
    mhz: float
    source: str              # where the figure comes from, for the table's notes


def ecp5_fmax(module: str, path: Path = ECP5_JSON,
              simulated: dict | None = None) -> tuple[Fmax | None, str]:
    """(the module's placed-and-routed Fmax, a note naming its source and date), or (None, why
    not). The file is `gradblock synth --target ecp5 --json`'s {"modules": {top: {"fmax_mhz",
    "parameters", ...}}}; its date is its last commit's, else its modification time. The note
    says so where the placed build's parameters differ from `simulated`, the bench's build."""
    try:
        doc = json.loads(path.read_text())
        figures = doc["modules"][module]
        mhz = float(figures["fmax_mhz"])
    except FileNotFoundError:
        return None, f"{module}: {NO_FMAX} ({_shown(path)} not present)"
    except (OSError, ValueError, KeyError, TypeError) as e:
        why = f"no {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
        return None, f"{module}: {NO_FMAX} ({_shown(path)}: {why})"
    placed = figures.get("parameters") or {}
    params = ", ".join(f"{k}={v}" for k, v in placed.items())
    source = (f"{module}: Fmax {mhz:g} MHz from {_shown(path)} ({_file_date(path)}; "
              f"{doc.get('device', 'ECP5')}{'; ' + params if params else ''})")
    differ = {k: v for k, v in (simulated or {}).items() if k in placed and placed[k] != v}
    if differ:
        source += ("; NOTE the simulated build differs: "
                   + ", ".join(f"{k}={v}" for k, v in differ.items()))
    return Fmax(mhz, source), source


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _file_date(path: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(path.parent), "log", "-1", "--format=%cs", "--",
                              path.name], capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            dirty = subprocess.run(["git", "-C", str(path.parent), "diff", "--quiet", "--",
                                    path.name], timeout=30).returncode != 0
            return f"committed {out.stdout.strip()}" + (", modified since" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "uncommitted, written " + time.strftime("%Y-%m-%d", time.gmtime(path.stat().st_mtime))


def gbps(fmax: Fmax | None, elements_per_cycle: float) -> float | str:
    """fp32 gradient rate in Gb/s at the ECP5 clock (or the cell saying there is none)."""
    if fmax is None:
        return NO_FMAX
    return fmax.mhz * 1e6 * elements_per_cycle * BITS_PER_ELEMENT / 1e9


# ------------------------------------------------------------------- compress_engine
@dataclass(frozen=True)
class EngineLayer:
    name: str                # golden case name
    grad: np.ndarray         # float32, its conv shape
    layer_id: int            # its place in the workload


def engine_layers(workloads) -> list[EngineLayer]:
    """Per workload its largest conv layer of <= LARGE_MAX_N elements whose shape no earlier
    pick has (ResNet-50 then adds a 1x1 conv to ResNet-20's 3x3); then the first workload's
    smallest conv layer of >= SMALL_MIN_N (see the module docstring)."""
    out: list[EngineLayer] = []

    def new_shape(c) -> bool:
        return all(e.grad.shape != c[2].shape for e in out)

    for wi, w in enumerate(workloads):
        convs = [(g.size, i, g) for i, g in enumerate(w.grads) if g.ndim == 4]
        picks = [max((c for c in convs if c[0] <= LARGE_MAX_N and new_shape(c)), default=None,
                     key=lambda c: c[:2])]
        if wi == 0:
            picks.append(min((c for c in convs if c[0] >= SMALL_MIN_N), default=None,
                             key=lambda c: c[:2]))
        for c in picks:
            if c is None or not new_shape(c):
                continue
            _, i, g = c
            slug = w.name.lower().replace("-", "")
            out.append(EngineLayer(f"{slug}_layer{i}_{'x'.join(map(str, g.shape))}", g, i))
    return out


def engine_case(layer: EngineLayer, R: float, k):
    """(manifest entry, arrays) of one layer at the bench's R and k: step 2 of training, the
    residual entering it from step 1 on the same gradient (as bench.context.Prepared)."""
    make_case = require(optional_module("gradblock.golden.datapath"), "make_case")
    residual = compress_layer(layer.grad, None, R=R, k=k, layer_id=layer.layer_id).residual_out
    return make_case(layer.name, layer.grad, residual, R=R, k=k, layer_id=layer.layer_id,
                     description=f"conv layer {tuple(layer.grad.shape)} of a bench workload, "
                                 "step-1 residual")


def engine_momentum_case(layer: EngineLayer, R: float, k, m: float = MOMENTUM_M):
    """(manifest entry, arrays) of the layer's momentum-corrected step 2 (spec §7, factor
    masking on): residual and velocity as step 1 on the same gradient leaves them."""
    CaseSpec, stages = require(optional_module("gradblock.golden.cases"), "CaseSpec",
                               "MOMENTUM_STAGES")
    compute_case = require(optional_module("gradblock.golden.compute"), "compute_case")
    MomentumConfig, momentum_layer = require(optional_module("gradblock.refmodel.momentum"),
                                             "MomentumConfig", "momentum_layer")
    cfg = MomentumConfig.from_float(m)
    zeros = np.zeros(layer.grad.shape, np.int32)
    step1 = momentum_layer(layer.grad, zeros, zeros, cfg, R=R, k=k, layer_id=layer.layer_id)
    spec = CaseSpec(
        f"{layer.name}_momentum", f"conv layer {tuple(layer.grad.shape)} of a bench workload, "
        f"momentum correction m = {m} (m_fix {cfg.m_fix}), step-1 residual and velocity",
        layer.grad, R=R, k=k, layer_id=layer.layer_id, stages=stages, m_fix=cfg.m_fix)
    return compute_case(spec, compress_layer, residual_override=step1.residual_out,
                        velocity_override=step1.velocity_out)


@dataclass(frozen=True)
class EngineRun:
    """One layer through compress_engine, as its testbench's `throughput` test recorded it."""
    case: str
    n: int
    k_eff: int
    selected: int            # S: elements of the selected blocks (pass 2 reads and zeroes them)
    cycles: int              # configuration handshake to done
    ar: int
    r: int
    aw: int
    w: int
    momentum: bool = False
    vel_r: int = 0           # velocity port data beats (momentum: n read, n + S written)
    vel_w: int = 0

    @property
    def elements_per_cycle(self) -> float:
        return self.n / self.cycles


def engine_runs(records: list[dict]) -> list[EngineRun]:
    out = []
    for rec in records:
        if rec.get("module") != "compress_engine":
            continue
        beats = rec.get("axi_beats")
        if not isinstance(beats, dict):
            raise ValueError(f"compress_engine record of {rec.get('case')} has no axi_beats "
                             "(sim/benches/tb_compress_engine.py counts them in `throughput`)")
        vel = rec.get("vel_axi_beats") or {}
        out.append(EngineRun(str(rec["case"]), int(rec["words"]), int(rec["k_eff"]),
                             int(rec["selected"]), int(rec["cycles"]), int(beats["ar"]),
                             int(beats["r"]), int(beats["aw"]), int(beats["w"]),
                             bool(rec.get("momentum", False)), int(vel.get("r", 0)),
                             int(vel.get("w", 0))))
    return out


def compress_table() -> Table:
    t = Table("rtl_engine", "4c. RTL compress_engine: cycles and memory beats per element",
              COMPRESS_COLUMNS)
    t.notes.append("compress_engine built as placed and routed on ECP5 ("
                   + ", ".join(f"{k} {v}" for k, v in COMPRESS_PARAMETERS.items())
                   + "); its testbench's `throughput` test: unthrottled gradient and frame "
                   "streams, cocotbext-axi AxiRam answering a beat per cycle; frame and residual "
                   "memory checked exact against the numpy reference. cycles: configuration "
                   "handshake to `done`. Layers: conv layers of the workloads (gradients as the "
                   "header says), k and R as above, residual from step 1. S = elements in the selected blocks; the "
                   "engine reads and writes each element once in pass 1 and each selected "
                   "element once more in pass 2, so the ideal is n + S beats each way, "
                   "(n + S) / n per element; AR/AW count bursts (at most 16 beats, split at "
                   "4 KiB). momentum yes: the same layer with momentum correction (m = "
                   f"{MOMENTUM_M}, factor masking, residual and velocity from step 1); the "
                   "velocity sits behind its own AXI4 port, read once in pass 1 (n beats) and "
                   "written in place (n) plus zeros over the selected blocks in pass 2 (S): "
                   "velocity R and W beats, 0 with momentum off. fp32 Gb/s at Fmax = Fmax x "
                   "elements/cycle x 32 bits")
    return t


def add_compress_rows(table: Table, sim: str, runs: list[EngineRun], fmax: Fmax | None) -> None:
    for e in runs:
        epc = e.elements_per_cycle
        table.add(sim, "compress_engine", e.case, "yes" if e.momentum else "no", e.n, e.k_eff,
                  e.selected, e.selected / e.n, e.cycles, e.cycles / e.n, epc, e.ar, e.r, e.aw,
                  e.w, e.r / e.n, e.w / e.n, e.vel_r, e.vel_w, fmax.mhz if fmax else NO_FMAX,
                  gbps(fmax, epc))


# ------------------------------------------------------------------- aggregate_engine
def exchange_case(layer: EngineLayer, R: float, k, workers: int, name: str):
    """(manifest entry, arrays) of one exchange (gradblock.golden.exchange): `workers` frames
    of `layer`, each the compress step of its own gradient with its own step-1 residual. The
    workers' gradients are the layer's times a per-filter factor (log-normal, sigma 0.5,
    seeded by the worker; worker 0 unchanged), so that, as in data-parallel training, they
    pick different blocks."""
    ExchangeSpec, compute_exchange = require(optional_module("gradblock.golden.exchange"),
                                             "ExchangeSpec", "compute_exchange")
    frames = []
    for w in range(workers):
        rows = layer.grad.shape[0]
        factor = np.random.default_rng(w).lognormal(0.0, 0.5, rows) if w else np.ones(rows)
        g = (layer.grad * factor.astype(np.float32).reshape((rows,) + (1,) * (layer.grad.ndim - 1))
             ).astype(np.float32)
        residual = compress_layer(g, None, R=R, k=k, layer_id=layer.layer_id).residual_out
        frames.append(compress_layer(g, residual, R=R, k=k, layer_id=layer.layer_id).frame)
    spec = ExchangeSpec(name, f"{workers} workers' frames of conv layer "
                              f"{tuple(layer.grad.shape)}, k = {k}", frames, layer.grad.size)
    return compute_exchange(spec)


@dataclass(frozen=True)
class AggregateRun:
    """One layer's frames through aggregate_engine, as its `throughput` test recorded it."""
    case: str
    clear: bool              # the engine zeroed the n sums first (one W beat each)
    n: int
    workers: int
    frame_words: int         # all workers' frames
    literals: int            # nonzero values: the only ones that touch memory
    cycles: int
    ar: int
    r: int
    aw: int
    w: int

    @property
    def zero_elements(self) -> int:
        """Elements the frames cover with zero runs (no memory traffic in an ideal design)."""
        return self.n * self.workers - self.literals

    @property
    def clear_writes(self) -> int:
        return self.n if self.clear else 0

    @property
    def literal_beats(self) -> int:
        return self.r + self.w - self.clear_writes


def aggregate_runs(records: list[dict]) -> list[AggregateRun]:
    out = []
    for rec in records:
        if rec.get("module") != "aggregate_engine":
            continue
        beats = rec.get("axi_beats")
        if not isinstance(beats, dict):
            raise ValueError(f"aggregate_engine record of {rec.get('case')} has no axi_beats")
        out.append(AggregateRun(str(rec["case"]), bool(rec["clear"]), int(rec["n"]),
                                int(rec["workers"]), int(rec["frame_words"]),
                                int(rec["literals"]), int(rec["cycles"]), int(beats["ar"]),
                                int(beats["r"]), int(beats["aw"]), int(beats["w"])))
    return out


AGGREGATE_COLUMNS = ["simulator", "module", "case", "clear", "workers", "n", "frame words",
                     "literals", "zero elements", "cycles", "cycles/frame word",
                     "elements/cycle", "AR bursts", "R beats", "AW bursts", "W beats",
                     "beats/literal", "beats/zero element", "Fmax (MHz)",
                     "frame Gb/s at Fmax"]


def aggregate_table() -> Table:
    t = Table("rtl_aggregate", "4d. RTL aggregate_engine: cycles per frame word and memory "
              "beats", AGGREGATE_COLUMNS)
    t.notes.append("aggregate_engine (" + ", ".join(f"{k} {v}" for k, v in
                                                   AGGREGATE_PARAMETERS.items())
                   + "), its testbench's `throughput` test: unthrottled frame stream, "
                   "cocotbext-axi AxiRam (64-bit) answering a beat per cycle, int64 sums checked "
                   "exact; each case once adding onto the sums in memory (clear no) and once "
                   "zeroing them first (clear yes: n more W beats). Frames: "
                   f"{AGGREGATE_WORKERS} workers on the conv layer of table 4c's smallest "
                   "case (see exchange_case in bench/rtl_engines.py), at the bench's k and at "
                   f"k = {AGGREGATE_DENSE_K:g}. zero elements = n x workers - literals; "
                   "beats/literal = (R + W - clear writes) / literals, ideal 2 (read the sum, "
                   "write it back); beats/zero element = (R + W - clear writes - 2 x literals) / "
                   "zero elements, ideal 0 (zero runs never touch memory); elements/cycle = "
                   "n x workers / cycles; frame Gb/s at Fmax = Fmax x frame words/cycle x 32 "
                   "bits")
    return t


def add_aggregate_rows(table: Table, sim: str, runs: list[AggregateRun],
                       fmax: Fmax | None) -> None:
    for a in runs:
        elements = a.n * a.workers
        table.add(sim, "aggregate_engine", a.case, "yes" if a.clear else "no", a.workers, a.n,
                  a.frame_words, a.literals, a.zero_elements, a.cycles,
                  a.cycles / a.frame_words, elements / a.cycles, a.ar, a.r, a.aw, a.w,
                  a.literal_beats / a.literals if a.literals else "no literal",
                  (a.literal_beats - 2 * a.literals) / a.zero_elements if a.zero_elements
                  else "no zero", fmax.mhz if fmax else NO_FMAX,
                  gbps(fmax, a.frame_words / a.cycles))


# ------------------------------------------------------------------------------ run
def run(ctx: BenchContext, speed: Table) -> list[Table]:
    """Tables 4c and 4d; the engines' simulation speed goes into `speed` (table 4b)."""
    comp, agg = compress_table(), aggregate_table()
    if not ctx.rtl:
        reason = "RTL simulations skipped (run with --rtl; on by default without --quick)"
        comp.skip(["icarus, verilator", "compress_engine"], reason)
        agg.skip(["icarus, verilator", "aggregate_engine"], reason)
        return [comp, agg]
    layers = engine_layers(ctx.workloads)
    if not layers:
        reason = f"no conv layer of {SMALL_MIN_N:,}..{LARGE_MAX_N:,} elements in the workloads"
        comp.skip(["icarus, verilator", "compress_engine"], reason)
        agg.skip(["icarus, verilator", "aggregate_engine"], reason)
        return [comp, agg]
    with tempfile.TemporaryDirectory(prefix="gradblock-bench-engines-") as tmp:
        _run_compress(ctx, comp, speed, layers, Path(tmp))
        _run_aggregate(ctx, agg, speed, min(layers, key=lambda e: e.grad.size), Path(tmp))
    return [comp, agg]


def _run_compress(ctx: BenchContext, comp: Table, speed: Table, layers: list[EngineLayer],
                  work: Path) -> None:
    fmax, fmax_note = ecp5_fmax("compress_engine", simulated=COMPRESS_PARAMETERS)
    comp.notes.append(fmax_note)
    # every layer plain, and the largest (the line-rate regime) once more with momentum
    cases, cell = ctx.attempt("rtl engines: layer cases", lambda: [
        engine_case(layer, ctx.R, ctx.k) for layer in layers]
        + [engine_momentum_case(layers[0], ctx.R, ctx.k)])
    if cases is None:
        comp.unmeasured(["icarus, verilator", "compress_engine"], cell)
        return
    fitting = []
    for meta, arrays in cases:
        if meta["k_eff"] > COMPRESS_PARAMETERS["K_MAX"]:
            comp.skip(["icarus, verilator", "compress_engine", meta["name"]],
                      f"k_eff {meta['k_eff']} > K_MAX {COMPRESS_PARAMETERS['K_MAX']} of the "
                      "ECP5 build")
        else:
            fitting.append((meta, arrays))
    if not fitting:
        return
    golden, cell = ctx.attempt("rtl engines: golden directory", lambda: _write_golden(
        work / "layers", "table 4c: compress_engine layers", fitting))
    bench = bench_of(DUTS["compress_engine"], parameters=dict(COMPRESS_PARAMETERS),
                     env={"TB_THROUGHPUT_CASES": str(len(fitting)), "TB_TRAFFIC": "0:0"})
    for sim in SIMULATORS:
        got, why = (None, cell) if golden is None else ctx.attempt(
            f"rtl {sim} compress_engine",
            lambda sim=sim: _measure(bench, sim, golden, work, engine_runs))
        if got is None:
            comp.unmeasured([sim, "compress_engine"], why)
            speed.unmeasured([sim, "compress_engine"], why)
            continue
        result, runs = got
        add_compress_rows(comp, sim, runs, fmax)
        add_speed_row(speed, sim, "compress_engine", result, sum(e.n for e in runs))
        ctx.log(f"rtl {sim} compress_engine: {len(runs)} layers, {result.seconds:.1f} s")


def _run_aggregate(ctx: BenchContext, agg: Table, speed: Table, layer: EngineLayer,
                   work: Path) -> None:
    fmax, fmax_note = ecp5_fmax("aggregate_engine", simulated=AGGREGATE_PARAMETERS)
    agg.notes.append(fmax_note)
    cases, cell = ctx.attempt("rtl engines: exchange cases", lambda: [
        exchange_case(layer, ctx.R, k, AGGREGATE_WORKERS,
                      f"{layer.name}_{AGGREGATE_WORKERS}workers_k{k:g}".replace(".", "p"))
        for k in dict.fromkeys((ctx.k, AGGREGATE_DENSE_K))])
    golden = None
    if cases is not None:
        golden, cell = ctx.attempt("rtl engines: exchange golden directory", lambda: _write_golden(
            work / "exchange", "table 4d: aggregate_engine exchanges", [], cases))
    bench = bench_of(DUTS["aggregate_engine"], parameters=dict(AGGREGATE_PARAMETERS),
                     env={"TB_TRAFFIC": "0:0"})
    for sim in SIMULATORS:
        got, why = (None, cell) if golden is None else ctx.attempt(
            f"rtl {sim} aggregate_engine",
            lambda sim=sim: _measure(bench, sim, golden, work, aggregate_runs))
        if got is None:
            agg.unmeasured([sim, "aggregate_engine"], why)
            speed.unmeasured([sim, "aggregate_engine"], why)
            continue
        result, runs = got
        add_aggregate_rows(agg, sim, runs, fmax)
        add_speed_row(speed, sim, "aggregate_engine", result,
                      sum(a.n * a.workers for a in runs))
        ctx.log(f"rtl {sim} aggregate_engine: {len(runs)} runs, {result.seconds:.1f} s")


def bench_of(dut: Dut, **changes) -> RtlBench:
    """The benchmark's run of a block of the DUT table (sim/duts.py): its top level, testbench,
    sources, reference build parameters and testbench settings, with `changes` (parameters=,
    env=) over them."""
    return RtlBench(**{"toplevel": dut.toplevel, "test_module": dut.test_module,
                       "needs_vectors": dut.needs_vectors, "sources": dut.sources,
                       "parameters": dict(dut.parameters), "env": dict(dut.env),
                       "golden_env": dut.golden_env, **changes})


def _write_golden(out: Path, what: str, cases, exchange=()) -> Path:
    write_golden = require(optional_module("gradblock.golden.format"), "write_golden")
    write_golden(out, {"generator": f"gradblock bench ({what})"}, cases, exchange)
    return out


def _measure(bench: RtlBench, sim: str, golden: Path, work: Path, parse):
    result, records = run_throughput(bench, sim, golden, work)
    runs = parse(records)
    if not runs:
        raise RuntimeError(f"{bench.toplevel} throughput test recorded no layer")
    return result, runs


# --------------------------------------------------------------------------- target
def _cell(row: dict, col: str) -> float | None:
    try:
        return float(row[col])
    except (KeyError, TypeError, ValueError):
        return None


def target_line(tables: dict[str, Table]) -> str:
    """The issue's engine target, read off table 4c: on each simulator, the slowest layer whose
    selected blocks hold at most 2 % of it must reach 0.95 elements per cycle."""
    table = tables.get("rtl_engine")
    rows = [dict(zip(table.columns, r)) for r in table.rows] if table else []
    judged = [r for r in rows if _cell(r, "elements/cycle") is not None
              and _cell(r, "S/n") is not None and _cell(r, "S/n") <= LINE_RATE_SHARE]
    worst: dict[str, dict] = {}
    for r in judged:
        if r["simulator"] not in worst or _cell(r, "elements/cycle") < _cell(
                worst[r["simulator"]], "elements/cycle"):
            worst[r["simulator"]] = r
    head = (f"- compress_engine ≥ {LINE_RATE_TARGET:.2f} elements/cycle when k_eff·B ≤ "
            f"{LINE_RATE_SHARE:.0%} of n (judged on S, the selected elements, = k_eff·B where "
            f"the blocks are whole; the slowest such layer per simulator): ")
    if not worst:
        measured = any(_cell(r, "elements/cycle") is not None for r in rows)
        return head + ("not measured (no layer with S ≤ 2 % of n)" if measured
                       else "not measured (run with --rtl)")
    parts = []
    for sim, r in sorted(worst.items()):
        epc = _cell(r, "elements/cycle")
        parts.append(f"{sim}: {epc:.3f} ({r['case']}, S/n {_cell(r, 'S/n'):.2%}) — "
                     f"{'met' if epc >= LINE_RATE_TARGET else 'missed'}")
    return head + "; ".join(parts)
