"""`gradblock quantise | encode | decode | step | inspect`: one layer's tensors through the
quantiser, the compress step and the ZRLE codec, as files.

Arrays are .npy files (loaded without pickle); frames are raw little-endian uint32 words.
Every user error (missing file, wrong dtype, NaN, malformed frame) prints one line
`gradblock NAME: ...` on stderr and returns exit status 2.
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from gradblock.codec import errors as frame_errors
from gradblock.codec import zrle
from gradblock.refmodel import compress as ref_compress
from gradblock.refmodel.quantiser import DEFAULT_RANGE, NonFiniteError, QuantConfig, RangeError, quantise
from gradblock.refmodel.selection import resolve_k

EXIT_USAGE = 2
BACKEND_ENV = "GRADBLOCK_BACKEND"        # auto (default) | numba | reference


# ------------------------------------------------------------------------------- backend

@dataclass(frozen=True)
class Backend:
    """The implementations the commands and the golden generator run. Both choices are
    bit-exact with the numpy reference; numba is only faster."""

    compress_name: str
    codec_name: str
    compress_layer: Callable
    encode_frame: Callable
    decode_frame: Callable

    @property
    def name(self) -> str:
        return f"compress={self.compress_name}, codec={self.codec_name}"


def _optional_module(name: str):
    """Import `name` if it exists; any other import failure inside it is a real error."""
    import importlib
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name == name:
            return None
        raise


class BackendError(ValueError):
    """$GRADBLOCK_BACKEND names an unknown or unavailable backend."""


@functools.lru_cache(maxsize=None)
def backend(choice: str | None = None) -> Backend:
    """numba fast path (refmodel.fast, codec.zrle_numba) where present, else the numpy
    reference. `choice` (or $GRADBLOCK_BACKEND): auto, numba or reference."""
    choice = (choice or os.environ.get(BACKEND_ENV) or "auto").lower()
    if choice not in ("auto", "numba", "reference"):
        raise BackendError(f"{BACKEND_ENV} must be auto, numba or reference, got {choice!r}")
    fast = codec = None
    if choice != "reference":
        fast = _optional_module("gradblock.refmodel.fast")
        codec = _optional_module("gradblock.codec.zrle_numba")
        if choice == "numba" and (fast is None or codec is None):
            missing = "gradblock.refmodel.fast" if fast is None else "gradblock.codec.zrle_numba"
            raise BackendError(f"{BACKEND_ENV}=numba but {missing} is not available")
    return Backend("numba" if fast else "reference", "numba" if codec else "reference",
                   fast.compress_layer if fast else ref_compress.compress_layer,
                   codec.encode_frame if codec else zrle.encode_frame,
                   codec.decode_frame if codec else zrle.decode_frame)


# ------------------------------------------------------------------------------- helpers

class CommandError(Exception):
    """A user error: reported as one line, exit status 2."""


def _parse(parser: argparse.ArgumentParser, argv: list[str]):
    """parse_args that returns argparse's exit status instead of raising SystemExit."""
    try:
        return parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)


def _guarded(name: str, body: Callable[[argparse.Namespace], int], args) -> int:
    if isinstance(args, int):
        return args
    try:
        return body(args)
    except (CommandError, NonFiniteError, RangeError, frame_errors.FrameError, BackendError) as e:
        print(f"gradblock {name}: {e}", file=sys.stderr)
        return EXIT_USAGE


def _load_npy(path: str, dtype, what: str) -> np.ndarray:
    try:
        arr = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise CommandError(f"{path}: no such file") from None
    except (OSError, ValueError, EOFError) as e:
        raise CommandError(f"{path}: not a readable .npy array ({e})") from None
    if not isinstance(arr, np.ndarray):
        raise CommandError(f"{path}: holds an archive, expected one .npy array")
    if arr.dtype != dtype:
        raise CommandError(f"{path}: {what} must be {np.dtype(dtype).name}, the file holds "
                           f"{arr.dtype} (convert it with .astype(np.{np.dtype(dtype).name}))")
    return arr


def _save_npy(path: str, arr: np.ndarray) -> None:
    try:
        np.save(path, arr, allow_pickle=False)
    except OSError as e:
        raise CommandError(f"{path}: cannot write ({e.strerror or e})") from None


