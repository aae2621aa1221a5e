"""The layers import one way (docs/architecture.md), and nothing generic is importable at the top.

Every .py of every package is parsed (ast, nothing imported), every import -- top level or
inside a function, absolute or relative -- is resolved to its gradblock.* name and checked against
what its package may import; and no package's modules import each other in a cycle (function-level
imports included: a cycle hidden in a function is still a cycle). Inside shim/, the subpackages
import one way too (SHIM_LAYERS below), the training side reaches the papers' systems
(shim/systems/) only through the allow-listed seam (SEAM below), and no module anywhere is an
alias of another (an old import path kept alive: issue 28 removed the last of them)."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# folder -> namespace (pyproject.toml [tool.setuptools.package-dir])
PACKAGES = {"codec": "gradblock.codec", "refmodel": "gradblock.refmodel",
            "fastpath": "gradblock.fastpath",
            "golden": "gradblock.golden", "hw": "gradblock.hw",
            "sim": "gradblock.sim", "shim": "gradblock.shim", "bench": "gradblock.bench",
            "torchstep": "gradblock.torchstep", "gradblock": "gradblock"}
SUBPACKAGES = {ns for ns in PACKAGES.values() if ns != "gradblock"}
CLI = "gradblock (the CLI package)"
BELOW_SHIM = {"gradblock.codec", "gradblock.refmodel", "gradblock.fastpath", "gradblock.golden",
              "gradblock.torchstep",
              "gradblock.hw", "gradblock.sim"}

# what each layered package may import of the project (besides itself)
ALLOWED = {
    "codec": set(),
    "refmodel": {"gradblock.codec"},
    # the numba fast path: the reference's checks and plans, the codec's numba encoder
    "fastpath": {"gradblock.codec", "gradblock.refmodel"},
    # global selection on CPU tensors runs fastpath.global_numba on their memory
    "torchstep": {"gradblock.codec", "gradblock.refmodel", "gradblock.fastpath"},
    # golden vectors: their file format, cases, computation and check (not the real-gradient
    # cases, which need the trained models: gradblock/realgrads.py injects those)
    "golden": {"gradblock.codec", "gradblock.refmodel"},
    "hw": {"gradblock.codec", "gradblock.refmodel"},
    "sim": {"gradblock.codec", "gradblock.refmodel", "gradblock.golden", "gradblock.hw"},
    "shim": BELOW_SHIM,
    "bench": BELOW_SHIM | {"gradblock.shim"},      # the models and data sets live in shim
    "gradblock": BELOW_SHIM | {"gradblock.shim", "gradblock.bench", CLI},   # the CLI: everything
}
BARE = set(PACKAGES) - {"gradblock"}


def _layer_of(name: str) -> str | None:
    """gradblock.X.y -> 'gradblock.X' for a subpackage, CLI for the rest of gradblock.*, None
    outside the project."""
    if name != "gradblock" and not name.startswith("gradblock."):
        return None
    for ns in SUBPACKAGES:
        if name == ns or name.startswith(ns + "."):
            return ns
    return CLI


def _imports(path: Path, package: str):
    """(line, absolute module name) of every import in `path`, a module of `package` (the
    namespace of its top folder; subfolders extend it)."""
    sub = path.parent.relative_to(ROOT).parts[1:]
    package = ".".join([package, *sub])
    tree = ast.parse(path.read_text(), filename=str(path))
    is_init = path.name == "__init__.py"
    here = package.split(".") + ([] if is_init else [path.stem])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:                       # relative: resolve against this module
                base = here[:len(here) - node.level] if not is_init else \
                    here[:len(here) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod == "gradblock":               # `from gradblock import torchstep`: the subpackage
                for alias in node.names:
                    yield node.lineno, f"gradblock.{alias.name}"
                continue
            yield node.lineno, mod
            for alias in node.names:             # `from p import x`: x may be a module of p
                if alias.name != "*":            # (callers reduce it to the module it names)
                    yield node.lineno, f"{mod}.{alias.name}"


def _modules(folder: str):
    return sorted((ROOT / folder).rglob("*.py"))


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_layer_imports_only_what_it_may(folder):
    own = PACKAGES[folder]
    allowed = ALLOWED[folder] | {own}
    bad = []
    for path in _modules(folder):
        for line, name in _imports(path, own):
            layer = _layer_of(name)
            if layer is not None and layer not in allowed:
                bad.append(f"{_relative(path)}:{line} imports {name} ({layer})")
    assert not bad, f"{folder}/ may import only {sorted(allowed)}:\n" + "\n".join(bad)


def _module_name(path: Path) -> str:
    folder, *rest = path.relative_to(ROOT).with_suffix("").parts
    parts = [PACKAGES[folder], *rest]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative enough for
    a package: recursion depth is the longest import chain)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _package_graph(folder: str) -> dict[str, set[str]]:
    """module -> modules of the same package it imports (any import, at any depth of the file)."""
    own = PACKAGES[folder]
    paths = _modules(folder)
    names = {_module_name(p) for p in paths}
    edges: dict[str, set[str]] = {}
    for path in paths:
        me = _module_name(path)
        deps = edges.setdefault(me, set())
        for _, name in _imports(path, own):
            while name and name not in names:        # gradblock.shim.x.y -> gradblock.shim.x
                name = name.rpartition(".")[0]
            if name and name != me and _layer_of(name) == _layer_of(me):
                deps.add(name)
    return edges


@pytest.mark.parametrize("folder", sorted(PACKAGES))
def test_no_import_cycles_inside_a_package(folder):
    """exchange -> merge_hook -> merge_apply -> merge_measure -> exchange was one (issue 20)."""
    edges = _package_graph(folder)
    cycles = _cycles(edges)
    assert not cycles, f"{folder}/ has import cycles (function-level imports count):\n" + \
        "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    graph = _package_graph("shim")
    assert "gradblock.shim.systems.merge_apply" in graph["gradblock.shim.systems.merge_hook"]
    # `from ..setup import data` would be an edge to the module, not only to the package; this
    # one is `from .hook_state import HookState`
    assert "gradblock.shim.exchange.hook_state" in graph["gradblock.shim.exchange.hook"]


# ------------------------------------------- shim/: the training shim apart from the papers' systems

SYSTEMS = "gradblock.shim.systems"
# shim/ split by job (issue 28), bottom first: each subpackage may import its own modules and
# those of the layers before it, never one after it (the systems' seam below is the one
# exception, inside two functions). The shim's top holds only what every subpackage shares: the
# error family and the declaration of the training parameters (params).
SHIM_BASE = {"gradblock.shim", "gradblock.shim.errors", "gradblock.shim.params"}
SHIM_LAYERS = ["gradblock.shim.compress",     # a worker's gradients -> frames and back
               "gradblock.shim.setup",        # one run's settings, data set, model
               "gradblock.shim.exchange",     # how a step's gradients travel; hooks, peers, state
               "gradblock.shim.training",     # the trainer and the train / validate commands
               SYSTEMS]                       # the source papers' systems, on top
# The one-way seam (shim/systems/__init__.py): the only imports of shim/systems by the training
# side, importer -> {systems module: the names it may import}. Each sits inside the function that
# needs it, so importing the training shim loads none of the systems.
SEAM = {
    # DdpExchange.bind: the merged DDP hook, when a merge plan is given
    "gradblock.shim.exchange.modes": {f"{SYSTEMS}.merge_hook": {"register_merged"}},
    # Trainer._merge_groups: the planner behind --merge-plan
    "gradblock.shim.training.trainer": {f"{SYSTEMS}.merge_apply": {"plan_for_run"}},
}


def _shim_modules():
    """name -> path of every module of shim/ (systems included)."""
    return {_module_name(p): p for p in _modules("shim")}


def _is_systems(name: str) -> bool:
    return name == SYSTEMS or name.startswith(SYSTEMS + ".")


def _import_nodes(path: Path):
    """(node, in a function, [(target module, imported name or None)]) of every import in
    `path`: the target reduced to a module of shim/ (or left as it is outside shim/)."""
    here = _module_name(path)
    known = set(_shim_modules())
    tree = ast.parse(path.read_text(), filename=str(path))
    nested = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            targets = [(a.name, None) for a in node.names]
        else:
            targets = []
            if node.level:
                parts = here.split(".")
                base = parts[:len(parts) - node.level + (1 if path.name == "__init__.py" else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                targets.append((sub, None) if sub in known else (mod, a.name))
        yield node, id(node) in nested, targets


def _training_side():
    return {n: p for n, p in _shim_modules().items() if not _is_systems(n)}


def _shim_layer(name: str) -> int | None:
    """-1 for the shim's shared base, i for SHIM_LAYERS[i], None outside shim/."""
    if name in SHIM_BASE:
        return -1
    for i, pkg in enumerate(SHIM_LAYERS):
        if name == pkg or name.startswith(pkg + "."):
            return i
    return None


