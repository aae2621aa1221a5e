"""Fuzzing the decoders with mutated and truncated frames (docs/spec.md §3.5).

Mutants are made in one jitted loop and validated by `codec.zrle_numba.check_frames` in
another, each frame a bounded view of one big array: the numba decoder must return a known
code for every one (no crash, no stray status), and on a sample the numpy reference must
report the same class and word index, or decode the same values.
"""
from __future__ import annotations

import numba as nb
import numpy as np
import pytest

from gradblock.codec import errors as E
from gradblock.codec import zrle, zrle_numba
from gradblock.codec.crc32_numba import CRC_INIT, crc32_final, crc32_update

VALID_CODES = {0} | {e.code for e in E.ALL_ERRORS}
HUGE_N = 1 << 22          # the reference allocates n values; skip cross-checks beyond this


def base_frames() -> list[tuple[np.ndarray, int]]:
    """(frame, n) pairs covering LMAX 2..2**24, empty/all-zero/dense/sparse payloads."""
    rng = np.random.default_rng(99)
    out = [(zrle.encode_frame(np.array([0, 0, 5, -1, 0], np.int32), 7), 5),
           (zrle.encode_frame(np.zeros(0, np.int32)), 0),
           (zrle.encode_frame(np.zeros(17, np.int32)), 17)]
    for i in range(45):
        n = int(rng.integers(1, 120))
        density = rng.choice([0.05, 0.3, 0.7, 1.0])
        p = rng.integers(-5, 6, n).astype(np.int32) * (rng.random(n) < density)
        p[rng.random(n) < 0.1] = rng.choice([-2**31, 2**31 - 1, 1, -1])
        lmax_log2 = int(rng.choice([1, 1, 2, 2, 3, 4, 8, 24]))
        out.append((zrle.encode_frame(p.astype(np.int32), i, 10.0, lmax_log2), n))
    return out


@nb.njit(cache=True)
def _mutate(bases, starts, ends, ns, n_cases, seed, words, case_starts, case_ends, expected):
    """Write n_cases mutants of the base frames into `words`; return the words used.

    Each mutant gets 1-3 edits (bit flip, word replacement, insertion, deletion, truncation,
    block duplication), then half of them get their trailer CRC recomputed over everything
    but the last word, so the structural checks behind the CRC are reached too."""
    np.random.seed(seed)
    specials = np.array([0, 1, 2, 3, 4, 5, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 0x5A524C45,
                         0x00000801, 0x41200000, 0x7F800000], dtype=np.uint32)
    buf = np.empty(4096, dtype=np.uint32)
    at = 0
    for c in range(n_cases):
        b = np.random.randint(0, starts.size)
        L = ends[b] - starts[b]
        buf[:L] = bases[starts[b]:ends[b]]
        for _ in range(np.random.randint(1, 4)):
            op = np.random.randint(0, 6)
            if op == 0 and L > 0:                               # flip one bit
                buf[np.random.randint(0, L)] ^= np.uint32(1) << np.random.randint(0, 32)
            elif op == 1 and L > 0:                             # replace one word
                i = np.random.randint(0, L)
                r = np.random.randint(0, 4)
                if r == 0:
                    buf[i] = np.uint32(np.random.randint(0, 2**32))
                elif r == 1:
                    buf[i] = specials[np.random.randint(0, specials.size)]
                else:
                    buf[i] = np.uint32(ns[b] + np.random.randint(-2, 3)) if ns[b] > 2 else 3
            elif op == 2 and L < 4000:                          # insert a word
                i = np.random.randint(0, L + 1)
                buf[i + 1:L + 1] = buf[i:L].copy()
                buf[i] = specials[np.random.randint(0, specials.size)]
                L += 1
            elif op == 3 and L > 0:                             # delete a word
                i = np.random.randint(0, L)
                buf[i:L - 1] = buf[i + 1:L].copy()
                L -= 1
            elif op == 4 and L > 0:                             # truncate
                L = np.random.randint(0, L)
            elif op == 5 and 2 < L < 3000:                      # duplicate a stretch
                i = np.random.randint(0, L - 1)
                j = min(L, i + 1 + np.random.randint(0, 6))
                seg = buf[i:j].copy()
                buf[j + (j - i):L + (j - i)] = buf[j:L].copy()
                buf[j:j + (j - i)] = seg
                L += j - i
        if L > 0 and np.random.randint(0, 2) == 0:
            buf[L - 1] = crc32_final(crc32_update(np.uint32(CRC_INIT), buf, 0, L - 1))
        words[at:at + L] = buf[:L]
        case_starts[c] = at
        case_ends[c] = at + L
        expected[c] = ns[b] if np.random.randint(0, 2) == 0 else -1
        at += L
    return at


