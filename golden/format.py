"""The golden-vector format (docs/golden.md): the one module that writes, loads and validates it.

A golden directory holds `manifest.json` plus, per case, `<case>.npz` and `<case>/<array>.hex`
($readmemh-ready: one lowercase hex word per line, 8 digits; 16 for block_norms). Every writer
(`gradblock golden`, golden/datapath.py) and every reader (`golden --check`, `verify`,
the cocotb testbenches) goes through here, so a directory is checked against one schema before
any case file is opened.

The manifest is untrusted input: it is read with a size bound, validated field by field (types,
ranges, names as plain file names, a bounded element count), and case files are opened only
inside the directory, as regular files, without blocking (a FIFO is refused, not waited on).
Arrays are read only after their .npy header matches the manifest, so no allocation is sized by
a header alone.

Writing goes to a fresh temporary directory beside the target, then moves in. Files of an
earlier manifest are removed only when they sit at the golden layout's paths and still hold the
bytes gradblock wrote there (each case entry records the sha256 of its files); anything else in
the directory is left alone, and a clash with a file gradblock did not write is refused.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import stat
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gradblock.codec import fileio
from gradblock.codec.errors import GradblockError
from gradblock.codec.zrle import LMAX_LOG2_MAX, LMAX_LOG2_MIN, max_frame_words
from gradblock.refmodel.validation import NORMS
from gradblock.golden import plain

FORMAT = "gradblock-golden"
VERSION = 1
MANIFEST = "manifest.json"
GENERATOR_PREFIX = "gradblock"         # a manifest whose generator starts so was written by us
ALL_STAGES = ("quantiser", "feedback", "norms", "select", "encode", "decode", "top")
QUANTISER_ONLY = ("quantiser",)
# momentum correction (docs/spec.md §7): a case listing this stage is a momentum_layer step;
# "quantised" stays Q(g), "accumulated" / "feedback_sat" are sat(r + u') and its flags
MOMENTUM_STAGE = "momentum"
STAGES = ALL_STAGES + (MOMENTUM_STAGE,)
BASE_ARRAY_DTYPES = {
    "grad_bits": np.uint32, "residual_in": np.int32, "quantised": np.int32,
    "quant_sat": np.uint8, "quant_nan": np.uint8, "accumulated": np.int32,
    "feedback_sat": np.uint8, "block_norms": np.uint64, "selected": np.int64,
    "payload": np.int32, "residual_out": np.int32, "frame": np.uint32,
}
MOMENTUM_ARRAY_DTYPES = {
    "velocity_in": np.int32,      # u
    "velocity": np.int32,         # u' = sat(mul(m, u) + Q(g)), before masking
    "momentum_sat": np.uint8,     # |mul(m, u) + Q(g)| > QMAX
    "velocity_out": np.int32,     # u' masked on the sent blocks (the next step's u)
}
ARRAY_DTYPES = BASE_ARRAY_DTYPES | MOMENTUM_ARRAY_DTYPES
QUANTISER_ARRAYS = ("grad_bits", "quantised", "quant_sat", "quant_nan")
M_FIX_MAX = 2**16 - 1
HEX_DIGITS = {name: 16 if name == "block_norms" else 8 for name in ARRAY_DTYPES}

# The exchange (docs/spec.md §5; docs/golden.md "Exchange cases"): N workers' frames of one
# layer -> int64 sums (refmodel.exchange.sum_messages). These cases live in the manifest's own
# list "exchange" (schema below), beside "cases", so readers of the compress cases never see them.
EXCHANGE_STAGE = "exchange"
EXCHANGE_ARRAY_DTYPES = {
    "frames": np.uint32,          # the workers' frames, concatenated in worker order
    "sums": np.int64,             # n int64 sums; empty when the exchange must fail
}
EXCHANGE_KEYS = ("name", "kind", "description", "stages", "n", "n_workers", "frame_words",
                 "layer_id", "range_bits", "error", "npz", "hex")
EXCHANGE_ERROR_KEYS = ("name", "worker", "word")
EXCHANGE_MAX_WORKERS = 64
ALL_DTYPES = ARRAY_DTYPES | EXCHANGE_ARRAY_DTYPES
HEX_DIGITS |= {"frames": 8, "sums": 16}

# Limits on what a manifest may describe (documented in docs/golden.md).
MAX_MANIFEST_BYTES = 16 << 20          # the full golden set's manifest is ~100 KB
MAX_JSON_DEPTH = 8                     # manifest -> cases -> entry -> hex/source -> value
MAX_CASES = 10_000
MAX_CASE_ELEMENTS = 1 << 24            # per case: 64 MiB per int32 array
MAX_NDIM = 8
MAX_NAME_LENGTH = 128
MAX_TEXT_LENGTH = 4096                 # description, kind, generator
MAX_FILE_BYTES = 1 << 30               # any one case file
LMAX_LOG2_RANGE = (LMAX_LOG2_MIN, LMAX_LOG2_MAX)
RANGE_BITS_MAX = 0x7F7FFFFF            # largest finite positive float32
META_KEYS = ("name", "kind", "description", "stages", "shape", "n", "layer_id", "range",
             "range_bits", "M", "k_shift", "lmax_log2", "block_size", "n_blocks", "k_req",
             "k_eff", "sat_quant", "sat_feedback", "frame_words", "npz", "hex")
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
# the block norm kind (docs/spec.md §2.3): an optional case key; a case without it (written
# before L2 existed) is an L1 case, so older golden directories still load and check
NORM_KINDS = NORMS                      # the contract's one list (refmodel/validation.py)


def case_norm(meta: dict) -> str:
    """A validated case entry's block norm kind: its "norm", or "l1" when absent."""
    return meta.get("norm", "l1")


