"""Golden vectors for a plain SystemVerilog bench (docs/golden.md, "A bench without Python"):
the params files, case list and numeric error codes `gradblock golden` writes (golden/plain.py),
and the two example benches of hw/tb_plain/ (quantiser, compress_top) run on Icarus and on
Verilator over the quick golden set: every applicable case passes, and a copy of the set with
one expected word changed makes each bench fail naming that case and word.
"""
from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from gradblock.codec.errors import GradblockError
from gradblock.golden import plain
from gradblock.golden.check import check_golden
from gradblock.golden.format import load_exchange, load_golden, read_manifest, write_golden
from gradblock.hw.sv_constants import codes, package_constants
from gradblock.sim import plain_bench
from gradblock.sim.duts import DUTS
from gradblock.sim.harness import simulator_available


def params_of(golden_dir, case: str) -> dict[str, int]:
    lines = (golden_dir / plain.params_name(case)).read_text().splitlines()
    pairs = [line.split(" ") for line in lines]
    assert all(len(p) == 2 for p in pairs), lines
    return {k: int(v) for k, v in pairs}


# ------------------------------------------------------------------ the files themselves
def test_params_files_match_the_manifest(golden_quick):
    """Every case's params.txt holds its manifest numbers, its stages and every array's word
    count; params.svh says the same as localparams; cases.txt lists every case in order."""
    manifest = read_manifest(golden_quick)
    for case in load_golden(golden_quick):
        m, p = case.meta, params_of(golden_quick, case.name)
        for key, field in (("n", "n"), ("m", "M"), ("k_shift", "k_shift"),
                           ("range_bits", "range_bits"), ("lmax_log2", "lmax_log2"),
                           ("block_size", "block_size"), ("n_blocks", "n_blocks"),
                           ("layer_id", "layer_id"), ("sat_quant", "sat_quant")):
            assert p[key] == m[field], (case.name, key)
        assert p["k_eff"] == (-1 if m["k_eff"] is None else m["k_eff"])
        assert p["frame_words"] == (-1 if m["frame_words"] is None else m["frame_words"])
        assert p["nan_count"] == int(case.arrays["quant_nan"].sum())
        for stage in ("quantiser", "top", "momentum"):
            assert p[f"stage_{stage}"] == int(stage in m["stages"]), (case.name, stage)
        for name, arr in case.arrays.items():
            assert p[f"words_{name}"] == arr.size, (case.name, name)
            hexfile = golden_quick / m["hex"][name]
            assert len(hexfile.read_text().splitlines()) == arr.size
        svh = (golden_quick / plain.params_name(case.name, "svh")).read_text()
        for key, value in p.items():
            assert f"localparam longint GB_{key.upper()} = {value};\n" in svh
    for case in load_exchange(golden_quick):
        p = params_of(golden_quick, case.name)
        err = case.meta["error"]
        assert p["error"] == int(err is not None)
        assert p["words_frames"] == sum(case.meta["frame_words"])
        assert [p[f"frame_words_{w}"] for w in range(p["n_workers"])] == case.meta["frame_words"]
    listed = [line.split() for line in (golden_quick / plain.CASE_LIST).read_text().splitlines()]
    assert listed == ([[c["name"], "compress"] for c in manifest["cases"]]
                      + [[c["name"], "exchange"] for c in manifest["exchange"]])


@pytest.mark.sim
def test_params_svh_compiles(golden_quick, tmp_path):
    """A case's params.svh included in a module: Icarus elaborates it and every localparam has
    its params.txt value (a negative k_shift and a 32-bit unsigned M included)."""
    if simulator_available("icarus"):
        pytest.skip("iverilog unavailable")
    case = next(c["name"] for c in read_manifest(golden_quick)["cases"] if c["k_shift"] < 0)
    pairs = params_of(golden_quick, case)
    top = tmp_path / "svh_top.sv"
    top.write_text("module svh_top;\n"
                   f'`include "{golden_quick / plain.params_name(case, "svh")}"\n'
                   "initial begin\n"
                   + "".join(f'  $display("{k} %0d", GB_{k.upper()});\n' for k in pairs)
                   + "end\nendmodule\n")
    exe = tmp_path / "svh.vvp"
    subprocess.run(["iverilog", "-g2012", "-o", str(exe), str(top)], check=True, timeout=120)
    out = subprocess.run(["vvp", "-n", str(exe)], capture_output=True, text=True, timeout=120)
    got = {k: int(v) for k, v in (line.split() for line in out.stdout.splitlines()
                                  if len(line.split()) == 2)}
    assert got == pairs, out.stdout[-2000:]
    assert pairs["k_shift"] < 0 and pairs["m"] >= 2**31