def make_mutants(n_cases: int, seed: int):
    bases = base_frames()
    flat = np.concatenate([f for f, _ in bases])
    ends = np.cumsum([f.size for f, _ in bases]).astype(np.int64)
    starts = ends - [f.size for f, _ in bases]
    ns = np.array([n for _, n in bases], dtype=np.int64)
    longest = int(max(f.size for f, _ in bases))
    words = np.empty(n_cases * (longest + 20), dtype=np.uint32)
    cs = np.empty(n_cases, np.int64)
    ce = np.empty(n_cases, np.int64)
    exp = np.empty(n_cases, np.int64)
    used = _mutate(flat, starts, ends, ns, n_cases, seed, words, cs, ce, exp)
    return words[:used], cs, ce, exp


def reference_outcome(words, expected_n):
    try:
        f = zrle.decode_frame(words, expected_n)
    except E.FrameError as e:
        return (e.code, e.word)
    return (0, f.n_words, f.values.tolist())


def numba_outcome(words, expected_n):
    try:
        f = zrle_numba.decode_frame(words, expected_n)
    except E.FrameError as e:
        return (e.code, e.word)
    return (0, f.n_words, f.values.tolist())


def add_outcome(words, expected_n):
    acc = np.zeros(header_n(words), dtype=np.int64)
    try:
        f = zrle_numba.decode_add(words, acc, expected_n)
    except E.FrameError as e:
        return (e.code, e.word)
    return (0, f.n_words, acc.tolist())


def header_n(frame: np.ndarray) -> int:
    return int(frame[3]) if frame.size > 3 else 0


def fuzz(n_cases: int, seed: int, n_cross: int):
    words, starts, ends, exp = make_mutants(n_cases, seed)
    codes, at = zrle_numba.check_frames(words, starts, ends, exp)
    lengths = ends - starts
    assert set(np.unique(codes).tolist()) <= VALID_CODES
    assert np.all(at >= 0) and np.all(at <= lengths)
    ok = codes == 0
    # a frame that decodes is at least header + trailer long and never longer than its input
    assert np.all(at[ok] >= 7)

    # the numpy reference agrees on a sample (the same class and word, or the same values)
    rng = np.random.default_rng(seed)
    sample = rng.choice(n_cases, size=min(n_cross, n_cases), replace=False)
    compared = 0
    for c in sample:
        frame = words[starts[c]:ends[c]]
        if header_n(frame) > HUGE_N:
            continue
        e = None if exp[c] < 0 else int(exp[c])
        ref = reference_outcome(frame, e)
        assert ref == numba_outcome(frame, e), (int(c), frame.tolist(), e)
        if header_n(frame) <= 4096:
            assert ref == add_outcome(frame, e), (int(c), frame.tolist(), e)
        assert ref[:2] == (int(codes[c]), int(at[c])), int(c)
        compared += 1
    assert compared >= 0.8 * len(sample)
    return codes


def test_fuzz_quick():
    codes = fuzz(5000, seed=1, n_cross=1500)
    seen = set(np.unique(codes).tolist())
    # the mutants reach deep into the frame: most classes, including a valid decode, occur
    assert {0, 1, 5, 6, 9, 10, 11, 12, 13, 14} <= seen, sorted(seen)