def _read_words(path: str) -> np.ndarray:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise CommandError(f"{path}: no such file") from None
    except OSError as e:
        raise CommandError(f"{path}: cannot read ({e.strerror or e})") from None
    if len(data) % 4:
        raise CommandError(f"{path}: {len(data)} bytes is not a whole number of 32-bit words")
    return np.frombuffer(data, dtype="<u4").astype(np.uint32)


def _write_words(path: str, words: np.ndarray) -> None:
    try:
        Path(path).write_bytes(np.ascontiguousarray(words, dtype="<u4").tobytes())
    except OSError as e:
        raise CommandError(f"{path}: cannot write ({e.strerror or e})") from None


def _config(R: float) -> QuantConfig:
    return QuantConfig.from_range(R)       # RangeError names the bad value


def _check_lmax(lmax_log2: int) -> int:
    if not zrle.LMAX_LOG2_MIN <= lmax_log2 <= zrle.LMAX_LOG2_MAX:
        raise CommandError(f"--lmax-log2 must be in {zrle.LMAX_LOG2_MIN}..{zrle.LMAX_LOG2_MAX}, "
                           f"got {lmax_log2}")
    return lmax_log2


def _check_layer_id(layer_id: int) -> int:
    if not 0 <= layer_id < 2**32:
        raise CommandError(f"--layer-id must fit 32 bits (0..{2**32 - 1}), got {layer_id}")
    return layer_id