def test_the_shim_top_holds_only_its_base_and_subpackages():
    """Every module of shim/ sits in a subpackage named by SHIM_LAYERS, or is the shared base."""
    stray = sorted(n for n in _shim_modules() if _shim_layer(n) is None)
    assert not stray, f"modules of shim/ outside its subpackages {SHIM_LAYERS}: {stray}"
    folders = {p.parent for p in _shim_modules().values()} - {ROOT / "shim"}
    assert {_module_name(f / "__init__.py") for f in folders} == set(SHIM_LAYERS)


@pytest.mark.parametrize("package", SHIM_LAYERS)
def test_each_shim_subpackage_says_its_job(package):
    """A paragraph of docstring in each subpackage's __init__.py: what it does and what it uses."""
    doc = ast.get_docstring(ast.parse(_file_of(package + ".__init__").read_text())) or ""
    assert len(doc.split()) >= 30, f"{package}/__init__.py needs a docstring saying its job"


def test_the_shim_subpackages_import_one_way():
    """A module of SHIM_LAYERS[i] imports nothing of SHIM_LAYERS[j > i] (function-level imports
    included), but for the allow-listed seam into the systems; the base imports no subpackage."""
    bad = []
    for me, path in _shim_modules().items():
        mine = _shim_layer(me)
        for node, _, targets in _import_nodes(path):
            for target, name in targets:
                theirs = _shim_layer(target)
                if theirs is None or theirs <= mine:
                    continue
                if name in SEAM.get(me, {}).get(target, set()):
                    continue                      # checked by the seam tests below
                bad.append(f"{_relative(path)}:{node.lineno} imports {target}")
    assert not bad, f"shim/'s subpackages import downwards only ({SHIM_LAYERS}):\n" + "\n".join(bad)


