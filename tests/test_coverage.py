"""Coverage closure (issue 23 item 3): the waivers of sim/coverage.py and the testbench bins of
sim/functional_bins.py that `gradblock verify --coverage` counts from the blocks' dedicated
cocotb tests (sim/verify.py, DEDICATED_TESTS).

Quick: the waiver matching on a synthetic coverage.dat, the bin tables against each other.
Slow (sim): the dedicated tests on Icarus with TB_BINS set must record every testbench bin, so
a testbench that stops recording (or a test that stops provoking an error code or reaching an
FSM state) fails here, not silently in the next coverage figure.
"""
from __future__ import annotations

import re

import pytest

from gradblock.codec.fileio import ForeignFileError
from gradblock.sim import coverage, functional_bins
from gradblock.sim.duts import DUTS
from gradblock.sim.harness import HW_DIR, simulator_available
from gradblock.sim.verify import DEDICATED_TESTS


def _entry(module: str, kind: str, file: str, line: int, comment: str, count: int) -> str:
    page = f"v_{kind}/{module}"
    fields = {"t": kind, "page": page, "f": file, "l": str(line), "n": "5", "o": comment,
              "h": f"TOP.{module}"}
    return "C '" + "".join(f"\x01{k}\x02{v}" for k, v in fields.items()) + f"' {count}"


def _line_of(path, pattern: str) -> int:
    for i, text in enumerate(path.read_text().splitlines(), 1):
        if re.search(pattern, text):
            return i
    raise AssertionError(f"{pattern!r} not in {path}")


def test_waivers_cover_only_their_points(tmp_path):
    """A never-hit point inside crc32_word's elaboration-only function is waived with its reason;
    a never-hit point outside it stays uncovered; a hit point is never listed; the figures
    after waivers leave only the waived points out."""
    crc = HW_DIR / "crc32_word.sv"
    inside = _line_of(crc, r"c = c\[0\] \?") if "steps32" in crc.read_text() else 0
    if not inside:
        pytest.skip("crc32_word.sv has no steps32 any more")
    outside = _line_of(crc, r"^\s*always")
    dat = tmp_path / "coverage.dat"
    dat.write_text("# SystemC::Coverage-3\n" + "\n".join([
        _entry("crc32_word", "line", str(crc), inside, "block", 0),
        _entry("crc32_word", "line", str(crc), outside, "block", 0),
        _entry("crc32_word", "line", str(crc), outside + 1, "block", 7),
        _entry("crc32_word", "branch", str(crc), inside, "cond_then", 0)]) + "\n")
    rep = coverage.module_summary(coverage.parse_dat(dat))["crc32_word"]
    assert rep["line"] == pytest.approx(100 / 3, abs=0.01)          # raw: 1 of 3
    assert rep["line_waived"] == 50.0                               # 1 of 2 (one waived)
    assert rep["branch"] == 0.0 and rep["branch_waived"] is None    # its only arm is waived
    assert [w["point"] for w in rep["waived"]] == [
        f"crc32_word.sv:{inside}:5 line block", f"crc32_word.sv:{inside}:5 branch cond_then"]
    assert all("elaboration" in w["reason"] for w in rep["waived"])
    assert rep["uncovered"] == [f"crc32_word.sv:{outside}:5 line block"]
    # a waiver that matched nothing is reported, not silently kept
    unused = coverage.unused_waivers(coverage.parse_dat(dat))
    assert any("row_mask" in u for u in unused) and not any("steps32" in u for u in unused)
    # points named in a snapshot directory that holds the file (verify --coverage's sources)
    snap = tmp_path / "sources"
    snap.mkdir()
    (snap / "crc32_word.sv").write_bytes(crc.read_bytes())
    moved = coverage.relocate(coverage.parse_dat(dat), snap)
    assert {p.file for p in moved} == {str(snap / "crc32_word.sv")}
    assert coverage.module_summary(moved)["crc32_word"]["line_waived"] == 50.0
    report = coverage.write_report([dat], tmp_path / "out", {"a": True, "b": False})
    assert "waivers_unused" in report and report["bins_missed"] == ["b"]
    assert "line*" in coverage.format_summary(report)
    # a rerun replaces the report it wrote; a user's file of the same name is refused, untouched
    coverage.write_report([dat], tmp_path / "out", {"a": True})
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "coverage.json").write_text("mine\n")
    with pytest.raises(ForeignFileError):
        coverage.write_report([dat], theirs, {})
    assert (theirs / "coverage.json").read_text() == "mine\n"
    assert sorted(p.name for p in theirs.iterdir()) == ["coverage.json"]     # nothing written


def test_every_testbench_bin_has_a_dedicated_test():
    """Each testbench bin family names the block and the cocotb tests that record it, and
    `verify --coverage` runs those tests (DEDICATED_TESTS): dropping one from the table, or a
    new bin nobody records, fails here."""
    names = functional_bins.dedicated_bins(set())
    assert len(names) >= 50
    for name in names:
        block, tests = functional_bins.source_of(name)
        planned = {t for d in DEDICATED_TESTS[block] for t in d.tests.split(",")}
        assert set(tests) <= planned, f"{name}: {block} does not run {set(tests) - planned}"
    # every FSM named has its states parsed from the RTL, IDLE first
    for block in functional_bins.RESET_FSMS:
        states = functional_bins.fsm_states(block)
        assert states[0] == "IDLE" and len(states) >= 4


