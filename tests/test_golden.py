"""Golden vectors: the quick set generated through the CLI, its manifest schema, hex files,
check_golden against the numpy reference, and tampering that check_golden must catch."""
from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from gradblock.codec import zrle
from gradblock.codec.fileio import ForeignFileError, OutputError, claimed
from gradblock import cli
from gradblock.golden import cases as golden_cases
from gradblock.golden import check as golden_check
from gradblock.golden import compute as golden_compute
from gradblock import golden_cli
from gradblock.golden import format as GF
from gradblock.refmodel.quantiser import QMAX


def needs_torch():
    pytest.importorskip("torch", reason="the real-gradient cases train a model with torch")

REQUIRED_SYNTHETIC = ("tie_break_k1", "tie_break_k4", "tie_all_equal", "quant_saturation_inf",
                      "feedback_saturation", "all_zero", "one_element", "lmax2_runs",
                      "lmax3_runs", "lmax8_runs", "special_floats", "short_last_block",
                      "k_fraction", "range_1", "range_0p01", "range_pow2", "nan_quantiser_only",
                      "multistep_s0", "multistep_s1")


@pytest.fixture(scope="module")
def quick_dir(tmp_path_factory):
    needs_torch()
    out = tmp_path_factory.mktemp("golden") / "quick"
    rc = cli.main(["golden", str(out), "--quick", "--seed", "0"])
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def manifest(quick_dir):
    return json.loads((quick_dir / GF.MANIFEST).read_text())


@pytest.fixture(scope="module")
def cases(quick_dir):
    return {c.name: c for c in GF.load_golden(quick_dir)}


