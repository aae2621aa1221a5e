"""Ending a torch.distributed process group so the process exits cleanly.

gloo runs each collective on its own worker threads, and a finished collective's work object
(with the tensors it touched) is released on that thread. When the process group outlives
the interpreter (a DDP model or hook still refers to it after `destroy_process_group`), those
threads may drop the last reference to a Python-owned tensor while Python is finalising; the
thread cannot take the GIL any more and the process aborts with "terminate called without an
active exception" (SIGABRT, seen in CI under load). Destroying the group and collecting its
last holders while the interpreter is alive runs the group's destructor, which joins the
worker threads (torch releases the GIL for it)."""
from __future__ import annotations

import gc
import sys


def end_process_group() -> None:
    """Destroy the default group (if any) and collect what still refers to it."""
    if "torch.distributed" not in sys.modules:
        return
    import torch.distributed as dist
    gc.collect()                     # DDP models and hook states in dead reference cycles
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()