def test_bins_read_from_the_records(tmp_path):
    """A bin counts only when a testbench recorded it (record -> read_recorded -> bins)."""
    path = tmp_path / "x.bins"
    functional_bins.record("decoder.err.CRC_MISMATCH", "reset.compress_top.PASS1",
                           path=str(path))
    got = functional_bins.read_recorded([path, tmp_path / "missing.bins"])
    assert got == {"decoder.err.CRC_MISMATCH", "reset.compress_top.PASS1"}
    d = functional_bins.dedicated_bins(got)
    assert d["decoder.err.CRC_MISMATCH"] and d["reset.compress_top.PASS1"]
    assert not d["decoder.err.BAD_MAGIC"] and not d["engine.err.MEMORY"]


@pytest.mark.slow
@pytest.mark.sim
def test_dedicated_tests_record_every_testbench_bin(tmp_path, golden_quick):
    """The dedicated tests that record bins, run on Icarus as `verify --coverage` runs them on
    Verilator (TB_BINS set, the golden quick set where they take vectors): together they must
    record every testbench bin, each block its own families."""
    reason = simulator_available("icarus")
    if reason:
        pytest.skip(reason)
    recorded: set[str] = set()
    wanted = functional_bins.dedicated_bins(set())
    blocks = sorted({functional_bins.source_of(n)[0] for n in wanted})
    for block in blocks:
        tests = sorted({t for n in wanted if functional_bins.source_of(n)[0] == block
                        for t in functional_bins.source_of(n)[1]})
        bins = tmp_path / f"{block}.bins"
        env = {"TB_BINS": bins, "TB_TRAFFIC": "0:0,0.4:0.4", "TB_FUZZ": 20,
               "TB_CASE_RESULTS": tmp_path / f"{block}-cases.json"}
        if any(d.vectors for d in DEDICATED_TESTS[block]):
            env["TB_GOLDEN_DIRS"] = golden_quick
        res = DUTS[block].run("icarus", env=env, testcase=",".join(tests),
                              run_name=f"bins-{block}")
        assert res.passed, res.report()
        mine = functional_bins.read_recorded([bins])
        assert all(functional_bins.source_of(n)[0] == block for n in mine), mine
        recorded |= mine
    missed = sorted(n for n in wanted if n not in recorded)
    assert not missed, f"testbench bins no dedicated test recorded: {missed}"


@pytest.mark.slow
@pytest.mark.sim
def test_a_dedicated_test_that_does_not_pass_is_a_failing_row(tmp_path, golden_quick):
    """run_dedicated gives one row per cocotb test; a test that fails or never runs is a
    fail / error row, which makes `verify` exit 1 like a failing golden case."""
    from gradblock.sim.duts import Run
    from gradblock.sim.verify import run_dedicated
    if simulator_available("verilator"):
        pytest.skip("verilator unavailable")
    mod = DUTS["quantiser"]
    rows, report = run_dedicated(mod, Run("reset_mid_stream,no_such_test"), "t",
                                 golden_quick, None, tmp_path, tmp_path / "cov")
    got = {r.case: r.status for r in rows}
    assert got["[reset_mid_stream]"] == "pass", report
    assert got["[no_such_test]"] == "error"
    assert (tmp_path / "cov" / "quantiser-t.dat").is_file()


def test_snapshot_replaces_only_its_own_files(tmp_path):
    """verify --coverage's source snapshot: a second run replaces what the first wrote; a
    DIR/sources holding a file gradblock did not write (or a copy edited since) stops the run
    and is left as it was."""
    from gradblock.codec.fileio import LEDGER, ForeignFileError, write_own_text
    from gradblock.sim.harness import HW_DIR
    from gradblock.sim.verify import snapshot_sources
    dest = tmp_path / "sources"
    snapshot_sources(dest)
    names = sorted(p.name for p in HW_DIR.glob("*.sv"))
    assert sorted(p.name for p in dest.glob("*.sv")) == names
    (dest / names[0]).unlink()
    write_own_text(dest / "gone.sv", "module gone; endmodule\n")      # a copy hw/ no longer has
    snapshot_sources(dest)                          # its own files: replaced, or removed
    assert (dest / names[0]).read_bytes() == (HW_DIR / names[0]).read_bytes()
    assert not (dest / "gone.sv").exists()
    (dest / names[0]).write_text("edited copy")
    with pytest.raises(ForeignFileError, match="did not write"):
        snapshot_sources(dest)
    assert (dest / names[0]).read_text() == "edited copy"
    users = tmp_path / "theirs"
    users.mkdir()
    (users / "mine.sv").write_text("module mine; endmodule\n")
    (users / names[0]).write_text("their own edit")
    with pytest.raises(ForeignFileError, match="did not write"):
        snapshot_sources(users)
    assert (users / "mine.sv").read_text() == "module mine; endmodule\n"
    assert (users / names[0]).read_text() == "their own edit"
    assert not (users / LEDGER).exists()