class GoldenError(GradblockError):
    """A golden directory is missing, unreadable, not in this format, or its manifest breaks the
    schema. The message is one line and names the file and the field."""


@dataclass
class GoldenCase:
    name: str
    meta: dict
    arrays: dict


def arrays_for(stages) -> tuple[str, ...]:
    """Arrays a case carries: the quantiser's four in a quantiser-only case, the compress
    step's twelve, plus the four velocity arrays in a momentum case; frames and sums in an
    exchange case."""
    if tuple(stages) == (EXCHANGE_STAGE,):
        return tuple(EXCHANGE_ARRAY_DTYPES)
    if tuple(stages) == QUANTISER_ONLY:
        return QUANTISER_ARRAYS
    if MOMENTUM_STAGE in stages:
        return tuple(ARRAY_DTYPES)
    return tuple(BASE_ARRAY_DTYPES)


def npz_name(case: str) -> str:
    return f"{case}.npz"


def hex_name(case: str, array: str) -> str:
    return f"{case}/{array}.hex"


# ------------------------------------------------------------------------------ hex text

def hex_text(arr: np.ndarray, digits: int) -> str:
    """One lowercase hex word per line, two's complement for signed values."""
    a = np.asarray(arr).reshape(-1)
    if digits == 16:
        vals = a.astype(np.uint64)
    elif a.dtype.kind == "i" and a.dtype.itemsize <= 4:
        vals = a.astype(np.int32).view(np.uint32)
    else:
        if a.size and (int(a.min()) < 0 or int(a.max()) >= 2**32):
            raise ValueError("values outside 0..2^32-1 cannot be written as 8 hex digits")
        vals = a.astype(np.uint32)
    fmt = f"{{:0{digits}x}}".format
    return "".join(fmt(v) + "\n" for v in vals.tolist())


def read_hex(path: Path, digits: int, max_lines: int = MAX_CASE_ELEMENTS) -> list[int]:
    """Parse a hex file strictly: every line exactly `digits` lowercase hex digits."""
    text = _read_regular(Path(path), (max_lines * (digits + 1)) or 1).decode("ascii", "replace")
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if len(line) != digits or line.lower() != line or \
                any(c not in "0123456789abcdef" for c in line):
            raise GoldenError(f"{path}:{i}: {line[:40]!r} is not {digits} lowercase hex digits")
        out.append(int(line, 16))
    return out


# ------------------------------------------------------------------------------ safe file access

