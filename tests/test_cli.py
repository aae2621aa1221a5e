"""`gradblock quantise | encode | decode | step | inspect` through gradblock.cli.main, once
through a subprocess, with both the numba and the numpy-reference backends."""
from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from gradblock.codec import errors as E
from gradblock.codec import zrle
from gradblock import cli
from cli_helpers import any_backend, run  # noqa: F401  (any_backend is a fixture)
from gradblock.backends import BACKEND_ENV, host_backend
from gradblock.commands import parse_k
from gradblock.refmodel.compress import compress_layer
from gradblock.refmodel.quantiser import QMAX, quantise

ROOT = Path(__file__).resolve().parents[1]




def one_line_error(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"gradblock {command}: "), err
    return lines[0]


def save(path, arr):
    np.save(path, arr)
    return path


def frame_words(n, tokens, lmax_log2=8, R_bits=0x41200000, layer_id=0, t0=None, crc=None,
                magic=zrle.MAGIC, h1=None):
    """Hand-built frame: tokens are (z, [literals]); t0 and CRC computed unless given."""
    words = [magic, (1 | lmax_log2 << 8) if h1 is None else h1, layer_id, n, R_bits]
    for z, lits in tokens:
        words += [z, len(lits)] + [int(np.int32(v).view(np.uint32)) for v in lits]
    words.append(len(tokens) if t0 is None else t0)
    body = np.array(words, dtype="<u4").tobytes()
    words.append(zlib.crc32(body) if crc is None else crc)
    return np.array(words, dtype=np.uint32)


def write_words(path, words):
    path.write_bytes(np.asarray(words, dtype="<u4").tobytes())
    return path


# ------------------------------------------------------------------------------ quantise


def test_quantise_matches_reference(tmp_path, capsys):
    x = np.random.default_rng(1).normal(0, 4, (7, 9)).astype(np.float32)
    x[0, :3] = [np.inf, -np.inf, 11.0]
    rc, out, _ = run(capsys, "quantise", save(tmp_path / "g.npy", x), tmp_path / "q.npy",
                     "--range", "10")
    assert rc == 0
    q = np.load(tmp_path / "q.npy")
    ref = quantise(x, 10.0)
    assert q.dtype == np.int32 and q.shape == x.shape
    np.testing.assert_array_equal(q, ref.q)
    assert q[0, 0] == QMAX and q[0, 1] == -QMAX
    assert f"saturated: {ref.saturated} " in out and ref.saturated >= 3
    assert "M = 0xcccccccc, k = 4" in out


def test_quantise_other_range(tmp_path, capsys):
    x = np.array([0.25, -0.125, 1.0], np.float32)
    rc, out, _ = run(capsys, "quantise", save(tmp_path / "g.npy", x), tmp_path / "q.npy", "-R", "0.25")
    assert rc == 0 and "saturated: 1 " in out
    np.testing.assert_array_equal(np.load(tmp_path / "q.npy"), quantise(x, 0.25).q)


def test_quantise_nan_exits_2_naming_count_and_index(tmp_path, capsys):
    x = np.array([1.0, 2.0, np.nan, 0.0, np.nan], np.float32)
    rc, out, err = run(capsys, "quantise", save(tmp_path / "g.npy", x), tmp_path / "q.npy")
    assert rc == 2
    line = one_line_error(err, "quantise")
    assert "2 NaN value(s)" in line and "first at flat index 2" in line
    assert not (tmp_path / "q.npy").exists()


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.complex64, "V2"])
def test_quantise_rejects_other_dtypes(tmp_path, capsys, dtype):
    rc, _, err = run(capsys, "quantise", save(tmp_path / "g.npy", np.zeros(3, dtype)),
                     tmp_path / "q.npy")
    assert rc == 2
    assert (f"must be float32 or float16, the file holds {np.dtype(dtype)}"
            in one_line_error(err, "quantise"))


def test_quantise_bad_inputs(tmp_path, capsys):
    g = save(tmp_path / "g.npy", np.ones(3, np.float32))
    rc, _, err = run(capsys, "quantise", tmp_path / "missing.npy", tmp_path / "q.npy")
    assert rc == 2 and "no such file" in one_line_error(err, "quantise")
    for bad in ("-1", "inf", "0", "nan"):
        rc, _, err = run(capsys, "quantise", g, tmp_path / "q.npy", f"--range={bad}")
        assert rc == 2 and "range R must be a finite float32 > 0" in one_line_error(err, "quantise")
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    rc, _, err = run(capsys, "quantise", tmp_path / "junk.npy", tmp_path / "q.npy")
    assert rc == 2 and "not a readable .npy" in one_line_error(err, "quantise")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object))
    rc, _, err = run(capsys, "quantise", tmp_path / "obj.npy", tmp_path / "q.npy")
    assert rc == 2 and "the file holds object" in one_line_error(err, "quantise")
    rc, _, err = run(capsys, "quantise", g, tmp_path / "no" / "dir" / "q.npy")
    assert rc == 2 and "does not exist" in one_line_error(err, "quantise")