@pytest.mark.slow
def test_fuzz_many():
    seen = set()
    for seed in range(2, 10):                       # 8 x 50k mutants in the jitted loops
        codes = fuzz(50_000, seed=seed, n_cross=1000)
        seen |= set(np.unique(codes).tolist())
    assert VALID_CODES <= seen, sorted(VALID_CODES - seen)


def test_every_single_bit_flip_of_small_frames():
    small = [(f, n) for f, n in base_frames() if f.size <= 16]
    assert len(small) >= 4
    for frame, n in small[:5]:
        for i in range(frame.size):
            for bit in range(32):
                bad = frame.copy()
                bad[i] ^= np.uint32(1 << bit)
                for e in (None, n):
                    assert reference_outcome(bad, e) == numba_outcome(bad, e), (i, bit, e)


def test_every_truncation_of_every_base_frame():
    for frame, n in base_frames():
        for length in range(frame.size):
            assert reference_outcome(frame[:length], n) == numba_outcome(frame[:length], n) \
                == (E.TruncatedError.code, length)


def test_decode_into_never_writes_outside_its_view():
    words, starts, ends, exp = make_mutants(3000, seed=11)
    guard = 0x5EED
    arena = np.full(200 + 64, guard, dtype=np.int32)
    view = arena[32:232]                            # 200 values with guards on both sides
    for c in range(3000):
        frame = words[starts[c]:ends[c]]
        try:
            f = zrle_numba.decode_into(frame, view, None if exp[c] < 0 else int(exp[c]))
            assert f.values.size <= view.size
        except (E.FrameError, ValueError):
            pass
        assert np.all(arena[:32] == guard) and np.all(arena[232:] == guard), c


# =============================================================================== the CLI
# Mutated inputs fed to the subcommands in-process (gradblock.cli.main): .npy files, frames,
# golden directories and training checkpoints. Every outcome must be a success or one named
# line with exit status 2 (golden --check may also report FAILed cases, exit 1), never a
# traceback, never an output larger than the limit, never a file beside the outputs asked.

import contextlib
import json
import os
import shutil
import signal
import zlib

from gradblock import cli
from gradblock.backends import BACKEND_ENV

CLI_LIMIT = 4096                  # --max-elements for the fuzzed commands: outputs stay small
NPY_HEADER_ROOM = 1 << 12


