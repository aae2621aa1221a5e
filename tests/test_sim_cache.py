"""Simulator build directories live in a cache the user controls (issue 24 item 4), keyed by a
hash of what the build depends on; the Verilator runtime objects are compiled once
(sim/objcache.py); outputs refuse a symbolic link (docs/limits.md, "Outputs"); a wheel
installed read-only runs `gradblock verify`."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import run
from gradblock.sim import harness

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ where builds go
def test_build_root_precedence(monkeypatch, tmp_path):
    """--build-dir (build_root) > GRADBLOCK_SIM_BUILD > $XDG_CACHE_HOME/gradblock > ~/.cache."""
    monkeypatch.delenv("GRADBLOCK_SIM_BUILD", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert harness.sim_build_root() == tmp_path / "home/.cache/gradblock/sim_build"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/is/ignored")
    assert harness.sim_build_root() == tmp_path / "home/.cache/gradblock/sim_build"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert harness.sim_build_root() == tmp_path / "xdg/gradblock/sim_build"
    monkeypatch.setenv("GRADBLOCK_SIM_BUILD", str(tmp_path / "env"))
    assert harness.sim_build_root() == tmp_path / "env"
    assert harness.sim_build_root(tmp_path / "flag") == tmp_path / "flag"
    pkg = Path(harness.__file__).resolve().parent.parent
    monkeypatch.delenv("GRADBLOCK_SIM_BUILD")
    for root in (harness.sim_build_root(), harness.build_dir_for("quantiser", "icarus", {}, False)):
        assert not root.resolve().is_relative_to(pkg), f"{root} is inside the package tree {pkg}"


def test_build_key_follows_sources_flags_and_parameters(tmp_path):
    """Identical inputs give one directory (reused across runs); a changed byte of a source,
    a parameter, a flag (coverage, waves) or the simulator gives another."""
    src = tmp_path / "blk.sv"
    src.write_text("module blk; endmodule\n")
    d = lambda **kw: harness.build_dir_for("blk", kw.pop("sim", "icarus"), kw.pop("p", {}),  # noqa: E731
                                           kw.pop("waves", False), [src], tmp_path, **kw)
    first = d()
    assert d() == first and first.parent == tmp_path and first.name.startswith("blk-icarus-")
    assert d(p={"W": 8}) != first
    assert d(waves=True) != first
    assert d(sim="verilator") != d(sim="verilator", coverage=True)
    src.write_text("module blk; endmodule // changed\n")
    assert d() != first


def test_build_key_follows_the_cocotb_environment(tmp_path, monkeypatch):
    """A Verilator model links cocotb's VPI library by absolute path: a build made from another
    environment's cocotb (another checkout's .venv, which may be gone) gets another key."""
    import cocotb
    src = tmp_path / "blk.sv"
    src.write_text("module blk; endmodule\n")
    key = lambda: harness.build_key("blk", "verilator", {}, [src], [])  # noqa: E731
    here = key()
    other = tmp_path / "other-venv" / "cocotb" / "__init__.py"
    other.parent.mkdir(parents=True)
    other.write_text("")
    monkeypatch.setattr(cocotb, "__file__", str(other))
    assert key() != here


# ------------------------------------------------------------------ Verilator runtime cache
def test_objcache_compiles_runtime_once(tmp_path, monkeypatch):
    """A compile of a file of the Verilator include directory runs once per flag set; a
    second model gets the cached object and .d; other sources always compile."""
    inc = tmp_path / "vroot" / "include"
    inc.mkdir(parents=True)
    (inc / "verilated_config.h").write_text("#define VERILATOR_VERSION 1\n")
    (inc / "verilated.cpp").write_text("int x;\n")
    log = tmp_path / "calls.txt"
    cc = tmp_path / "fakecc"
    cc.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo fakecc 1; exit 0; }\n"
                  f"echo \"$@\" >> {log}\n"
                  "while [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\n"
                  "echo obj > $out; echo 'verilated.o: x' > ${out%.o}.d\n")
    cc.chmod(0o755)
    monkeypatch.setenv("VERILATOR_ROOT", str(inc.parent))
    from gradblock.sim import objcache
    cache = tmp_path / "cache"
    for model in ("m1", "m2"):
        work = tmp_path / model
        work.mkdir()
        monkeypatch.chdir(work)
        argv = ["--dir", str(cache), str(cc), "-Os", "-DVM_COVERAGE=0", "-c", "-o", "verilated.o",
                str(inc / "verilated.cpp")]
        assert objcache.main(argv) == 0
        assert (work / "verilated.o").read_text() == "obj\n"
        assert (work / "verilated.d").is_file()
    assert len(log.read_text().splitlines()) == 1           # compiled once, copied once
    assert objcache.main(["--dir", str(cache), str(cc), "-Os", "-DVM_COVERAGE=1", "-c", "-o",
                          "verilated.o", str(inc / "verilated.cpp")]) == 0
    assert len(log.read_text().splitlines()) == 2           # other flags: compiled again
    (tmp_path / "m2" / "model.cpp").write_text("int y;\n")
    for _ in range(2):
        assert objcache.main(["--dir", str(cache), str(cc), "-c", "-o", "model.o",
                              str(tmp_path / "m2" / "model.cpp")]) == 0
    assert len(log.read_text().splitlines()) == 4           # model sources: never cached


# ------------------------------------------------------------------ symlinked outputs
def test_output_through_a_symlink_is_refused(tmp_path, capsys):
    """Policy (docs/limits.md, Outputs): an output path that is a symbolic link is refused
    with a named error and exit 2; the link's target is left as it was. A link among the
    parent directories is followed."""
    np.save(tmp_path / "g.npy", np.ones(3, np.float32))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "out.bin").symlink_to(victim)
    rc, _, err = run(capsys, "quantise", tmp_path / "g.npy", tmp_path / "out.bin")
    assert rc == 2 and "symbolic link" in err and len(err.strip().splitlines()) == 1, err
    assert victim.read_text() == "precious" and (tmp_path / "out.bin").is_symlink()
    (tmp_path / "real").mkdir()
    (tmp_path / "linkdir").symlink_to(tmp_path / "real")
    rc, _, err = run(capsys, "quantise", tmp_path / "g.npy", tmp_path / "linkdir" / "q.bin")
    assert rc == 0, err
    assert (tmp_path / "real" / "q.bin").is_file()


# ------------------------------------------------------------------ read-only install
@pytest.mark.slow
@pytest.mark.sim
def test_read_only_wheel_runs_verify(tmp_path):
    """The wheel (not editable) installed into a read-only directory runs `gradblock verify`
    on one module; the build lands in the cache named by --build-dir, nothing in the install."""
    reason = harness.simulator_available("icarus")
    if reason:
        pytest.skip(reason)
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(wheels), str(ROOT)], check=True, env=env, cwd=tmp_path)
    wheel = next(wheels.glob("gradblock-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(site), str(wheel)], check=True, env=env)
    for p in [site, *site.rglob("*")]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    before = sorted(str(p.relative_to(site)) for p in site.rglob("*"))
    golden = tmp_path / "golden"
    cache = tmp_path / "cache"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from gradblock.cli import main; "
            "sys.exit(main(sys.argv[2:]))")
    try:
        gen = subprocess.run([sys.executable, "-c", code, str(site), "golden", str(golden),
                              "--quick", "--no-check"], capture_output=True, text=True,
                             cwd=tmp_path, env={**env, "PYTHONPATH": str(site)})
        assert gen.returncode == 0, gen.stderr
        proc = subprocess.run([sys.executable, "-c", code, str(site), "verify", "--sim", "icarus",
                               "--vectors", str(golden), "--modules", "ef_add", "--build-dir",
                               str(cache)], capture_output=True, text=True, cwd=tmp_path,
                              env={**env, "PYTHONPATH": str(site)}, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert " 0 fail" in proc.stdout
        where = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                                "import gradblock.sim.harness as h; print(h.__file__)", str(site)],
                               capture_output=True, text=True, cwd=tmp_path, check=True)
        assert Path(where.stdout.strip()).is_relative_to(site), where.stdout
        assert list(cache.glob("ef_add-icarus-*/.build-ok")), list(cache.iterdir())
        after = sorted(str(p.relative_to(site)) for p in site.rglob("*")
                       if "__pycache__" not in p.parts)
        assert [p for p in after if p not in before] == []
    finally:
        for p in [site, *site.rglob("*")]:
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | stat.S_IWUSR)


def test_stamp_records_the_build(tmp_path):
    """The stamp a finished build leaves names what was built (read by people debugging a
    cache), and a stamped directory is not rebuilt."""
    d = tmp_path / "b"
    d.mkdir()
    (d / harness.BUILD_STAMP).write_text(json.dumps({"toplevel": "x"}))
    assert harness._build("icarus", "x", [], {}, d, False) is False


# ------------------------------------------------------------------ coverage (issue 23 item 3)
def test_coverage_dat_parse_and_report(tmp_path):
    """A Verilator coverage.dat (SystemC::Coverage-3) merges over runs and instances into
    per-module line / branch / toggle percentages, an lcov file and annotated sources."""
    from gradblock.sim import coverage
    src = tmp_path / "blk.sv"
    src.write_text("module blk;\n  always_ff @(posedge clk)\n    if (a) x <= 1;\nendmodule\n")

    def point(kind, line, col, comment, count, inst="TOP.blk"):
        f = {"f": str(src), "l": line, "n": col, "t": kind, "page": f"v_{kind}/blk__W3",
             "o": comment, "h": inst}
        return "C '" + "".join(f"\x01{k}\x02{v}" for k, v in f.items())[1:] + f"' {count}\n"
    head = "# SystemC::Coverage-3\n"
    (tmp_path / "a.dat").write_text(head + point("line", 2, 3, "block", 5)
                                    + point("branch", 3, 5, "if", 2)
                                    + point("branch", 3, 6, "else", 0)
                                    + point("toggle", 1, 1, "a:0->1", 1)
                                    + point("toggle", 1, 1, "a:1->0", 0))
    (tmp_path / "b.dat").write_text(head + point("toggle", 1, 1, "a:1->0", 3, "TOP.other"))
    rep = coverage.write_report([tmp_path / "a.dat", tmp_path / "b.dat"], tmp_path / "out",
                                bins={"x.hit": True, "y.missed": False})
    m = rep["modules"]["blk"]
    assert (m["line"], m["branch"], m["toggle"]) == (100.0, 50.0, 100.0)
    assert m["uncovered"] == ["blk.sv:3:6 branch else"]
    assert (rep["bins_total"], rep["bins_hit"], rep["bins_missed"]) == (2, 1, ["y.missed"])
    assert json.loads((tmp_path / "out" / "coverage.json").read_text()) == rep
    info = (tmp_path / "out" / "coverage.info").read_text()
    assert "BRDA:3,6,1,-" in info and "DA:2,5" in info
    ann = (tmp_path / "out" / "annotated" / "blk.sv").read_text().splitlines()
    assert ann[2].startswith("%000000") and ann[1].startswith(" 000005")
    with pytest.raises(coverage.CoverageFormatError):
        (tmp_path / "bad.dat").write_text("not coverage\n")
        coverage.parse_dat(tmp_path / "bad.dat")


@pytest.mark.slow
@pytest.mark.sim
def test_verify_coverage_one_module(tmp_path, golden_quick):
    """`gradblock verify --sim verilator --coverage DIR` on one module and two cases writes the
    report: quantiser's line coverage is measured (not n/a), the annotated source exists, and
    the bins the two cases hit (saturation both ways) are hit. The full run: docs/hw.md."""
    reason = harness.simulator_available("verilator")
    if reason:
        pytest.skip(reason)
    from gradblock.sim.verify import verify_main
    out = tmp_path / "cov"
    rc = verify_main(["--sim", "verilator", "--vectors", str(golden_quick), "--modules",
                      "quantiser", "--cases", "quant_saturation_inf", "special_floats",
                      "--coverage", str(out)])
    assert rc == 0
    rep = json.loads((out / "coverage.json").read_text())
    q = rep["modules"]["quantiser"]
    assert q["line"] is not None and q["line"] > 50 and q["toggle"] is not None
    assert (out / "annotated" / "quantiser.sv").is_file()
    bins = rep["bins"]
    assert bins["quantiser.saturate_pos"] and bins["quantiser.saturate_neg"]
    assert rep["bins_hit"] < rep["bins_total"]          # the other blocks did not run
    from gradblock import cli
    assert cli.main(["verify", "--sim", "icarus", "--coverage", str(out)]) == 2


# ------------------------------------------------------------------ mutation (issue 23 item 5)
def test_mutation_sites_are_expressions_only():
    from gradblock.sim import mutation
    text = ("module m (input logic a, output logic y);  // a + b\n"
            "    assign y = a + b;\n"
            "    always_ff @(posedge clk) if (a == 1'b1) q <= c - 2;\n"
            "endmodule\n")
    got = {(m.line, m.kind, m.before, m.after) for m in mutation.sites(text, "m")}
    assert (2, "operator", "+", "-") in got and (2, "drop-term", "+ b", "") in got
    assert (3, "operator", "==", "!=") in got and (3, "constant", "1'b1", "1'b0") in got
    assert not any(line == 1 for line, *_ in got)             # declarations and comments
    assert not any(b == "<=" for _, _, b, _ in got)            # never the assignment itself
    m = next(m for m in mutation.sites(text, "m") if m.before == "+")
    assert "assign y = a - b;" in mutation.apply(text, m)


@pytest.mark.slow
@pytest.mark.sim
def test_tiny_mutation_run(tmp_path, golden_quick):
    """Two mutants of ef_add through the golden set on Icarus: the sum's `+` turned into `-`
    is killed; a wider slice of a 32-bit output (truncated back, an equivalent mutant)
    survives. The full run and its score: docs/hw.md, "Mutation score"."""
    reason = harness.simulator_available("icarus")
    if reason:
        pytest.skip(reason)
    from gradblock.sim import mutation
    all_sites = mutation.sites((harness.HW_DIR / "ef_add.sv").read_text(), "ef_add")
    flip = next(m for m in all_sites if m.kind == "operator" and m.before == "+"
                and "sum_in =" in (harness.HW_DIR / "ef_add.sv").read_text().splitlines()[m.line - 1])
    same = next(m for m in all_sites if "m_tdata = out_word[31:0]" in
                (harness.HW_DIR / "ef_add.sv").read_text().splitlines()[m.line - 1]
                and m.before == "31")
    cases = ["tie_break_k1", "feedback_saturation"]
    assert mutation.run_mutant(flip, golden_quick, "icarus", tmp_path, cases).status == "killed"
    assert mutation.run_mutant(same, golden_quick, "icarus", tmp_path, cases).status == "survived"
    s = mutation.score([flip, same])
    assert (s["killed"], s["counted"], s["score"]) == (1, 2, 50.0)
