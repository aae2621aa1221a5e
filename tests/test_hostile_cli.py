"""The CLI against hostile input (issue 9): every case ends with one named line on stderr and
exit status 2, or a correct result; no traceback, no allocation sized by an untrusted header,
no output other than the path asked, nothing half-written."""
from __future__ import annotations

import os
import sys
import tracemalloc
import zlib

import numpy as np
import pytest

from gradblock import cli
from gradblock.codec import zrle
from cli_helpers import any_backend, run  # noqa: F401  (any_backend is a fixture)
from gradblock.backends import BACKEND_ENV
from gradblock.npyio import DEFAULT_MAX_ELEMENTS

R10 = 0x41200000
N_MAX = 2**32 - 1




def named_error(rc: int, err: str, command: str) -> str:
    """Exit 2 with exactly one line `gradblock COMMAND: ...` and no traceback."""
    assert rc == 2, (rc, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gradblock {command}: "), err
    assert "Traceback" not in err
    return lines[0]


def listing(path) -> list[str]:
    return sorted(os.listdir(path))


def npy_bytes(descr: str, shape, body: bytes = b"", fortran: bool = False) -> bytes:
    """A .npy v1.0 file with any header, however untrue."""
    header = repr({"descr": descr, "fortran_order": fortran, "shape": tuple(shape)}).encode()
    pad = 64 - (10 + len(header) + 1) % 64
    header += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + body


def frame_of(words) -> bytes:
    """Words plus the correct trailer CRC."""
    w = np.asarray(words, dtype="<u4")
    return w.tobytes() + zlib.crc32(w.tobytes()).to_bytes(4, "little")


# A valid 36-byte frame of 2**32-1 zeros: header, one token (z = n, L = 0), T = 1, CRC.
HUGE_VALID = frame_of([zrle.MAGIC, 1 | 8 << 8, 0, N_MAX, R10, N_MAX, 0, 1])
# An 8-word frame claiming 2**32-1 elements, cut before its CRC.
HUGE_CUT = np.array([zrle.MAGIC, 1 | 8 << 8, 0, N_MAX, R10, N_MAX, 0, 1], "<u4").tobytes()


# ----------------------------------------------------------------- 1. numbers at the edge

@pytest.mark.parametrize("value", ["9223372036854775808", "18446744073709551617", "4294967296",
                                   "0", "-3"])
def test_step_block_size_out_of_range_is_refused(tmp_path, capsys, any_backend, value):
    np.save(tmp_path / "zeros.npy", np.zeros((4, 4), np.float32))
    before = listing(tmp_path)
    rc, _, err = run(capsys, "step", tmp_path / "zeros.npy", "-", "--block-size", value,
                     "--frame", tmp_path / "f.bin", "--residual-out", tmp_path / "r.npy")
    assert "--block-size: block_size must be an integer in 1..4294967295" in named_error(rc, err, "step")
    assert listing(tmp_path) == before


@pytest.mark.parametrize("option, value", [("--block-size", "1e23"), ("--block-size", "2.5"),
                                           ("--k", "1e400"), ("--k", "-1"), ("--k", "nan"),
                                           ("--layer-id", "4294967296"), ("--lmax-log2", "99"),
                                           ("--range", "1e39"), ("--range", "nan")])
def test_step_bad_numbers_are_one_line(tmp_path, capsys, any_backend, option, value):
    np.save(tmp_path / "g.npy", np.ones((4, 4), np.float32))
    rc, _, err = run(capsys, "step", tmp_path / "g.npy", "-", option, value,
                     "--frame", tmp_path / "f.bin", "--residual-out", tmp_path / "r.npy")
    assert option in named_error(rc, err, "step")
    assert not (tmp_path / "f.bin").exists() and not (tmp_path / "r.npy").exists()


def test_large_block_size_inside_the_range_is_one_block(tmp_path, capsys, any_backend):
    g = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "g.npy", g)
    rc, out, err = run(capsys, "step", tmp_path / "g.npy", "-", "--block-size", N_MAX,
                       "--frame", tmp_path / "f.bin", "--residual-out", tmp_path / "r.npy")
    assert rc == 0, err
    assert "1 blocks of 4294967295" in out
    assert not np.load(tmp_path / "r.npy").any()           # the one block was sent