@contextlib.contextmanager
def deadline(seconds: int):
    """Fail (instead of hanging the suite) if a command blocks, e.g. on a FIFO."""
    def expired(*_):
        raise TimeoutError(f"command still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def cli_outcome(capsys, argv, allowed=(0, 2)) -> tuple[int, str, str]:
    command = str(argv[0])
    with deadline(120):
        rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in out, (argv, err)
    assert rc in allowed, (argv, rc, err[-2000:])
    if rc == 2:
        lines = err.strip().splitlines()
        assert lines and lines[-1].startswith(f"gradblock {command}: "), (argv, err)
        assert len(lines) == 1, (argv, err)
    assert "internal error" not in err, (argv, err)
    return rc, out, err


def mutate_bytes(rng: np.random.Generator, data: bytes, hot: int) -> bytes:
    """1-3 edits, most of them in the first `hot` bytes (a header)."""
    b = bytearray(data)
    for _ in range(int(rng.integers(1, 4))):
        op = int(rng.integers(0, 6))
        at = int(rng.integers(0, max(1, min(len(b), hot) if rng.random() < 0.7 else len(b))))
        if op == 0 and b:                                      # flip a bit
            b[min(at, len(b) - 1)] ^= 1 << int(rng.integers(0, 8))
        elif op == 1 and b:                                    # a digit or a structural char
            b[min(at, len(b) - 1)] = rng.choice(list(b"0123456789-(),:'{} Lx\n\x00\xff"))
        elif op == 2:                                          # truncate
            del b[at:]
        elif op == 3:                                          # insert junk
            b[at:at] = rng.bytes(int(rng.integers(1, 9)))
        elif op == 4:                                          # duplicate a slice
            b[at:at] = b[at:at + int(rng.integers(1, 40))]
        else:                                                  # delete a slice
            del b[at:at + int(rng.integers(1, 9))]
    return bytes(b)


def hostile_npy(rng: np.random.Generator, descr: str) -> bytes:
    """A well-formed .npy header with a hostile shape, dtype or order over a short body."""
    shapes = [(), (0,), (3, 0, 5), (2**34,), (2**31, 2**31), (2**62, 4), (CLI_LIMIT + 1,),
              (CLI_LIMIT,), (7, 9), (-1,), (10**30,)]
    shape = shapes[int(rng.integers(0, len(shapes)))]
    descr = rng.choice([descr, descr, "<f8", ">f4", ">i4", "|u1", "|O", "<U3", "|b1"])
    header = repr({"descr": str(descr), "fortran_order": bool(rng.random() < 0.3),
                   "shape": shape}).encode()
    header += b" " * (64 - (11 + len(header)) % 64) + b"\n"
    body = rng.bytes(int(rng.choice([0, 4, 252, 4 * CLI_LIMIT])))
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + body


def npy_of(arr: np.ndarray) -> bytes:
    import io
    f = io.BytesIO()
    np.save(f, arr, allow_pickle=False)
    return f.getvalue()


def check_outputs(tmp, expected_inputs: set[str], outputs: list[str], rc: int) -> None:
    """Only the outputs asked may appear (none on failure... unless they existed), each within
    the size a CLI_LIMIT-element array or frame can take."""
    present = set(os.listdir(tmp))
    extra = present - expected_inputs - set(outputs)
    assert not extra, extra                                   # no temp file, no 'out.bin.npy'
    if rc != 0:
        assert not present & set(outputs), present & set(outputs)
    for name in present & set(outputs):
        assert os.path.getsize(os.path.join(tmp, name)) <= NPY_HEADER_ROOM + 4 * max_frame_words_limit()


def max_frame_words_limit() -> int:
    return zrle.max_frame_words(CLI_LIMIT)


def fuzz_array_commands(tmp_path, capsys, n_cases: int, seed: int) -> dict:
    """quantise / encode / step on mutated and hostile .npy files."""
    rng = np.random.default_rng(seed)
    outcomes = {0: 0, 2: 0}
    for c in range(n_cases):
        case = tmp_path / f"a{c}"
        case.mkdir()
        shape = tuple(int(d) for d in rng.integers(0, 9, int(rng.integers(0, 4))))
        g = (rng.normal(0, 5, shape) * (rng.random(shape) < 0.5)).astype(np.float32)
        if g.size and rng.random() < 0.1:
            g.reshape(-1)[int(rng.integers(0, g.size))] = rng.choice([np.nan, np.inf, -np.inf])
        command = rng.choice(["quantise", "encode", "step"])
        arr = g if command != "encode" else \
            np.nan_to_num(g * 100, nan=0, posinf=0, neginf=0).astype(np.int32)
        descr = "<f4" if command != "encode" else "<i4"
        good = npy_of(arr)
        r = rng.random()
        data = good if r < 0.15 else hostile_npy(rng, descr) if r < 0.4 else \
            mutate_bytes(rng, good, 128)
        (case / "in.npy").write_bytes(data)
        inputs = {"in.npy"}
        if command == "step":
            res = rng.random()
            if res < 0.4:
                residual = "-"
            else:
                rdata = npy_of(rng.integers(-2**31, 2**31, shape, dtype=np.int64).astype(np.int32))
                (case / "r.npy").write_bytes(rdata if res < 0.7 else mutate_bytes(rng, rdata, 128))
                residual, inputs = case / "r.npy", inputs | {"r.npy"}
            options = []
            for opt, values in (("--k", ["1", "2", "0.5", "0", "-1", "1e400", "nan", "0.999999",
                                          "3.0", "99999999999999999999"]),
                                ("--block-size", ["1", "3", "0", "-1", "4294967295", "4294967296",
                                                   "9223372036854775808", "1e23"]),
                                ("--lmax-log2", ["1", "8", "24", "0", "25", "-1"]),
                                ("--layer-id", ["0", "4294967295", "4294967296", "-1"]),
                                ("--range", ["10", "1e-30", "3e38", "1e39", "0", "-1", "nan", "inf"])):
                if rng.random() < 0.3:
                    options += [opt, str(rng.choice(values))]
            outputs = ["f.bin", "r_out.npy"]
            argv = ["step", case / "in.npy", residual, "--frame", case / "f.bin",
                    "--residual-out", case / "r_out.npy", "--max-elements", CLI_LIMIT] + options
        else:
            outputs = ["out.bin"]
            argv = [command, case / "in.npy", case / "out.bin", "--max-elements", CLI_LIMIT]
            if rng.random() < 0.3:
                argv += ["--range", str(rng.choice(["10", "0", "nan", "1e39", "2.5"]))]
        rc, _, _ = cli_outcome(capsys, argv)
        check_outputs(case, inputs, outputs, rc)
        outcomes[rc] += 1
        shutil.rmtree(case)
    return outcomes


def fuzz_frame_commands(tmp_path, capsys, n_cases: int, seed: int) -> dict:
    """decode / inspect on mutated frames and messages (half with the CRC made right again,
    so the checks behind it are reached), some claiming enormous n."""
    rng = np.random.default_rng(seed)
    bases = [f for f, _ in base_frames()]
    outcomes = {0: 0, 2: 0}
    for c in range(n_cases):
        w = [bases[int(rng.integers(0, len(bases)))] for _ in range(int(rng.integers(1, 4)))]
        words = np.concatenate(w).astype(np.uint32)
        for _ in range(int(rng.integers(0, 4))):
            i = int(rng.integers(0, words.size))
            r = rng.random()
            if r < 0.3:
                words[i] ^= np.uint32(1 << int(rng.integers(0, 32)))
            elif r < 0.6:
                words[i] = rng.choice(np.array([0, 1, 0xFFFFFFFF, 0x80000000, CLI_LIMIT,
                                                CLI_LIMIT + 1, zrle.MAGIC], np.uint32))
            elif r < 0.8:
                words = words[:i]
            else:
                words = np.insert(words, i, np.uint32(rng.integers(0, 2**32)))
            if not words.size:
                break
        if words.size > 2 and rng.random() < 0.5:
            words[-1] = zlib.crc32(words[:-1].astype("<u4").tobytes())
        data = words.astype("<u4").tobytes()
        if rng.random() < 0.1:
            data = data[:-int(rng.integers(1, 4))] if data else data   # not whole words
        (tmp_path / "m.bin").write_bytes(data)
        if rng.random() < 0.5:
            argv = ["decode", tmp_path / "m.bin", tmp_path / "d.npy", "--max-elements", CLI_LIMIT]
            if rng.random() < 0.3:
                argv += ["--expected-n", str(rng.choice(["5", "0", "-1", "4294967296",
                                                         "99999999999999999999", "5.0"]))]
            outputs = ["d.npy"]
        else:
            argv = ["inspect", tmp_path / "m.bin", "--max-elements", CLI_LIMIT,
                    "--tokens", str(rng.choice(["0", "3", "-3", "99"]))]
            outputs = []
        rc, _, _ = cli_outcome(capsys, argv)
        check_outputs(tmp_path, {"m.bin"}, outputs, rc)
        outcomes[rc] += 1
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_path / "d.npy")
    return outcomes