# ------------------------------------------------------------------------------ encode / decode

SPEC_EXAMPLE = [0x5A524C45, 0x00000801, 0x00000007, 0x00000005, 0x41200000, 0x00000002,
                0x00000002, 0x00000005, 0xFFFFFFFF, 0x00000001, 0x00000000, 0x00000002,
                0x455EB0ED]


def test_encode_spec_example(tmp_path, capsys, any_backend):
    p = save(tmp_path / "p.npy", np.array([0, 0, 5, -1, 0], np.int32))
    rc, out, _ = run(capsys, "encode", p, tmp_path / "f.bin", "--layer-id", 7, "--range", 10,
                     "--lmax-log2", 8)
    assert rc == 0 and "13 words" in out and "T = 2 tokens" in out
    assert (tmp_path / "f.bin").read_bytes() == np.array(SPEC_EXAMPLE, "<u4").tobytes()


@pytest.mark.parametrize("lmax_log2", [1, 2, 8, 24])
def test_encode_decode_round_trip(tmp_path, capsys, any_backend, lmax_log2):
    rng = np.random.default_rng(lmax_log2)
    p = rng.integers(-2**31 + 1, 2**31, (12, 40)).astype(np.int32)
    p[rng.random(p.shape) < 0.6] = 0
    rc, _, _ = run(capsys, "encode", save(tmp_path / "p.npy", p), tmp_path / "f.bin",
                   "--layer-id", 3, "--range", 0.5, "--lmax-log2", lmax_log2)
    assert rc == 0
    words = np.fromfile(tmp_path / "f.bin", "<u4")
    np.testing.assert_array_equal(words, zrle.encode_frame(p, 3, 0.5, lmax_log2))
    rc, out, _ = run(capsys, "decode", tmp_path / "f.bin", tmp_path / "d.npy", "--expected-n", p.size)
    assert rc == 0 and "decoded layer 3: n = 480" in out
    d = np.load(tmp_path / "d.npy")
    assert d.dtype == np.int32 and d.shape == (p.size,)
    np.testing.assert_array_equal(d, p.reshape(-1))


def test_encode_bad_inputs(tmp_path, capsys):
    p = save(tmp_path / "p.npy", np.ones(4, np.int32))
    for opt, val, msg in (("--lmax-log2", 0, "--lmax-log2: lmax_log2 must be in 1..24"),
                          ("--lmax-log2", 25, "--lmax-log2: lmax_log2 must be in 1..24"),
                          ("--layer-id", -1, "--layer-id: layer id must fit 32 bits"),
                          ("--layer-id", 2**32, "--layer-id: layer id must fit 32 bits")):
        rc, _, err = run(capsys, "encode", p, tmp_path / "f.bin", opt, val)
        assert rc == 2 and msg in one_line_error(err, "encode")
    rc, _, err = run(capsys, "encode", save(tmp_path / "f.npy", np.ones(4, np.float32)),
                     tmp_path / "f.bin")
    assert rc == 2 and "must be int32" in one_line_error(err, "encode")


def test_encode_empty_layer(tmp_path, capsys):
    rc, _, _ = run(capsys, "encode", save(tmp_path / "p.npy", np.zeros(0, np.int32)), tmp_path / "f.bin")
    assert rc == 0
    rc, out, _ = run(capsys, "decode", tmp_path / "f.bin", tmp_path / "d.npy")
    assert rc == 0 and np.load(tmp_path / "d.npy").size == 0


GOOD = [(2, [5, -1]), (1, [])]          # n = 5, the spec example's tokens


