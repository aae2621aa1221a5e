"""Writing outputs safely: exactly the path asked, atomically, or a named refusal.

Every file gradblock writes goes through here: the one atomic writer, in the bottom layer
(gradblock.codec) so every layer may use it; `gradblock.shim.outputs`
re-export it. Policy about which paths may be written (directories, devices, links) lives in
`check_output_path`; the write itself in `_atomic_temp`, the one function every writer below
goes through. The data lands in a temporary file in the
destination's own directory and is renamed over the destination with `os.replace` only once
it is complete, so a crash, a full disk or a Ctrl-C never leaves a half-written output, and a
reader never sees one. The path is used as given: no suffix is appended (`np.save("out.bin")`
would write `out.bin.npy`).

Refused, with `OutputError` naming the path and the reason, before anything is written:
an existing directory, an existing non-regular file (FIFO, device, socket: replacing
`/dev/null` would be a disaster, writing into a FIFO can hang), a missing parent directory,
and a parent we cannot create files in, and a path whose last component is a symbolic link
(docs/limits.md, "Outputs": writing through it would replace a file elsewhere that gradblock
did not write; links among the parent directories are followed). The final rename replaces a
link created after the check by the file itself, never the link's target.
"""
from __future__ import annotations

import contextlib
import io
import os
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterator

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
    if os.path.islink(given):
        raise OutputError(f"{given}: is a symbolic link; refusing to write through it (name the "
                          f"target path itself, or remove the link)")
    try:
        target = Path(os.path.realpath(given))      # links among the parents are followed
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
def _atomic_temp(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """The one atomic write: check `path`, create a temporary file beside it and yield
    (descriptor, temporary path); on a clean exit it is synced, given the mode open() would
    give, and renamed onto the checked path; on an exception it is removed, `path` untouched,
    and an OSError becomes OutputError naming `path`. The caller owns the descriptor."""
    target = check_output_path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as e:
        raise OutputError(f"{path}: cannot create a file in {target.parent} ({_reason(e)})") from None
    try:
        yield fd, tmp
        with open(tmp, "rb") as f:             # what the caller wrote, on the disk first
            os.fsync(f.fileno())
        os.chmod(tmp, _creation_mode())
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise OutputError(f"{path}: cannot write ({_reason(e)})") from None
        raise


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb") -> Iterator[io.IOBase]:
    """Open a temporary file beside `path` for writing; on a clean exit it is flushed, synced
    and renamed onto `path`; on an exception it is removed and `path` is untouched.
    mode: "wb" or "w" (text, UTF-8)."""
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_open writes only, mode 'wb' or 'w', got {mode!r}")
    with _atomic_temp(path) as (fd, _):
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """For writers that want a path, not a file (`torch.save`, `savefig`): call
    `write(tmp_path)` on a temporary file beside `path`, then rename it onto `path` as
    atomic_open does. Returns `path`."""
    with _atomic_temp(path) as (fd, tmp):
        os.close(fd)
        write(Path(tmp))
    return Path(path)


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
