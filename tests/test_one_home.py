"""One home for each piece of knowledge (issue 20): one backend registry, one atomic writer.

Checked from the source (ast) as well as by behaviour, so a new copy anywhere fails here."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("codec", "refmodel", "torchstep", "hw", "sim", "shim", "bench", "gradblock")


def _sources():
    for folder in FOLDERS:
        yield from sorted((ROOT / folder).rglob("*.py"))


def _calls(tree: ast.AST):
    """(line, dotted name) of every call, e.g. 'os.replace', 'tempfile.mkstemp'."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f, parts = node.func, []
            while isinstance(f, ast.Attribute):
                parts.append(f.attr)
                f = f.value
            if isinstance(f, ast.Name):
                parts.append(f.id)
            yield node.lineno, ".".join(reversed(parts))


# ------------------------------------------------------------------------------- registry

def test_the_cli_backend_is_a_view_of_the_registry(monkeypatch):
    from gradblock import backends, commands
    commands.backend.cache_clear()
    try:
        ref = commands.backend("reference")
        assert ref.compress_layer is backends.get_backend("numpy").step
        assert ref.momentum_layer.__self__ is backends.get_backend("numpy")
        if backends.available_backends()["numba"] is None:
            fast = commands.backend("numba")
            assert fast.compress_layer is backends.get_backend("numba").step
            assert fast.name == "compress=numba, codec=numba"
        monkeypatch.setenv(backends.BACKEND_ENV, "bogus")
        commands.backend.cache_clear()
        with pytest.raises(backends.BackendUnavailableError, match="auto, numba or reference"):
            commands.backend()
    finally:
        commands.backend.cache_clear()


def test_no_module_picks_a_backend_by_name_outside_the_registry():
    """`if backend_name == "numba"` (and friends) belong in gradblock/backends.py only."""
    bad = []
    for path in _sources():
        if path == ROOT / "gradblock" / "backends.py":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                    isinstance(c, ast.Constant) and c.value in ("numba", "reference")
                    for c in node.comparators) and isinstance(node.left, ast.Name) \
                    and "backend" in node.left.id:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, "choose backends through gradblock.backends:\n" + "\n".join(bad)


# ---------------------------------------------------------------------------- atomic writes

# Renames that are not a file write: publishing an already-written staged directory, moving a
# finished build product into a cache.
RENAMES_ALLOWED = {"refmodel/golden_format.py"}


def test_one_atomic_writer():
    """Temporary file + os.replace lives in gradblock/codec/fileio.py; writers call it."""
    home = ROOT / "codec" / "fileio.py"
    bad = []
    for path in _sources():
        if path == home:
            continue
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, name in _calls(tree):
            if name in ("tempfile.mkstemp", "mkstemp") or \
                    (name in ("os.replace", "os.rename") and rel not in RENAMES_ALLOWED):
                bad.append(f"{rel}:{line} {name}")
    assert not bad, "write outputs through gradblock.codec.fileio (atomic_open, atomic_write, " \
                    "write_text, ...), not a copy:\n" + "\n".join(bad)


def test_the_cli_package_re_exports_the_writer():
    from gradblock import fileio
    from gradblock.codec import fileio as home
    assert fileio.atomic_open is home.atomic_open and fileio.OutputError is home.OutputError


# ---------------------------------------------------------------------- documented import paths

# What users code against (docs/training.md's own-training-loop example, docs/architecture.md)
# and the old homes of what issue 20 moved: each must keep importing.
DOCUMENTED = [
    ("gradblock.shim.compressors", "build_compressor"), ("gradblock.shim.compressors", "layers_of"),
    ("gradblock.shim.hook", "register"), ("gradblock.shim.optim", "GlobalMomentumSGD"),
    ("gradblock.shim.models", "build_model"), ("gradblock.shim.data", "load_dataset"),
    ("gradblock.backends", "get_backend"), ("gradblock.backends", "available_backends"),
    ("gradblock.fileio", "atomic_open"), ("gradblock.fileio", "write_text"),      # moved to codec
    ("gradblock.fileio", "OutputError"), ("gradblock.commands", "backend"),
    ("gradblock.commands", "BACKEND_ENV"), ("gradblock.commands", "BackendError"),
    ("gradblock.refmodel.validation", "ParameterError"), ("gradblock.refmodel.validation", "LmaxError"),
    ("gradblock.shim.merge_measure", "measure_comm"),                            # moved to merge_apply
    ("gradblock.shim.outputs", "atomic_write"),
]


@pytest.mark.parametrize("module,name", DOCUMENTED, ids=[f"{m}.{n}" for m, n in DOCUMENTED])
def test_documented_paths_import(module, name):
    import importlib
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and not e.name.startswith("gradblock"):
            pytest.skip(f"{module} needs the optional package {e.name}, not installed here")
        raise
    assert hasattr(mod, name), f"{module}.{name} is documented and must keep working"