def test_error_and_norm_codes_are_the_rtls(golden_quick):
    """The numbers a bench compares with are gradblock_pkg's: FRAME_ERR_* for a bad frame,
    AGG_ERR_* for the cross-worker checks, NORM_* for the norm; every hostile exchange case of
    the quick set has its code."""
    frame = codes("FRAME_ERR_")
    assert {k: v for k, v in plain.FRAME_ERROR_CODES.items()} == frame
    agg = codes("AGG_ERR_")
    assert plain.CROSS_WORKER_CODES == {k: agg[k] for k in plain.CROSS_WORKER_CODES}
    pkg = package_constants()
    assert plain.NORM_CODES == {"l1": pkg["NORM_L1"], "l2": pkg["NORM_L2"]}
    seen = set()
    for case in load_exchange(golden_quick):
        err, p = case.meta["error"], params_of(golden_quick, case.name)
        if err is None:
            assert (p["error_code"], p["error_frame_code"], p["error_worker"]) == (0, 0, -1)
            continue
        want = agg[err["name"]] if err["name"] in agg else frame[err["name"]]
        assert p["error_code"] == want, case.name
        assert p["error_frame_code"] == frame.get(err["name"], 0)
        assert (p["error_worker"], p["error_word"]) == (err["worker"], err["word"])
        seen.add(err["name"])
    assert {"CRC_MISMATCH", "RANGE_MISMATCH"} <= seen, seen


def test_check_catches_an_edited_params_file(golden_quick, tmp_path):
    d = tmp_path / "g"
    shutil.copytree(golden_quick, d)
    assert all(r.ok for r in check_golden(d))
    victim = d / plain.params_name("tie_break_k1")
    victim.write_text(victim.read_text().replace("k_eff 1\n", "k_eff 2\n"))
    bad = {r.name: r.problems for r in check_golden(d) if not r.ok}
    assert list(bad) == ["tie_break_k1"], bad
    assert any("params.txt" in p for p in bad["tie_break_k1"])
    (d / plain.CASE_LIST).write_text("tie_break_k1 compress\n")
    assert any(r.name == plain.CASE_LIST and not r.ok for r in check_golden(d))


def test_regeneration_owns_the_case_list(golden_quick, tmp_path):
    """write_golden replaces its own cases.txt and params files, and refuses to overwrite a
    cases.txt it did not write."""
    cases = [(dict({k: v for k, v in c.meta.items() if k not in ("npz", "hex", "sha256")}),
              c.arrays) for c in load_golden(golden_quick)[:3]]
    fields = {"generator": "gradblock test"}
    target = tmp_path / "g"
    write_golden(target, fields, cases)
    write_golden(target, fields, cases[:2])          # its own files: replaced
    assert len((target / plain.CASE_LIST).read_text().splitlines()) == 2
    assert not (target / cases[2][0]["name"]).exists()
    foreign = tmp_path / "f"
    foreign.mkdir()
    (foreign / plain.CASE_LIST).write_text("mine\n")
    with pytest.raises(GradblockError, match="cases.txt"):
        write_golden(foreign, fields, cases)
    assert (foreign / plain.CASE_LIST).read_text() == "mine\n"


def test_directories_without_params_files_still_load(golden_quick, tmp_path):
    """A golden directory written before the params files (no "files", no params in sha256)
    loads and checks as before."""
    d = tmp_path / "old"
    shutil.copytree(golden_quick, d)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest.pop("files")
    for entry in manifest["cases"] + manifest["exchange"]:
        for ext in ("txt", "svh"):
            entry["sha256"].pop(plain.params_name(entry["name"], ext))
            (d / plain.params_name(entry["name"], ext)).unlink()
    (d / plain.CASE_LIST).unlink()
    (d / "manifest.json").write_text(json.dumps(manifest))
    assert all(r.ok for r in check_golden(d))


# ------------------------------------------------------------------ the benches
def expected_counts(golden_dir, bench: str) -> tuple[int, int]:
    """(cases the bench must check, cases it must see refused) from the manifest and the
    bench's build (compress_top's reference build, the DUT table's)."""
    cases = read_manifest(golden_dir)["cases"]
    if bench == "tb_quantiser_golden":
        return sum("quantiser" in c["stages"] for c in cases), 0
    ref = DUTS["compress_top"].parameters
    top = [c for c in cases if "top" in c["stages"]]
    refused = [c for c in top if c["n"] > ref["N_MAX"] or c["k_eff"] > ref["K_MAX"]
               or c["lmax_log2"] > ref["LMAX_LOG2_MAX"]]
    return len(top) - len(refused), len(refused)


