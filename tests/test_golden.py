"""Golden vectors: the quick set generated through the CLI, its manifest schema, hex files,
check_golden against the numpy reference, and tampering that check_golden must catch."""
from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from gradblock.codec import zrle
from gradblock import cli
from gradblock import golden as G
from gradblock.refmodel.quantiser import QMAX

pytest.importorskip("torch", reason="the real-gradient cases train a model with torch")

REQUIRED_SYNTHETIC = ("tie_break_k1", "tie_break_k4", "tie_all_equal", "quant_saturation_inf",
                      "feedback_saturation", "all_zero", "one_element", "lmax2_runs",
                      "lmax3_runs", "lmax8_runs", "special_floats", "short_last_block",
                      "k_fraction", "range_1", "range_0p01", "range_pow2", "nan_quantiser_only",
                      "multistep_s0", "multistep_s1")


@pytest.fixture(scope="module")
def quick_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("golden") / "quick"
    rc = cli.main(["golden", str(out), "--quick", "--seed", "0"])
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def manifest(quick_dir):
    return json.loads((quick_dir / G.MANIFEST).read_text())


@pytest.fixture(scope="module")
def cases(quick_dir):
    return {c.name: c for c in G.load_golden(quick_dir)}


def copy_of(quick_dir, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(quick_dir, dst)
    return dst


pytestmark = pytest.mark.torch


def test_manifest_schema(manifest):
    assert manifest["format"] == "gradblock-golden" and manifest["version"] == 1
    assert isinstance(manifest["generator"], str) and manifest["quick"] is True
    names = [c["name"] for c in manifest["cases"]]
    assert len(names) == len(set(names))
    assert set(REQUIRED_SYNTHETIC) <= set(names)
    for c in manifest["cases"]:
        assert set(G.META_KEYS) <= set(c), c["name"]
        assert c["kind"] in ("synthetic", "real")
        assert c["stages"] and set(c["stages"]) <= set(G.ALL_STAGES)
        assert c["n"] == math.prod(c["shape"])
        assert c["n_blocks"] == -(-c["n"] // c["block_size"])
        assert 2**31 <= c["M"] < 2**32
        assert np.float32(c["range"]).view(np.uint32) == c["range_bits"]
        assert c["npz"] == f"{c['name']}.npz"
        assert c["hex"] == {a: f"{c['name']}/{a}.hex" for a in G.arrays_for(c["stages"])}
        if c["stages"] == ["quantiser"]:
            assert c["k_eff"] is None and c["frame_words"] is None
        else:
            assert c["stages"] == list(G.ALL_STAGES)
            assert 1 <= c["k_eff"] <= c["n_blocks"]
    assert manifest["cases"][0]["M"] == 3435973836 and manifest["cases"][0]["k_shift"] == 4


def test_array_shapes_and_dtypes(cases):
    for name, case in cases.items():
        m, a = case.meta, case.arrays
        assert sorted(a) == sorted(G.arrays_for(m["stages"])), name
        for key, arr in a.items():
            assert arr.dtype == G.ARRAY_DTYPES[key] and arr.ndim == 1, (name, key)
        sizes = {"block_norms": m["n_blocks"], "selected": m["k_eff"], "frame": m["frame_words"]}
        for key, arr in a.items():
            assert arr.size == sizes.get(key, m["n"]), (name, key)
        assert int(a["quant_sat"].sum()) == m["sat_quant"]
        if "feedback_sat" in a:
            assert int(a["feedback_sat"].sum()) == m["sat_feedback"]


def test_hex_files_parse_back_to_the_npz(quick_dir, cases):
    for name, case in cases.items():
        for key, rel in case.meta["hex"].items():
            digits = 16 if key == "block_norms" else 8
            words = G.read_hex(quick_dir / rel, digits)
            arr = case.arrays[key]
            if arr.dtype == np.int32:
                arr = arr.view(np.uint32)
            assert words == arr.astype(np.uint64).tolist(), (name, key)


def test_check_golden_passes(quick_dir):
    results = G.check_golden(quick_dir)
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
    return {r.name: r.problems for r in G.check_golden(golden_dir) if not r.ok}


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
    m = json.loads((d / G.MANIFEST).read_text())
    entry = next(c for c in m["cases"] if c["name"] == "k_fraction")
    entry["k_eff"] += 1
    (d / G.MANIFEST).write_text(json.dumps(m))

    def bump(a):
        a[0] += 1
        return a
    _rewrite_npz(d / "multistep_s1.npz", "residual_in", bump)
    bad = _failures(d)
    assert set(bad) == {"tie_break_k1", "k_fraction", "multistep_s1"}
    assert bad["tie_break_k1"] == ["tie_break_k1/block_norms.hex: differs from the npz at line 4 "
                                   "(64 lines, expected 64)"]
    assert "manifest k_eff = 5, reference 4" in bad["k_fraction"]
    assert any("residual_in differs from multistep_s0" in p for p in bad["multistep_s1"])


def test_load_golden_errors(tmp_path):
    with pytest.raises(G.GoldenError, match="no such directory"):
        G.load_golden(tmp_path / "nope")
    with pytest.raises(G.GoldenError, match="manifest.json: missing"):
        G.load_golden(tmp_path)
    (tmp_path / G.MANIFEST).write_text('{"format": "other", "version": 1, "cases": []}')
    with pytest.raises(G.GoldenError, match="format is not 'gradblock-golden'"):
        G.load_golden(tmp_path)
    (tmp_path / G.MANIFEST).write_text('{"format": "gradblock-golden", "version": 2, "cases": []}')
    with pytest.raises(G.GoldenError, match="version 2"):
        G.load_golden(tmp_path)
    (tmp_path / G.MANIFEST).write_text(
        '{"format": "gradblock-golden", "version": 1, "cases": [{"name": "x", "npz": "x.npz"}]}')
    with pytest.raises(G.GoldenError, match="x.npz: missing"):
        G.load_golden(tmp_path)
    assert cli.main(["golden", str(tmp_path), "--check"]) == 2


def test_read_hex_is_strict(tmp_path):
    f = tmp_path / "a.hex"
    f.write_text("0000000a\n0000000B\n")
    with pytest.raises(G.GoldenError, match=r"a.hex:2: '0000000B' is not 8 lowercase hex digits"):
        G.read_hex(f, 8)
    f.write_text("000a\n")
    with pytest.raises(G.GoldenError, match="is not 8"):
        G.read_hex(f, 8)


def test_hex_text_formats():
    assert G.hex_text(np.array([-1, 5], np.int32), 8) == "ffffffff\n00000005\n"
    assert G.hex_text(np.array([2**40], np.uint64), 16) == "0000010000000000\n"
    assert G.hex_text(np.array([3], np.int64), 8) == "00000003\n"
    with pytest.raises(ValueError, match="8 hex digits"):
        G.hex_text(np.array([2**32], np.int64), 8)


def test_synthetic_specs_are_seeded():
    a, b, c = G.synthetic_specs(0), G.synthetic_specs(0), G.synthetic_specs(1)
    assert [s.name for s in a] == [s.name for s in c]
    def same(x, y):
        return np.array_equal(x.grad_f32().view(np.uint32), y.grad_f32().view(np.uint32)) and \
            np.array_equal(x.residual, y.residual)
    assert all(same(x, y) for x, y in zip(a, b))
    assert not all(same(x, y) for x, y in zip(a, c))


def test_regenerating_replaces_old_cases(quick_dir, tmp_path):
    d = copy_of(quick_dir, tmp_path)
    m = json.loads((d / G.MANIFEST).read_text())
    m["cases"].append({**m["cases"][0], "name": "stale_case", "npz": "stale_case.npz"})
    (d / G.MANIFEST).write_text(json.dumps(m))
    (d / "stale_case.npz").write_bytes(b"x")
    (d / "stale_case").mkdir()
    (d / "unrelated.txt").write_text("keep me")
    G.generate_golden(d, quick=True, progress=False)
    assert not (d / "stale_case.npz").exists() and not (d / "stale_case").exists()
    assert (d / "unrelated.txt").exists()
    assert all(r.ok for r in G.check_golden(d))


@pytest.mark.slow
def test_full_set_has_real_sized_layers(tmp_path):
    manifest = G.generate_golden(tmp_path, quick=False, progress=False)
    real = [c for c in manifest["cases"] if c["kind"] == "real"]
    shapes = {tuple(c["shape"]) for c in real}
    assert (64, 64, 3, 3) in shapes and (16, 8, 3, 3) in shapes and (10, 64) in shapes
    assert all(r.ok for r in G.check_golden(tmp_path))


@pytest.mark.slow
def test_fashion_mnist_real_source():
    from gradblock.shim.data import FASHION_MNIST_DIR
    if not FASHION_MNIST_DIR.is_dir():
        pytest.skip(f"Fashion-MNIST not installed at {FASHION_MNIST_DIR}")
    from gradblock.refmodel.compress import compress_layer
    specs, info = G.real_specs("fashion-mnist", 0, True, compress_layer)
    assert info["dataset"] == "fashion-mnist" and len(specs) == 4
    for spec in specs:
        meta, arrays = G.compute_case(spec, compress_layer)
        assert meta["kind"] == "real" and arrays["grad_bits"].size == meta["n"]


def test_malformed_manifest_entry_is_reported_not_crashed(quick_dir, tmp_path, capsys):
    d = copy_of(quick_dir, tmp_path)
    m = json.loads((d / G.MANIFEST).read_text())
    m["cases"][1]["shape"] = "48x12"
    del m["cases"][2]["k_eff"]
    (d / G.MANIFEST).write_text(json.dumps(m))
    bad = _failures(d)
    assert set(bad) == {"tie_break_k4", "tie_all_equal"}
    assert "malformed manifest entry" in bad["tie_break_k4"][0]
    assert "lacks ['k_eff']" in bad["tie_all_equal"][0]
    assert cli.main(["golden", str(d), "--check"]) == 1
    out = capsys.readouterr().out
    total = len(m["cases"])
    assert "FAIL tie_all_equal" in out and f"{total - 2} of {total} cases pass" in out
