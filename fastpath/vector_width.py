"""512-bit vectors for the numba kernels on AVX-512 hosts (docs/performance.md).

LLVM tunes recent Intel cores (Skylake-AVX512 on, emeraldrapids included) with the
`prefer-256-bit` feature: its loop vectoriser then uses 256-bit registers although the CPU has
512-bit ones. The compress step's pass 1 is integer arithmetic on int64 lanes, and with
`-prefer-256-bit` it runs on twice the lanes (ResNet-50 pass 1: 1.2-1.4x faster). The choice
is process-wide numba configuration (NUMBA_CPU_FEATURES, read when numba compiles), so this
module only ever sets it for a process that is ours: the `gradblock` command line calls
`choose_vector_width()` before anything imports numba. A library user opts in the same way,
first thing in the program, or by exporting NUMBA_CPU_FEATURES themselves.

Same bits at either width: the kernels are integer code and single IEEE operations in a
fixed order (no fastmath), which vectorise alike on 4 or 8 lanes (tests/test_wide_vectors.py).
numba's on-disk cache keys every entry on the CPU name and feature string, so code compiled
for one width is never loaded for the other.

This module imports nothing that imports numba.
"""
from __future__ import annotations

import os
import sys
from typing import MutableMapping

from gradblock.codec.errors import UsageError

WIDTH_ENV = "GRADBLOCK_VECTOR_WIDTH"       # "512" (the default where possible) or "256"
FEATURES_ENV = "NUMBA_CPU_FEATURES"
CPU_NAME_ENV = "NUMBA_CPU_NAME"
WIDE_TUNING = "-prefer-256-bit"
WIDTHS = ("256", "512")


class VectorWidthError(UsageError):
    """GRADBLOCK_VECTOR_WIDTH holds something other than 256 or 512."""


def host_features() -> str | None:
    """The host's LLVM feature string as numba uses it by default, or None without llvmlite."""
    try:
        import llvmlite.binding as ll
    except ImportError:
        return None
    return ll.get_host_cpu_features().flatten()


def wide_features(features: str | None) -> str | None:
    """`features` with 512-bit vectors preferred, or None when the host has no AVX-512F."""
    if not features or "+avx512f" not in features.split(","):
        return None
    return f"{features},{WIDE_TUNING}"


def choose_vector_width(environ: MutableMapping[str, str] = os.environ,
                        features: str | None = None) -> str:
    """Set NUMBA_CPU_FEATURES for 512-bit vectors when that is safe and ours to choose:
    GRADBLOCK_VECTOR_WIDTH is unset or 512, neither NUMBA_CPU_FEATURES nor NUMBA_CPU_NAME is
    set, numba is not imported yet (it may have compiled already), and the host has AVX-512F.
    `features`: the host's feature string (looked up when None). Returns one line saying
    what was chosen and why; raises VectorWidthError for a bad GRADBLOCK_VECTOR_WIDTH."""
    asked = environ.get(WIDTH_ENV, "").strip()
    if asked and asked not in WIDTHS:
        raise VectorWidthError(f"{WIDTH_ENV} must be 256 or 512, got {asked!r}")
    if asked == "256":
        return f"256-bit: {WIDTH_ENV}=256"
    for name in (FEATURES_ENV, CPU_NAME_ENV):
        if name in environ:            # empty counts: numba then compiles with no extra features
            return f"left to numba: {name} is set"
    if "numba" in sys.modules:
        return "left to numba: numba was imported first"
    wide = wide_features(host_features() if features is None else features)
    if wide is None:
        return "left to numba: the host has no AVX-512F"
    environ[FEATURES_ENV] = wide
    return f"512-bit: {FEATURES_ENV}=<host features>,{WIDE_TUNING}"


def vector_width_in_use(environ: MutableMapping[str, str] = os.environ) -> str:
    """For benchmark reports: '512-bit' when NUMBA_CPU_FEATURES asks for 512-bit vectors on
    an AVX-512 host, else "LLVM's default" (256-bit on AVX-512 hosts), naming the CPU numba
    compiles for when NUMBA_CPU_NAME sets one (NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=""
    is how an AVX2 host's code is measured on an AVX-512 one: docs/performance.md)."""
    features = environ.get(FEATURES_ENV, "").split(",")
    if WIDE_TUNING in features and "+avx512f" in features:
        return "512-bit"
    cpu = environ.get(CPU_NAME_ENV)
    if not cpu:
        return "LLVM's default"
    which = {None: "the host's features", "": "that CPU's own features"}.get(
        environ.get(FEATURES_ENV), f"{FEATURES_ENV} as set")
    return f"LLVM's default for CPU {cpu} ({CPU_NAME_ENV}), with {which}"
