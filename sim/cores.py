"""FuseSoC CAPI2 cores for the RTL, one per module or package, generated from the one dependency
resolver (hw/deps.py), the DUT table (sim/duts.py) and the HDL itself (parameters, read by slang).
It lives in sim/ because a core's sim target names its DUT's testbench (hw/ imports nothing
above it).

hw/<name>.core sits beside hw/<name>.sv and lists that one file; everything else it needs comes
by `depend:` on the cores of the modules it instantiates and the packages it uses (hw/deps.py's
`direct`), so FuseSoC assembles a design from cores, each file once, and a system core that
depends on both engines builds without duplicate modules. `python -m gradblock.sim.cores`
rewrites them after the RTL changes; tests/test_fusesoc.py fails while a committed core differs
from what this module writes.

Each module's core has a `parameters:` section with every HDL parameter of the module (name,
default, the comment beside it), so `fusesoc run --target lint gradblock:ip:compress_engine
--K_MAX=16` builds that variant, and these targets (flow API, edalize):
  lint   flow lint, Verilator --lint-only -Wall
  sim    flow sim, Icarus Verilog with the module's cocotb testbench (sim/benches/, the DUT
         table's test_module): only for modules that have one. cocotb 2 needs GPI_USERS in the
         environment (edalize predates it):
           export GPI_USERS="$(cocotb-config --libpython);$(cocotb-config --pygpi-entry-point)"
         and a datapath testbench its golden vectors (TB_GOLDEN_DIR; docs/hw.md)
  synth  flow generic, yosys synth_ecp5 (the FPGA family of docs/hw.md's figures)
Usage (from anywhere): fusesoc --cores-root hw run --target lint gradblock:ip:compress_engine
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from gradblock.hw import deps, slang_lint

from .duts import DUTS

CORES_DIR = deps.HW_DIR
VENDOR, LIBRARY, VERSION = "gradblock", "ip", "0.1.0"
# Icarus command file for the cocotb runs: every hw/ file starts with `resetall, which drops a
# `timescale given on the command line, so the time scale cocotb's 10 ns clock needs comes as
# the default for modules without one (+timescale, as cocotb's own runner does it)
ICARUS_CMD = "icarus_cocotb.f"
ICARUS_CMD_TEXT = ("# written by `python -m gradblock.sim.cores`: Icarus's default time scale for "
                   "the cores' cocotb runs\n+timescale+1ns/1ps\n")


def vlnv(name: str) -> str:
    return f"{VENDOR}:{LIBRARY}:{name}:{VERSION}"


def core_path(name: str) -> Path:
    return CORES_DIR / f"{name}.core"


def _work_dir(name: str) -> str:
    """Where FuseSoC copies the core's files, relative to the build's work root."""
    return f"src/{vlnv(name).replace(':', '_')}"


def _first_comment(name: str) -> str:
    """The first sentence of the file's header comment, as the core's description."""
    words = []
    for line in (deps.HW_DIR / f"{name}.sv").read_text().splitlines():
        s = line.strip()
        if not s.startswith("//"):
            if s or words:
                break
            continue
        words += s.lstrip("/").split()
        text = " ".join(words)
        if ". " in text + " ":
            break
    text = " ".join(words).replace('"', "'")
    text = text[:text.index(". ") + 1] if ". " in text else text
    return (text[:117] + "...") if len(text) > 120 else (text or name)


def parameters(module: str) -> list[tuple[str, int, str]]:
    """(name, default, description) of every parameter of `module` a user may set (not the
    localparams), in declaration order: the values from slang's elaboration, the description
    from the comment on the parameter's line."""
    view = slang_lint.View(f"top:{module}", tuple(deps.sources(module)), module)
    d = slang_lint._driver(view)
    d.parseAllSources()
    inst = next(i for i in d.createCompilation().getRoot().topInstances if i.name == module)
    text = (deps.HW_DIR / f"{module}.sv").read_text()
    out = []
    for p in inst.body.parameters:
        if p.isLocalParam or not p.isPortParam:
            continue
        value = str(p.value)
        m = re.fullmatch(r"(?:\d+)?'s?([bdhoBDHO])([0-9a-fA-F_]+)", value)
        default = int(m.group(2).replace("_", ""), {"b": 2, "d": 10, "h": 16, "o": 8}[
            m.group(1).lower()]) if m else int(value)
        c = re.search(rf"\bparameter\b[^\n]*?\b{p.name}\s*=[^\n]*?//\s*([^\n]*)"
                      rf"((?:\n[ \t]*//[^\n]*)*)", text)       # and its continuation lines
        desc = " ".join([c.group(1).strip()] + [s.strip().lstrip("/").strip()
                                                for s in c.group(2).splitlines() if s.strip()]
                        ) if c else ""
        desc = desc or f"HDL parameter {p.name}"
        out.append((p.name, default, desc.replace('"', "'")))
    return out


def _dut_bench(module: str) -> str | None:
    """The cocotb module of the DUT whose top level is `module` (built from hw/ alone)."""
    for dut in DUTS.values():
        if dut.toplevel == module and dut.sources_fn is None:
            return dut.test_module
    return None


def core_text(name: str) -> str:
    kind = deps.scan(deps.HW_DIR / f"{name}.sv")[0]
    modules, packages = deps.direct(name)
    depend = "".join(f"\n      - {VENDOR}:{LIBRARY}:{d}" for d in packages + modules)
    head = f"""CAPI=2:
# written by `python -m gradblock.sim.cores` from hw/deps.py, sim/duts.py and the HDL: do not edit
name: {vlnv(name)}
description: "{_first_comment(name)}"

filesets:
  rtl:
    files:
      - {name}.sv
    file_type: systemVerilogSource
"""
    if depend:
        head += f"    depend:{depend}\n"
    if kind == "package":
        return head + "\ntargets:\n  default:\n    filesets: [rtl]\n"
    bench = _dut_bench(name)
    if bench:
        head += f"""  cocotb:
    files:
      - {ICARUS_CMD}: {{file_type: user}}
"""
    params = parameters(name)
    body = ""
    if params:
        body += "\nparameters:\n"
        for pname, default, desc in params:
            body += (f"  {pname}:\n    datatype: int\n    paramtype: vlogparam\n"
                     f"    default: {default}\n    description: \"{desc}\"\n")
    plist = f"\n    parameters: [{', '.join(p for p, _, _ in params)}]" if params else ""
    body += f"""
targets:
  default: &default
    filesets: [rtl]
    toplevel: {name}

  lint:
    <<: *default{plist}
    flow: lint
    flow_options:
      tool: verilator
      verilator_options: [-Wall]
"""
    if bench:
        body += f"""
  sim:
    <<: *default
    filesets: [rtl, cocotb]{plist}
    flow: sim
    flow_options:
      tool: icarus
      cocotb_module: {bench}
      iverilog_options: [-g2012, -c, {_work_dir(name)}/{ICARUS_CMD}]
"""
    body += f"""
  synth:
    <<: *default{plist}
    flow: generic
    flow_options:
      tool: yosys
      arch: ecp5
      output_format: json
"""
    return head + body


def names() -> list[str]:
    """Every module and package of hw/ (each gets a core)."""
    return list(deps.available())


def write_all() -> list[Path]:
    written = []
    wanted = {core_path(n): core_text(n) for n in names()}
    wanted[CORES_DIR / ICARUS_CMD] = ICARUS_CMD_TEXT
    for path, text in wanted.items():
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


if __name__ == "__main__":
    for p in write_all():
        print(f"wrote {p}")
    sys.exit(0)