# ------------------------------------------------------- 2. allocations sized by a header

@pytest.mark.parametrize("command", ["decode", "inspect"])
def test_frame_claiming_2_pow_32_elements_is_refused_by_the_limit(tmp_path, capsys, any_backend,
                                                                   command):
    (tmp_path / "huge.bin").write_bytes(HUGE_VALID)
    argv = [command, tmp_path / "huge.bin"] + ([tmp_path / "d.npy"] if command == "decode" else [])
    rc, _, err = run(capsys, *argv)
    line = named_error(rc, err, command)
    assert f"of {N_MAX} elements exceeds the limit of {DEFAULT_MAX_ELEMENTS} elements" in line
    assert not (tmp_path / "d.npy").exists()


@pytest.mark.parametrize("command", ["decode", "inspect"])
def test_cut_frame_claiming_2_pow_32_elements_allocates_nothing(tmp_path, capsys, monkeypatch,
                                                                 command):
    """Even with the limit raised to the format's maximum, the reference decoder finds the
    missing CRC before it reserves 16 GiB (tracemalloc sees numpy's allocations)."""
    monkeypatch.setenv(BACKEND_ENV, "reference")    # read by every command call
    (tmp_path / "cut.bin").write_bytes(HUGE_CUT)
    argv = [command, tmp_path / "cut.bin", "--max-elements", N_MAX]
    if command == "decode":
        argv.insert(2, tmp_path / "d.npy")
    tracemalloc.start()
    try:
        rc, _, err = run(capsys, *argv)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "TRUNCATED at word 8" in named_error(rc, err, command)
    assert peak < 16 << 20, peak


@pytest.mark.parametrize("command", ["quantise", "encode", "step"])
@pytest.mark.parametrize("shape", [(2**34,), (2**17, 2**17), (2**70,)])
def test_npy_header_claiming_huge_shape_is_refused(tmp_path, capsys, command, shape):
    descr = "<i4" if command == "encode" else "<f4"
    (tmp_path / "big.npy").write_bytes(npy_bytes(descr, shape, b"\0" * 64))
    out = (["--frame", tmp_path / "f.bin", "--residual-out", tmp_path / "r.npy"]
           if command == "step" else [tmp_path / "out"])
    argv = [command, tmp_path / "big.npy"] + (["-"] if command == "step" else []) + out
    for limit in ([], ["--max-elements", N_MAX]):
        tracemalloc.start()
        try:
            rc, _, err = run(capsys, *argv, *limit)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert "elements exceeds the" in named_error(rc, err, command)
        assert peak < 16 << 20, peak
    assert listing(tmp_path) == ["big.npy"]


def test_npy_shorter_than_its_header_is_refused_before_allocating(tmp_path, capsys):
    (tmp_path / "short.npy").write_bytes(npy_bytes("<f4", (2**26,), b"\0" * 40))
    tracemalloc.start()
    try:
        rc, _, err = run(capsys, "quantise", tmp_path / "short.npy", tmp_path / "q.npy")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    line = named_error(rc, err, "quantise")
    assert "truncated" in line and "268435456 data bytes" in line
    assert peak < 16 << 20, peak


def test_max_elements_is_inclusive_and_checked(tmp_path, capsys):
    np.save(tmp_path / "g.npy", np.ones(6, np.float32))
    rc, _, err = run(capsys, "quantise", tmp_path / "g.npy", tmp_path / "q.npy", "--max-elements", 6)
    assert rc == 0, err
    rc, _, err = run(capsys, "quantise", tmp_path / "g.npy", tmp_path / "q.npy", "--max-elements", 5)
    assert "of 6 elements exceeds the limit of 5 elements" in named_error(rc, err, "quantise")
    for bad in ("0", "-1", "4294967296", "lots"):
        rc, _, err = run(capsys, "quantise", tmp_path / "g.npy", tmp_path / "q.npy",
                         "--max-elements", bad)
        assert "--max-elements" in named_error(rc, err, "quantise")


