"""Which hw/ files a top level needs: the module and everything it instantiates, found by
scanning the sources (one module per file, hw/<module>.sv), so testbench runners and the
synthesis flow never carry hand-kept lists that go stale when a block gains a helper."""
from __future__ import annotations

import re
from pathlib import Path

HW_DIR = Path(__file__).resolve().parent.parent / "hw"

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_INSTANCE = re.compile(r"^\s*(\w+)\s*(?:#\s*\(|\w+\s*\()", re.M)


def instantiated(module: str, hw_dir: Path = HW_DIR) -> list[str]:
    """Modules of hw_dir instantiated directly by `module`, in order of appearance."""
    path = hw_dir / f"{module}.sv"
    if not path.is_file():
        raise FileNotFoundError(f"no RTL source for module {module!r}: {path} does not exist")
    text = _COMMENTS.sub("", path.read_text())
    known = {p.stem for p in hw_dir.glob("*.sv")}
    out = []
    for name in _INSTANCE.findall(text):
        if name in known and name != module and name not in out:
            out.append(name)
    return out


def module_closure(top: str, hw_dir: Path = HW_DIR) -> list[str]:
    """`top` first, then every module it needs, each once."""
    order, stack = [], [top]
    while stack:
        m = stack.pop()
        if m in order:
            continue
        order.append(m)
        stack.extend(reversed(instantiated(m, hw_dir)))
    return order


def sources(top: str, hw_dir: Path = HW_DIR) -> list[Path]:
    return [hw_dir / f"{m}.sv" for m in module_closure(top, hw_dir)]
