"""Shared by the formal test files: the tool check, a copy of a property set with its RTL, and a
planted bug in that copy (the proofs must fail on it: not vacuous)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gradblock.hw import deps, formal


def need_formal_tools() -> None:
    """Skip, naming the missing tool, where the formal flow cannot run."""
    try:
        formal.tools()
    except formal.FormalToolError as e:
        pytest.skip(str(e))


def copy_set(tmp_path: Path, name: str) -> Path:
    """hw/*.sv and the set's formal files into tmp_path (the layout the runner expects); the
    copy's formal directory, for formal.run(formal_dir=...)."""
    fdir = tmp_path / "formal"
    fdir.mkdir()
    for p in deps.HW_DIR.glob("*.sv"):
        shutil.copy(p, tmp_path / p.name)
    for f in formal.files_of(formal.property_sets()[name]):
        if not f.startswith("../"):
            shutil.copy(formal.FORMAL_DIR / f, fdir / f)
    shutil.copy(formal.property_sets()[name], fdir)
    return fdir


def plant(path: Path, old: str, new: str, count: int = -1) -> None:
    """Replace `old` by `new` in a copied file; `old` must be there (else the source changed
    and the planted bug with it)."""
    text = path.read_text()
    assert old in text, f"{path.name} changed: update the planted bug"
    path.write_text(text.replace(old, new, count))