def copy_of(quick_dir, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(quick_dir, dst)
    return dst


def test_manifest_schema(manifest):
    assert manifest["format"] == "gradblock-golden" and manifest["version"] == 1
    assert isinstance(manifest["generator"], str) and manifest["quick"] is True
    names = [c["name"] for c in manifest["cases"]]
    assert len(names) == len(set(names))
    assert set(REQUIRED_SYNTHETIC) <= set(names)
    for c in manifest["cases"]:
        assert set(GF.META_KEYS) <= set(c), c["name"]
        assert c["kind"] in ("synthetic", "real")
        assert c["stages"] and set(c["stages"]) <= set(GF.STAGES)
        assert c["n"] == math.prod(c["shape"])
        assert c["n_blocks"] == -(-c["n"] // c["block_size"])
        assert 2**31 <= c["M"] < 2**32
        assert np.float32(c["range"]).view(np.uint32) == c["range_bits"]
        assert c["npz"] == f"{c['name']}.npz"
        assert c["hex"] == {a: f"{c['name']}/{a}.hex" for a in GF.arrays_for(c["stages"])}
        if c["stages"] == ["quantiser"]:
            assert c["k_eff"] is None and c["frame_words"] is None
        elif "momentum" in c["stages"]:
            assert c["stages"] == ["momentum", "norms", "select", "encode", "decode"]
            assert 0 <= c["m_fix"] < 2**16 and isinstance(c["masked"], bool)
            assert 1 <= c["k_eff"] <= c["n_blocks"]
        else:
            assert c["stages"] == list(GF.ALL_STAGES)
            assert 1 <= c["k_eff"] <= c["n_blocks"]
    assert manifest["cases"][0]["M"] == 3435973836 and manifest["cases"][0]["k_shift"] == 4


def test_array_shapes_and_dtypes(cases):
    for name, case in cases.items():
        m, a = case.meta, case.arrays
        assert sorted(a) == sorted(GF.arrays_for(m["stages"])), name
        for key, arr in a.items():
            assert arr.dtype == GF.ARRAY_DTYPES[key] and arr.ndim == 1, (name, key)
        sizes = {"block_norms": m["n_blocks"], "selected": m["k_eff"], "frame": m["frame_words"]}
        for key, arr in a.items():
            assert arr.size == sizes.get(key, m["n"]), (name, key)
        assert int(a["quant_sat"].sum()) == m["sat_quant"]
        if "feedback_sat" in a:
            assert int(a["feedback_sat"].sum()) == m["sat_feedback"]
        if "momentum_sat" in a:
            assert int(a["momentum_sat"].sum()) == m["sat_momentum"]


def test_momentum_cases_are_what_they_claim(cases):
    """Velocity arrays and the m configuration (docs/spec.md §7): carried steps, saturation,
    masking off, a layer sent whole, m = 0."""
    mom = {n: c for n, c in cases.items() if "momentum" in c.meta["stages"]}
    assert {"momentum_multistep_s3", "momentum_saturation", "momentum_half_way",
            "momentum_unmasked", "momentum_whole_layer", "momentum_m_zero"} <= set(mom)
    for s in (1, 2, 3):
        a, prev = mom[f"momentum_multistep_s{s}"].arrays, mom[f"momentum_multistep_s{s - 1}"].arrays
        assert np.array_equal(a["velocity_in"], prev["velocity_out"])
        assert np.array_equal(a["residual_in"], prev["residual_out"])
    sat = mom["momentum_saturation"].meta
    assert sat["sat_momentum"] > 0 and sat["sat_feedback"] > 0 and sat["m_fix"] == 65535
    un, whole = mom["momentum_unmasked"], mom["momentum_whole_layer"]
    assert not un.meta["masked"] and np.array_equal(un.arrays["velocity_out"],
                                                    un.arrays["velocity"])
    assert not whole.meta["masked"] and whole.meta["k_eff"] == whole.meta["n_blocks"]
    m0 = mom["momentum_m_zero"].arrays
    assert np.array_equal(m0["velocity"], m0["quantised"])
    ms = mom["momentum_multistep_s2"]
    sent = np.zeros(ms.meta["n_blocks"], bool)
    sent[ms.arrays["selected"]] = True
    sent = np.repeat(sent, ms.meta["block_size"])[:ms.meta["n"]]
    assert ms.meta["masked"] and not ms.arrays["velocity_out"][sent].any()
    assert np.array_equal(ms.arrays["velocity_out"][~sent], ms.arrays["velocity"][~sent])


def test_hex_files_parse_back_to_the_npz(quick_dir, cases):
    for name, case in cases.items():
        for key, rel in case.meta["hex"].items():
            digits = 16 if key == "block_norms" else 8
            words = GF.read_hex(quick_dir / rel, digits)
            arr = case.arrays[key]
            if arr.dtype == np.int32:
                arr = arr.view(np.uint32)
            assert words == arr.astype(np.uint64).tolist(), (name, key)


def test_check_golden_passes(quick_dir):
    results = golden_check.check_golden(quick_dir)
    assert results and all(r.ok for r in results), [r for r in results if not r.ok]


def test_cases_are_what_they_claim(cases):
    assert cases["tie_break_k1"].arrays["selected"].tolist() == [5]
    assert cases["tie_break_k4"].arrays["selected"].tolist() == [3, 9, 1, 20]
    norms = cases["tie_break_k4"].arrays["block_norms"]
    assert norms[3] == norms[9] and norms[1] == norms[20] == norms[33] < norms[3]
    assert cases["k_fraction_float_product"].meta["k_eff"] == 8
    short = cases["short_last_block"]
    assert short.meta["n_blocks"] == 15 and short.arrays["selected"][0] == 14

    sat = cases["quant_saturation_inf"]
    bits = sat.arrays["grad_bits"]
    assert sat.meta["sat_quant"] > 0
    for b in (0x7F800000, 0xFF800000):              # ±Inf present, saturated, clamped
        i = int(np.flatnonzero(bits == b)[0])
        assert sat.arrays["quant_sat"][i] == 1 and abs(int(sat.arrays["quantised"][i])) == QMAX
    i = int(np.flatnonzero(bits == 0x41200000)[0])     # x = R: not counted, code QMAX
    assert sat.arrays["quant_sat"][i] == 0 and sat.arrays["quantised"][i] == QMAX

    fb = cases["feedback_saturation"].arrays
    acc = fb["accumulated"][fb["feedback_sat"] == 1]
    assert (acc == QMAX).any() and (acc == -QMAX).any()

    special = cases["special_floats"].arrays
    code = dict(zip(special["grad_bits"].tolist(), special["quantised"].tolist()))
    assert code[0x3A83126F] == 0x000346DC and code[0x40A00000] == 0x40000000
    assert code[0x40000000] == 429496730 and code[0x40C00000] == 1288490188   # 2.0, 6.0 ties
    assert code[0x00000001] == 0 and code[0x80000000] == 0

    nan = cases["nan_quantiser_only"]
    assert nan.meta["stages"] == ["quantiser"] and int(nan.arrays["quant_nan"].sum()) == 5
    flagged = nan.arrays["quant_nan"] == 1
    assert (nan.arrays["quantised"][flagged] == 0).all()
    assert (nan.arrays["quant_sat"][flagged] == 0).all()
    assert nan.arrays["quant_sat"][[5, 6, 7]].tolist() == [1, 1, 1]      # ±Inf and 12.0

    assert cases["all_zero"].arrays["frame"].size == 9
    np.testing.assert_array_equal(cases["multistep_s1"].arrays["residual_in"],
                                  cases["multistep_s0"].arrays["residual_out"])
    assert cases["multistep_s2"].meta["residual_from"] == "multistep_s1"


@pytest.mark.parametrize("name,lmax", [("lmax2_runs", 4), ("lmax3_runs", 8), ("lmax8_runs", 256)])
def test_literal_run_cases_hit_lmax(cases, name, lmax):
    frame = cases[name].arrays["frame"]
    z_l, pos = [], zrle.HEADER_WORDS
    for _ in range(int(frame[-2])):
        z_l.append((int(frame[pos]), int(frame[pos + 1])))
        pos += 2 + z_l[-1][1]
    assert (0, 1) in z_l or any(z == 0 and 0 < L < lmax for z, L in z_l[1:])   # LMAX + 1 split
    assert any(L == lmax for _, L in z_l)
    assert z_l[0][0] == 0                                  # starts with a nonzero run


def test_real_cases(cases):
    real = {n: c for n, c in cases.items() if c.meta["kind"] == "real"}
    assert len(real) >= 2
    shapes = {tuple(c.meta["shape"]) for c in real.values()}
    assert (16, 8, 3, 3) in shapes and any(len(s) == 1 for s in shapes)
    linked = [c for c in real.values() if c.meta.get("residual_from")]
    assert linked
    for c in linked:
        np.testing.assert_array_equal(c.arrays["residual_in"],
                                      cases[c.meta["residual_from"]].arrays["residual_out"])
        assert c.arrays["residual_in"].any()       # a carried residual, not zeros
    for c in real.values():
        assert c.meta["source"]["model"] == "conv64" and np.isfinite(
            c.arrays["grad_bits"].view(np.float32)).all()


# ------------------------------------------------------------------------------ tampering


def _rewrite_npz(path, key, fn):
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays[key] = fn(arrays[key].copy())
    np.savez(path, **arrays)


def _failures(golden_dir):
    return {r.name: r.problems for r in golden_check.check_golden(golden_dir) if not r.ok}


def test_tampered_array_fails(quick_dir, tmp_path):
    d = copy_of(quick_dir, tmp_path)

    def flip(a):
        a[7] ^= 1
        return a
    _rewrite_npz(d / "random_conv.npz", "payload", flip)
    bad = _failures(d)
    assert list(bad) == ["random_conv"]
    assert any(p.startswith("payload: 1 element(s) differ, first at 7") for p in bad["random_conv"])
    assert any("frame does not decode to exactly the payload" in p for p in bad["random_conv"])
    assert any("payload.hex: differs from the npz" in p for p in bad["random_conv"])
    assert cli.main(["golden", str(d), "--check"]) == 1


def test_tampered_hex_manifest_and_chain_fail(quick_dir, tmp_path):
    d = copy_of(quick_dir, tmp_path)
    hexfile = d / "tie_break_k1" / "block_norms.hex"
    lines = hexfile.read_text().splitlines()
    lines[3] = lines[3][:-1] + ("0" if lines[3][-1] != "0" else "1")
    hexfile.write_text("\n".join(lines) + "\n")
    m = json.loads((d / GF.MANIFEST).read_text())
    entry = next(c for c in m["cases"] if c["name"] == "k_fraction")
    entry["k_eff"] += 1
    (d / GF.MANIFEST).write_text(json.dumps(m))

    def bump(a):
        a[0] += 1
        return a
    _rewrite_npz(d / "multistep_s1.npz", "residual_in", bump)
    bad = _failures(d)
    assert set(bad) == {"tie_break_k1", "k_fraction", "multistep_s1"}
    assert bad["tie_break_k1"] == ["tie_break_k1/block_norms.hex: differs from the npz at line 4 "
                                   "(64 lines, expected 64)",
                                   "tie_break_k1/block_norms.hex: changed since gradblock wrote it "
                                   "(sha256 differs)"]
    assert "manifest k_eff = 5, reference 4" in bad["k_fraction"]
    assert any("residual_in differs from multistep_s0" in p for p in bad["multistep_s1"])


def test_load_golden_errors(tmp_path):
    with pytest.raises(GF.GoldenError, match="no such directory"):
        GF.load_golden(tmp_path / "nope")
    with pytest.raises(GF.GoldenError, match="manifest.json: missing"):
        GF.load_golden(tmp_path)
    (tmp_path / GF.MANIFEST).write_text('{"format": "other", "version": 1, "cases": []}')
    with pytest.raises(GF.GoldenError, match="format is not 'gradblock-golden'"):
        GF.load_golden(tmp_path)
    (tmp_path / GF.MANIFEST).write_text('{"format": "gradblock-golden", "version": 2, "cases": []}')
    with pytest.raises(GF.GoldenError, match="version 2"):
        GF.load_golden(tmp_path)
    (tmp_path / GF.MANIFEST).write_text(
        '{"format": "gradblock-golden", "version": 1, "cases": [{"name": "x", "npz": "x.npz"}]}')
    with pytest.raises(GF.GoldenError, match=r"cases\[0\] \(x\)\.kind is missing"):
        GF.load_golden(tmp_path)
    assert cli.main(["golden", str(tmp_path), "--check"]) == 2


def test_read_hex_is_strict(tmp_path):
    f = tmp_path / "a.hex"
    f.write_text("0000000a\n0000000B\n")
    with pytest.raises(GF.GoldenError, match=r"a.hex:2: '0000000B' is not 8 lowercase hex digits"):
        GF.read_hex(f, 8)
    f.write_text("000a\n")
    with pytest.raises(GF.GoldenError, match="is not 8"):
        GF.read_hex(f, 8)


def test_hex_text_formats():
    assert GF.hex_text(np.array([-1, 5], np.int32), 8) == "ffffffff\n00000005\n"
    assert GF.hex_text(np.array([2**40], np.uint64), 16) == "0000010000000000\n"
    assert GF.hex_text(np.array([3], np.int64), 8) == "00000003\n"
    with pytest.raises(ValueError, match="8 hex digits"):
        GF.hex_text(np.array([2**32], np.int64), 8)


def test_synthetic_specs_are_seeded():
    a, b, c = golden_cases.synthetic_specs(0), golden_cases.synthetic_specs(0), golden_cases.synthetic_specs(1)
    assert [s.name for s in a] == [s.name for s in c]
    def same(x, y):
        return np.array_equal(x.grad_f32().view(np.uint32), y.grad_f32().view(np.uint32)) and \
            np.array_equal(x.residual, y.residual)
    assert all(same(x, y) for x, y in zip(a, b))
    assert not all(same(x, y) for x, y in zip(a, c))


def test_regenerating_replaces_only_its_own_files(quick_dir, tmp_path):
    """Regeneration deletes a listed case's files only while they hold the bytes gradblock
    wrote (sha256 in the manifest); a changed file and unlisted files stay."""
    d = copy_of(quick_dir, tmp_path)
    m = json.loads((d / GF.MANIFEST).read_text())
    src = m["cases"][0]
    for stale in ("stale_ours", "stale_edited"):   # copies of a real case under a new name
        shutil.copy(d / src["npz"], d / f"{stale}.npz")
        shutil.copytree(d / src["name"], d / stale)
        m["cases"].append({**src, "name": stale, "npz": f"{stale}.npz",
                           "hex": {k: f"{stale}/{k}.hex" for k in src["hex"]},
                           "sha256": {rel.replace(src["name"], stale, 1): h
                                      for rel, h in src["sha256"].items()}})
    (d / GF.MANIFEST).write_text(json.dumps(m))
    (d / "stale_edited.npz").write_bytes(b"the user's own bytes")
    (d / "stale_edited" / "notes.txt").write_text("keep me too")
    (d / "unrelated.txt").write_text("keep me")
    golden_cli.generate(d, quick=True, progress=False)
    assert not (d / "stale_ours.npz").exists() and not (d / "stale_ours").exists()
    assert (d / "stale_edited.npz").read_bytes() == b"the user's own bytes"
    assert (d / "stale_edited" / "notes.txt").read_text() == "keep me too"
    assert (d / "unrelated.txt").read_text() == "keep me"
    assert all(r.ok for r in golden_check.check_golden(d))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # staging cleaned up


@pytest.mark.slow
def test_full_set_has_real_sized_layers(tmp_path):
    manifest = golden_cli.generate(tmp_path, quick=False, progress=False)
    real = [c for c in manifest["cases"] if c["kind"] == "real"]
    shapes = {tuple(c["shape"]) for c in real}
    assert (64, 64, 3, 3) in shapes and (16, 8, 3, 3) in shapes and (10, 64) in shapes
    assert all(r.ok for r in golden_check.check_golden(tmp_path))


@pytest.mark.slow
def test_fashion_mnist_real_source():
    from gradblock.shim.setup.data import FASHION_MNIST_DIR
    if not FASHION_MNIST_DIR.is_dir():
        pytest.skip(f"Fashion-MNIST not installed at {FASHION_MNIST_DIR}")
    from gradblock.refmodel.compress import compress_layer
    from gradblock.realgrads import real_specs
    specs, info = real_specs("fashion-mnist", 0, True, compress_layer)
    # four captured layer steps, and the last step's layers again ranked by the L2 norm
    assert info["dataset"] == "fashion-mnist" and len(specs) == 6
    assert [s.norm for s in specs].count("l2") == 2
    for spec in specs:
        meta, arrays = golden_compute.compute_case(spec, compress_layer)
        assert meta["kind"] == "real" and arrays["grad_bits"].size == meta["n"]


def test_malformed_manifest_entry_is_a_named_error(quick_dir, tmp_path, capsys):
    d = copy_of(quick_dir, tmp_path)
    m = json.loads((d / GF.MANIFEST).read_text())
    m["cases"][1]["shape"] = "48x12"
    (d / GF.MANIFEST).write_text(json.dumps(m))
    assert cli.main(["golden", str(d), "--check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cases[1] (tie_break_k4).shape = '48x12'" in err


# ------------------------------------------------------------------------------ hostile manifests
# A valid base directory without torch: the datapath corner cases (same format, same writer).

def _verify_sim():
    """A simulator `gradblock verify` accepts here, or None (verify's part is then skipped)."""
    try:
        from gradblock.sim.verify import SIMULATORS, simulator_available
    except ImportError:
        return None
    return next((s for s in SIMULATORS if not simulator_available(s)), None)


VERIFY_SIM = _verify_sim()


@pytest.fixture
def edge_dir(tmp_path):
    from gradblock.golden.datapath import write_cases
    d = tmp_path / "g"
    write_cases(d, "edge")
    return d


def _edit_manifest(d, fn):
    m = json.loads((d / GF.MANIFEST).read_text())
    fn(m)
    (d / GF.MANIFEST).write_text(json.dumps(m))


def _assert_named_refusal(d, capsys, field):
    """`golden --check` and `verify --vectors` both end in one line naming `field`, exit 2."""
    capsys.readouterr()
    assert cli.main(["golden", str(d), "--check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gradblock golden: ") and err.count("\n") == 1 and field in err, err
    if VERIFY_SIM is not None:
        assert cli.main(["verify", "--sim", VERIFY_SIM, "--vectors", str(d)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("gradblock verify: ") and err.count("\n") == 1 and field in err, err


def _nested(depth):
    v = 1
    for _ in range(depth):
        v = {"x": v}
    return v


HOSTILE_ENTRIES = {
    "npz_parent": (lambda c: c.update(npz="../x.npz"), ".npz = '../x.npz'"),
    "npz_absolute": (lambda c: c.update(npz="/etc/passwd"), ".npz = '/etc/passwd'"),
    "npz_int": (lambda c: c.update(npz=5), ".npz = 5"),
    "hex_dev_zero": (lambda c: c["hex"].update(grad_bits="/dev/zero"), ".hex = "),
    "range_bits_negative": (lambda c: c.update(range_bits=-1), ".range_bits = -1: outside"),
    "range_bits_float": (lambda c: c.update(range_bits=1.5), ".range_bits = 1.5: not an integer"),
    "shape_2_70": (lambda c: c.update(shape=[2**70]), ".shape = [1180591620717411303424]"),
    "shape_product": (lambda c: c.update(shape=[2**20, 2**20]), "more than the limit"),
    "n_mismatch": (lambda c: c.update(n=c["n"] + 1), ".n = "),
    "name_list": (lambda c: c.update(name=["a"]), "cases[0].name is list"),
    "name_traversal": (lambda c: c.update(name="../evil"), "is not a plain file name"),
    "name_separator": (lambda c: c.update(name="a/b"), "is not a plain file name"),
    "k_req_string": (lambda c: c.update(k_req="2"), ".k_req = '2': not a finite number"),
    "lmax_zero": (lambda c: c.update(lmax_log2=0), ".lmax_log2 = 0: outside 1..24"),
    "stages_unknown": (lambda c: c.update(stages=["quantiser", "warp"]), ".stages = "),
    "block_size_bool": (lambda c: c.update(block_size=True), ".block_size = True"),
    "missing_field": (lambda c: c.pop("frame_words"), ".frame_words is missing"),
    "deep_source": (lambda c: c.update(source=_nested(40)), "nested deeper than 8 levels"),
    "residual_from_path": (lambda c: c.update(residual_from="/tmp/x"), "residual_from"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_ENTRIES))
def test_hostile_manifest_entry_is_a_named_error(edge_dir, capsys, case):
    edit, field = HOSTILE_ENTRIES[case]
    _edit_manifest(edge_dir, lambda m: edit(m["cases"][0]))
    _assert_named_refusal(edge_dir, capsys, field)


@pytest.mark.parametrize("text,field", [
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 8 levels"),
    ('{"format": "gradblock-golden", "version": 1, "cases": {"a": 1}}', "'cases' is not a list"),
    ('{"format": "gradblock-golden", "version": true, "cases": []}', "version True"),
    ("[1, 2", "not readable JSON"),
    ('{"format": "gradblock-golden", "version": 1, "cases": [3]}', "cases[0] is int"),
])
def test_hostile_manifest_text_is_a_named_error(edge_dir, capsys, text, field):
    (edge_dir / GF.MANIFEST).write_text(text)
    _assert_named_refusal(edge_dir, capsys, field)


def test_symlink_leaving_the_directory_is_refused(edge_dir, tmp_path, capsys):
    outside = tmp_path / "outside.npz"
    shutil.copy(edge_dir / "dp_single.npz", outside)
    (edge_dir / "dp_single.npz").unlink()
    (edge_dir / "dp_single.npz").symlink_to(outside)
    _assert_named_refusal(edge_dir, capsys, "resolves outside the directory")
    (edge_dir / "dp_single.npz").unlink()
    (edge_dir / "dp_single.npz").symlink_to("/dev/zero")
    _assert_named_refusal(edge_dir, capsys, "resolves outside the directory")


def test_a_symlink_inside_the_directory_is_followed(edge_dir):
    (edge_dir / "dp_single.npz").rename(edge_dir / "real.bin")
    (edge_dir / "dp_single.npz").symlink_to("real.bin")
    assert all(r.ok for r in golden_check.check_golden(edge_dir))


@pytest.mark.parametrize("which", ["dp_single.npz", "dp_single/frame.hex", GF.MANIFEST])
def test_fifo_is_refused_without_hanging(edge_dir, which):
    """A FIFO where a case file or the manifest should be: refused at once (a blocking open
    would wait forever for a writer). A child process, so a regression fails, not hangs."""
    import os
    import subprocess
    import sys
    (edge_dir / which).unlink()
    os.mkfifo(edge_dir / which)
    proc = subprocess.run([sys.executable, "-m", "gradblock.cli", "golden", str(edge_dir),
                           "--check"], capture_output=True, text=True, timeout=120)
    if which.endswith(".hex"):      # the hex files are read by the check: a per-case problem
        assert proc.returncode == 1 and "frame.hex: not a regular file" in proc.stdout
    else:
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1
        assert "not a regular file" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_npz_header_claiming_2_34_elements_allocates_nothing(edge_dir, capsys):
    """A member header claiming 2^34 floats is refused from the header, before any read."""
    import io
    import zipfile
    path = edge_dir / "dp_single.npz"
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<u4", "fortran_order": False,
                                               "shape": (2**34,)})
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("grad_bits.npy", buf.getvalue() + b"\0" * 64)
        for k, a in arrays.items():
            if k != "grad_bits":
                b = io.BytesIO()
                np.save(b, a)
                zf.writestr(f"{k}.npy", b.getvalue())
    _assert_named_refusal(edge_dir, capsys, "grad_bits is uint32 (17179869184,), expected 1-D "
                                            "uint32 of 1 elements")


def test_npz_member_with_pickled_objects_is_refused(edge_dir, capsys):
    path = edge_dir / "dp_single.npz"
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["frame"] = np.array([object()] * arrays["frame"].size, dtype=object)
    np.savez(path, **arrays)
    _assert_named_refusal(edge_dir, capsys, "frame is object")


# ------------------------------------------------------------------------------ regeneration

def test_regeneration_refuses_to_overwrite_a_user_file(tmp_path):
    from gradblock.golden.datapath import write_cases
    d = tmp_path / "g"
    d.mkdir()
    (d / "dp_single.npz").write_bytes(b"mine")
    (d / "notes.txt").write_text("mine too")
    with pytest.raises(ForeignFileError, match="dp_single.npz: exists and was not written by "
                                             "gradblock"):
        write_cases(d, "edge")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]          # no staging left
    assert sorted(p.name for p in d.iterdir()) == ["dp_single.npz", "notes.txt"]
    assert (d / "dp_single.npz").read_bytes() == b"mine"


def test_regeneration_refuses_a_foreign_manifest(edge_dir):
    from gradblock.golden.datapath import write_cases
    _edit_manifest(edge_dir, lambda m: m.update(generator="someone else's tool"))
    before = {p: p.read_bytes() for p in edge_dir.rglob("*") if p.is_file()}
    with pytest.raises(ForeignFileError, match="exists and was not written by gradblock"):
        write_cases(edge_dir, "edge")
    assert {p: p.read_bytes() for p in edge_dir.rglob("*") if p.is_file()} == before


def test_regeneration_keeps_user_files_and_drops_its_own_stale_cases(edge_dir):
    from gradblock.golden.datapath import write_cases
    (edge_dir / "notes.txt").write_text("mine")
    (edge_dir / "dp_nan" / "mine.txt").write_text("mine")
    names = write_cases(edge_dir, "sweep")       # another kind: every old case is stale
    assert (edge_dir / "notes.txt").read_text() == "mine"
    assert (edge_dir / "dp_nan" / "mine.txt").read_text() == "mine"
    assert not (edge_dir / "dp_nan.npz").exists()
    assert not list((edge_dir / "dp_nan").glob("*.hex"))
    assert not (edge_dir / "dp_single").exists()
    assert [c.name for c in GF.load_golden(edge_dir)] == names
    assert all(r.ok for r in golden_check.check_golden(edge_dir))


def test_golden_cli_refusal_is_one_line_exit_2(tmp_path, capsys):
    needs_torch()
    d = tmp_path / "g"
    d.mkdir()
    (d / "tie_break_k1.npz").write_bytes(b"mine")
    assert cli.main(["golden", str(d), "--quick"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("gradblock golden: ") and "not written by gradblock" in err[-1]
    assert (d / "tie_break_k1.npz").read_bytes() == b"mine" and len(list(d.iterdir())) == 1


def test_datapath_vectors_pass_check_golden(tmp_path):
    from gradblock.golden.datapath import write_cases
    for kind in ("edge", "sweep"):
        names = write_cases(tmp_path / kind, kind)
        results = golden_check.check_golden(tmp_path / kind)
        assert [r.name for r in results] == names and all(r.ok for r in results), results


# ------------------------------------------------------------------------------ demo --out

def test_demo_never_takes_over_an_existing_directory(tmp_path, monkeypatch):
    from gradblock.demo import output_dir
    user = tmp_path / "user"
    user.mkdir()
    (user / "thesis.tex").write_text("mine")
    first = output_dir(user)
    assert first == user / "gradblock-demo-1" and claimed(first)
    assert output_dir(user) == user / "gradblock-demo-2"
    assert output_dir(first) == first                       # made by the demo: reused
    fresh = output_dir(tmp_path / "new" / "out")
    assert fresh == tmp_path / "new" / "out" and claimed(fresh)
    monkeypatch.setenv("HOME", str(user))
    assert output_dir("~") == user / "gradblock-demo-3"
    assert (user / "thesis.tex").read_text() == "mine"
    with pytest.raises(OutputError, match="exists and is not a directory"):
        output_dir(user / "thesis.tex")


def test_demo_cli_on_a_file_is_exit_2(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("mine")
    assert cli.main(["demo", "--out", str(f), "--sims", "--skip-training"]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and f.read_text() == "mine"


def test_demo_in_the_current_directory_keeps_everything(tmp_path, monkeypatch, capsys):
    needs_torch()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("mine")
    assert cli.main(["demo", "--out", ".", "--sims", "--skip-training"]) == 0
    assert (tmp_path / "keep.txt").read_text() == "mine"
    assert (tmp_path / "gradblock-demo-1" / "golden" / GF.MANIFEST).is_file()


# ------------------------------------------------------------------------------ manifest fuzz

FUZZ_VALUES = [None, True, False, -1, 0, 1, 2**31, 2**70, -2**70, 1.5, float("nan"),
               float("inf"), "", "x", "../x.npz", "/dev/zero", "a/b", "a" * 5000, [], [2**70],
               [1, "a"], {}, {"a": {"b": {"c": 1}}}, ["quantiser"], [3, 3]]


def _fuzzed(manifest, rng):
    """The manifest with one field of one case (or of the top level, or of a case's hex /
    sha256 map) deleted or replaced by a hostile value."""
    m = json.loads(json.dumps(manifest))
    target = m if rng.random() < 0.1 else m["cases"][rng.integers(len(m["cases"]))]
    if target is not m and rng.random() < 0.25:
        target = target[str(rng.choice(["hex", "sha256"]))]
    key = str(rng.choice(sorted(target)))
    if rng.random() < 0.2:
        del target[key]
    else:
        target[key] = FUZZ_VALUES[rng.integers(len(FUZZ_VALUES))]
    return m


def test_fuzzed_manifests_give_named_errors_or_check_results(tmp_path, capsys):
    """300 one-field mutations of a valid manifest: load_golden raises only GoldenError, and
    check_golden / `golden --check` end in a result or a one-line named error, never a
    traceback (the CLI's catch-all would print 'internal error')."""
    from gradblock.golden.datapath import write_cases
    d = tmp_path / "g"
    write_cases(d, "edge")
    full = json.loads((d / GF.MANIFEST).read_text())
    full["cases"] = [c for c in full["cases"] if c["name"] in ("dp_single", "dp_all_zero",
                                                                "dp_nan", "dp_ties_all")]
    rng = np.random.default_rng(7)
    outcomes = {"refused": 0, "loaded": 0}
    for i in range(300):
        m = _fuzzed(full, rng)
        (d / GF.MANIFEST).write_text(json.dumps(m))
        try:
            GF.load_golden(d)
        except GF.GoldenError as e:
            assert "\n" not in str(e), e
            outcomes["refused"] += 1
        else:
            outcomes["loaded"] += 1
            assert all(isinstance(r, golden_check.CheckResult)
                       for r in golden_check.check_golden(d))
        if i % 10 == 0:
            capsys.readouterr()
            rc = cli.main(["golden", str(d), "--check"])
            err = capsys.readouterr().err
            assert rc in (0, 1, 2) and "internal error" not in err, (m, err)
    assert outcomes["refused"] > 200 and outcomes["loaded"] > 0, outcomes


def test_fuzzed_npz_bytes_give_named_errors(edge_dir):
    """Byte flips in one case's npz: a GoldenError or a loaded case (which the check then
    judges), never another exception."""
    path = edge_dir / "dp_ties_all.npz"
    good = path.read_bytes()
    rng = np.random.default_rng(11)
    for _ in range(150):
        bad = bytearray(good)
        for pos in rng.integers(0, len(bad), rng.integers(1, 4)):
            bad[pos] ^= int(rng.integers(1, 256))
        path.write_bytes(bytes(bad))
        try:
            GF.load_golden(edge_dir, names={"dp_ties_all"})
        except GF.GoldenError as e:
            assert "\n" not in str(e)