def malformed_frames():
    """(name, words, expected_n) for every decoder error (docs/spec.md §3.5)."""
    good = frame_words(5, GOOD)
    bad_crc = good.copy()
    bad_crc[-1] ^= 1
    return [
        ("BAD_MAGIC", frame_words(5, GOOD, magic=0x5A524C46), None),
        ("BAD_VERSION", frame_words(5, GOOD, h1=0x802), None),
        ("BAD_LMAX", frame_words(5, GOOD, h1=0x1901), None),
        ("BAD_LMAX", frame_words(5, GOOD, h1=0x10801), None),
        ("BAD_RANGE", frame_words(5, GOOD, R_bits=0x7F800000), None),
        ("BAD_RANGE", frame_words(5, GOOD, R_bits=0xC1200000), None),
        ("SIZE_MISMATCH", good, 6),
        ("LITERAL_RUN_TOO_LONG", frame_words(5, [(2, [1, 2, 3])], lmax_log2=1), None),
        ("ZERO_LITERAL", frame_words(5, [(2, [5, 0]), (1, [])]), None),
        ("EMPTY_TOKEN", frame_words(5, [(0, []), (5, [])]), None),
        ("EARLY_ZERO_LENGTH", frame_words(5, [(1, []), (4, [])]), None),
        ("SPLIT_LITERAL_RUN", frame_words(5, [(2, [5]), (0, [-1]), (1, [])]), None),
        ("OVERRUN", frame_words(5, [(2, [5, -1]), (2, [])]), None),
        ("TRUNCATED", good[:9], None),
        ("TRUNCATED", good[:3], None),
        ("TRUNCATED", good[:-1], None),
        ("TOKEN_COUNT_MISMATCH", frame_words(5, GOOD, t0=3), None),
        ("CRC_MISMATCH", bad_crc, None),
    ]


@pytest.mark.parametrize("name,words,expected_n", malformed_frames(),
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(malformed_frames())])
def test_decode_malformed_frame_exits_2_with_named_error(tmp_path, capsys, any_backend, name,
                                                         words, expected_n):
    with pytest.raises(E.FrameError) as ref:      # the reference decoder agrees on the error
        zrle.decode_frame(words, expected_n)
    assert ref.value.name == name
    f = write_words(tmp_path / "bad.bin", words)
    argv = ["decode", f, tmp_path / "d.npy"] + ([] if expected_n is None else
                                                 ["--expected-n", expected_n])
    rc, out, err = run(capsys, *argv)
    assert rc == 2
    line = one_line_error(err, "decode")
    assert line == f"gradblock decode: {ref.value}"
    assert line.startswith(f"gradblock decode: {name} at word {ref.value.word}: ")
    assert not (tmp_path / "d.npy").exists()
    if expected_n is None:
        rc, out, err = run(capsys, "inspect", f)
        assert rc == 2 and "MALFORMED" in out
        assert f": {name} at word" in one_line_error(err, "inspect")


def test_decode_file_size_and_extra_words(tmp_path, capsys):
    good = frame_words(5, GOOD)
    f = tmp_path / "odd.bin"
    f.write_bytes(np.asarray(good, "<u4").tobytes() + b"\x00\x01")
    rc, _, err = run(capsys, "decode", f, tmp_path / "d.npy")
    assert rc == 2 and "54 bytes is not a whole number of 32-bit words" in one_line_error(err, "decode")
    rc, _, err = run(capsys, "decode", write_words(tmp_path / "x.bin", np.append(good, [0, 0])),
                     tmp_path / "d.npy")
    assert rc == 2 and "2 extra word(s) after the frame" in one_line_error(err, "decode")
    rc, _, err = run(capsys, "decode", write_words(tmp_path / "e.bin", []), tmp_path / "d.npy")
    assert rc == 2 and "TRUNCATED at word 0" in one_line_error(err, "decode")
    rc, _, err = run(capsys, "decode", tmp_path / "none.bin", tmp_path / "d.npy")
    assert rc == 2 and "no such file" in one_line_error(err, "decode")
    rc, _, err = run(capsys, "decode", write_words(tmp_path / "g.bin", good), tmp_path / "d.npy",
                     "--expected-n", -1)
    assert rc == 2 and "--expected-n must be in 0..4294967295" in one_line_error(err, "decode")


# ------------------------------------------------------------------------------ step


@pytest.mark.parametrize("k,block_size,lmax_log2", [("1", None, 8), ("3", None, 2),
                                                    ("0.25", None, 8), ("0.3", 7, 3),
                                                    ("100", 5, 8)])