@pytest.fixture(params=["auto", "reference"])
def cli_backend(request, monkeypatch):
    monkeypatch.setenv(BACKEND_ENV, request.param)     # read by every command call
    yield request.param


def test_cli_fuzz_arrays_quick(tmp_path, capsys, cli_backend):
    outcomes = fuzz_array_commands(tmp_path, capsys, 150, seed=21)
    assert outcomes[0] >= 10 and outcomes[2] >= 50, outcomes     # both paths exercised


def test_cli_fuzz_frames_quick(tmp_path, capsys, cli_backend):
    outcomes = fuzz_frame_commands(tmp_path, capsys, 200, seed=22)
    assert outcomes[0] >= 10 and outcomes[2] >= 50, outcomes


@pytest.mark.slow
def test_cli_fuzz_arrays_and_frames_many(tmp_path, capsys, cli_backend):
    for seed in range(30, 34):
        fuzz_array_commands(tmp_path, capsys, 1000, seed=seed)
        fuzz_frame_commands(tmp_path, capsys, 1500, seed=seed)


# ------------------------------------------------------------------ golden directories

GOLDEN_CASES = ("one_element", "tie_all_equal", "nan_quantiser_only", "short_last_block_1d")


@pytest.fixture(scope="module")
def small_golden(tmp_path_factory):
    """A real golden directory of four small synthetic cases (gradblock's own writer)."""
    from gradblock.golden.cases import synthetic_specs
    from gradblock.golden.compute import compute_case
    from gradblock.refmodel.compress import compress_layer
    from gradblock.golden.format import GENERATOR_PREFIX, write_golden
    specs = [s for s in synthetic_specs(0) if s.name in GOLDEN_CASES]
    assert len(specs) == len(GOLDEN_CASES)
    out = tmp_path_factory.mktemp("golden") / "g"
    write_golden(out, {"generator": f"{GENERATOR_PREFIX} fuzz fixture"},
                 (compute_case(s, compress_layer) for s in specs))
    return out