# the planted error: (bench, array file to change, what the bench must say)
PLANTS = {"tb_quantiser_golden": ("quantised", "quantised word"),
          "tb_compress_top_golden": ("frame", "frame word")}


@pytest.fixture(scope="module")
def planted(golden_quick, tmp_path_factory):
    """A copy of the quick set with one word changed in each bench's expected array, in the
    first case each bench checks: {bench: (directory, case, word index)}."""
    out = {}
    for bench, (array, _) in PLANTS.items():
        d = tmp_path_factory.mktemp("planted") / bench
        shutil.copytree(golden_quick, d)
        stage = "quantiser" if bench == "tb_quantiser_golden" else "top"
        case = next(c for c in read_manifest(d)["cases"] if stage in c["stages"]
                    and c["n"] > 8 and c["k_eff"] is not None and c["k_eff"] <= 32)
        path = d / case["hex"][array]
        lines = path.read_text().splitlines()
        word = 5
        lines[word] = f"{int(lines[word], 16) ^ 0x00010000:08x}"
        path.write_text("\n".join(lines) + "\n")
        out[bench] = (d, case["name"], word)
    return out


@pytest.mark.parametrize("bench", sorted(plain_bench.BENCHES))
def test_plain_bench_lint_clean(bench):
    """Each bench with its DUT: verilator --lint-only -Wall --timing, no message."""
    if simulator_available("verilator"):
        pytest.skip("verilator unavailable")
    cmd = ["verilator", "--lint-only", "-Wall", "--timing", f"-I{plain_bench.BENCH_DIR}",
           "--top-module", bench, *map(str, plain_bench.sources(bench))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    messages = [s for s in (proc.stdout + proc.stderr).splitlines() if s.startswith("%")]
    assert proc.returncode == 0 and not messages, "\n".join(messages)


@pytest.mark.sim
@pytest.mark.parametrize("sim", ["icarus", "verilator"])
@pytest.mark.parametrize("bench", sorted(plain_bench.BENCHES))
def test_plain_bench(bench, sim, golden_quick, planted, tmp_path):
    reason = simulator_available(sim)
    if reason:
        pytest.skip(f"{sim} unavailable: {reason}")
    parameters = dict(DUTS["compress_top"].parameters) if bench == "tb_compress_top_golden" \
        else {}
    exe = plain_bench.build(bench, sim, tmp_path, parameters)
    good = plain_bench.run(exe, golden_quick)
    assert good.passed, good.output[-3000:]
    assert (good.cases, good.refused) == expected_counts(golden_quick, bench), good.output[-2000:]
    directory, case, word = planted[bench]
    bad = plain_bench.run(exe, directory)
    assert bad.returncode != 0 and not bad.passed, bad.output[-2000:]
    assert "GOLDEN-BENCH FAIL" in bad.output
    what = PLANTS[bench][1]
    assert bad.mismatches() and all(m.startswith(f"case {case}: {what} {word}:")
                                    for m in bad.mismatches()), bad.mismatches()


@pytest.mark.sim
@pytest.mark.parametrize("bench", sorted(plain_bench.BENCHES))
def test_plain_bench_empty_layer(bench, tmp_path):
    """n = 0: every array an empty file with a word count of 0, the frame 7 words; each bench
    reads nothing for the empty arrays and passes the case (Icarus)."""
    from gradblock.golden.datapath import make_case
    if simulator_available("icarus"):
        pytest.skip("iverilog unavailable")
    meta, arrays = make_case("empty_layer", np.zeros(0, np.float32), block_size=4,
                             description="n = 0")
    d = tmp_path / "g"
    write_golden(d, {"generator": "gradblock test"}, [(meta, arrays)])
    p = params_of(d, "empty_layer")
    assert (p["n"], p["words_grad_bits"], p["words_frame"]) == (0, 0, 7)
    assert (d / "empty_layer" / "grad_bits.hex").read_bytes() == b""
    parameters = dict(DUTS["compress_top"].parameters) if bench == "tb_compress_top_golden" \
        else {}
    res = plain_bench.run(plain_bench.build(bench, "icarus", tmp_path / "b", parameters), d)
    assert res.passed and res.cases == 1, res.output[-2000:]