def test_step_matches_reference(tmp_path, capsys, any_backend, k, block_size, lmax_log2):
    rng = np.random.default_rng(5)
    g = rng.normal(0, 3, (16, 4, 3, 3)).astype(np.float32)
    g[0, 0, 0, :2] = [np.inf, -20.0]
    r = rng.integers(-2**30, 2**30, g.shape).astype(np.int32)
    r[1, 0, 0, 0] = QMAX
    g[1, 0, 0, 0] = 9.0
    argv = ["step", save(tmp_path / "g.npy", g), save(tmp_path / "r.npy", r), "--range", 10,
            "--k", k, "--layer-id", 9, "--lmax-log2", lmax_log2, "--frame", tmp_path / "f.bin",
            "--residual-out", tmp_path / "r2.npy"]
    if block_size:
        argv += ["--block-size", block_size]
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    ref = compress_layer(g, r, R=10.0, k=parse_k(k), block_size=block_size, layer_id=9,
                         lmax_log2=lmax_log2)
    np.testing.assert_array_equal(np.fromfile(tmp_path / "f.bin", "<u4"), ref.frame)
    r2 = np.load(tmp_path / "r2.npy")
    assert r2.dtype == np.int32 and r2.shape == g.shape
    np.testing.assert_array_equal(r2, ref.residual_out)
    assert f"-> k_eff = {ref.k_eff}" in out
    assert f"selected blocks (rank order): {int(ref.selected[0])} (L1 {int(ref.norms[ref.selected[0]])})" in out
    assert f"saturation: quantiser {ref.sat_quant}, feedback {ref.sat_feedback}" in out
    assert ref.sat_quant == 2 and ref.sat_feedback >= 1
    assert f"frame: {ref.frame.size} words" in out and "ratio" in out


def test_step_chains_residual(tmp_path, capsys):
    rng = np.random.default_rng(2)
    g1, g2 = (rng.normal(0, 1, (8, 6)).astype(np.float32) for _ in range(2))
    common = ["--k", "0.25", "--range", "4"]
    assert run(capsys, "step", save(tmp_path / "g1.npy", g1), "-", *common, "--frame",
               tmp_path / "f1.bin", "--residual-out", tmp_path / "r1.npy")[0] == 0
    assert run(capsys, "step", save(tmp_path / "g2.npy", g2), tmp_path / "r1.npy", *common,
               "--frame", tmp_path / "f2.bin", "--residual-out", tmp_path / "r2.npy")[0] == 0
    s1 = compress_layer(g1, None, R=4.0, k=0.25)
    s2 = compress_layer(g2, s1.residual_out, R=4.0, k=0.25)
    np.testing.assert_array_equal(np.load(tmp_path / "r2.npy"), s2.residual_out)
    np.testing.assert_array_equal(np.fromfile(tmp_path / "f2.bin", "<u4"), s2.frame)


def test_step_errors(tmp_path, capsys):
    g = save(tmp_path / "g.npy", np.ones((4, 4), np.float32))
    out = ["--frame", tmp_path / "f.bin", "--residual-out", tmp_path / "r.npy"]
    gn = np.ones((4, 4), np.float32)
    gn[2, 1] = np.nan
    rc, _, err = run(capsys, "step", save(tmp_path / "gn.npy", gn), "-", *out)
    assert rc == 2 and "1 NaN value(s)" in one_line_error(err, "step") and "index 9" in err
    rc, _, err = run(capsys, "step", g, save(tmp_path / "r3.npy", np.zeros((4, 3), np.int32)), *out)
    assert rc == 2 and "residual shape (4, 3) differs from the gradient's (4, 4)" in err
    rc, _, err = run(capsys, "step", g, save(tmp_path / "r64.npy", np.zeros((4, 4), np.int64)), *out)
    assert rc == 2 and "the residual must be int32" in one_line_error(err, "step")
    rc, _, err = run(capsys, "step", g, "-", "--k", "0", *out)
    assert rc == 2 and "--k: k must be an integer >= 1" in one_line_error(err, "step")
    rc, _, err = run(capsys, "step", g, "-", "--block-size", "0", *out)
    assert rc == 2 and "--block-size: block_size must be an integer in 1.." in one_line_error(err, "step")
    for bad in ("1.5", "-0.5", "abc", "nan"):
        rc, _, err = run(capsys, "step", g, "-", "--k", bad, *out)
        assert rc == 2 and "argument --k" in err
    rc, _, err = run(capsys, "step", g, "-")          # --frame / --residual-out are required
    assert rc == 2 and "required" in err
    assert not (tmp_path / "f.bin").exists()


def test_parse_k():
    assert parse_k("3") == 3 and isinstance(parse_k("3"), int)
    assert parse_k("0.125") == 0.125 and parse_k("2.0") == 2.0


# ------------------------------------------------------------------------------ inspect


