"""`gradblock quantise | encode | decode | step | inspect`: one layer's tensors through the
quantiser, the compress step and the ZRLE codec, as files.

Arrays are .npy files (loaded without pickle); frames are raw little-endian uint32 words.
Inputs are read with memory bounded by --max-elements (gradblock.npyio); outputs are written
exactly where asked, atomically, after every output path has been checked (gradblock.codec.fileio).
Every user error (missing file, wrong dtype, NaN, malformed frame, a limit passed) prints one
line `gradblock NAME: ...` on stderr and returns exit status 2 (gradblock.cli's policy).
"""
from __future__ import annotations

import argparse
from typing import Callable

import numpy as np

from gradblock import momentum_step
from gradblock.codec import fileio
from gradblock.backends import host_backend
from gradblock.codec import errors as frame_errors
from gradblock.codec import zrle
from gradblock.codec.errors import UsageError, UsageParser
from gradblock.npyio import DEFAULT_MAX_ELEMENTS, check_frame_size, read_npy, read_words
from gradblock.refmodel.quantiser import DEFAULT_RANGE, QuantConfig, RangeError, quantise
from gradblock.refmodel.validation import (MAX_LAYER_ELEMENTS, ParameterError, check_block_size,
                                           check_layer_id, check_lmax_log2, check_norm,
                                           check_range, parse_k)

# A gradient file: float32, or float16 widened exactly (docs/spec.md §1.2). A bfloat16 .npy
# cannot be told from other 2-byte voids ('<V2'), so it is refused (npyio says why).
GRADIENT_FILE_DTYPES = (np.float32, np.float16)

# ------------------------------------------------------------------------------- helpers

class CommandError(UsageError):
    """A user error in a command's arguments: reported as one line, exit status 2."""


def _guarded(name: str, parser: argparse.ArgumentParser, body: Callable[[argparse.Namespace], int],
             argv: list[str]) -> int:
    """Parse and run under the CLI's one exit-code policy (gradblock.cli.run_guarded)."""
    from gradblock.cli import run_guarded
    return run_guarded(name, lambda: body(parser.parse_args(argv)))