def test_frame_file_longer_than_the_limit_allows_is_not_read(tmp_path, capsys):
    frame = zrle.encode_frame(np.arange(1, 101, dtype=np.int32))
    (tmp_path / "f.bin").write_bytes(frame.astype("<u4").tobytes())
    rc, _, err = run(capsys, "decode", tmp_path / "f.bin", tmp_path / "d.npy", "--max-elements", 10)
    assert "longer than the longest frame of 10 elements" in named_error(rc, err, "decode")
    rc, _, err = run(capsys, "decode", tmp_path / "f.bin", tmp_path / "d.npy", "--max-elements", 100)
    assert rc == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "d.npy"), np.arange(1, 101))


# ------------------------------------------------------------ 3. outputs: exact, atomic

def test_quantise_writes_exactly_the_path_asked(tmp_path, capsys):
    np.save(tmp_path / "g.npy", np.ones(3, np.float32))
    rc, _, err = run(capsys, "quantise", tmp_path / "g.npy", tmp_path / "out.bin")
    assert rc == 0, err
    assert listing(tmp_path) == ["g.npy", "out.bin"]
    assert np.load(tmp_path / "out.bin").dtype == np.int32


@pytest.mark.parametrize("command", ["quantise", "decode"])
def test_output_that_is_a_directory_or_a_fifo_is_refused(tmp_path, capsys, command):
    np.save(tmp_path / "g.npy", np.ones(3, np.float32))
    (tmp_path / "f.bin").write_bytes(zrle.encode_frame(np.ones(3, np.int32)).astype("<u4").tobytes())
    src = tmp_path / ("g.npy" if command == "quantise" else "f.bin")
    (tmp_path / "adir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    rc, _, err = run(capsys, command, src, tmp_path / "adir")
    assert "is a directory" in named_error(rc, err, command)
    rc, _, err = run(capsys, command, src, tmp_path / "fifo")      # must not hang
    assert "not a regular file" in named_error(rc, err, command)
    rc, _, err = run(capsys, command, src, tmp_path / "missing" / "x.npy")
    assert "does not exist" in named_error(rc, err, command)
    assert listing(tmp_path / "adir") == []


def test_failed_command_leaves_an_existing_output_untouched(tmp_path, capsys):
    (tmp_path / "q.npy").write_bytes(b"precious")
    x = np.array([1.0, np.nan], np.float32)
    np.save(tmp_path / "g.npy", x)
    rc, _, err = run(capsys, "quantise", tmp_path / "g.npy", tmp_path / "q.npy")
    named_error(rc, err, "quantise")
    assert (tmp_path / "q.npy").read_bytes() == b"precious"
    assert listing(tmp_path) == ["g.npy", "q.npy"]                # no temp file left behind


def test_step_refuses_one_file_for_both_outputs(tmp_path, capsys):
    np.save(tmp_path / "g.npy", np.ones((2, 2), np.float32))
    rc, _, err = run(capsys, "step", tmp_path / "g.npy", "-", "--frame", tmp_path / "o",
                     "--residual-out", tmp_path / "o")
    assert "the same file as the output" in named_error(rc, err, "step")
    assert not (tmp_path / "o").exists()


def test_step_may_update_its_residual_in_place(tmp_path, capsys, any_backend):
    g = np.random.default_rng(3).normal(size=(6, 5)).astype(np.float32)
    np.save(tmp_path / "g.npy", g)
    np.save(tmp_path / "r.npy", np.zeros((6, 5), np.int32))
    argv = ["step", tmp_path / "g.npy", tmp_path / "r.npy", "--k", 2, "--frame", tmp_path / "f.bin",
            "--residual-out", tmp_path / "r.npy"]
    rc, _, err = run(capsys, *argv)
    assert rc == 0, err
    from gradblock.refmodel.compress import compress_layer
    ref = compress_layer(g, np.zeros((6, 5), np.int32), R=10.0, k=2)
    np.testing.assert_array_equal(np.load(tmp_path / "r.npy"), ref.residual_out)


# ------------------------------------------------------------- 4. smaller number checks

def test_expected_n_beyond_32_bits_is_named(tmp_path, capsys, any_backend):
    (tmp_path / "f.bin").write_bytes(zrle.encode_frame(np.ones(3, np.int32)).astype("<u4").tobytes())
    for value in ("99999999999999999999", "4294967296", "-1"):
        rc, _, err = run(capsys, "decode", tmp_path / "f.bin", tmp_path / "d.npy", "--expected-n", value)
        assert "--expected-n must be in 0..4294967295" in named_error(rc, err, "decode")
    rc, _, err = run(capsys, "decode", tmp_path / "f.bin", tmp_path / "d.npy", "--expected-n", "5.0")
    assert "--expected-n" in named_error(rc, err, "decode")
    rc, _, err = run(capsys, "decode", tmp_path / "f.bin", tmp_path / "d.npy", "--expected-n", "4")
    assert "SIZE_MISMATCH" in named_error(rc, err, "decode")


def test_inspect_negative_tokens_is_named(tmp_path, capsys):
    (tmp_path / "f.bin").write_bytes(zrle.encode_frame(np.ones(3, np.int32)).astype("<u4").tobytes())
    rc, _, err = run(capsys, "inspect", tmp_path / "f.bin", "--tokens", "-3")
    assert "--tokens must be >= 0" in named_error(rc, err, "inspect")
    rc, out, err = run(capsys, "inspect", tmp_path / "f.bin", "--tokens", "0")
    assert rc == 0 and "all frames ok" in out, err


@pytest.mark.parametrize("body", [b"", b"\x93NUMPY", b"\x93NUMPY\x09\x00", b"PK\x03\x04rest",
                                  npy_bytes("<f4", (-1,)), npy_bytes("|O", (1,), b"\0" * 8),
                                  npy_bytes(">f4", (1,), b"\0" * 4),
                                  b"\x93NUMPY\x01\x00\xff\xff" + b"{" * 70000])
def test_malformed_npy_is_one_named_line(tmp_path, capsys, body):
    (tmp_path / "x.npy").write_bytes(body)
    rc, _, err = run(capsys, "quantise", tmp_path / "x.npy", tmp_path / "q.npy")
    named_error(rc, err, "quantise")
    assert not (tmp_path / "q.npy").exists()


def test_input_that_is_a_directory_is_named(tmp_path, capsys):
    rc, _, err = run(capsys, "decode", tmp_path, tmp_path / "d.npy")
    assert "is a directory" in named_error(rc, err, "decode")


def test_fortran_order_npy_is_read_row_major(tmp_path, capsys):
    x = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    np.save(tmp_path / "g.npy", x)
    rc, _, err = run(capsys, "quantise", tmp_path / "g.npy", tmp_path / "q.npy")
    assert rc == 0, err
    from gradblock.refmodel.quantiser import quantise
    np.testing.assert_array_equal(np.load(tmp_path / "q.npy"), quantise(np.ascontiguousarray(x), 10.0).q)


# ------------------------------------------------------------ 5. one exit-code policy

def test_unexpected_exception_is_exit_1_one_line(capsys, monkeypatch):
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)

    def boom():
        raise KeyError("surprise")
    assert cli.run_guarded("thing", boom) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gradblock thing: internal error: KeyError" in err
    assert "Traceback" not in err


