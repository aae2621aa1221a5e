"""Where a run writes: checked before training, written atomically.

`check_output_dir` / `check_output_file` refuse, with an `OutputPathError`, a path that
cannot be written (an existing file where a directory is needed or the other way round, a
parent that is a file, a read-only place) before any training time is spent. `atomic_write`
writes through a temporary file in the target's directory and `os.replace`, so a reader sees
the old file or the new one, never half of one (gradblock.codec.fileio, the one atomic writer).
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

from gradblock.codec import fileio

from .errors import OutputPathError


def _existing_ancestor(path: Path) -> Path:
    anc = path
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    return anc


def _probe(directory: Path, what: str) -> None:
    """Create (and drop) an unnamed file in `directory`: the real test of writability."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as e:
        raise OutputPathError(f"{what}: cannot write in {directory}: {e.strerror or e}") from None


def check_output_dir(path: str | Path, option: str) -> Path:
    """A directory gradblock may create (with its parents) and write files into."""
    p = Path(path)
    what = f"{option} {path}"
    if p.exists() and not p.is_dir():
        raise OutputPathError(f"{what}: exists and is not a directory")
    anc = _existing_ancestor(p)
    if not anc.is_dir():
        raise OutputPathError(f"{what}: {anc} is a file, not a directory")
    _probe(anc, what)
    return p


def check_output_file(path: str | Path, option: str,
                      ours: Callable[[Path], bool] | None = None) -> Path:
    """A file gradblock may create or replace (its directory created if needed). With `ours`,
    an existing file is only replaced if `ours(path)` recognises it as gradblock's own."""
    p = Path(path)
    what = f"{option} {path}"
    if p.is_dir():
        raise OutputPathError(f"{what}: is a directory; give a file name such as {p / 'ckpt.pt'}")
    if p.exists() and not p.is_file():
        raise OutputPathError(f"{what}: exists and is not a regular file")
    if ours is not None and p.exists() and not ours(p):
        raise OutputPathError(f"{what}: exists and was not written by gradblock; refusing to "
                              f"replace it")
    anc = _existing_ancestor(p.parent)
    if not anc.is_dir():
        raise OutputPathError(f"{what}: {anc} is a file, not a directory")
    _probe(anc, what)
    return p


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call `write(tmp_path)` on a temporary file in `path`'s directory, then rename it onto
    `path`; the temporary file is removed if writing fails. The directory is created first
    (a run's --out); the write is gradblock.codec.fileio's, the one atomic writer."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return fileio.atomic_write(path, write)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text))