def test_the_layer_order_of_shim_is_checked():
    """The checker sees real edges: the trainer imports the exchange, the exchange the compressors."""
    graph = _package_graph("shim")
    assert "gradblock.shim.exchange.modes" in graph["gradblock.shim.training.trainer"]
    assert "gradblock.shim.compress.compressors" in graph["gradblock.shim.exchange.hook"]
    assert _shim_layer("gradblock.shim.exchange.hook") > _shim_layer("gradblock.shim.compress.fastpath")


def test_the_training_side_reaches_the_systems_only_through_the_seam():
    """Nothing in shim/ outside systems/ imports shim/systems but
    the allow-listed seam: the named modules and names, inside a function."""
    bad = []
    for me, path in _training_side().items():
        for node, in_function, targets in _import_nodes(path):
            for target, name in targets:
                if not _is_systems(target):
                    continue
                allowed = SEAM.get(me, {}).get(target, set())
                where = f"{_relative(path)}:{node.lineno} imports {target}" + \
                    (f".{name}" if name else "")
                if name not in allowed:
                    bad.append(f"{where} (not in the seam)")
                elif not in_function:
                    bad.append(f"{where} at module level (the seam imports inside a function)")
    assert not bad, "the training shim may use shim/systems only through the seam " \
        f"(tests/test_layering.py SEAM, shim/systems/__init__.py):\n" + "\n".join(bad)


def test_the_seam_allow_list_is_in_use():
    """Every allow-listed import of the seam exists (a stale entry would allow a new one)."""
    found = set()
    for me, path in _training_side().items():
        for _, _, targets in _import_nodes(path):
            found |= {(me, t, n) for t, n in targets}
    missing = [(me, t, n) for me, mods in SEAM.items() for t, names in mods.items() for n in names
               if (me, t, n) not in found]
    assert not missing, f"SEAM lists imports nobody makes: {missing}"


def test_the_systems_use_no_private_name_of_the_training_side():
    """merge_apply once used merge_measure's private _fit; the systems import public names only."""
    training = set(_training_side())
    bad = []
    for me, path in _shim_modules().items():
        if not _is_systems(me):
            continue
        for node, _, targets in _import_nodes(path):
            bad += [f"{_relative(path)}:{node.lineno} imports {t}.{n}" for t, n in targets
                    if t in training and n and n.startswith("_")]
    assert not bad, "\n".join(bad)