def tree_state(root) -> dict:
    """(size, mtime, kind) of everything under root: a check must change nothing."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            state[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return state


HOSTILE_JSON = [-1, 0, 2**70, -2**63, 1e308, 5.5, float("nan"), True, None, "", "x", [], {},
                [2**70], [1, -1], [0] * 40, {"a": 1}, "../outside.npz", "/dev/zero", "/etc/passwd",
                "fifo", "sub/../../x", "a" * 5000, "case\x00.npz", ".", "manifest.json"]


def mutate_manifest(rng: np.random.Generator, manifest: dict) -> str:
    """A JSON-level edit (a field replaced, removed or added, a case duplicated or dropped)
    or a byte-level one on the serialised text."""
    m = json.loads(json.dumps(manifest))
    r = rng.random()
    if r < 0.1:                                                # deep nesting
        depth = int(rng.choice([50, 5000, 200_000]))
        return json.dumps(m)[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"
    if r < 0.3:
        return mutate_bytes(rng, json.dumps(m, indent=1).encode(), 1 << 20).decode("latin-1")
    for _ in range(int(rng.integers(1, 3))):
        cases = m.get("cases") if isinstance(m.get("cases"), list) else None
        target = m if not cases or rng.random() < 0.15 else cases[int(rng.integers(0, len(cases)))]
        if not isinstance(target, dict):
            continue
        keys = list(target)
        op = rng.random()
        if op < 0.6 and keys:
            key = keys[int(rng.integers(0, len(keys)))]
            value = HOSTILE_JSON[int(rng.integers(0, len(HOSTILE_JSON)))]
            if key == "hex" and isinstance(target[key], dict) and target[key] and rng.random() < 0.7:
                sub = list(target[key])
                target[key][sub[int(rng.integers(0, len(sub)))]] = value
            else:
                target[key] = value
        elif op < 0.8 and keys:
            del target[keys[int(rng.integers(0, len(keys)))]]
        elif cases is not None and op < 0.9:
            cases.append(json.loads(json.dumps(cases[0])))     # a duplicate name
        elif cases:
            cases.pop(int(rng.integers(0, len(cases))))
    return json.dumps(m, indent=1, allow_nan=True)


def manifest_reads(d) -> bool:
    from gradblock.golden.format import GoldenError, read_manifest
    try:
        read_manifest(d)
    except GoldenError:
        return False
    return True


def fuzz_golden(small_golden, tmp_path, capsys, n_cases: int, seed: int,
                verify_too: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    manifest = json.loads((small_golden / "manifest.json").read_text())
    outcomes = {0: 0, 1: 0, 2: 0}
    (tmp_path / "outside.npz").write_bytes(b"not ours")
    for c in range(n_cases):
        d = tmp_path / f"g{c}"
        shutil.copytree(small_golden, d)
        os.mkfifo(d / "fifo")
        r = rng.random()
        if r < 0.6:
            (d / "manifest.json").write_text(mutate_manifest(rng, manifest), encoding="latin-1")
        else:                                                  # a case's npz or hex file
            files = sorted(p for p in d.rglob("*") if p.is_file() and p.name != "manifest.json")
            victim = files[int(rng.integers(0, len(files)))]
            victim.write_bytes(mutate_bytes(rng, victim.read_bytes(), 256))
        before, outside = tree_state(d), tree_state(tmp_path / "outside.npz")
        rc, out, err = cli_outcome(capsys, ["golden", "--check", d], allowed=(0, 1, 2))
        if rc == 1:                                            # a readable set that differs
            assert "FAIL " in out, (out, err)
        if r < 0.6 and verify_too and not manifest_reads(d):
            # a manifest the format refuses: verify must refuse it too, before any simulator
            vrc, _, verr = cli_outcome(capsys, ["verify", "--vectors", d])
            assert vrc == 2, verr
        assert tree_state(d) == before                         # a check writes nothing
        assert tree_state(tmp_path / "outside.npz") == outside
        outcomes[rc] += 1
        shutil.rmtree(d)
    return outcomes


def test_cli_fuzz_golden_check_quick(small_golden, tmp_path, capsys):
    outcomes = fuzz_golden(small_golden, tmp_path, capsys, 60, seed=41, verify_too=True)
    assert outcomes[2] >= 20 and outcomes[0] + outcomes[1] >= 5, outcomes


@pytest.mark.slow
def test_cli_fuzz_golden_check_many(small_golden, tmp_path, capsys):
    for seed in range(42, 45):
        fuzz_golden(small_golden, tmp_path, capsys, 200, seed=seed, verify_too=True)


# ------------------------------------------------------------------ training checkpoints

TRAIN_ARGS = ["--data", "digits", "--train-subset", "64", "--test-subset", "32", "--workers", "2",
              "--batch-size", "8", "--epochs", "1", "--compressor", "coarse", "--no-progress",
              "--threads", "1"]


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory):
    """A real checkpoint after two steps of a tiny coarse run (gradblock train's own writer)."""
    pytest.importorskip("torch", reason="checkpoints are torch files: needs the [torch] extra")
    d = tmp_path_factory.mktemp("ckpt")
    rc = cli.main(["train", *TRAIN_ARGS, "--max-steps", "2", "--checkpoint", str(d / "c.pt"),
                   "--out", str(d / "run")])
    assert rc == 0 and (d / "c.pt").is_file()
    return d / "c.pt"


def _hostile_value(rng, like):
    import torch
    choices = [-5, 0, 2**70, -1.5, float("nan"), None, "x", [], {}, True,
               torch.zeros(3), torch.zeros(0), torch.full((2, 2), float("nan"))]
    if isinstance(like, torch.Tensor) and like.numel():
        choices += [like.reshape(-1)[:-1].clone(), like.to(torch.float64), like.to(torch.int32),
                    like.t().clone() if like.ndim == 2 else like.unsqueeze(0).clone()]
    return choices[int(rng.integers(0, len(choices)))]


def mutate_checkpoint(rng: np.random.Generator, ckpt: dict) -> dict:
    """One to three edits anywhere in the nested state: a value replaced by a hostile one
    (wrong type, range or shape), a key removed, or a container emptied."""
    import copy
    c = copy.deepcopy(ckpt)
    for _ in range(int(rng.integers(1, 4))):
        node, path = c, []
        while True:                                        # walk down to a random container
            keys = list(node) if isinstance(node, dict) else list(range(len(node))) \
                if isinstance(node, list) else []
            if not keys:
                break
            key = keys[int(rng.integers(0, len(keys)))]
            child = node[key]
            if not isinstance(child, (dict, list)) or not child or rng.random() < 0.3:
                r = rng.random()
                if r < 0.6:
                    node[key] = _hostile_value(rng, child)
                elif r < 0.85 and isinstance(node, dict):
                    del node[key]
                elif isinstance(child, (dict, list)):
                    node[key] = type(child)()
                break
            node, path = child, path + [key]
    return c


def fuzz_checkpoints(small_checkpoint, tmp_path, capsys, n_cases: int, seed: int) -> dict:
    import torch
    rng = np.random.default_rng(seed)
    base = torch.load(small_checkpoint, weights_only=True)
    raw = small_checkpoint.read_bytes()
    outcomes = {0: 0, 2: 0}
    for c in range(n_cases):
        d = tmp_path / f"c{c}"
        d.mkdir()
        if rng.random() < 0.2:                             # a damaged file
            (d / "m.pt").write_bytes(mutate_bytes(rng, raw, len(raw)))
        else:
            torch.save(mutate_checkpoint(rng, base), d / "m.pt")
        rc, _, err = cli_outcome(capsys, ["train", *TRAIN_ARGS, "--max-steps", "3",
                                          "--resume", d / "m.pt", "--out", d / "run"])
        outcomes[rc] += 1
        shutil.rmtree(d)
    return outcomes


def _targeted_edits():
    """The checkpoint edits issue 9 names, plus tensors where plain values belong (a crafted
    file may hold any of them)."""
    import torch

    def edit(path, value=None, delete=False):
        def apply(c):
            node = c
            for key in path[:-1]:
                node = node[key]
            if delete:
                del node[path[-1]]
            else:
                node[path[-1]] = value
        return "/".join(map(str, path)) + ("" if not delete else " (deleted)"), apply
    return [edit(["global_step"], -5), edit(["global_step"], 2**70),
            edit(["compressor", "workers", 0], {}),
            edit(["compressor", "workers", 0, "layers"], delete=True),
            edit(["model"], delete=True),
            edit(["run_config", "warmup_epochs"], torch.zeros(0)),
            edit(["run_config", "k"], torch.ones(2)),
            edit(["epoch"], torch.tensor(0)),
            edit(["optimizer", "param_groups", 0, "lr"], float("nan"))]


@pytest.mark.parametrize("index", range(9))
def test_cli_checkpoint_targeted_edits(small_checkpoint, tmp_path, capsys, index):
    import copy

    import torch
    what, apply = _targeted_edits()[index]
    ckpt = copy.deepcopy(torch.load(small_checkpoint, weights_only=True))
    apply(ckpt)
    torch.save(ckpt, tmp_path / "m.pt")
    rc, _, err = cli_outcome(capsys, ["train", *TRAIN_ARGS, "--max-steps", "3", "--resume",
                                      tmp_path / "m.pt", "--out", tmp_path / "run"])
    assert rc == 2, (what, err)                             # none of these may resume


def test_cli_fuzz_checkpoints_quick(small_checkpoint, tmp_path, capsys):
    outcomes = fuzz_checkpoints(small_checkpoint, tmp_path, capsys, 6, seed=51)
    assert outcomes[2] >= 1, outcomes


@pytest.mark.slow
def test_cli_fuzz_checkpoints_many(small_checkpoint, tmp_path, capsys):
    fuzz_checkpoints(small_checkpoint, tmp_path, capsys, 60, seed=52)
