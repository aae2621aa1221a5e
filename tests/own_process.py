"""Run a test's body in a fresh Python process, for code that leaves native threads behind.

A one-rank gloo group in the pytest worker itself starts C++ threads (gloo's, and DDP's
reducer callbacks) that can outlive the test and release Python objects later; on CI one such
thread aborted a pytest worker between two later tests ("Fatal Python error: Aborted", a thread
with no Python frame), which xdist reports against an innocent test. In a child process
whatever those threads do ends with the child, and a hang ends at the timeout.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def run_in_own_process(module: str, case: str, *args: str, timeout: int = 300) -> None:
    """Call `module.case(*args)` (a module in tests/, string arguments) in a new interpreter;
    fail the calling test with the child's output when it raises, dies or runs past
    `timeout` seconds."""
    # the verdict is printed and flushed, then the process ends without Python's finalisation:
    # after a collective failed inside a DDP hook, gloo's worker threads may still release
    # tensors then and abort the interpreter (SIGABRT) after a case that passed
    code = (f"import os, sys; import {module} as m; m.{case}(*sys.argv[1:]); "
            f"print('own_process: {case} passed'); sys.stdout.flush(); sys.stderr.flush(); "
            f"os._exit(0)")
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    try:
        proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code, *args], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{module}.{case}{args} ran past {timeout} s in its own process:\n"
                    f"{_tail(e.stdout)}\n{_tail(e.stderr)}", pytrace=False)
    if proc.returncode != 0 or f"own_process: {case} passed" not in proc.stdout:
        pytest.fail(f"{module}.{case}{args} failed in its own process (exit status "
                    f"{proc.returncode}):\n{_tail(proc.stdout)}\n{_tail(proc.stderr)}", pytrace=False)


def _tail(text, limit: int = 6000) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    text = text or ""
    return text if len(text) <= limit else "...\n" + text[-limit:]


@contextlib.contextmanager
def one_rank_gloo_group():
    """A one-rank gloo default group (file store in a temporary directory) for the block."""
    import torch.distributed as dist
    with tempfile.TemporaryDirectory(prefix="gradblock-gloo-") as tmp:
        dist.init_process_group("gloo", init_method=f"file://{Path(tmp) / 'store'}", rank=0,
                                world_size=1)
        try:
            yield
        finally:
            from gradblock.shim.exchange.process_group import end_process_group
            end_process_group()
