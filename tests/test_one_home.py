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

def test_one_backend_type():
    """gradblock/backends.py defines `Backend` (the protocol) and the registry; no other module
    defines a second one (gradblock/commands.py had its own view, issue 28 item 5)."""
    bad = []
    for path in _sources():
        if path == ROOT / "gradblock" / "backends.py":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        bad += [f"{path.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree)
                if isinstance(n, ast.ClassDef) and n.name == "Backend"]
    assert not bad, "use gradblock.backends (get_backend, host_backend):\n" + "\n".join(bad)


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
RENAMES_ALLOWED = {"golden/format.py"}


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


# ------------------------------------------------------------------------ the output policy

REFUSAL_WORDS = ("not written by gradblock", "did not write")


def _strings(node: ast.AST):
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            yield n.value


def test_one_output_policy():
    """What gradblock wrote, and so may replace or remove, is decided in codec/fileio.py alone:
    no other module names a marker or ledger file of its own (".gradblock-..."), and every
    refusal of a file gradblock did not write is fileio's ForeignFileError (issue 28 item 2:
    there were six ways: the demo's marker, verify's snapshot list, golden's checksums, the
    trainer's and validate's content sniffing, shim/outputs.py)."""
    home = ROOT / "codec" / "fileio.py"
    bad = []
    for path in _sources():
        if path == home:
            continue
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    node.value.startswith(".gradblock-"):
                bad.append(f"{rel}:{node.lineno} names its own marker {node.value!r}")
            if isinstance(node, ast.Raise) and node.exc is not None and any(
                    w in s for s in _strings(node.exc) for w in REFUSAL_WORDS):
                func = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name != "ForeignFileError":
                    bad.append(f"{rel}:{node.lineno} refuses a foreign file with {name}")
    assert not bad, "decide what gradblock wrote through gradblock.codec.fileio (write_own, " \
                    "check_replaceable, remove_own, holds):\n" + "\n".join(bad)


def test_the_output_policy_check_sees_a_second_policy(tmp_path):
    tree = ast.parse('MARK = ".gradblock-mine"\n'
                     'def f(p):\n    raise ValueError(f"{p}: not written by gradblock")\n')
    marks = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == ".gradblock-mine"]
    raises = [n for n in ast.walk(tree) if isinstance(n, ast.Raise)
              and any(w in s for s in _strings(n.exc) for w in REFUSAL_WORDS)]
    assert marks and raises and raises[0].exc.func.id == "ValueError"


# ---------------------------------------------------------------------- documented import paths