def test_the_systems_subpackage_is_checked_for_cycles():
    """shim/'s graph holds systems/ too, so a cycle inside systems/ or through the seam fails
    test_no_import_cycles_inside_a_package[shim]."""
    graph = _package_graph("shim")
    systems = {m for m in graph if _is_systems(m)}
    assert {f"{SYSTEMS}.{m}" for m in ("merge_plan", "merge_measure", "merge_apply", "merge_hook",
                                       "merge_check", "coded")} <= systems
    assert "gradblock.shim.compress.compressors" in graph[f"{SYSTEMS}.merge_hook"]       # systems -> training
    assert f"{SYSTEMS}.merge_hook" in graph["gradblock.shim.exchange.modes"]          # the seam
    assert not _cycles({m: graph[m] & systems for m in systems})
    assert not _cycles(graph)


def _file_of(module: str) -> Path:
    for folder, ns in sorted(PACKAGES.items(), key=lambda kv: -len(kv[1])):
        if module.startswith(ns + "."):
            return ROOT / folder / (module[len(ns) + 1:].replace(".", "/") + ".py")
    raise KeyError(module)


def _is_alias(tree: ast.Module) -> bool:
    """A module that only hands on another's names: its body is a docstring, imports, `__all__`
    and `sys.modules[__name__] = ...`, nothing defined (a package's __init__ is not asked)."""
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.Assign) and all(
                isinstance(t, ast.Subscript) or (isinstance(t, ast.Name) and t.id == "__all__")
                for t in node.targets):
            continue
        return False
    return True


def test_no_module_is_an_alias():
    """Issue 28 removed the 13 alias modules (old import paths kept alive); none comes back."""
    aliases = [_relative(p) for folder in PACKAGES for p in _modules(folder)
               if p.name != "__init__.py" and _is_alias(ast.parse(p.read_text()))]
    assert not aliases, f"alias modules (import the new home instead): {aliases}"


def test_the_alias_finder_finds_aliases():
    assert _is_alias(ast.parse('"""old home"""\nimport sys\nimport a.b as m\nsys.modules[__name__] = m\n'))
    assert _is_alias(ast.parse('from a.b import (x, y)  # noqa: F401\n'))
    assert not _is_alias(ast.parse('from a.b import x\n\ndef f():\n    return x\n'))


def test_the_training_shim_loads_none_of_the_systems(tmp_path):
    """Importing every training module of shim/ imports nothing of shim/systems."""
    pytest.importorskip("torch")
    names = sorted(_training_side())
    code = ("import importlib, sys\n"
            f"for n in {names!r}: importlib.import_module(n)\n"
            "print(sorted(m for m in sys.modules if m.startswith('gradblock.shim.systems')))")
    r = _python_outside_checkout(code, tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout, r.stderr[-2000:])


@pytest.mark.parametrize("folder", sorted(PACKAGES) + ["tests"])
def test_no_bare_top_level_imports(folder):
    """`import codec` / `from refmodel import x` only worked with the checkout on sys.path."""
    package = PACKAGES.get(folder, folder)
    bad = []
    for path in _modules(folder):
        for line, name in _imports(path, package):
            if name.split(".")[0] in BARE:
                bad.append(f"{_relative(path)}:{line} imports {name}")
    assert not bad, "use gradblock.<package>, never a bare top-level name:\n" + "\n".join(bad)


def test_import_resolution_of_this_checker():
    """The resolver above must see the imports it checks (or every rule passes vacuously)."""
    names = {n for _, n in _imports(ROOT / "torchstep" / "layer.py", "gradblock.torchstep")}
    assert "gradblock.torchstep.quantiser" in names and "gradblock.codec.zrle_torch" in names
    names = {n for _, n in _imports(ROOT / "codec" / "zrle.py", "gradblock.codec")}
    assert "gradblock.codec.errors" in names
    assert _layer_of("gradblock.cli") == CLI and _layer_of("gradblock.sim.harness") == "gradblock.sim"
    assert _layer_of("numpy") is None


def _python_outside_checkout(code: str, tmp_path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", sorted(BARE))
def test_generic_names_are_not_importable(name, tmp_path):
    r = _python_outside_checkout(f"import {name}", tmp_path)
    assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr, (r.stdout, r.stderr)


def test_namespaced_packages_import(tmp_path):
    r = _python_outside_checkout("import gradblock.codec.zrle, gradblock.refmodel.quantiser, "
                                 "gradblock.codec.errors; print('ok')", tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