def test_debug_env_shows_the_traceback(capsys, monkeypatch):
    monkeypatch.setenv(cli.DEBUG_ENV, "1")

    def boom():
        raise KeyError("surprise")
    assert cli.run_guarded("thing", boom) == 1
    assert "Traceback" in capsys.readouterr().err


def test_named_errors_of_every_layer_are_exit_2(capsys):
    from gradblock.codec.errors import BadMagicError
    from gradblock.refmodel.quantiser import NonFiniteError
    from gradblock.refmodel.validation import BlockSizeError
    for exc in (BadMagicError("x", 0), NonFiniteError(1, 0), BlockSizeError("b")):
        def fail(exc=exc):
            raise exc
        assert cli.run_guarded("thing", fail) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("gradblock thing: ")


def test_system_exit_from_library_code_is_mapped(capsys):
    def exits(code):
        raise SystemExit(code)
    assert cli.run_guarded("thing", exits, "bad config value") == 2
    assert capsys.readouterr().err == "gradblock thing: bad config value\n"
    assert cli.run_guarded("thing", exits, 0) == 0
    assert cli.run_guarded("thing", exits, 3) == 3


def test_unknown_command_and_help(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert cli.main(["--help"]) == 0
    assert cli.main(["decode", "--help"]) == 0
    assert "usage: gradblock decode" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["quantise", "encode", "decode", "step", "inspect"])