def parse_k(text: str) -> int | float:
    """--k: an integer number of blocks (>= 1) or a fraction of the blocks in (0, 1)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        f = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither an integer nor a fraction") from None
    if not (0.0 < f < 1.0 or (f >= 1.0 and math.isfinite(f) and f.is_integer())):
        raise argparse.ArgumentTypeError(f"{text!r}: a fraction must lie in (0, 1)")
    return f


def _describe_config(cfg: QuantConfig) -> str:
    return f"R = {cfg.range:.9g} ({cfg.range_bits:#010x}), M = {cfg.M:#010x}, k = {cfg.k}"


def _ratio(n: int, frame_words: int) -> str:
    return f"dense {n} words, ratio {n / frame_words:.2f}x" if n else "dense 0 words"


def _add_range(p: argparse.ArgumentParser) -> None:
    p.add_argument("--range", "-R", dest="R", type=float, default=DEFAULT_RANGE,
                   help=f"quantiser range R, a finite float32 > 0 (default {DEFAULT_RANGE:g})")


def _add_frame_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layer-id", type=int, default=0, help="frame layer id (h2, default 0)")
    p.add_argument("--lmax-log2", type=int, default=zrle.DEFAULT_LMAX_LOG2,
                   help=f"log2 of the longest literal run, {zrle.LMAX_LOG2_MIN}.."
                        f"{zrle.LMAX_LOG2_MAX} (default {zrle.DEFAULT_LMAX_LOG2})")


# ------------------------------------------------------------------------------- quantise

def quantise_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="gradblock quantise",
                                description="float32 .npy -> int32 codes .npy (docs/spec.md §1)")
    p.add_argument("input", help="float32 .npy")
    p.add_argument("output", help="int32 .npy, same shape")
    _add_range(p)
    return _guarded("quantise", _quantise, _parse(p, argv))


def _quantise(args) -> int:
    cfg = _config(args.R)
    x = _load_npy(args.input, np.float32, "the input")
    res = quantise(x, cfg, where=args.input)
    _save_npy(args.output, res.q)
    print(f"quantised {x.size} values, shape {tuple(x.shape)}: {_describe_config(cfg)}")
    print(f"saturated: {res.saturated} (|x| > R, ±Inf included, clamped to ±QMAX)")
    return 0


# ------------------------------------------------------------------------------- encode

def encode_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="gradblock encode",
                                description="int32 .npy (flattened row-major) -> one ZRLE frame, "
                                            "raw little-endian uint32 words")
    p.add_argument("input", help="int32 .npy")
    p.add_argument("output", help="frame .bin")
    _add_frame_options(p)
    _add_range(p)
    return _guarded("encode", _encode, _parse(p, argv))


def _encode(args) -> int:
    cfg = _config(args.R)
    lmax_log2, layer_id = _check_lmax(args.lmax_log2), _check_layer_id(args.layer_id)
    payload = _load_npy(args.input, np.int32, "the payload")
    frame = backend().encode_frame(payload, layer_id, cfg.range, lmax_log2)
    _write_words(args.output, frame)
    print(f"frame: layer {layer_id}, n = {payload.size}, T = {int(frame[-2])} tokens, "
          f"{frame.size} words ({4 * frame.size} bytes); {_ratio(payload.size, frame.size)}")
    return 0


# ------------------------------------------------------------------------------- decode

def decode_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="gradblock decode",
                                description="one ZRLE frame -> int32 .npy (1-D); exit status 2 "
                                            "and the named error on a malformed frame")
    p.add_argument("input", help="frame .bin (exactly one frame)")
    p.add_argument("output", help="int32 .npy")
    p.add_argument("--expected-n", type=int, default=None,
                   help="element count the frame must hold (else SIZE_MISMATCH)")
    return _guarded("decode", _decode, _parse(p, argv))


def _decode(args) -> int:
    words = _read_words(args.input)
    if args.expected_n is not None and args.expected_n < 0:
        raise CommandError(f"--expected-n must be >= 0, got {args.expected_n}")
    frame = backend().decode_frame(words, args.expected_n)
    if frame.n_words != words.size:
        raise CommandError(f"{words.size - frame.n_words} extra word(s) after the frame, which "
                           f"ends at word {frame.n_words} of {words.size} (a message of several "
                           f"frames: use gradblock inspect)")
    _save_npy(args.output, frame.values)
    print(f"decoded layer {frame.layer_id}: n = {frame.values.size}, R = {frame.range:.9g}, "
          f"LMAX = 2^{frame.lmax_log2}, T = {frame.n_tokens} tokens, "
          f"{int(np.count_nonzero(frame.values))} nonzero")
    return 0


# ------------------------------------------------------------------------------- step

def step_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="gradblock step",
        description="one layer's compress step: quantise + error feedback + block selection + "
                    "ZRLE frame (docs/spec.md §4)")
    p.add_argument("grad", help="float32 .npy gradient (its shape sets the blocks)")
    p.add_argument("residual", help="int32 .npy residual of the same shape, or '-' for zeros "
                                    "(the first step)")
    _add_range(p)
    p.add_argument("--k", type=parse_k, default=1,
                   help="blocks to send: an integer >= 1 or a fraction in (0, 1) (default 1)")
    p.add_argument("--block-size", type=int, default=None,
                   help="elements per block (default: the product of the trailing dimensions)")
    _add_frame_options(p)
    p.add_argument("--frame", required=True, help="output frame .bin")
    p.add_argument("--residual-out", required=True, help="output int32 .npy residual")
    return _guarded("step", _step, _parse(p, argv))


def _step(args) -> int:
    cfg = _config(args.R)
    lmax_log2, layer_id = _check_lmax(args.lmax_log2), _check_layer_id(args.layer_id)
    if args.block_size is not None and args.block_size < 1:
        raise CommandError(f"--block-size must be >= 1, got {args.block_size}")
    grad = _load_npy(args.grad, np.float32, "the gradient")
    if args.residual == "-":
        residual = np.zeros(grad.shape, dtype=np.int32)
    else:
        residual = _load_npy(args.residual, np.int32, "the residual")
        if residual.shape != grad.shape:
            raise CommandError(f"{args.residual}: residual shape {tuple(residual.shape)} differs "
                               f"from the gradient's {tuple(grad.shape)}")
    try:
        resolve_k(args.k, 1)
    except ValueError as e:
        raise CommandError(f"--k: {e}") from None
    st = backend().compress_layer(grad, residual, R=cfg, k=args.k, block_size=args.block_size,
                                  layer_id=layer_id, lmax_log2=lmax_log2, where=args.grad)
    _write_words(args.frame, st.frame)
    _save_npy(args.residual_out, st.residual_out)

    lay = st.layout
    short = lay.n - (lay.n_blocks - 1) * lay.block_size if lay.n_blocks else 0
    last = f", last block {short}" if lay.n_blocks and short != lay.block_size else ""
    print(f"layer {layer_id}: shape {tuple(grad.shape)}, n = {lay.n}, {lay.n_blocks} blocks of "
          f"{lay.block_size}{last}; {_describe_config(cfg)}")
    print(f"k = {args.k} -> k_eff = {st.k_eff}")
    shown = st.selected[:16]
    listing = ", ".join(f"{int(b)} (L1 {int(st.norms[b])})" for b in shown)
    more = f" ... and {st.selected.size - shown.size} more" if st.selected.size > shown.size else ""
    print(f"selected blocks (rank order): {listing}{more}")
    print(f"saturation: quantiser {st.sat_quant}, feedback {st.sat_feedback}")
    print(f"frame: {st.frame.size} words ({4 * st.frame.size} bytes), T = {int(st.frame[-2])} "
          f"tokens; {_ratio(lay.n, st.frame.size)}")
    print(f"residual: {int(np.count_nonzero(st.residual_out))} of {lay.n} nonzero")
    return 0


# ------------------------------------------------------------------------------- inspect

def inspect_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="gradblock inspect",
                                description="readable dump of every frame in a message; exit "
                                            "status 2 and the named error at a malformed frame")
    p.add_argument("input", help="message .bin (frames concatenated)")
    p.add_argument("--tokens", type=int, default=8, help="tokens to list per frame (default 8)")
    return _guarded("inspect", _inspect, _parse(p, argv))


def _header_lines(w: np.ndarray) -> list[str]:
    """The header fields present in w (a frame's words from its start), decoded leniently."""
    names = ("magic", "h1", "layer id", "n", "R")
    out = []
    for i, v in enumerate(int(x) for x in w[:zrle.HEADER_WORDS]):
        if i == 0:
            text = f"{v:#010x}" + (" ('ZRLE')" if v == zrle.MAGIC else " (not 'ZRLE')")
        elif i == 1:
            text = (f"{v:#010x}: version {v & 0xFF}, lmax_log2 {(v >> 8) & 0xFF}"
                    + (f" (LMAX {1 << ((v >> 8) & 0xFF)})" if 0 < (v >> 8) & 0xFF < 32 else "")
                    + (f", reserved bits {v >> 16:#x}" if v >> 16 else ""))
        elif i == 4:
            text = f"{float(np.uint32(v).view(np.float32)):.9g} ({v:#010x})"
        else:
            text = str(v)
        out.append(f"  {names[i]:<9}{text}")
    if w.size < zrle.HEADER_WORDS:
        out.append(f"  (header cut short: {w.size} of {zrle.HEADER_WORDS} words)")
    return out


def _walk_tokens(w: np.ndarray, stop: int) -> list[tuple[int, int]]:
    """(z, L) of the tokens whose z and L words lie before word `stop` of the frame, walked
    without validation (for showing what came before an error)."""
    toks, pos = [], zrle.HEADER_WORDS
    n = int(w[3]) if w.size > 3 else 0
    produced = 0
    while pos + 1 < min(stop + 2, w.size) and pos <= stop and produced < n:
        z, L = int(w[pos]), int(w[pos + 1])
        toks.append((z, L))
        produced += z + L
        pos += 2 + L
    return toks


def _token_line(toks: list[tuple[int, int]], limit: int) -> str:
    shown = " ".join(f"({z},{L})" for z, L in toks[:max(limit, 0)])
    more = f" ... {len(toks) - limit} more" if len(toks) > limit else ""
    return f"{shown}{more}" if toks else "(none)"


def _inspect(args) -> int:
    words = _read_words(args.input)
    decode = backend().decode_frame
    at, index, elements = 0, 0, 0
    while True:                        # an empty file is one missing frame: TRUNCATED
        w = words[at:]
        try:
            frame = decode(words, None, at)
        except frame_errors.FrameError as e:
            print(f"frame {index} at word {at}: MALFORMED")
            for line in _header_lines(w):
                print(line)
            word = e.word if e.word is not None else w.size
            toks = _walk_tokens(w, word)
            print(f"  tokens   read before the error ({len(toks)}, the last may be the bad one): "
                  f"{_token_line(toks, args.tokens)}")
            raise CommandError(f"frame {index} at word {at}: {e}") from None
        toks = _walk_tokens(w, frame.n_words)
        nonzero = int(np.count_nonzero(frame.values))
        print(f"frame {index} at word {at}: {frame.n_words} words")
        for line in _header_lines(w):
            print(line)
        print(f"  tokens   T = {frame.n_tokens}: {_token_line(toks, args.tokens)}")
        print(f"  nonzero  {nonzero} of {frame.values.size}; "
              f"{_ratio(frame.values.size, frame.n_words)}")
        print(f"  trailer  T = {int(w[frame.n_words - 2])}, CRC {int(w[frame.n_words - 1]):#010x} ok")
        at += frame.n_words
        index += 1
        elements += frame.values.size
        if at >= words.size:
            break
    print(f"message: {index} frame(s), {words.size} words, {elements} elements, all frames ok")
    return 0