def _open_regular(path: Path) -> int:
    """An fd for a regular file, opened without blocking (a FIFO must not hang us) and refused
    unless it is a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise GoldenError(f"{path}: missing") from None
    except OSError as e:
        raise GoldenError(f"{path}: cannot open ({e.strerror or e})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise GoldenError(f"{path}: not a regular file")
    return fd


def _read_regular(path: Path, limit: int) -> bytes:
    fd = _open_regular(path)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise GoldenError(f"{path}: {size} bytes, more than the limit of {limit}")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise GoldenError(f"{path}: more than the limit of {limit} bytes")
    return data


def case_path(golden_dir: Path, rel: str, field: str) -> Path:
    """`rel` (a manifest path) resolved inside golden_dir; symlinks may not lead out of it."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel or "\0" in rel:
        raise GoldenError(f"{golden_dir / MANIFEST}: {field} = {rel!r} is not a relative path "
                          f"inside the directory")
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise GoldenError(f"{golden_dir / MANIFEST}: {field} = {rel!r} leaves the directory")
    path = golden_dir / rel
    root = os.path.realpath(golden_dir)
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        raise GoldenError(f"{golden_dir / MANIFEST}: {field} = {rel!r} resolves outside the "
                          f"directory")
    return path


def read_case_file(golden_dir: Path, rel: str, field: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a file the manifest names, read safely (inside the directory, regular,
    at most `limit` bytes)."""
    return _read_regular(case_path(Path(golden_dir), rel, field), max(limit, 1))


# ------------------------------------------------------------------------------ schema

def _json_depth(value) -> int:
    """Nesting depth of a parsed JSON value, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_JSON_DEPTH:
            return d
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


class _Fields:
    """Type and range checks for one JSON object; each failure is a GoldenError naming the field."""

    def __init__(self, where: str, obj: dict, prefix: str):
        self.where, self.obj, self.prefix = where, obj, prefix

    def fail(self, key: str, why: str):
        v = repr(self.obj.get(key, None))
        v = v if len(v) <= 60 else v[:57] + "..."
        raise GoldenError(f"{self.where}: {self.prefix}{key} = {v}: {why}")

    def present(self, key: str, optional: bool):
        if key not in self.obj:
            if optional:
                return False
            raise GoldenError(f"{self.where}: {self.prefix}{key} is missing")
        return True

    def int(self, key: str, lo: int, hi: int, *, optional=False, nullable=False):
        if not self.present(key, optional):
            return None
        v = self.obj[key]
        if v is None and nullable:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            self.fail(key, "not an integer")
        if not lo <= v <= hi:
            self.fail(key, f"outside {lo}..{hi}")
        return v

    def number(self, key: str, *, optional=False):
        if not self.present(key, optional):
            return None
        v = self.obj[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            self.fail(key, "not a finite number")
        return v

    def text(self, key: str, *, optional=False, limit=MAX_TEXT_LENGTH):
        if not self.present(key, optional):
            return None
        v = self.obj[key]
        if not isinstance(v, str):
            self.fail(key, "not a string")
        if len(v) > limit:
            self.fail(key, f"longer than {limit} characters")
        return v


def check_name(where: str, field: str, name) -> str:
    """A case name is a plain file name: no separators, no `.`/`..`, printable ASCII."""
    if not isinstance(name, str):
        raise GoldenError(f"{where}: {field} is {type(name).__name__}, not a string")
    if len(name) > MAX_NAME_LENGTH or not NAME_RE.match(name) or name in (".", ".."):
        shown = name if len(name) <= 60 else name[:57] + "..."
        raise GoldenError(f"{where}: {field} = {shown!r} is not a plain file name "
                          f"([A-Za-z0-9_.-], at most {MAX_NAME_LENGTH} characters)")
    return name


def validate_entry(where: str, entry, index: int) -> dict:
    """One case entry against the schema; returns it unchanged."""
    if not isinstance(entry, dict):
        raise GoldenError(f"{where}: cases[{index}] is {type(entry).__name__}, not an object")
    name = check_name(where, f"cases[{index}].name", entry.get("name"))
    f = _Fields(where, entry, f"cases[{index}] ({name}).")
    for key in META_KEYS:
        f.present(key, optional=False)
    f.text("kind")
    f.text("description")
    stages = entry.get("stages")
    if not isinstance(stages, list) or not stages or len(stages) > len(STAGES) or \
            any(not isinstance(s, str) or s not in STAGES for s in stages) or \
            len(set(stages)) != len(stages):
        f.fail("stages", f"not a list of distinct stages from {list(STAGES)}")
    shape = entry.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_NDIM or \
            any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
        f.fail("shape", f"not a list of at most {MAX_NDIM} integers >= 0")
    if any(d > MAX_CASE_ELEMENTS for d in shape) or math.prod(shape) > MAX_CASE_ELEMENTS:
        f.fail("shape", f"more than the limit of {MAX_CASE_ELEMENTS} elements")
    n = f.int("n", 0, MAX_CASE_ELEMENTS)
    if n != math.prod(shape):
        f.fail("n", f"not the product of shape {shape}")
    f.int("layer_id", 0, 2**32 - 1)
    f.number("range")
    f.int("range_bits", 1, RANGE_BITS_MAX)
    f.int("M", 0, 2**32 - 1)
    f.int("k_shift", -1024, 1024)
    f.int("lmax_log2", *LMAX_LOG2_RANGE)
    f.int("block_size", 1, 2**63 - 1)
    n_blocks = f.int("n_blocks", 0, MAX_CASE_ELEMENTS)
    k_req = f.number("k_req")
    if k_req <= 0:
        f.fail("k_req", "not > 0")
    quantiser_only = tuple(stages) == QUANTISER_ONLY
    f.int("k_eff", 0, n_blocks, nullable=quantiser_only)
    f.int("sat_quant", 0, n)
    f.int("sat_feedback", 0, n, nullable=quantiser_only)
    f.int("frame_words", 0, max_frame_words(n), nullable=quantiser_only)
    if f.present("norm", optional=True) and entry["norm"] not in NORM_KINDS:
        f.fail("norm", f"not one of {list(NORM_KINDS)}")
    if MOMENTUM_STAGE in stages:
        if MOMENTUM_STAGE in stages and "top" in stages:
            f.fail("stages", "a momentum case cannot list 'top' (compress_top has no velocity)")
        f.int("m_fix", 0, M_FIX_MAX)
        f.int("sat_momentum", 0, n)
        for key in ("momentum_mask", "masked"):
            f.present(key, optional=False)
            if not isinstance(entry[key], bool):
                f.fail(key, "not true or false")
    if entry.get("npz") != npz_name(name):
        f.fail("npz", f"not {npz_name(name)!r} (the golden layout)")
    hexes = entry.get("hex")
    expected = arrays_for(stages)
    if not isinstance(hexes, dict) or sorted(hexes) != sorted(expected) or \
            any(hexes[k] != hex_name(name, k) for k in expected):
        f.fail("hex", f"not {{array: '{name}/<array>.hex'}} for {list(expected)}")
    if "residual_from" in entry:
        check_name(where, f"cases[{index}] ({name}).residual_from", entry["residual_from"])
    if "source" in entry and not isinstance(entry["source"], dict):
        f.fail("source", "not an object")
    sums = entry.get("sha256")
    if sums is not None:
        files = [npz_name(name)] + [hex_name(name, k) for k in expected]
        if isinstance(sums, dict) and plain.params_name(name) in sums:   # since the plain bench
            files += [plain.params_name(name, "txt"), plain.params_name(name, "svh")]
        if not isinstance(sums, dict) or sorted(sums) != sorted(files) or any(
                not isinstance(v, str) or not re.fullmatch(r"[0-9a-f]{64}", v)
                for v in sums.values()):
            f.fail("sha256", "not {file: sha256 hex} for the case's npz and hex files")
    return entry


def validate_exchange_entry(where: str, entry, index: int) -> dict:
    """One exchange case entry (manifest list "exchange") against its schema."""
    if not isinstance(entry, dict):
        raise GoldenError(f"{where}: exchange[{index}] is {type(entry).__name__}, not an object")
    name = check_name(where, f"exchange[{index}].name", entry.get("name"))
    f = _Fields(where, entry, f"exchange[{index}] ({name}).")
    for key in EXCHANGE_KEYS:
        f.present(key, optional=False)
    f.text("kind")
    f.text("description")
    if entry.get("stages") != [EXCHANGE_STAGE]:
        f.fail("stages", f"not [{EXCHANGE_STAGE!r}]")
    n = f.int("n", 0, MAX_CASE_ELEMENTS)
    workers = f.int("n_workers", 1, EXCHANGE_MAX_WORKERS)
    words = entry.get("frame_words")
    if not isinstance(words, list) or len(words) != workers or any(
            isinstance(w, bool) or not isinstance(w, int) or not 0 <= w <= max_frame_words(n)
            for w in words):
        f.fail("frame_words", f"not a list of {workers} frame lengths in 0..{max_frame_words(n)}")
    f.int("layer_id", 0, 2**32 - 1)
    f.int("range_bits", 0, 2**32 - 1)
    err = entry.get("error")
    if err is not None:
        if not isinstance(err, dict) or sorted(err) != sorted(EXCHANGE_ERROR_KEYS):
            f.fail("error", f"not null or an object with {list(EXCHANGE_ERROR_KEYS)}")
        e = _Fields(where, err, f"exchange[{index}] ({name}).error.")
        if not re.fullmatch(r"[A-Z][A-Z0-9_]{0,40}", str(e.text("name", limit=41))):
            e.fail("name", "not an upper-case error name")
        e.int("worker", 0, workers - 1)
        e.int("word", 0, max_frame_words(n) + 1)
    if entry.get("npz") != npz_name(name):
        f.fail("npz", f"not {npz_name(name)!r} (the golden layout)")
    expected = arrays_for([EXCHANGE_STAGE])
    hexes = entry.get("hex")
    if not isinstance(hexes, dict) or sorted(hexes) != sorted(expected) or \
            any(hexes[k] != hex_name(name, k) for k in expected):
        f.fail("hex", f"not {{array: '{name}/<array>.hex'}} for {list(expected)}")
    sums = entry.get("sha256")
    if sums is not None:
        files = [npz_name(name)] + [hex_name(name, k) for k in expected]
        if isinstance(sums, dict) and plain.params_name(name) in sums:   # since the plain bench
            files += [plain.params_name(name, "txt"), plain.params_name(name, "svh")]
        if not isinstance(sums, dict) or sorted(sums) != sorted(files) or any(
                not isinstance(v, str) or not re.fullmatch(r"[0-9a-f]{64}", v)
                for v in sums.values()):
            f.fail("sha256", "not {file: sha256 hex} for the case's npz and hex files")
    return entry


def validate_manifest(manifest, where: str) -> dict:
    """The whole manifest against the schema (docs/golden.md); returns it unchanged."""
    if not isinstance(manifest, dict):
        raise GoldenError(f"{where}: not a JSON object")
    if manifest.get("format") != FORMAT:
        raise GoldenError(f"{where}: format is not {FORMAT!r}")
    if manifest.get("version") != VERSION or isinstance(manifest.get("version"), bool):
        raise GoldenError(f"{where}: version {manifest.get('version')!r}, this reader reads "
                          f"{VERSION}")
    _Fields(where, manifest, "").text("generator", optional=True)
    cases = manifest.get("cases")
    if not isinstance(cases, list):
        raise GoldenError(f"{where}: 'cases' is not a list")
    if len(cases) > MAX_CASES:
        raise GoldenError(f"{where}: {len(cases)} cases, more than the limit of {MAX_CASES}")
    seen = set()
    for i, entry in enumerate(cases):
        validate_entry(where, entry, i)
        if entry["name"] in seen:
            raise GoldenError(f"{where}: cases[{i}].name = {entry['name']!r} appears twice")
        seen.add(entry["name"])
    files = manifest.get("files", {})         # top-level files besides the manifest (cases.txt)
    if not isinstance(files, dict) or any(k != plain.CASE_LIST or not isinstance(v, str)
                                          or not re.fullmatch(r"[0-9a-f]{64}", v)
                                          for k, v in files.items()):
        raise GoldenError(f"{where}: 'files' is not {{{plain.CASE_LIST!r}: sha256 hex}}")
    exchange = manifest.get("exchange", [])
    if not isinstance(exchange, list):
        raise GoldenError(f"{where}: 'exchange' is not a list")
    if len(cases) + len(exchange) > MAX_CASES:
        raise GoldenError(f"{where}: {len(cases) + len(exchange)} cases, more than the limit of "
                          f"{MAX_CASES}")
    for i, entry in enumerate(exchange):
        validate_exchange_entry(where, entry, i)
        if entry["name"] in seen:
            raise GoldenError(f"{where}: exchange[{i}].name = {entry['name']!r} appears twice")
        seen.add(entry["name"])
    return manifest


def read_manifest(golden_dir: str | Path) -> dict:
    """manifest.json of a golden directory, read with a size bound and validated."""
    golden_dir = Path(golden_dir)
    path = golden_dir / MANIFEST
    if not golden_dir.is_dir():
        raise GoldenError(f"{golden_dir}: no such directory")
    if not path.exists() and not path.is_symlink():
        raise GoldenError(f"{path}: missing (generate with `gradblock golden {golden_dir}`)")
    case_path(golden_dir, MANIFEST, "manifest")
    data = _read_regular(path, MAX_MANIFEST_BYTES)
    try:
        manifest = json.loads(data)
    except RecursionError:
        raise GoldenError(f"{path}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:
        raise GoldenError(f"{path}: not readable JSON ({e})") from None
    if _json_depth(manifest) > MAX_JSON_DEPTH:
        raise GoldenError(f"{path}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return validate_manifest(manifest, str(path))


# ------------------------------------------------------------------------------ loading arrays

def _expected_sizes(meta: dict) -> dict[str, tuple[int, int]]:
    """(lo, hi) element counts each array may have, from the validated entry. `selected` and
    `frame` get their possible range, not the manifest's k_eff/frame_words: a disagreement
    there is for the check to report against the reference."""
    n, nb = meta["n"], meta["n_blocks"]
    sizes = {k: (n, n) for k in ARRAY_DTYPES}
    sizes["block_norms"] = (nb, nb)
    sizes["selected"] = (0, nb)
    sizes["frame"] = (0, max_frame_words(n))
    return sizes


def _exchange_sizes(meta: dict) -> dict[str, tuple[int, int]]:
    words = sum(meta["frame_words"])
    n = 0 if meta["error"] is not None else meta["n"]
    return {"frames": (words, words), "sums": (n, n)}


def load_npz(golden_dir: Path, meta: dict) -> dict[str, np.ndarray]:
    """The arrays of one validated case entry. Each member's .npy header is checked (name,
    dtype, 1-D, element count from the manifest) before its data is read."""
    path = case_path(golden_dir, meta["npz"], f"{meta['name']}.npz")
    expected = arrays_for(meta["stages"])
    exchange = tuple(meta["stages"]) == (EXCHANGE_STAGE,)
    sizes = _exchange_sizes(meta) if exchange else _expected_sizes(meta)
    fd = _open_regular(path)
    arrays = {}
    try:
        with os.fdopen(fd, "rb") as f, zipfile.ZipFile(f) as zf:
            members = zf.namelist()
            if sorted(members) != sorted(f"{k}.npy" for k in expected):
                raise GoldenError(f"{path}: holds {sorted(members)[:16]}, expected "
                                  f"{sorted(f'{k}.npy' for k in expected)}")
            for key in expected:
                with zf.open(f"{key}.npy") as m:
                    version = np.lib.format.read_magic(m)
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = read_header(m, max_header_size=10_000)
                want = np.dtype(ALL_DTYPES[key])
                lo, hi = sizes[key]
                if dtype != want or len(shape) != 1 or not lo <= shape[0] <= hi:
                    raise GoldenError(f"{path}: {key} is {dtype} {shape}, expected 1-D {want.name} "
                                      f"of {lo if lo == hi else f'{lo}..{hi}'} elements")
                with zf.open(f"{key}.npy") as m:
                    arrays[key] = np.lib.format.read_array(m, allow_pickle=False)
    except GoldenError:
        raise
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error,
            NotImplementedError, RuntimeError) as e:   # zipfile: unknown method, encrypted
        raise GoldenError(f"{path}: unreadable ({type(e).__name__}: {e})") from None
    return arrays


def load_golden(golden_dir: str | Path, stage: str | None = None,
                names: set[str] | None = None) -> list[GoldenCase]:
    """Cases of a golden directory (all, or those listing `stage` / named in `names`), in
    manifest order: the validated entry and its npz arrays."""
    golden_dir = Path(golden_dir)
    manifest = read_manifest(golden_dir)
    cases = []
    for entry in manifest["cases"]:
        if stage is not None and stage not in entry["stages"]:
            continue
        if names is not None and entry["name"] not in names:
            continue
        cases.append(GoldenCase(entry["name"], entry, load_npz(golden_dir, entry)))
    return cases


def load_exchange(golden_dir: str | Path, names: set[str] | None = None) -> list[GoldenCase]:
    """The exchange cases of a golden directory (manifest list "exchange"; none in a
    directory written before they existed), in manifest order."""
    golden_dir = Path(golden_dir)
    manifest = read_manifest(golden_dir)
    return [GoldenCase(e["name"], e, load_npz(golden_dir, e))
            for e in manifest.get("exchange", []) if names is None or e["name"] in names]


# ------------------------------------------------------------------------------ writing

def _atomic_write(path: Path, data: bytes) -> None:
    """Write next to `path`, then os.replace: readers see the old file or the new one
    (gradblock.codec.fileio, the one atomic writer)."""
    fileio.write_bytes(path, data)


def _npz_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def plain_files(meta: dict, arrays: dict) -> dict[str, str]:
    """{path: text} of the case's files for a bench without Python (golden/plain.py)."""
    return plain.params_files(meta, arrays, tuple(ARRAY_DTYPES), STAGES,
                              tuple(meta["stages"]) == (EXCHANGE_STAGE,))


def write_case(out_dir: Path, meta: dict, arrays: dict) -> dict:
    """Write one case (npz, hex files, params.txt / params.svh) into out_dir; return its
    manifest entry (meta plus npz, hex and the sha256 of every file written)."""
    name = check_name(str(out_dir), "case name", meta["name"])
    expected = arrays_for(meta["stages"])
    if sorted(arrays) != sorted(expected):
        raise ValueError(f"case {name}: arrays {sorted(arrays)}, expected {sorted(expected)}")
    arrays = {k: np.ascontiguousarray(arrays[k], dtype=ALL_DTYPES[k]).reshape(-1)
              for k in expected}
    out_dir = Path(out_dir)
    (out_dir / name).mkdir(exist_ok=True)
    sums = {}
    data = _npz_bytes(arrays)
    _atomic_write(out_dir / npz_name(name), data)
    sums[npz_name(name)] = hashlib.sha256(data).hexdigest()
    hexes = {}
    for key in expected:
        rel = hex_name(name, key)
        data = hex_text(arrays[key], HEX_DIGITS[key]).encode("ascii")
        _atomic_write(out_dir / rel, data)
        hexes[key] = rel
        sums[rel] = hashlib.sha256(data).hexdigest()
    for rel, text in plain_files(meta, arrays).items():
        data = text.encode("ascii")
        _atomic_write(out_dir / rel, data)
        sums[rel] = hashlib.sha256(data).hexdigest()
    entry = {**meta, "npz": npz_name(name), "hex": hexes, "sha256": sums}
    if tuple(meta["stages"]) == (EXCHANGE_STAGE,):
        validate_exchange_entry(str(out_dir / MANIFEST), entry, 0)
    else:
        validate_entry(str(out_dir / MANIFEST), entry, 0)
    return entry


def write_manifest(out_dir: Path, manifest: dict) -> None:
    validate_manifest(manifest, str(Path(out_dir) / MANIFEST))
    _atomic_write(Path(out_dir) / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())


def _ours(target: Path) -> tuple[set[str], set[str]]:
    """Files (relative paths) and case folders of the target's existing manifest that gradblock
    wrote and that still hold those bytes (the manifest is the record of codec/fileio.py's
    output policy: `fileio.holds`). A manifest that is unreadable, foreign or lacks the
    checksums owns nothing."""
    try:
        old = read_manifest(target)
    except GoldenError:
        return set(), set()
    if not str(old.get("generator", "")).startswith(GENERATOR_PREFIX):
        return set(), set()
    files, dirs = set(), set()
    for entry in old["cases"] + old.get("exchange", []):
        sums = entry.get("sha256") or {}
        for rel, digest in sums.items():
            path = target / rel
            if not os.path.islink(path.parent) and fileio.holds(path, digest):
                files.add(rel)
        dirs.add(entry["name"])
    for rel, digest in (old.get("files") or {}).items():
        if fileio.holds(target / rel, digest):
            files.add(rel)
    files.add(MANIFEST)
    return files, dirs


def _plan_swap(target: Path, staged: Path) -> tuple[set[str], set[str]]:
    """(files to delete, case folders to remove when empty) so that `staged` can move into
    `target`. Raises ForeignFileError, before anything is touched, when a new file would land on
    one gradblock did not write."""
    ours, our_dirs = _ours(target)
    new_files = {str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file()}
    for rel in sorted(new_files):
        path = target / rel
        if (path.exists() or path.is_symlink()) and rel not in ours:
            raise fileio.ForeignFileError(f"{path}: exists and was not written by gradblock (or was "
                                          f"changed since); refusing to overwrite it. Move it away "
                                          f"or choose another directory")
        if path.parent != target and path.parent.exists() and (
                path.parent.is_symlink() or not path.parent.is_dir()):
            raise GoldenError(f"{path.parent}: exists and is not a plain directory; refusing "
                              f"to write into it")
    return ours, our_dirs


def swap_in(staged: Path, target: Path) -> None:
    """Move a fully written golden directory `staged` into `target`: the old manifest's own
    files go, everything else in target stays; the manifest moves last."""
    if not target.exists():
        os.rename(staged, target)
        return
    if target.is_symlink() or not target.is_dir():
        raise GoldenError(f"{target}: exists and is not a directory")
    ours, our_dirs = _plan_swap(target, staged)
    for rel in sorted(ours - {MANIFEST}):   # the old manifest is replaced last, not deleted
        (target / rel).unlink(missing_ok=True)
    for name in sorted(our_dirs):
        d = target / name
        if d.is_dir() and not d.is_symlink():
            try:
                d.rmdir()                   # only when empty: never a user's file inside
            except OSError:
                pass
    for src in sorted(staged.rglob("*"), key=lambda p: len(p.parts)):
        rel = src.relative_to(staged)
        if src.is_dir():
            (target / rel).mkdir(exist_ok=True)
        elif rel.name != MANIFEST or rel.parent != Path("."):
            os.replace(src, target / rel)
    os.replace(staged / MANIFEST, target / MANIFEST)
    for d in sorted((p for p in staged.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        d.rmdir()
    staged.rmdir()


def write_golden(target: str | Path, manifest_fields: dict, cases, exchange=()) -> dict:
    """Write a golden directory: `cases` yields (meta, arrays) pairs, `exchange` the exchange
    cases' (the manifest's "exchange" list, written only when there are some);
    `manifest_fields` holds the manifest's other fields (generator, seed, ...). Everything is written into a temporary
    directory beside `target` and then swapped in (swap_in). Returns the manifest."""
    target = Path(os.path.abspath(target))  # "." and "~/x" get a real name and parent
    generator = manifest_fields.get("generator", "")
    if not isinstance(generator, str) or not generator.startswith(GENERATOR_PREFIX):
        raise ValueError(f"generator must start with {GENERATOR_PREFIX!r}, got {generator!r}")
    if target.exists() and (target.is_symlink() or not target.is_dir()):
        raise GoldenError(f"{target}: exists and is not a directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        staged = Path(tempfile.mkdtemp(prefix=f".{target.name}.golden-", dir=target.parent))
    except OSError:                         # parent not writable: stage inside the target
        if not target.is_dir():
            raise
        staged = Path(tempfile.mkdtemp(prefix=".golden-", dir=target))
    try:
        entries = [write_case(staged, meta, arrays) for meta, arrays in cases]
        manifest = {"format": FORMAT, "version": VERSION, **manifest_fields, "cases": entries}
        ex_entries = [write_case(staged, meta, arrays) for meta, arrays in exchange]
        if ex_entries:
            manifest["exchange"] = ex_entries
        listing = plain.case_list(entries, ex_entries).encode("ascii")
        _atomic_write(staged / plain.CASE_LIST, listing)
        manifest["files"] = {plain.CASE_LIST: hashlib.sha256(listing).hexdigest()}
        write_manifest(staged, manifest)
        swap_in(staged, target)
    finally:
        if staged.exists():                 # only our own temporary directory
            _remove_staged(staged)
    return manifest


def _remove_staged(staged: Path) -> None:
    """Remove the temporary directory write_golden made (it holds only files it wrote)."""
    for p in sorted(staged.rglob("*"), key=lambda p: -len(p.parts)):
        if p.is_dir() and not p.is_symlink():
            p.rmdir()
        else:
            p.unlink()
    staged.rmdir()
