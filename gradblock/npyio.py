"""Reading the CLI's input files with memory bounded by what they can really hold.

A .npy header or a frame header is untrusted: it may claim 2**34 floats in a 100-byte file.
Nothing here allocates from a header before checking it against the file's size and the
caller's element limit (`--max-elements`, docs/limits.md); every problem is one named error.
"""
from __future__ import annotations

import math
import os
import stat
import warnings

import numpy as np

from gradblock.codec import zrle
from gradblock.codec.errors import GradblockError
from gradblock.refmodel.validation import SizeLimitError, check_layer_size

DEFAULT_MAX_ELEMENTS = 2**28   # 1 GiB of int32: above every layer of the models we train
MAX_NPY_HEADER = 10_000        # numpy's own default cap on a .npy header's length
_ZIP_MAGIC = b"PK\x03\x04"


class InputError(GradblockError):
    """An input file is missing, unreadable, or not what the command reads (not a .npy, the
    wrong dtype, shorter than its header says...). The message starts with the path."""


def _open(path: str):
    if "\0" in str(path):
        raise InputError(f"{str(path)!r}: a path cannot contain a NUL character")
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a file") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    st = os.fstat(f.fileno())
    if stat.S_ISDIR(st.st_mode):
        f.close()
        raise InputError(f"{path}: is a directory, expected a file")
    return f, (st.st_size if stat.S_ISREG(st.st_mode) else None)


def _read_exactly(f, path: str, nbytes: int) -> bytearray:
    buf = bytearray(nbytes)
    view, got = memoryview(buf), 0
    try:
        while got < nbytes:
            k = f.readinto(view[got:])
            if not k:
                break
            got += k
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    if got < nbytes:
        raise InputError(f"{path}: truncated, {got} of {nbytes} data bytes present")
    return buf


def _read_stream(f, path: str, limit: int, chunk: int = 1 << 20) -> bytes:
    """A pipe's bytes, at most limit + 1 of them (one more shows it was too long)."""
    parts, got = [], 0
    try:
        while got <= limit:
            part = f.read(min(chunk, limit + 1 - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    return b"".join(parts)


def read_npy(path: str, dtype, what: str, max_elements: int = DEFAULT_MAX_ELEMENTS) -> np.ndarray:
    """One array from a .npy file, without pickle, refused (named error) unless its dtype is
    `dtype` (or one of a tuple of dtypes, the first named in the advice), its element count
    is within `max_elements` and the file holds all its bytes. The header is read and checked
    first; only then is the array allocated."""
    accepted = [np.dtype(d) for d in (dtype if isinstance(dtype, tuple) else (dtype,))]
    f, size = _open(path)
    with f:
        try:
            magic = f.read(6)
            if magic[:4] == _ZIP_MAGIC:
                raise InputError(f"{path}: holds an archive (.npz), expected one .npy array")
            f.seek(0)
            version = np.lib.format.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise InputError(f"{path}: .npy format version {version[0]}.{version[1]} is not "
                                 f"read here (1.0 and 2.0 are)")
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            with warnings.catch_warnings():      # a Python-2 header reads fine: no stderr noise
                warnings.simplefilter("ignore", UserWarning)
                shape, fortran, dt = read_header(f, MAX_NPY_HEADER)
        except InputError:
            raise
        except Exception as e:       # noqa: BLE001 - numpy parses untrusted text here: its
            # failures (ValueError, SyntaxError, tokenize.TokenError, RecursionError...) all
            # mean one thing to the user
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise InputError(f"{path}: not a readable .npy array ({reason})") from None
        if dt not in accepted:
            names = [d.name for d in accepted]
            names = " or ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} or {names[-1]}"
            # ml_dtypes saves bfloat16 as '<V2': the format cannot name it, so it is not guessed
            bf16 = (" (a bfloat16 array is saved as raw 2-byte voids, which do not say they are "
                    "bfloat16)" if dt.kind == "V" and dt.itemsize == 2 else "")
            raise InputError(f"{path}: {what} must be {names}, the file holds {dt}{bf16} "
                             f"(convert it with .astype(np.{accepted[0].name}))")
        dtype = dt
        if any(d < 0 for d in shape):
            raise InputError(f"{path}: not a readable .npy array (negative dimension in "
                             f"shape {tuple(shape)})")
        count = math.prod(shape)
        check_layer_size(count, max_elements, what=f"{path}: {what}")
        nbytes = count * dtype.itemsize
        if size is not None and size - f.tell() < nbytes:
            raise InputError(f"{path}: truncated, the header says shape {tuple(shape)} "
                             f"({nbytes} data bytes) but {max(0, size - f.tell())} follow it")
        data = _read_exactly(f, path, nbytes)
    flat = np.frombuffer(data, dtype=dtype)          # a bytearray: the array stays writeable
    if fortran:
        return flat.reshape(shape[::-1]).transpose()
    return flat.reshape(shape)


def max_words(max_elements: int) -> int:
    """Words in the longest message a command reads: one frame of `max_elements` values at
    its worst-case length (codec.zrle.max_frame_words)."""
    return zrle.max_frame_words(max_elements)


def read_words(path: str, max_elements: int = DEFAULT_MAX_ELEMENTS) -> np.ndarray:
    """A frame or message file as uint32 words (little-endian on disk), refused if longer than
    the longest frame `max_elements` allows, so a huge file is never read into memory."""
    limit = max_words(max_elements) * 4
    f, size = _open(path)
    with f:
        if size is not None and size > limit:
            raise SizeLimitError(f"{path}: {size} bytes is longer than the longest frame of "
                                 f"{max_elements} elements ({limit} bytes); raise --max-elements "
                                 f"if the layer is real")
        data = _read_exactly(f, path, size) if size is not None else _read_stream(f, path, limit)
    if len(data) > limit:
        raise SizeLimitError(f"{path}: longer than the longest frame of {max_elements} elements "
                             f"({limit} bytes); raise --max-elements if the layer is real")
    if len(data) % 4:
        raise InputError(f"{path}: {len(data)} bytes is not a whole number of 32-bit words")
    return np.frombuffer(data, dtype="<u4").astype(np.uint32)


def check_frame_size(words: np.ndarray, start: int, max_elements: int, path: str) -> None:
    """Refuse the frame at words[start] if its header declares more than `max_elements`
    values. A malformed header raises its FrameError, as the decoder would."""
    head = zrle.read_header(words, None, start)
    check_layer_size(head.n, max_elements, what=f"{path}: frame at word {start}")
