"""Writing outputs safely: exactly the path asked, atomically, or a named refusal.

Every file gradblock writes goes through here. The data lands in a temporary file in the
destination's own directory and is renamed over the destination with `os.replace` only once
it is complete, so a crash, a full disk or a Ctrl-C never leaves a half-written output, and a
reader never sees one. The path is used as given: no suffix is appended (`np.save("out.bin")`
would write `out.bin.npy`).

Refused, with `OutputError` naming the path and the reason, before anything is written:
an existing directory, an existing non-regular file (FIFO, device, socket: replacing
`/dev/null` would be a disaster, writing into a FIFO can hang), a missing parent directory,
and a parent we cannot create files in. A symbolic link is followed: its target is written.
"""
from __future__ import annotations

import contextlib
import io
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np

from gradblock.codec.errors import GradblockError


class OutputError(GradblockError):
    """An output cannot be written where asked (a directory is there, no parent, no permission,
    disk full...). The message starts with the path."""


def _reason(e: OSError) -> str:
    return e.strerror or str(e)


def check_output_path(path: str | os.PathLike) -> Path:
    """The real path an output will be written to, or OutputError saying why it cannot be.
    Call it before long work (training, a sweep) so a bad path fails first, not last."""
    given = Path(os.fspath(path))
    if not os.fspath(path):
        raise OutputError("output path is empty")
    if "\0" in os.fspath(path):
        raise OutputError(f"{str(given)!r}: a path cannot contain a NUL character")
    try:
        target = Path(os.path.realpath(given))      # follow a symlink to what it names
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputError(f"{given}: cannot check the output path ({_reason(e)})") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{given}: is a directory, expected a file path to write")
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"{given}: exists and is not a regular file (a device, FIFO or "
                              f"socket); refusing to replace it")
    parent = target.parent
    if not parent.is_dir():
        raise OutputError(f"{given}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{given}: no permission to create files in {parent}")
    return target


def _creation_mode() -> int:
    """The mode `open(path, "w")` would give a new file: 0o666 less the umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb") -> Iterator[io.IOBase]:
    """Open a temporary file beside `path` for writing; on a clean exit it is flushed, synced
    and renamed onto `path`; on an exception it is removed and `path` is untouched.
    mode: "wb" or "w" (text, UTF-8)."""
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_open writes only, mode 'wb' or 'w', got {mode!r}")
    target = check_output_path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as e:
        raise OutputError(f"{path}: cannot create a file in {target.parent} ({_reason(e)})") from None
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _creation_mode())
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise OutputError(f"{path}: cannot write ({_reason(e)})") from None
        raise


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_open(path, "wb") as f:
        f.write(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path, "w") as f:
        f.write(text)


def save_npy(path: str | os.PathLike, arr: np.ndarray) -> None:
    """One array as .npy at exactly `path` (no '.npy' appended), without pickle."""
    with atomic_open(path, "wb") as f:
        np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=False)


def save_npz(path: str | os.PathLike, compressed: bool = True, **arrays: np.ndarray) -> None:
    """Named arrays as .npz at exactly `path`, without pickle."""
    saver = np.savez_compressed if compressed else np.savez
    with atomic_open(path, "wb") as f:
        saver(f, allow_pickle=False, **arrays)


def write_words(path: str | os.PathLike, words: np.ndarray) -> None:
    """uint32 words as raw little-endian bytes (a ZRLE frame or message)."""
    write_bytes(path, np.ascontiguousarray(words, dtype="<u4").tobytes())
