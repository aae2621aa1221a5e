"""Writing outputs safely: exactly the path asked, atomically, or a named refusal. The one output
policy of gradblock: every writer of every layer calls it (it sits in the bottom layer,
gradblock.codec, so every layer may).

Which paths may be written at all (directories, devices, links) is `check_output_path`; the
write itself is `_atomic_temp`, the one function every writer below goes through.

What gradblock wrote, and so may replace or remove, is decided here too, one way: a file is
gradblock's when a record gradblock wrote lists its name with the sha256 of the bytes it holds
now (`holds`). The record is the directory's ledger (`LEDGER`, written by `write_own` /
`write_own_text`, read by `written_by_gradblock`), or a format's own manifest that carries the
checksums (the golden set's, through `holds`). A file the user named on the command line as
THE output (`gradblock quantise IN OUT`) is theirs to have replaced; a file gradblock names
itself or keeps (a run's result.json, model and checkpoints, validate's tables, verify's source
snapshot, a golden case) is replaced or removed only when it is gradblock's: `check_replaceable`
refuses the rest with `ForeignFileError`, before any long work. A directory gradblock made for
itself carries a ledger that says so (`claim_directory`, `claimed`: the demo's --out). Every
refusal is an `OutputError`. The data lands in a temporary file in the
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
import fcntl
import hashlib
import io
import json
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


class ForeignFileError(OutputError):
    """A file is in the way that gradblock did not write (or that was changed since): it is
    neither replaced nor removed."""


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


def check_output_dir(path: str | os.PathLike, option: str | None = None) -> Path:
    """A directory gradblock may create (with its parents) and write files into, or OutputError
    naming the option ("--out") and the path. Call it before long work."""
    p = Path(path)
    what = f"{option} {path}" if option else str(path)
    if p.is_symlink() and not p.is_dir() or (p.exists() and not p.is_dir()):
        raise OutputError(f"{what}: exists and is not a directory")
    anc = p
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise OutputError(f"{what}: {anc} is a file, not a directory")
    try:                                         # the real test of writability
        with tempfile.TemporaryFile(dir=anc):
            pass
    except OSError as e:
        raise OutputError(f"{what}: cannot write in {anc}: {_reason(e)}") from None
    return p


# ------------------------------------------------------------------ what gradblock wrote

LEDGER = ".gradblock-outputs.json"     # per directory: {"files": {name: [sha256, ...]}, "created": bool}


def digest(path: str | os.PathLike) -> str | None:
    """sha256 (hex) of a regular file, not through a link; None for anything else."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    except OSError:
        return None


def holds(path: str | os.PathLike, recorded) -> bool:
    """THE test of "gradblock wrote this": `path` is a regular file whose bytes have a sha256
    that gradblock recorded when it wrote them (`recorded`: one hex digest or several)."""
    recorded = {recorded} if isinstance(recorded, str) else set(recorded or ())
    return bool(recorded) and digest(path) in recorded


def _read_ledger(directory: Path) -> dict:
    try:
        d = json.loads((directory / LEDGER).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {"files": {}}
    if not isinstance(d, dict) or not isinstance(d.get("files"), dict):
        return {"files": {}}
    return d


@contextlib.contextmanager
def _ledger(directory: Path) -> Iterator[dict]:
    """The directory's ledger, locked against the other processes writing there (the ranks of
    a run), and written back atomically when the block ends."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        d = _read_ledger(directory)
        yield d
        with _atomic_temp(directory / LEDGER) as (tfd, _):
            with os.fdopen(tfd, "w", encoding="utf-8") as f:
                json.dump(d, f, indent=1, sort_keys=True)
    finally:
        os.close(fd)


def written_by_gradblock(path: str | os.PathLike) -> bool:
    """Whether `path` holds bytes gradblock wrote there (its directory's ledger says so)."""
    p = Path(path)
    return holds(p, _read_ledger(p.parent)["files"].get(p.name))


def check_replaceable(path: str | os.PathLike, what: str | None = None) -> Path:
    """`check_output_path`, and ForeignFileError if a file is there that gradblock did not
    write. The parent directory may be missing (`write_own` creates it). `what` names the
    option in the message."""
    p = Path(path)
    label = f"{what} {path}" if what else str(path)
    if p.is_dir() and not p.is_symlink():
        raise OutputError(f"{label}: is a directory; give a file name")
    if (p.exists() or p.is_symlink()) and not written_by_gradblock(p):
        raise ForeignFileError(f"{label}: exists and was not written by gradblock (or was changed "
                               f"since); refusing to replace it")
    if not p.parent.exists():
        check_output_dir(p.parent, what)
        return p
    if not p.parent.is_dir():
        raise OutputError(f"{label}: {p.parent} is a file, not a directory")
    try:
        check_output_path(p)
    except OutputError as e:
        raise type(e)(f"{label}: {str(e).split(': ', 1)[-1]}") from None
    return p


def write_own(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Write `path` atomically as `atomic_write` does, after `check_replaceable`, creating its
    directory, and record the bytes in the directory's ledger so that a later run may replace
    them. The new digest is recorded before the rename and the old one dropped after it, so a
    process killed in between leaves a file the ledger still owns either way."""
    p = Path(path)
    check_replaceable(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    with _atomic_temp(p) as (fd, tmp):
        os.close(fd)
        write(Path(tmp))
        new = digest(tmp)
        with _ledger(p.parent) as led:
            led["files"][p.name] = sorted(set(led["files"].get(p.name) or []) | {new})
    with _ledger(p.parent) as led:
        led["files"][p.name] = [new]
    return p


def write_own_text(path: str | os.PathLike, text: str) -> Path:
    return write_own(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def remove_own(path: str | os.PathLike) -> bool:
    """Remove `path` if gradblock wrote it (its ledger's record); True if removed. Anything else
    is left where it is."""
    p = Path(path)
    if not p.parent.is_dir():
        return False
    with _ledger(p.parent) as led:
        if not holds(p, led["files"].get(p.name)):
            return False
        p.unlink()
        led["files"].pop(p.name, None)
    return True


def claim_directory(path: str | os.PathLike) -> Path:
    """Create `path` (it must not exist: FileExistsError) as a directory gradblock owns: its
    ledger says it was created here, so `claimed` recognises it later."""
    p = Path(path)
    p.mkdir(parents=False)
    with _ledger(p) as led:
        led["created"] = True
    return p


def claimed(path: str | os.PathLike) -> bool:
    """Whether `path` is a directory gradblock created for itself (`claim_directory`)."""
    p = Path(path)
    return p.is_dir() and not p.is_symlink() and _read_ledger(p).get("created") is True
