"""Read the constants of an RTL package (hw/gradblock_pkg.sv) into Python, so that testbenches
and tests take error codes and frame constants from the one file the RTL compiles, and
tests/test_rtl_constants.py can hold that file against gradblock.codec.

Only the forms the package uses are understood: `localparam [type] NAME = <literal>;` where
the literal is decimal (`24`) or sized/based (`32'h5A524C45`, `4'd9`, `8'b1`). Anything else
is an error, never a silent skip.
"""
from __future__ import annotations

import re
from pathlib import Path

from .deps import HW_DIR, RtlDependencyError, scan

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_LOCALPARAM = re.compile(r"\blocalparam\b([^;=]*?)\b(\w+)\s*=\s*([^;]+);")
_SIZED = re.compile(r"(?:(\d+)\s*)?'\s*([sS]?)([hHdDbBoO])\s*([0-9a-fA-F_]+)")
_BASES = {"h": 16, "d": 10, "b": 2, "o": 8}


class PackageParseError(ValueError):
    """A package line this reader does not understand."""


def literal(text: str) -> int:
    """The value of a decimal or sized/based SystemVerilog integer literal."""
    text = text.strip()
    if re.fullmatch(r"\d[\d_]*", text):
        return int(text.replace("_", ""))
    m = _SIZED.fullmatch(text)
    if not m:
        raise PackageParseError(f"not an integer literal: {text!r}")
    width, _, base, digits = m.groups()
    value = int(digits.replace("_", ""), _BASES[base.lower()])
    if width and value >> int(width):
        raise PackageParseError(f"{text!r} does not fit in {width} bits")
    return value


def package_constants(name: str = "gradblock_pkg", hw_dir: Path = HW_DIR) -> dict[str, int]:
    """NAME -> value of every localparam of package hw/<name>.sv, in file order."""
    path = Path(hw_dir) / f"{name}.sv"
    if not path.is_file():
        raise RtlDependencyError(f"no RTL package {name!r}: {path} does not exist")
    if scan(path)[0] != "package":
        raise RtlDependencyError(f"{path.name} is not a package")
    text = _COMMENTS.sub("", path.read_text())
    out: dict[str, int] = {}
    for _, const, value in _LOCALPARAM.findall(text):
        if const in out:
            raise PackageParseError(f"{path.name}: {const} is defined twice")
        try:
            out[const] = literal(value)
        except PackageParseError as exc:
            raise PackageParseError(f"{path.name}: {const}: {exc}") from None
    return out


def codes(prefix: str, name: str = "gradblock_pkg", hw_dir: Path = HW_DIR) -> dict[str, int]:
    """The constants whose names start with `prefix`, prefix removed: codes("TOP_ERR_")
    -> {"N_OVER_N_MAX": 1, ...}."""
    return {k[len(prefix):]: v for k, v in package_constants(name, hw_dir).items()
            if k.startswith(prefix)}