def test_usage_errors_are_one_line(capsys, command):
    rc, _, err = run(capsys, command, "--no-such-option")
    assert f"see gradblock {command} --help" in named_error(rc, err, command)


@pytest.mark.parametrize("command", [c for c in cli.COMMANDS
                                     if c not in ("quantise", "encode", "decode", "step", "inspect")])
def test_every_command_exits_2_on_an_unknown_option(capsys, command):
    rc = cli.main([command, "--no-such-option"])
    err = capsys.readouterr().err
    if rc == 2 and "needs the optional package" in err:
        pytest.skip(f"{command} needs an optional package that is not installed: {err.strip()}")
    assert rc == 2 and "Traceback" not in err, err


def test_console_script_exit_status(tmp_path):
    """The installed entry point: exit status 2 and one line, through a real process."""
    import subprocess
    r = subprocess.run([sys.executable, "-c", "import sys; from gradblock.cli import main; "
                        "sys.exit(main())", "decode", str(tmp_path / "none.bin"),
                        str(tmp_path / "d.npy")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such file" in r.stderr


def test_frame_from_a_pipe_is_read_with_the_same_bound(tmp_path, capsys):
    """A pipe has no size to check first: it is read up to the limit and no further."""
    import threading
    frame = zrle.encode_frame(np.arange(1, 101, dtype=np.int32)).astype("<u4").tobytes()
    for limit, ok in ((100, True), (10, False)):
        r, w = os.pipe()
        writer = threading.Thread(target=lambda: (os.write(w, frame), os.close(w)))
        writer.start()
        try:
            rc, _, err = run(capsys, "decode", f"/dev/fd/{r}", tmp_path / "d.npy",
                             "--max-elements", limit)
        finally:
            writer.join()
            os.close(r)
        if ok:
            assert rc == 0, err
            np.testing.assert_array_equal(np.load(tmp_path / "d.npy"), np.arange(1, 101))
        else:
            assert "longer than the longest frame of 10 elements" in named_error(rc, err, "decode")


def test_a_message_that_already_names_the_command_is_not_prefixed_twice(capsys):
    def exits():
        raise SystemExit("gradblock thing: no table 99")
    assert cli.run_guarded("thing", exits) == 2
    assert capsys.readouterr().err == "gradblock thing: no table 99\n"


def test_paths_with_a_nul_character_are_named_errors(tmp_path, capsys):
    np.save(tmp_path / "g.npy", np.ones(3, np.float32))
    rc, _, err = run(capsys, "quantise", f"{tmp_path}/g\0.npy", tmp_path / "q.npy")
    assert "NUL" in named_error(rc, err, "quantise")
    rc, _, err = run(capsys, "quantise", tmp_path / "g.npy", f"{tmp_path}/q\0.npy")
    assert "NUL" in named_error(rc, err, "quantise")
    assert listing(tmp_path) == ["g.npy"]


def test_python2_npy_header_reads_without_stderr_noise(tmp_path, capsys):
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (3L,), }"
    header += b" " * (64 - (11 + len(header)) % 64) + b"\n"
    x = np.array([0.5, -1.0, 2.0], "<f4")
    (tmp_path / "g.npy").write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little")
                                     + header + x.tobytes())
    rc, _, err = run(capsys, "quantise", tmp_path / "g.npy", tmp_path / "q.npy")
    assert rc == 0 and err == ""
    from gradblock.refmodel.quantiser import quantise
    np.testing.assert_array_equal(np.load(tmp_path / "q.npy"), quantise(x, 10.0).q)


def test_npy_format_version_3_is_named(tmp_path, capsys):
    data = bytearray(npy_bytes("<f4", (1,), b"\0" * 4))
    data[6] = 3
    (tmp_path / "g.npy").write_bytes(bytes(data))
    rc, _, err = run(capsys, "quantise", tmp_path / "g.npy", tmp_path / "q.npy")
    assert "format version 3.0" in named_error(rc, err, "quantise")
