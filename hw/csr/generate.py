"""Generate compress_engine's register block from its one SystemRDL source with PeakRDL.

    python hw/csr/generate.py [OUT_DIR]      (default: hw/csr, the committed copies)

From hw/csr/compress_engine_csr.rdl it writes, with the PeakRDL command-line tools
(pyproject extra `csr`: peakrdl-regblock, peakrdl-cheader, peakrdl-markdown):
  compress_engine_csr.sv, compress_engine_csr_pkg.sv   the AXI4-Lite CSR block (regblock,
                                                        flat AXI4-Lite ports s_axil_*)
  compress_engine_csr.h                                 the C header (offsets, field masks)
  compress_engine_csr.md                                the register map (docs/registers.md)
The tools run from the repository root with the .rdl named by its relative path, so the output
does not depend on where the checkout lives; tests/test_csr_generated.py regenerates into a
temporary directory and checks the committed files are byte-identical.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RDL = "hw/csr/compress_engine_csr.rdl"      # relative to ROOT: the map names it
NAME = "compress_engine_csr"
OUTPUTS = (f"{NAME}.sv", f"{NAME}_pkg.sv", f"{NAME}.h", f"{NAME}.md")

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


def commands(out_dir: Path) -> list[list[str]]:
    tool = peakrdl()
    return [[tool, "regblock", RDL, "-o", str(out_dir), *REGBLOCK_ARGS],
            [tool, "c-header", RDL, "-o", str(out_dir / f"{NAME}.h"), "--type-style", "hier"],
            [tool, "markdown", RDL, "-o", str(out_dir / f"{NAME}.md")]]


def sources() -> list[Path]:
    """compress_engine_axil's files in compile order: the Verilator waivers of the generated
    block, the packages (hw/deps.py's for compress_engine, then the register block's), the top,
    the register block, then compress_engine and its modules (hw/deps.py)."""
    from gradblock.hw import deps
    engine = deps.sources("compress_engine")
    packages = [p for p in engine if deps.scan(p)[0] == "package"]
    return ([HERE / f"{NAME}.vlt", *packages, HERE / f"{NAME}_pkg.sv",
             HERE / "compress_engine_axil.sv", HERE / f"{NAME}.sv"]
            + [p for p in engine if p not in packages])


def generate(out_dir: str | os.PathLike = HERE) -> list[Path]:
    """Write the generated files into out_dir; returns their paths."""
    out = Path(out_dir).absolute()
    out.mkdir(parents=True, exist_ok=True)
    for cmd in commands(out):
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[1:3])} failed:\n{proc.stdout}{proc.stderr}")
    return [out / f for f in OUTPUTS]


if __name__ == "__main__":
    for path in generate(sys.argv[1] if len(sys.argv) > 1 else HERE):
        print(path)