def test_inspect_message(tmp_path, capsys, any_backend):
    rng = np.random.default_rng(3)
    frames = []
    for layer, (n, lmax_log2) in enumerate([(5, 8), (300, 2), (1, 1)]):
        p = rng.integers(-9, 9, n).astype(np.int32)
        frames.append(zrle.encode_frame(p, layer + 10, 0.5, lmax_log2))
    msg = write_words(tmp_path / "m.bin", np.concatenate(frames))
    rc, out, _ = run(capsys, "inspect", msg, "--tokens", 3)
    assert rc == 0
    for i, f in enumerate(frames):
        assert f"frame {i} at word {sum(x.size for x in frames[:i])}: {f.size} words" in out
        assert f"layer id {10 + i}" in out
        assert f"T = {int(f[-2])}, CRC {int(f[-1]):#010x} ok" in out
    assert "lmax_log2 2 (LMAX 4)" in out and "R        0.5 (0x3f000000)" in out
    assert " more" in out                        # 300 elements: more tokens than listed
    assert "message: 3 frame(s)" in out and "306 elements" in out


def test_inspect_stops_at_the_malformed_frame(tmp_path, capsys):
    good = frame_words(5, GOOD, layer_id=1)
    bad = frame_words(5, [(2, [5, 0]), (1, [])], layer_id=2)
    msg = write_words(tmp_path / "m.bin", np.concatenate([good, bad, good]))
    rc, out, err = run(capsys, "inspect", msg)
    assert rc == 2
    assert "frame 0 at word 0: 13 words" in out and "frame 1 at word 13: MALFORMED" in out
    assert "frame 2" not in out
    assert "read before the error (1, the last may be the bad one): (2,2)" in out
    line = one_line_error(err, "inspect")
    assert line.startswith("gradblock inspect: frame 1 at word 13: ZERO_LITERAL at word 8:")


def test_inspect_empty_and_ragged_files(tmp_path, capsys):
    rc, _, err = run(capsys, "inspect", write_words(tmp_path / "e.bin", []))
    assert rc == 2 and "TRUNCATED at word 0" in one_line_error(err, "inspect")
    (tmp_path / "r.bin").write_bytes(b"\x01\x02\x03")
    rc, _, err = run(capsys, "inspect", tmp_path / "r.bin")
    assert rc == 2 and "3 bytes is not a whole number" in one_line_error(err, "inspect")


# ------------------------------------------------------------------------------ dispatch


@pytest.mark.parametrize("command", ["quantise", "encode", "decode", "step", "inspect"])
def test_help(capsys, command):
    rc, out, _ = run(capsys, command, "--help")
    assert rc == 0 and f"usage: gradblock {command}" in out


def test_backend_choice(monkeypatch):
    monkeypatch.setenv(BACKEND_ENV, "reference")
    assert host_backend().name == "numpy"
    monkeypatch.setenv(BACKEND_ENV, "bogus")
    with pytest.raises(ValueError, match="auto, numba or reference"):
        host_backend()


def test_subprocess_round_trip(tmp_path):
    p = save(tmp_path / "p.npy", np.array([0, 0, 5, -1, 0], np.int32))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    py = [sys.executable, "-m", "gradblock.cli"]
    enc = subprocess.run(py + ["encode", str(p), str(tmp_path / "f.bin"), "--layer-id", "7"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert enc.returncode == 0, enc.stderr
    assert (tmp_path / "f.bin").read_bytes() == np.array(SPEC_EXAMPLE, "<u4").tobytes()
    bad = tmp_path / "bad.bin"
    words = np.array(SPEC_EXAMPLE, np.uint32)
    words[-1] ^= 0xFF
    write_words(bad, words)
    dec = subprocess.run(py + ["decode", str(bad), str(tmp_path / "d.npy")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert dec.returncode == 2
    assert dec.stderr.strip().startswith("gradblock decode: CRC_MISMATCH at word 12: ")


def test_one_parser_for_k():
    """gradblock step, train, validate and bench read --k with refmodel.validation.parse_k."""
    from gradblock.refmodel import validation
    assert parse_k is validation.parse_k
    assert parse_k("4") == 4 and parse_k("3.0") == 3 and parse_k("0.25") == 0.25
    for bad in ("0", "-1", "1.5", "nan", "inf", "abc", "1e400"):
        with pytest.raises(validation.KError):
            parse_k(bad)


def test_process_group_cleanup_runs_only_after_a_command_that_may_have_left_one(monkeypatch):
    """The CLI collects (to join gloo's threads) only when the command brought torch.distributed
    in or left a group up, not after every in-process call (a collection with torch loaded
    costs tens of ms; the CLI fuzz tests make thousands of calls)."""
    import sys
    pytest.importorskip("torch")
    import torch.distributed as dist
    assert not dist.is_initialized()
    assert cli._started_collectives(had_dist=False)           # brought in by this command
    assert not cli._started_collectives(had_dist=True)        # already there, no group up
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    assert cli._started_collectives(had_dist=True)            # a group left up
    monkeypatch.delitem(sys.modules, "torch.distributed")
    assert not cli._started_collectives(had_dist=False)       # no torch.distributed at all