def _max_elements(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= v <= MAX_LAYER_ELEMENTS:
        raise argparse.ArgumentTypeError(f"must be in 1..{MAX_LAYER_ELEMENTS}, got {v}")
    return v


def _add_max_elements(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-elements", type=_max_elements, default=DEFAULT_MAX_ELEMENTS,
                   help=f"refuse an array or frame of more elements (default {DEFAULT_MAX_ELEMENTS}"
                        f" = 2^28; at most {MAX_LAYER_ELEMENTS}, a frame's 32-bit n); see "
                        f"docs/limits.md")


def _checked(option: str, check: Callable, value):
    """check(value) through the contract's validator, its error naming the option typed."""
    try:
        return check(value)
    except (ParameterError, RangeError) as e:
        raise type(e)(f"{option}: {e}") from None


def _frame_options(args) -> tuple[int, int]:
    return (_checked("--lmax-log2", check_lmax_log2, args.lmax_log2),
            _checked("--layer-id", check_layer_id, args.layer_id))


def _outputs(*paths: str) -> None:
    """Check every output path before any work, and that no two outputs are one file."""
    seen = {}
    for path in paths:
        real = fileio.check_output_path(path)
        if real in seen:
            raise CommandError(f"{path}: the same file as the output {seen[real]}")
        seen[real] = path


def _describe_config(cfg: QuantConfig) -> str:
    return f"R = {cfg.range:.9g} ({cfg.range_bits:#010x}), M = {cfg.M:#010x}, k = {cfg.k}"


def _ratio(n: int, frame_words: int) -> str:
    return f"dense {n} words, ratio {n / frame_words:.2f}x" if n else "dense 0 words"


def _add_range(p: argparse.ArgumentParser) -> None:
    p.add_argument("--range", "-R", dest="R", type=float, default=DEFAULT_RANGE,
                   help=f"quantiser range R, a finite float32 > 0 (default {DEFAULT_RANGE:g})")


def _add_frame_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layer-id", type=int, default=0, help="frame layer id (h2, 0..2^32-1, default 0)")
    p.add_argument("--lmax-log2", type=int, default=zrle.DEFAULT_LMAX_LOG2,
                   help=f"log2 of the longest literal run, {zrle.LMAX_LOG2_MIN}.."
                        f"{zrle.LMAX_LOG2_MAX} (default {zrle.DEFAULT_LMAX_LOG2})")


# ------------------------------------------------------------------------------- quantise

def quantise_main(argv: list[str]) -> int:
    p = UsageParser(prog="gradblock quantise",
                description="float32 .npy -> int32 codes .npy (docs/spec.md §1; a float16 "
                            ".npy is widened exactly to float32 first, §1.2)")
    p.add_argument("input", help="float32 (or float16) .npy")
    p.add_argument("output", help="int32 .npy, same shape (written at exactly this path)")
    _add_range(p)
    _add_max_elements(p)
    return _guarded("quantise", p, _quantise, argv)


def _quantise(args) -> int:
    cfg = _checked("--range", check_range, args.R)
    _outputs(args.output)
    x = read_npy(args.input, GRADIENT_FILE_DTYPES, "the input", args.max_elements)
    res = quantise(x, cfg, where=args.input)
    fileio.save_npy(args.output, res.q)
    print(f"quantised {x.size} values, shape {tuple(x.shape)}: {_describe_config(cfg)}")
    print(f"saturated: {res.saturated} (|x| > R, ±Inf included, clamped to ±QMAX)")
    return 0


# ------------------------------------------------------------------------------- encode

def encode_main(argv: list[str]) -> int:
    p = UsageParser(prog="gradblock encode",
                description="int32 .npy (flattened row-major) -> one ZRLE frame, raw "
                            "little-endian uint32 words")
    p.add_argument("input", help="int32 .npy")
    p.add_argument("output", help="frame .bin")
    _add_frame_options(p)
    _add_range(p)
    _add_max_elements(p)
    return _guarded("encode", p, _encode, argv)


def _encode(args) -> int:
    cfg = _checked("--range", check_range, args.R)
    lmax_log2, layer_id = _frame_options(args)
    _outputs(args.output)
    payload = read_npy(args.input, np.int32, "the payload", args.max_elements)
    frame = host_backend().codec.encode_frame(payload, layer_id, cfg.range, lmax_log2)
    fileio.write_words(args.output, frame)
    print(f"frame: layer {layer_id}, n = {payload.size}, T = {int(frame[-2])} tokens, "
          f"{frame.size} words ({4 * frame.size} bytes); {_ratio(payload.size, frame.size)}")
    return 0


# ------------------------------------------------------------------------------- decode

def decode_main(argv: list[str]) -> int:
    p = UsageParser(prog="gradblock decode",
                description="one ZRLE frame -> int32 .npy (1-D); exit status 2 and the named "
                            "error on a malformed frame")
    p.add_argument("input", help="frame .bin (exactly one frame)")
    p.add_argument("output", help="int32 .npy")
    p.add_argument("--expected-n", type=int, default=None,
                   help="element count the frame must hold, 0..2^32-1 (else SIZE_MISMATCH)")
    _add_max_elements(p)
    return _guarded("decode", p, _decode, argv)


def _decode(args) -> int:
    if args.expected_n is not None and not 0 <= args.expected_n <= MAX_LAYER_ELEMENTS:
        raise CommandError(f"--expected-n must be in 0..{MAX_LAYER_ELEMENTS}, got {args.expected_n}")
    _outputs(args.output)
    words = read_words(args.input, args.max_elements)
    check_frame_size(words, 0, args.max_elements, args.input)
    frame = host_backend().codec.decode_frame(words, args.expected_n)
    if frame.n_words != words.size:
        raise CommandError(f"{words.size - frame.n_words} extra word(s) after the frame, which "
                           f"ends at word {frame.n_words} of {words.size} (a message of several "
                           f"frames: use gradblock inspect)")
    fileio.save_npy(args.output, frame.values)
    print(f"decoded layer {frame.layer_id}: n = {frame.values.size}, R = {frame.range:.9g}, "
          f"LMAX = 2^{frame.lmax_log2}, T = {frame.n_tokens} tokens, "
          f"{int(np.count_nonzero(frame.values))} nonzero")
    return 0


# ------------------------------------------------------------------------------- step

def step_main(argv: list[str]) -> int:
    p = UsageParser(
        prog="gradblock step",
        description="one layer's compress step: quantise + error feedback + block selection + "
                    "ZRLE frame (docs/spec.md §4)")
    p.add_argument("grad", help="float32 (or float16, widened exactly) .npy gradient (its "
                                "shape sets the blocks)")
    p.add_argument("residual", help="int32 .npy residual of the same shape, or '-' for zeros "
                                    "(the first step)")
    _add_range(p)
    p.add_argument("--k", type=parse_k, default=1,
                   help="blocks to send: an integer >= 1 or a fraction in (0, 1) (default 1)")
    p.add_argument("--block-size", type=int, default=None,
                   help="elements per block, 1..2^32-1 (default: the product of the trailing "
                        "dimensions)")
    p.add_argument("--norm", default="l1",
                   help="block norm that ranks blocks: l1 (sum |a|, default) or l2 (sum of "
                        "(|a| >> s)^2, s = bit_length(B) >> 1; docs/spec.md §2.3)")
    _add_frame_options(p)
    p.add_argument("--frame", required=True, help="output frame .bin")
    p.add_argument("--residual-out", required=True, help="output int32 .npy residual")
    _add_max_elements(p)
    momentum_step.add_options(p)
    return _guarded("step", p, _step, argv)


def _step(args) -> int:
    # every number is checked before any file is read or any kernel runs
    cfg = _checked("--range", check_range, args.R)
    lmax_log2, layer_id = _frame_options(args)
    block_size = _checked("--block-size", check_block_size, args.block_size)
    norm = _checked("--norm", check_norm, args.norm)
    _outputs(args.frame, args.residual_out, *momentum_step.check_args(args))
    grad = read_npy(args.grad, GRADIENT_FILE_DTYPES, "the gradient", args.max_elements)
    if args.residual == "-":
        residual = np.zeros(grad.shape, dtype=np.int32)
    else:
        residual = read_npy(args.residual, np.int32, "the residual", args.max_elements)
        if residual.shape != grad.shape:
            raise CommandError(f"{args.residual}: residual shape {tuple(residual.shape)} differs "
                               f"from the gradient's {tuple(grad.shape)}")
    if momentum_step.requested(args):       # docs/spec.md §7, gradblock/momentum_step.py
        st = momentum_step.run(args, grad, residual, R=cfg, block_size=block_size,
                               layer_id=layer_id, lmax_log2=lmax_log2,
                               max_elements=args.max_elements, backend=host_backend(),
                               norm=norm)
    else:
        st = host_backend().step(grad, residual, R=cfg, k=args.k, block_size=block_size,
                                      layer_id=layer_id, lmax_log2=lmax_log2, where=args.grad,
                                      norm=norm)
    fileio.write_words(args.frame, st.frame)
    fileio.save_npy(args.residual_out, st.residual_out)

    lay = st.layout
    short = lay.n - (lay.n_blocks - 1) * lay.block_size if lay.n_blocks else 0
    last = f", last block {short}" if lay.n_blocks and short != lay.block_size else ""
    print(f"layer {layer_id}: shape {tuple(grad.shape)}, n = {lay.n}, {lay.n_blocks} blocks of "
          f"{lay.block_size}{last}; {_describe_config(cfg)}")
    print(f"k = {args.k} -> k_eff = {st.k_eff}")
    shown = st.selected[:16]
    listing = ", ".join(f"{int(b)} ({norm.upper()} {int(st.norms[b])})" for b in shown)
    more = f" ... and {st.selected.size - shown.size} more" if st.selected.size > shown.size else ""
    print(f"selected blocks (rank order): {listing}{more}")
    print(f"saturation: quantiser {st.sat_quant}, feedback {st.sat_feedback}")
    print(f"frame: {st.frame.size} words ({4 * st.frame.size} bytes), T = {int(st.frame[-2])} "
          f"tokens; {_ratio(lay.n, st.frame.size)}")
    print(f"residual: {int(np.count_nonzero(st.residual_out))} of {lay.n} nonzero")
    momentum_step.report(args, st)
    return 0


# ------------------------------------------------------------------------------- inspect

def inspect_main(argv: list[str]) -> int:
    p = UsageParser(prog="gradblock inspect",
                description="readable dump of every frame in a message; exit status 2 and the "
                            "named error at a malformed frame")
    p.add_argument("input", help="message .bin (frames concatenated)")
    p.add_argument("--tokens", type=int, default=8, help="tokens to list per frame, >= 0 (default 8)")
    _add_max_elements(p)
    return _guarded("inspect", p, _inspect, argv)


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
    if args.tokens < 0:
        raise CommandError(f"--tokens must be >= 0, got {args.tokens}")
    words = read_words(args.input, args.max_elements)
    decode = host_backend().codec.decode_frame
    at, index, elements = 0, 0, 0
    while True:                        # an empty file is one missing frame: TRUNCATED
        w = words[at:]
        try:
            check_frame_size(words, at, args.max_elements, args.input)
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
