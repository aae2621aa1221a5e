"""codec/fileio.py's output policy (docs/architecture.md): gradblock replaces or removes a file
only when a record it wrote lists that file with the sha256 of the bytes it holds now."""
from __future__ import annotations

import json

import pytest

from gradblock.codec import fileio
from gradblock.codec.fileio import ForeignFileError, OutputError


def test_its_own_file_is_replaced_and_a_foreign_one_refused(tmp_path):
    f = tmp_path / "out" / "result.json"
    fileio.write_own_text(f, "one")                      # the directory is created
    assert fileio.written_by_gradblock(f)
    fileio.write_own_text(f, "two")                      # its own: replaced
    assert f.read_text() == "two"
    user = tmp_path / "out" / "notes.txt"
    user.write_text("mine")
    with pytest.raises(ForeignFileError, match="notes.txt: exists and was not written by gradblock"):
        fileio.write_own_text(user, "x")
    assert user.read_text() == "mine"


def test_a_file_edited_since_is_the_users(tmp_path):
    f = tmp_path / "model.pt"
    fileio.write_own_text(f, "gradblock's")
    f.write_text("the user's edit")
    assert not fileio.written_by_gradblock(f)
    with pytest.raises(ForeignFileError):
        fileio.check_replaceable(f, "--out")
    assert not fileio.remove_own(f) and f.read_text() == "the user's edit"


def test_remove_own_removes_only_its_own(tmp_path):
    ours, theirs = tmp_path / "a.pt", tmp_path / "b.pt"
    fileio.write_own_text(ours, "x")
    theirs.write_text("x")                               # same bytes, but no record of this name
    assert fileio.remove_own(ours) and not ours.exists()
    assert not fileio.remove_own(theirs) and theirs.exists()
    assert json.loads((tmp_path / fileio.LEDGER).read_text())["files"] == {}


def test_a_write_killed_before_the_rename_leaves_the_old_file_ours(tmp_path, monkeypatch):
    """The new digest is recorded before the rename and the old one dropped after it: a process
    that dies in between leaves a file the ledger still owns, whichever it is."""
    import os
    f = tmp_path / "ck.pt"
    fileio.write_own_text(f, "old")
    real = os.replace

    def dies_at_the_output(src, dst):
        if os.path.basename(dst) != fileio.LEDGER:
            raise KeyboardInterrupt
        return real(src, dst)
    monkeypatch.setattr(fileio.os, "replace", dies_at_the_output)
    with pytest.raises(KeyboardInterrupt):
        fileio.write_own_text(f, "new")
    monkeypatch.setattr(fileio.os, "replace", real)
    assert f.read_text() == "old" and fileio.written_by_gradblock(f)
    assert len(json.loads((tmp_path / fileio.LEDGER).read_text())["files"]["ck.pt"]) == 2
    fileio.write_own_text(f, "new")
    assert fileio.written_by_gradblock(f)
    assert len(json.loads((tmp_path / fileio.LEDGER).read_text())["files"]["ck.pt"]) == 1


def test_refusals_before_writing(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(OutputError, match="is a directory"):
        fileio.check_replaceable(tmp_path / "d", "--checkpoint")
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match="--out .*is a file, not a directory"):
        fileio.check_replaceable(tmp_path / "f" / "result.json", "--out")
    with pytest.raises(OutputError, match="exists and is not a directory"):
        fileio.check_output_dir(tmp_path / "f", "--out")


def test_claimed_directories(tmp_path):
    d = fileio.claim_directory(tmp_path / "demo")
    assert fileio.claimed(d) and not fileio.claimed(tmp_path)
    with pytest.raises(FileExistsError):
        fileio.claim_directory(d)
    fileio.write_own_text(tmp_path / "plain" / "x.txt", "x")   # written into, not created by us
    assert not fileio.claimed(tmp_path / "plain")


def test_holds_is_the_one_test(tmp_path):
    f = tmp_path / "x"
    f.write_bytes(b"abc")
    d = fileio.digest(f)
    assert fileio.holds(f, d) and fileio.holds(f, [d, "0" * 64]) and not fileio.holds(f, "0" * 64)
    assert not fileio.holds(f, None) and fileio.digest(tmp_path) is None
    (tmp_path / "link").symlink_to(f)
    assert not fileio.holds(tmp_path / "link", d)          # never through a link
