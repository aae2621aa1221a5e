"""Compile Verilator's runtime library once, not once per model.

Every Verilator model links verilated.o, verilated_vpi.o, verilated_threads.o, verilated_dpi.o
(and verilated_cov.o, verilated_fst_c.o... by build flags), compiled from the same files in
$VERILATOR_ROOT/include with the same flags. On a 2-core machine they are most of a small
model's build (about 25 s of 35). sim.harness passes this script to Verilator's make as
OBJCACHE (the hook make puts before every compiler command, meant for ccache):

    make -f Vtop.mk OBJCACHE="python -m-less path/to/objcache.py --dir CACHE" ...
    -> python objcache.py --dir CACHE c++ -Os ... -c -o verilated.o .../include/verilated.cpp

A command whose source lies in the Verilator installation's include directory is cached:
the key is the sha256 of the whole command line (less the output name), the source's bytes,
the installation's verilated_config.h (its version) and the compiler's --version. A hit copies
the object and its make dependency file (.d) into place; a miss compiles, then stores both
(atomically: a temporary name, then rename). Anything else (the model's own C++, cocotb's
verilator.cpp, which includes the model's header) runs the compiler unchanged.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path


def _parse(cmd: list[str]) -> tuple[str | None, str | None]:
    """(object file, source file) of a `... -c -o X src` compile, else (None, None)."""
    if "-c" not in cmd or "-o" not in cmd:
        return None, None
    i = cmd.index("-o")
    if i + 1 >= len(cmd):
        return None, None
    src = cmd[-1]
    if not src.endswith((".cpp", ".cc", ".c")):
        return None, None
    return cmd[i + 1], src


def _runtime_include(src: Path) -> Path | None:
    """The Verilator include directory `src` lies in, if it does."""
    root = os.environ.get("VERILATOR_ROOT")
    candidates = [Path(root) / "include"] if root else []
    candidates.append(src.parent)
    for inc in candidates:
        try:
            if (inc / "verilated_config.h").is_file() and src.resolve().is_relative_to(inc.resolve()):
                return inc
        except OSError:
            continue
    return None


def _key(cmd: list[str], obj: str, src: Path, inc: Path) -> str:
    i = cmd.index("-o")
    argv = cmd[:i] + cmd[i + 2:]
    try:
        cc = subprocess.run([cmd[0], "--version"], capture_output=True, text=True,
                            timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        cc = "?"
    h = hashlib.sha256(json.dumps({"argv": argv, "cc": cc, "obj": Path(obj).name}).encode())
    h.update(src.read_bytes())
    h.update((inc / "verilated_config.h").read_bytes())
    return h.hexdigest()


def _put(src: Path, dest: Path) -> None:
    """Copy `src` to `dest` atomically (the project's one writer: temp file, then rename)."""
    from gradblock.codec.fileio import atomic_write
    atomic_write(dest, lambda tmp: shutil.copyfile(src, tmp))


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "--dir":
        print("usage: objcache.py --dir CACHE COMPILER ARGS...", file=sys.stderr)
        return 2
    cache, cmd = Path(argv[1]), argv[2:]
    obj, src = _parse(cmd)
    inc = _runtime_include(Path(src)) if src else None
    if obj is None or inc is None:
        return subprocess.call(cmd)
    key = _key(cmd, obj, Path(src), inc)
    entry = cache / key[:2] / key
    dep = Path(obj).with_suffix(".d")
    if (entry / "obj").is_file():
        _put(entry / "obj", Path(obj))
        if (entry / "dep").is_file():
            _put(entry / "dep", dep)
        return 0
    rc = subprocess.call(cmd)
    if rc == 0 and Path(obj).is_file():
        try:
            entry.mkdir(parents=True, exist_ok=True)
            if dep.is_file():
                _put(dep, entry / "dep")
            _put(Path(obj), entry / "obj")      # last: its presence means a complete entry
        except OSError:
            pass                                # a cache that cannot be written is no error
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
