"""The one RTL dependency resolver: which hw/ files a top level needs, in compile order.

Every consumer (the cocotb harness, `gradblock verify`, the lint and RTL tests, hw/synth.py, the
benchmarks) asks this module instead of keeping its own list, so a block that gains a helper
module or starts using gradblock_pkg needs no edit anywhere else.

Conventions it relies on (tests/test_rtl_lint.py checks them): one module or package per file,
named like the file (hw/<name>.sv). A module depends on
  * every hw/ module it instantiates (`name #(...) inst (` or `name inst (`), and
  * every hw/ package it names, by scope (`pkg::NAME`) or by import (`import pkg::*;`).

`sources(top)` lists packages first (each after the packages it uses), then `top`, then the
modules below it in the order they are first met, each once. Simulators and yosys need a
package compiled before its users; module order does not matter to them.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

from gradblock.codec.errors import GradblockError

HW_DIR = Path(__file__).resolve().parent

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRINGS = re.compile(r'"(?:\\.|[^"\\])*"')
_DECL = re.compile(r"^\s*(module|package)\s+(\w+)", re.M)
# `foo #(` or `foo bar (`: an instantiation of foo (checked only for names of hw/ modules)
_INSTANCE = re.compile(r"\b([A-Za-z_]\w*)\s*(?:#\s*\(|[A-Za-z_]\w*\s*\()")
_SCOPE = re.compile(r"\b(\w+)\s*::")


class RtlDependencyError(GradblockError):
    """The hw/ sources do not follow the conventions above (missing file, wrong declaration)."""


@functools.lru_cache(maxsize=None)
def _scan(path: Path, mtime_ns: int) -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
    """(kind, name, instantiated identifiers, package scopes) of one source file."""
    text = _STRINGS.sub('""', _COMMENTS.sub("", path.read_text()))
    decls = _DECL.findall(text)
    if len(decls) != 1:
        raise RtlDependencyError(f"{path.name}: expected one module or package, found "
                                 f"{[n for _, n in decls] or 'none'}")
    kind, name = decls[0]
    if name != path.stem:
        raise RtlDependencyError(f"{path.name} declares {kind} {name!r}: the file must be named "
                                 f"{name}.sv")
    instances = tuple(dict.fromkeys(_INSTANCE.findall(text)))
    scopes = tuple(dict.fromkeys(_SCOPE.findall(text)))
    return kind, name, instances, scopes


def scan(path: Path) -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
    path = Path(path)
    return _scan(path, path.stat().st_mtime_ns)


def available(hw_dir: Path = HW_DIR) -> dict[str, str]:
    """name -> "module" / "package" for every hw/*.sv file."""
    return {p.stem: scan(p)[0] for p in sorted(Path(hw_dir).glob("*.sv"))}


def _path(name: str, hw_dir: Path) -> Path:
    path = Path(hw_dir) / f"{name}.sv"
    if not path.is_file():
        raise RtlDependencyError(f"no RTL source for {name!r}: {path} does not exist")
    return path


def direct(name: str, hw_dir: Path = HW_DIR) -> tuple[list[str], list[str]]:
    """(hw/ modules instantiated by `name`, hw/ packages it uses), in order of appearance."""
    known = available(hw_dir)
    _, _, instances, scopes = scan(_path(name, hw_dir))
    modules = [m for m in instances if known.get(m) == "module" and m != name]
    packages = [p for p in scopes if known.get(p) == "package" and p != name]
    return modules, packages


def instantiated(module: str, hw_dir: Path = HW_DIR) -> list[str]:
    """Modules of hw_dir instantiated directly by `module`, in order of appearance."""
    return direct(module, hw_dir)[0]


def module_closure(top: str, hw_dir: Path = HW_DIR) -> list[str]:
    """`top` first, then every module it needs (depth first), each once; packages excluded."""
    order, stack = [], [top]
    while stack:
        m = stack.pop()
        if m in order:
            continue
        order.append(m)
        stack.extend(reversed(instantiated(m, hw_dir)))
    return order


def package_closure(top: str, hw_dir: Path = HW_DIR) -> list[str]:
    """Every package `top` and its modules use, each after the packages it uses itself."""
    order: list[str] = []

    def visit(pkg: str, path: tuple[str, ...]) -> None:
        if pkg in order:
            return
        if pkg in path:
            raise RtlDependencyError(f"packages use each other in a cycle: "
                                     f"{' -> '.join(path + (pkg,))}")
        for sub in direct(pkg, hw_dir)[1]:
            visit(sub, path + (pkg,))
        order.append(pkg)

    for m in module_closure(top, hw_dir):
        for pkg in direct(m, hw_dir)[1]:
            visit(pkg, ())
    return order


def names(top: str, hw_dir: Path = HW_DIR) -> list[str]:
    """File stems `top` needs in compile order: packages, then `top` and its modules."""
    return package_closure(top, hw_dir) + module_closure(top, hw_dir)


def sources(top: str, hw_dir: Path = HW_DIR) -> list[Path]:
    """hw/ files `top` needs, in compile order (see the module docstring)."""
    return [_path(n, hw_dir) for n in names(top, hw_dir)]


def tops(hw_dir: Path = HW_DIR) -> list[str]:
    """Every module of hw_dir (candidates for a top level), packages excluded."""
    return [n for n, kind in available(hw_dir).items() if kind == "module"]


def hdl_defaults(top: str) -> dict:
    """name -> default value (an int) of each parameter in `top`'s header (hw/<top>.sv)."""
    text = re.sub(r"//[^\n]*", "", (HW_DIR / f"{top}.sv").read_text())
    header = re.search(rf"\bmodule\s+{top}\s*#\s*\((.*?)\)\s*\(", text, re.S)
    if not header:
        return {}
    out = {}
    for name, value in re.findall(r"parameter\s+(?:int|bit)\s+(\w+)\s*=\s*([^,]+)",
                                  header.group(1)):
        value = value.strip()
        m = re.fullmatch(r"(\d+)'[bB]([01]+)", value)
        out[name] = int(m.group(2), 2) if m else int(value, 0)
    return out