# What users code against (docs/training.md's own-training-loop example, docs/architecture.md)
# each must keep importing.
DOCUMENTED = [
    ("gradblock.shim.compress.compressors", "build_compressor"), ("gradblock.shim.compress.compressors", "layers_of"),
    ("gradblock.shim.exchange.hook", "register"), ("gradblock.shim.exchange.optim", "GlobalMomentumSGD"),
    ("gradblock.shim.setup.models", "build_model"), ("gradblock.shim.setup.data", "load_dataset"),
    ("gradblock.backends", "get_backend"), ("gradblock.backends", "available_backends"),
    ("gradblock.codec.fileio", "atomic_open"), ("gradblock.codec.fileio", "write_text"),
    ("gradblock.codec.fileio", "OutputError"), ("gradblock.backends", "host_backend"),
    ("gradblock.backends", "BACKEND_ENV"), ("gradblock.backends", "BackendUnavailableError"),
    ("gradblock.refmodel.validation", "ParameterError"), ("gradblock.refmodel.validation", "LmaxError"),
    ("gradblock.shim.systems.merge_apply", "measure_comm"),
    ("gradblock.codec.fileio", "write_own"), ("gradblock.codec.fileio", "check_replaceable"),
    # docs/golden.md's "From Python"
    ("gradblock.golden.format", "load_golden"), ("gradblock.golden.check", "check_golden"),
    ("gradblock.golden.compute", "generate_golden"),
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


# --------------------------------------------------------------- the DUT table (item 7)

DUT_TABLE = ROOT / "sim" / "duts.py"
TB_LIBRARY = ROOT / "sim" / "benches" / "tb_util.py"
# where a block is built or run: the table's readers (tests, verify, bench) and the testbenches
DUT_READERS = ("sim", "bench", "tests", "gradblock")


def _reader_sources():
    for folder in DUT_READERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path != DUT_TABLE:
                yield path


def _docstrings(tree: ast.AST) -> set[int]:
    """id() of every docstring constant (examples in prose are not build knowledge)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _literal_dict(node: ast.Dict) -> dict | None:
    """A dict display of constant keys and values as a dict, else None."""
    if not node.keys or any(k is None or not isinstance(k, ast.Constant) for k in node.keys):
        return None
    if not all(isinstance(v, ast.Constant) for v in node.values):
        return None
    return {k.value: v.value for k, v in zip(node.keys, node.values)}


def test_the_dut_table_is_the_one_home():
    """A testbench module's name, a block's reference parameter set and the block -> golden
    stage map are written in sim/duts.py only; everything else reads DUTS."""
    from gradblock.sim.duts import DUTS
    tb_modules = {d.test_module for d in DUTS.values()}
    param_sets = {d.name: dict(d.parameters) for d in DUTS.values() if len(d.parameters) > 1}
    stages = {d.name: set(d.stages) for d in DUTS.values() if d.stages}
    bad = []
    for path in _reader_sources():
        rel = path.relative_to(ROOT)
        tree = ast.parse(path.read_text(), filename=str(path))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and id(node) not in docs and node.value in tb_modules:
                bad.append(f"{rel}:{node.lineno} names the testbench {node.value!r}")
            if isinstance(node, ast.Call) and _calls_name(node) == "run_rtl" and node.args \
                    and isinstance(node.args[0], ast.Constant):
                bad.append(f"{rel}:{node.lineno} builds the top level {node.args[0].value!r} "
                           "by name (use DUTS[...].run)")
            if isinstance(node, ast.Dict) and (lit := _literal_dict(node)) is not None:
                for name, params in param_sets.items():
                    if lit == params:
                        bad.append(f"{rel}:{node.lineno} copies {name}'s parameters {lit}")
                mapped = [k for k, v in lit.items() if k in stages and v in stages[k]]
                if len(mapped) >= 2 and any(lit[k] != k for k in mapped):
                    bad.append(f"{rel}:{node.lineno} maps blocks to golden stages ({mapped})")
    assert not bad, "a block's build knowledge belongs in sim/duts.py:\n" + "\n".join(bad)


def _calls_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")


def test_verify_and_the_testbenches_read_the_table():
    from gradblock.sim import duts, verify
    assert verify.REGISTRY == duts.verified()
    assert all(verify.REGISTRY[n] is duts.DUTS[n] for n in verify.REGISTRY)
    assert list(verify.REGISTRY) == [n for n, d in duts.DUTS.items() if d.stage]
    for name, dut in duts.DUTS.items():
        assert dut.missing() == [], (name, dut.missing())
        assert dut.sources[dut.sources.index(dut.toplevel)] == dut.toplevel
        if dut.stage:
            assert duts.stage_of(name) == dut.stage
    with pytest.raises(TypeError):
        duts.DUTS["compress_top"].parameters["K_MAX"] = 1          # the table is read-only


def test_golden_quick_is_defined_once():
    """The session's `gradblock golden --quick` directory is tests/conftest.py's fixture."""
    defs = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        defs += [(str(path.relative_to(ROOT)), n.lineno) for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == "golden_quick"]
    assert [rel for rel, _ in defs] == ["tests/conftest.py"], \
        "define golden_quick once, in tests/conftest.py: " + ", ".join(f"{r}:{n}" for r, n in defs)


def test_one_testbench_library():
    """sim/benches/tb_util.py is the testbenches' one helper library: every other file there is a
    testbench of the DUT table, and no helper is written twice (the same top-level function
    in two testbenches, or a testbench redefining one of the library's)."""
    from gradblock.sim.duts import DUTS
    tb_files = {p.stem for p in TB_LIBRARY.parent.glob("*.py")} - {"__init__"}
    testbenches = {d.test_module.rsplit(".", 1)[-1] for d in DUTS.values()}
    assert tb_files - {TB_LIBRARY.stem} == testbenches, \
        f"sim/benches/ files that are neither the library nor a DUT's testbench: " \
        f"{sorted(tb_files - {TB_LIBRARY.stem} - testbenches)}"
    lib = ast.parse(TB_LIBRARY.read_text())
    library = {n.name for n in lib.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                            ast.ClassDef))}
    seen: dict[str, str] = {}
    bad = []
    for stem in sorted(testbenches):
        path = TB_LIBRARY.parent / f"{stem}.py"
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.decorator_list:
                continue                      # cocotb tests are decorated: each module's own
            if node.name in library:
                bad.append(f"{path.name}:{node.lineno} redefines tb_util.{node.name}")
            body = ast.dump(ast.Module(body=node.body, type_ignores=[]))
            key = f"{node.name}:{body}"
            if key in seen:
                bad.append(f"{path.name}:{node.lineno} repeats {seen[key]}'s {node.name}")
            seen.setdefault(key, path.name)
    assert not bad, "testbench helpers belong in sim/benches/tb_util.py, once:\n" + "\n".join(bad)
