"""One error root: every named error of the project inherits GradblockError, so gradblock/cli.py
maps exactly that root to one line and exit status 2; and a closed pipe ends quietly.

The classes are found by parsing every module of every package (ast: a class whose name ends in
Error or Exception), then imported to check their bases, so a new error class anywhere is
checked without being listed here."""
from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gradblock.codec import errors as E

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"codec": "gradblock.codec", "refmodel": "gradblock.refmodel", "hw": "gradblock.hw",
            "sim": "gradblock.sim", "shim": "gradblock.shim", "bench": "gradblock.bench",
            "torchstep": "gradblock.torchstep", "gradblock": "gradblock"}

# Errors that are deliberately not user errors: escaping a command they are a bug or a failed
# tool (exit 1 through gradblock.cli), never exit 2. Each says why.
INTERNAL = {
    "gradblock.hw.ecp5.Ecp5FlowError": "yosys / nextpnr failed or their report lacks a figure",
    "gradblock.hw.sv_constants.PackageParseError": "hw/gradblock_pkg.sv, the project's own file, "
                                                   "has a line the reader does not understand",
}


def _module_name(path: Path) -> str:
    folder, *rest = path.relative_to(ROOT).with_suffix("").parts
    parts = [PACKAGES[folder], *rest]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _error_classes() -> list[tuple[str, str]]:
    """(module, class name) of every class named *Error / *Exception in the packages."""
    found = []
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name.endswith(("Error", "Exception")):
                    found.append((_module_name(path), node.name))
    return found


ERROR_CLASSES = _error_classes()


def test_the_walk_finds_the_known_errors():
    """The walk itself must see classes, or the test below passes vacuously."""
    names = {f"{m}.{c}" for m, c in ERROR_CLASSES}
    for known in ("gradblock.codec.errors.ParameterError", "gradblock.refmodel.validation.KError",
                  "gradblock.shim.setup.data.DatasetError",
                  "gradblock.hw.deps.RtlDependencyError", "gradblock.shim.errors.TrainingError",
                  "gradblock.refmodel.coded.CodedConfigError", "gradblock.codec.fileio.OutputError"):
        assert known in names, known
    assert len(names) >= 30


@pytest.mark.parametrize("module,name", ERROR_CLASSES, ids=[f"{m}.{c}" for m, c in ERROR_CLASSES])
def test_every_named_error_inherits_the_root(module, name):
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and not e.name.startswith("gradblock"):
            pytest.skip(f"{module} needs the optional package {e.name}, not installed here")
        raise
    cls = getattr(mod, name, None)
    if cls is None:
        pytest.skip(f"{module}.{name} is local to a function (checked where it is raised)")
    qualified = f"{module}.{name}"
    if qualified in INTERNAL:
        assert not issubclass(cls, E.GradblockError), f"{qualified} is listed as internal"
        return
    assert issubclass(cls, E.GradblockError), \
        f"{qualified} must inherit gradblock.codec.errors.GradblockError (or be listed in INTERNAL " \
        f"with the reason it is not a user error)"


def test_frame_errors_built_by_the_table_inherit_the_root():
    assert all(issubclass(e, E.FrameError) and issubclass(e, E.GradblockError)
               for e in E.ALL_ERRORS)


def test_the_cli_maps_exactly_the_root(capsys):
    from gradblock import cli

    class Custom(E.GradblockError):
        pass

    def fail(exc):
        raise exc
    assert cli.run_guarded("thing", fail, Custom("bad thing")) == 2
    assert capsys.readouterr().err == "gradblock thing: Custom: bad thing\n"
    assert cli.run_guarded("thing", fail, E.UsageError("--x: bad")) == 2
    assert capsys.readouterr().err == "gradblock thing: --x: bad\n"
    assert cli.run_guarded("thing", fail, ValueError("plain")) == 1      # not named: a bug
    assert "internal error: ValueError: plain" in capsys.readouterr().err


# ------------------------------------------------------------------------------ closed pipe

def _closed_pipe(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`gradblock ARGV | head -0`: the reader is gone before the first write."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", "gradblock.cli", *argv], stdout=w,
                              stderr=subprocess.PIPE, text=True, cwd=cwd, timeout=300)
    finally:
        os.close(w)


def _message(path: Path, frames: int) -> Path:
    from gradblock.codec import zrle
    words = [zrle.encode_frame(np.arange(1, 40, dtype=np.int32) * (i + 1), layer_id=i)
             for i in range(frames)]
    path.write_bytes(np.concatenate(words).astype("<u4").tobytes())
    return path


def test_inspect_into_a_closed_pipe_ends_quietly(tmp_path):
    """Like `seq 1 1000000 | head -1`: no message, exit status 141 (128 + SIGPIPE)."""
    msg = _message(tmp_path / "m.bin", 300)
    r = _closed_pipe(["inspect", str(msg)], tmp_path)
    assert r.returncode == 141 and r.stderr == "", (r.returncode, r.stderr)


def test_step_into_a_closed_pipe_ends_quietly_and_writes_its_outputs(tmp_path):
    np.save(tmp_path / "g.npy", np.linspace(-1, 1, 64, dtype=np.float32))
    r = _closed_pipe(["step", "g.npy", "-", "--frame", "f.bin", "--residual-out", "r.npy"],
                     tmp_path)
    assert r.returncode == 141 and r.stderr == "", (r.returncode, r.stderr)
    assert (tmp_path / "f.bin").stat().st_size > 0 and (tmp_path / "r.npy").exists()


def test_a_broken_pipe_that_is_not_stdout_is_still_a_bug(capsys):
    from gradblock import cli

    def other_pipe():
        raise BrokenPipeError(32, "Broken pipe")
    assert cli.run_guarded("thing", other_pipe) == 1
    assert "internal error: BrokenPipeError" in capsys.readouterr().err


def test_usage_into_a_closed_pipe_ends_quietly(tmp_path):
    r = _closed_pipe(["--help"], tmp_path)
    assert r.returncode == 141 and r.stderr == "", (r.returncode, r.stderr)
