"""Generic yosys synthesis of the RTL: checks (no latches, `check -assert` clean) and cell counts
per module, for the resource table in docs/hw.md.

    python hw/synth.py                   # synthesise, print the markdown table
    python hw/synth.py --json stats.json # also keep the per-module numbers

Flow per top level: read the top and every file it needs (hw/deps.py: packages first), `chparam`,
`synth -run begin:fine`, then the rest of the generic `synth` script except `memory_map`:
memories stay `$mem_v2` cells (a RAM macro or block RAM in a real flow), reported as words x
bits beside the logic. Hierarchy is kept, so one run of `compress_top` gives separate counts
for every datapath block and for the encoder it contains; the decoder is a second run.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gradblock.codec import fileio
from gradblock.hw.deps import hdl_defaults, sources


@dataclass(frozen=True)
class SynthRun:
    top: str
    parameters: dict
    files: tuple = ()      # sources; default: the top and what it instantiates, from hw/

    def source_files(self) -> list[Path]:
        return [Path(f) for f in self.files] if self.files else sources(self.top)

    def build_parameters(self) -> dict:
        """Every parameter of the build: the top's HDL defaults with `parameters` over them."""
        return {**hdl_defaults(self.top), **self.parameters} if not self.files else \
            dict(self.parameters)


# compress_top contains quantiser, ef_add, block_l1, topk_select, pipe_reg and the encoder with
# its helpers; the decoder is the only block outside it. Both at their HDL defaults, which are
# their reference builds: no parameter is repeated here (hw/ may not read sim/duts.py, the DUT
# table; tests/test_rtl_synth.py checks that its entries for these tops are the defaults).
RUNS = (
    SynthRun("compress_top", {}),
    SynthRun("zrle_decoder", {}),
)


LATCH_SELECT = "t:*dlatch* t:*DLATCH*"


@dataclass
class ModuleStats:
    name: str                      # readable: module (parameters)
    cells: int                     # its own generic gates and flops, memories excluded
    flops: int                     # its own flip-flop bits
    memories: list = field(default_factory=list)   # (name, words, bits)
    total_cells: int = 0           # with every module instantiated below it
    total_flops: int = 0


@dataclass
class SynthResult:
    run: SynthRun
    modules: dict                  # yosys module name -> ModuleStats
    total_cells: int
    total_flops: int
    log: str


def yosys_script(run: SynthRun, stat_json: Path, mem_dump: Path) -> str:
    files = " ".join(str(p) for p in run.source_files())
    chparam = " ".join(f"-set {k} {v}" for k, v in run.parameters.items())
    return "; ".join([
        f"read_verilog -sv {files}",
        *([f"chparam {chparam} {run.top}"] if chparam else []),
        f"hierarchy -check -top {run.top}",
        f"synth -top {run.top} -run begin:fine",
        # synth's fine and check stages without memory_map
        "opt -fast -full", "techmap", "opt -fast", "abc -fast", "opt -fast",
        "hierarchy -check", "check -assert",
        f"select -assert-none {LATCH_SELECT}",
        f"tee -q -o {stat_json} stat -json",
        f"tee -q -o {mem_dump} dump t:$mem_v2",
    ])


def readable_module(name: str) -> str:
    """`$paramod\\pipe_reg\\W=s32'0...0100010` -> `pipe_reg (W=34)`; hashed names -> the module."""
    name = name.lstrip("\\")
    if not name.startswith("$paramod"):
        return name
    parts = name.split("\\")
    module = parts[1] if parts[0] == "$paramod" else parts[-1]
    params = []
    for p in parts[2:] if parts[0] == "$paramod" else []:
        key, _, val = p.partition("=")
        m = re.fullmatch(r"s?\d+'([01]+)", val)
        params.append(f"{key}={int(m.group(1), 2) if m else val}")
    return f"{module} ({', '.join(params)})" if params else module


def parse_stat_json(text: str) -> dict:
    """The "modules" object of `stat -json`. (yosys 0.23 appends the text hierarchy inside its
    "design" object when a top is set, which makes the whole file invalid JSON.)"""
    at = text.find('"modules"')
    if at < 0:
        raise RuntimeError(f"stat -json output has no modules: {text[:300]!r}")
    start = text.index("{", at)
    modules, _ = json.JSONDecoder().raw_decode(text[start:])
    return {"modules": modules}


def parse_memories(dump: str) -> dict:
    """yosys module name -> [(memory name, words, bits)] from `dump t:$mem_v2` (key None when
    the dump names no module, which yosys does when only one module is selected)."""
    out, module, cell, params = {}, None, None, {}

    def close():
        if cell is not None:
            out.setdefault(module, []).append((cell, params.get("SIZE", 0), params.get("WIDTH", 0)))

    for line in dump.splitlines():
        s = line.strip()
        if s.startswith("module "):
            close()
            module, cell, params = s.split(None, 1)[1], None, {}
        elif s.startswith("cell $mem_v2 "):
            close()
            cell, params = s.split()[2].lstrip("\\"), {}
        elif s.startswith("parameter \\SIZE ") or s.startswith("parameter \\WIDTH "):
            key, val = s.split()[1].lstrip("\\"), s.split()[2]
            params[key] = int(val)
    close()
    return out


