"""Generate the engines' register blocks, each from its one SystemRDL source, with PeakRDL.

    python hw/csr/generate.py [OUT_DIR]      (default: hw/csr, the committed copies)

From hw/csr/<map>.rdl (<map>: compress_engine_csr, aggregate_engine_csr) it writes, with the
PeakRDL command-line tools (pyproject extra `csr`: peakrdl-regblock, -cheader, -markdown):
  <map>.sv, <map>_pkg.sv   the AXI4-Lite CSR block (regblock, flat AXI4-Lite ports s_axil_*)
  <map>.h                  the C header (offsets, field masks)
  <map>.md                 the register map (docs/registers.md)
The tools run from the repository root with the .rdl named by its relative path, so the output
does not depend on where the checkout lives; tests/test_csr.py regenerates into a temporary
directory and checks the committed files are byte-identical.

One step follows regblock: its struct types are declared `packed` (packed_structs). regblock
writes them unpacked, which yosys refuses ("Only PACKED supported at this time"), so the block
could not be synthesised; every member is a bit vector or such a struct, so packing them
changes no behaviour (the same fields, widths and assignments), only the storage layout the
standard leaves open for unpacked structs.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# each register block: its top (hw/csr/<top>.sv) and the engine it wraps (hw/deps.py)
MAPS = {"compress_engine_csr": ("compress_engine_axil", "compress_engine"),
        "aggregate_engine_csr": ("aggregate_engine_axil", "aggregate_engine")}


def outputs(name: str) -> tuple[str, ...]:
    return (f"{name}.sv", f"{name}_pkg.sv", f"{name}.h", f"{name}.md")


def rdl(name: str) -> str:
    """The map's source, relative to ROOT (the generated map names it)."""
    return f"hw/csr/{name}.rdl"


# regblock: flat AXI4-Lite ports (no SV interface), struct types named by hierarchy, and an
# error response (SLVERR) for an unmapped address or a write to a read-only register
REGBLOCK_ARGS = ("--cpuif", "axi4-lite-flat", "--type-style", "hier",
                 "--err-if-bad-addr", "--err-if-bad-rw")


def peakrdl() -> str:
    """The peakrdl command of this Python environment (beside the interpreter), else PATH's."""
    here = Path(sys.executable).parent / "peakrdl"
    found = str(here) if here.is_file() else shutil.which("peakrdl")
    if not found:
        raise FileNotFoundError("peakrdl not found: install the project's `csr` extra "
                                "(pip install -e '.[csr]')")
    return found


def commands(name: str, out_dir: Path) -> list[list[str]]:
    tool, src = peakrdl(), rdl(name)
    return [[tool, "regblock", src, "-o", str(out_dir), *REGBLOCK_ARGS],
            [tool, "c-header", src, "-o", str(out_dir / f"{name}.h"), "--type-style", "hier"],
            [tool, "markdown", src, "-o", str(out_dir / f"{name}.md")]]


def map_sources(name: str) -> list[Path]:
    """A wrapped engine's files in compile order: the Verilator waivers of the generated
    block, the packages (hw/deps.py's for the engine, then the register block's), the top,
    the register block, then the engine and its modules (hw/deps.py)."""
    from gradblock.hw import deps
    top, engine_top = MAPS[name]
    engine = deps.sources(engine_top)
    packages = [p for p in engine if deps.scan(p)[0] == "package"]
    return ([HERE / "regblock.vlt", *packages, HERE / f"{name}_pkg.sv",
             HERE / f"{top}.sv", HERE / f"{name}.sv"]
            + [p for p in engine if p not in packages])


def sources() -> list[Path]:
    """compress_engine_axil's files (sim/duts.py's sources_fn)."""
    return map_sources("compress_engine_csr")


def aggregate_sources() -> list[Path]:
    """aggregate_engine_axil's files (sim/duts.py's sources_fn)."""
    return map_sources("aggregate_engine_csr")


_STRUCT = re.compile(r"\b(typedef\s+)?struct\s*\{")


def packed_structs(text: str) -> str:
    """Every `struct {` of regblock's output as `struct packed {` (see the module docstring)."""
    return _STRUCT.sub(lambda m: f"{m.group(1) or ''}struct packed {{", text)


def generate(out_dir: str | os.PathLike = HERE) -> list[Path]:
    """Write the generated files into out_dir; returns their paths."""
    out = Path(out_dir).absolute()
    out.mkdir(parents=True, exist_ok=True)
    for name in MAPS:
        for cmd in commands(name, out):
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd[1:3])} failed:\n{proc.stdout}{proc.stderr}")
        for sv in (out / f"{name}.sv", out / f"{name}_pkg.sv"):
            sv.write_text(packed_structs(sv.read_text()))
    return [out / f for name in MAPS for f in outputs(name)]


if __name__ == "__main__":
    for path in generate(sys.argv[1] if len(sys.argv) > 1 else HERE):
        print(path)
