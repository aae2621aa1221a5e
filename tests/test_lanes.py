"""The lane switch (issue 31 item 5): `--lanes W` on `gradblock verify` and `gradblock synth`
selects the W-lane build of every block that has one (hw/lanes.py), and refuses, in one line with
exit 2, a block that takes one element a cycle or a W outside 1, 2, 4, 8, 16."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from gradblock.hw import lanes, synth
from gradblock.hw.deps import HW_DIR, hdl_defaults, sources
from gradblock.sim import verify

from cli_helpers import run


def test_every_listed_lane_block_declares_w_defaulting_to_one():
    """A block in LANE_BLOCKS is in hw/ and declares W with default 1 (the one-element design),
    so `--lanes` can never silently select a build that does not exist."""
    for top in lanes.LANE_BLOCKS:
        assert (HW_DIR / f"{top}.sv").is_file(), f"{top} is listed but not in hw/"
        assert hdl_defaults(top).get("W") == 1, f"{top}: no W parameter defaulting to 1"
    assert lanes.lane_tops() == list(lanes.LANE_BLOCKS)


def test_with_lanes_sets_w_and_keeps_the_other_parameters():
    top = lanes.LANE_BLOCKS[0]
    assert lanes.with_lanes(top, {"K_MAX": 32}, 4) == {"K_MAX": 32, "W": 4}
    assert lanes.with_lanes(top, {"K_MAX": 32}, None) == {"K_MAX": 32}


@pytest.mark.parametrize("command", ["verify", "synth"])
def test_a_block_without_lanes_is_refused_by_name(command, capsys):
    flag = "--modules" if command == "verify" else "--tops"
    rc, out, err = run(capsys, command, "--lanes", "4", flag, "quantiser")
    if command == "synth" and "not on PATH" in err:
        pytest.skip(f"ECP5 wheels missing: {err.strip()}")
    assert rc == 2 and err.count("\n") == 1, err
    assert "quantiser has no lane parameter W" in err


@pytest.mark.parametrize("command", ["verify", "synth"])
def test_lanes_outside_the_verified_widths_is_a_usage_error(command, capsys):
    rc, out, err = run(capsys, command, "--lanes", "3")
    assert rc == 2 and err.count("\n") == 1 and "--lanes" in err, err


def test_verify_selects_the_lane_build_of_each_lane_block():
    builds = verify.lane_builds(None, 16)
    assert builds, "no registered block is lane-parametric"
    for name, dut in builds.items():
        assert dut.parameters["W"] == 16
        assert lanes.lane_parametric(dut.toplevel)
        # everything else of the reference build is kept
        ref = verify.REGISTRY[name].parameters
        assert {k: v for k, v in dut.parameters.items() if k != "W"} == \
            {k: v for k, v in ref.items() if k != "W"}


@pytest.mark.skipif(shutil.which("yosys") is None, reason="yosys not installed")
@pytest.mark.parametrize("lanes", [4, pytest.param(16, marks=pytest.mark.slow)])
@pytest.mark.parametrize("top", lanes.LANE_BLOCKS)
def test_yosys_elaborates_each_lane_build_without_latches(top, lanes, tmp_path):
    """Debian's yosys (0.23: no int'() casts, no loop variables under conditions in functions)
    reads every lane block at W and finds no latch after `proc` (the synthesis tests and the
    ECP5 flow build on this)."""
    files = " ".join(str(p) for p in sources(top))
    script = (f"read_verilog -sv {files}; chparam -set W {lanes} {top}; "
              f"hierarchy -check -top {top}; proc; select -assert-none {synth.LATCH_SELECT}")
    proc = subprocess.run(["yosys", "-q", "-p", script], capture_output=True, text=True,
                          timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
