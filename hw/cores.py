"""FuseSoC CAPI2 cores for the RTL, generated from the one dependency resolver (hw/deps.py).

hw/cores/<module>.core exists for every module of hw/ (the blocks and both engines); its
`rtl` fileset is exactly `deps.sources(module)` (packages first), so a core never keeps a file
list of its own: `python -m gradblock.hw.cores` rewrites them after the RTL gains a module,
and tests/test_fusesoc.py fails while a committed core differs from what this module writes.

Targets of every core (legacy CAPI2 `default_tool` form, run by FuseSoC 2.x through edalize):
  lint   verilator --lint-only -Wall
  sim    Icarus Verilog (-g2012): elaborates and runs the top on its own (no stimulus)
  synth  yosys synth_ecp5 (the FPGA family of docs/hw.md's figures)
Usage (from the repository root):
  fusesoc --cores-root hw/cores run --target lint gradblock:ip:compress_engine
"""
from __future__ import annotations

import sys
from pathlib import Path

from gradblock.hw import deps

CORES_DIR = deps.HW_DIR / "cores"
VENDOR, LIBRARY, VERSION = "gradblock", "ip", "0.1.0"


def vlnv(module: str) -> str:
    return f"{VENDOR}:{LIBRARY}:{module}:{VERSION}"


def _first_comment(module: str) -> str:
    """The first sentence of the module's header comment, as the core's description."""
    words = []
    for line in (deps.HW_DIR / f"{module}.sv").read_text().splitlines():
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
    return (text[:117] + "...") if len(text) > 120 else (text or module)


def core_text(module: str) -> str:
    files = "\n".join(f"      - ../{p.name}" for p in deps.sources(module))
    return f"""CAPI=2:
# written by `python -m gradblock.hw.cores` from hw/deps.py: do not edit by hand
name: {vlnv(module)}
description: "{_first_comment(module)}"

filesets:
  rtl:
    files:
{files}
    file_type: systemVerilogSource

targets:
  default: &default
    filesets: [rtl]
    toplevel: {module}

  lint:
    <<: *default
    default_tool: verilator
    tools:
      verilator:
        mode: lint-only
        verilator_options: [-Wall]

  sim:
    <<: *default
    default_tool: icarus
    tools:
      icarus:
        iverilog_options: [-g2012]

  synth:
    <<: *default
    default_tool: yosys
    tools:
      yosys:
        arch: ecp5
        output_format: json
"""


def core_files(core: Path) -> list[str]:
    """The `rtl` fileset of a .core file, as hw/ file names (read without a YAML library)."""
    out, inside = [], False
    for line in Path(core).read_text().splitlines():
        s = line.strip()
        if s == "files:":
            inside = True
            continue
        if inside:
            if not s.startswith("- "):
                break
            out.append(Path(s[2:].strip()).name)
    return out


def write_all(cores_dir: Path = CORES_DIR) -> list[Path]:
    cores_dir.mkdir(exist_ok=True)
    written = []
    for module in deps.tops():
        path = cores_dir / f"{module}.core"
        text = core_text(module)
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


if __name__ == "__main__":
    for p in write_all():
        print(f"wrote {p}")
    sys.exit(0)