def _own_cells(by_type: dict, modules: dict) -> tuple[int, int, dict]:
    """(gates and flops, flop bits, {submodule: instances}) of one module's cell list:
    memories and instances of other modules are not its own cells."""
    names = {k.lstrip("\\"): k for k in modules}
    cells = flops = 0
    subs = {}
    for t, n in by_type.items():
        if t.lstrip("\\") in names:
            subs[names[t.lstrip("\\")]] = n
        elif not t.startswith("$mem"):
            cells += n
            flops += n if "DFF" in t.upper() else 0
    return cells, flops, subs


def module_stats(stat: dict, memories: dict) -> dict:
    mods = stat["modules"]
    out = {}
    for name, m in mods.items():
        cells, flops, _ = _own_cells(m.get("num_cells_by_type", {}), mods)
        total_cells, total_flops = hierarchy_totals(stat, name)
        out[name] = ModuleStats(readable_module(name), cells, flops, memories.get(name, []),
                                total_cells, total_flops)
    return out


def hierarchy_totals(stat: dict, top: str) -> tuple[int, int]:
    """Cells (memories excluded) and flop bits of `top` with everything below it."""
    mods = stat["modules"]

    def walk(key):
        cells, flops, subs = _own_cells(mods[key].get("num_cells_by_type", {}), mods)
        for sub, n in subs.items():
            c, f = walk(sub)
            cells, flops = cells + n * c, flops + n * f
        return cells, flops

    return walk(next(k for k in mods if k.lstrip("\\") == top.lstrip("\\")))


def run_synth(run: SynthRun, yosys: str = "yosys", timeout: int = 1200) -> SynthResult:
    with tempfile.TemporaryDirectory(prefix=f"synth-{run.top}-") as tmp:
        stat_json, mem_dump = Path(tmp) / "stat.json", Path(tmp) / "mem.txt"
        proc = subprocess.run([yosys, "-q", "-p", yosys_script(run, stat_json, mem_dump)],
                              capture_output=True, text=True, timeout=timeout)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise RuntimeError(f"yosys failed on {run.top} {run.parameters}:\n{log[-4000:]}")
        stat = parse_stat_json(stat_json.read_text())
        memories = parse_memories(mem_dump.read_text())
    if None in memories:
        # dump names no module when every selected memory sits in one: find it in the stats
        owners = [k for k, m in stat["modules"].items()
                  if any(t.startswith("$mem") for t in m.get("num_cells_by_type", {}))]
        if len(owners) != 1:
            raise RuntimeError(f"{run.top}: cannot tell which module owns the memories {owners}")
        memories[owners[0]] = memories.pop(None)
    cells, flops = hierarchy_totals(stat, run.top)
    return SynthResult(run, module_stats(stat, memories), cells, flops, log)


def format_table(results: list[SynthResult]) -> str:
    lines = ["| module | cells | flop bits | cells, with submodules | flop bits, with submodules "
             "| memories (words x bits) |", "|---|---:|---:|---:|---:|---|"]
    for res in results:
        params = ", ".join(f"{k}={v}" for k, v in res.run.build_parameters().items())
        lines.append(f"| **{res.run.top}** run ({params or 'default parameters'}) | | | | | |")
        for m in sorted(res.modules.values(), key=lambda m: m.name):
            mems = ", ".join(f"{mem} {w} x {b}" for mem, w, b in m.memories) or "-"
            lines.append(f"| `{m.name}` | {m.cells} | {m.flops} | {m.total_cells} | "
                         f"{m.total_flops} | {mems} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python hw/synth.py", description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, help="write the per-module numbers here")
    p.add_argument("--yosys", default="yosys", help="yosys executable (default: yosys on PATH)")
    p.add_argument("--lanes", type=int, metavar="W",
                   help="also count each lane-parametric top (every hw/ module with a W "
                        "parameter) at W elements a cycle")
    args = p.parse_args(argv)
    if not shutil.which(args.yosys):
        print(f"synth: {args.yosys!r} not found", file=sys.stderr)
        return 2
    runs = list(RUNS)
    if args.lanes is not None:
        from gradblock.hw.lanes import LANES, lane_tops
        if args.lanes not in LANES:
            print(f"synth: --lanes must be one of {', '.join(map(str, LANES))}", file=sys.stderr)
            return 2
        runs += [SynthRun(top, {"W": args.lanes}) for top in lane_tops()]
    results = []
    for run in runs:
        try:
            results.append(run_synth(run, args.yosys))
        except RuntimeError as e:
            print(f"synth: {e}", file=sys.stderr)
            return 1
    print(format_table(results))
    if args.json:
        fileio.write_text(args.json, json.dumps(
            [{"top": r.run.top, "parameters": r.run.build_parameters(),
              "total_cells": r.total_cells,
              "total_flops": r.total_flops,
              "modules": {m.name: {"cells": m.cells, "flops": m.flops, "memories": m.memories,
                                   "total_cells": m.total_cells, "total_flops": m.total_flops}
                          for m in r.modules.values()}} for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
