"""Training that survives faults under torchrun (docs/reliability.md).

* **Elastic checkpoints** (`--elastic`): every `--checkpoint-every S` steps each rank writes
  `CKPT.stepNNNNNNNN.rankR.pt` atomically and keeps the newest `KEEP` of its own. When the
  group (re)starts, the ranks agree on the newest step that *every* rank holds and resume
  from it, so `torchrun --max-restarts N` recovers a killed or stopped rank by itself. Ranks
  are at most one checkpoint apart (step S+1's collective waits for every rank's step S,
  and each rank saves before it), so keeping two always leaves a common one.
* **Bounded waits that name the missing rank**: the process group's `--timeout` bounds every
  collective; when one fails (timed out, peer closed), the live ranks answer a roll call in
  the rendezvous store and the error names the ranks that did not (`PeerLostError`).
* **Replica checksums** (`--check-every S`): CRC-32 of every parameter and optimizer buffer,
  gathered from every rank; replicas that differ stop the job (`ReplicaDivergenceError`),
  naming the ranks that differ from the majority.
* **Fault injection for tests** (`GRADBLOCK_FAULT=kind:rank:step[,kind:rank:step...]`, kinds
  `kill`, `stop`, `flip`, `perturb`, and `mark`, which only prints the line on which the
  network testbed takes the rank's link down): acts on the first attempt only
  (`TORCHELASTIC_RESTART_COUNT` 0), so the restarted group runs clean. Never set in use.
"""
from __future__ import annotations

import os
import re
import signal
import sys
import time
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from gradblock.codec.fileio import remove_own

from ..errors import ConfigError, TrainingError
from .state import rank_path

KEEP = 2                      # elastic checkpoints each rank keeps
_STEP_DIGITS = 8


class PeerLostError(TrainingError):
    """A collective failed (timed out, or a peer closed its connection); the message names
    the ranks that did not answer the roll call that followed."""


class ReplicaDivergenceError(TrainingError):
    """The cross-rank checksum found replicas whose parameters or optimizer state differ."""


# ------------------------------------------------------------------------------ elastic checkpoints

def step_path(base: str | Path, step: int) -> Path:
    """`ck.pt`, step 120 -> `ck.step00000120.pt` (rank_path adds `.rankR` to it)."""
    base = Path(base)
    return base.with_name(f"{base.stem}.step{step:0{_STEP_DIGITS}d}{base.suffix or '.pt'}")


def _step_pattern(base: Path, rank: int) -> re.Pattern:
    suffix = re.escape(base.suffix or ".pt")
    return re.compile(rf"^{re.escape(base.stem)}\.step(\d{{{_STEP_DIGITS}}})\.rank{rank}{suffix}$")


def local_steps(base: str | Path, rank: int) -> list[int]:
    """Steps this rank holds elastic checkpoints for, newest first (by name only)."""
    base = Path(base)
    pat = _step_pattern(base, rank)
    folder = base.parent if str(base.parent) else Path(".")
    if not folder.is_dir():
        return []
    steps = [int(m.group(1)) for p in folder.iterdir() if (m := pat.match(p.name))]
    return sorted(steps, reverse=True)


def prune(base: str | Path, rank: int, keep: int = KEEP) -> None:
    """Remove this rank's elastic checkpoints older than the newest `keep`; only files that
    match the pattern and that gradblock wrote (codec/fileio.py's output policy) are removed."""
    for step in local_steps(base, rank)[keep:]:
        remove_own(rank_path(step_path(base, step), rank))


def common_step(exchange, base: str | Path) -> int | None:
    """The newest step whose checkpoint every rank holds (a collective), or None."""
    width = KEEP + 2
    mine = local_steps(base, exchange.rank)[:width]
    mine = mine + [-1] * (width - len(mine))
    everyone = exchange.gather_floats([float(s) for s in mine])
    per_rank = [set(int(s) for s in everyone[i:i + width] if s >= 0)
                for i in range(0, len(everyone), width)]
    shared = set.intersection(*per_rank) if per_rank else set()
    return max(shared) if shared else None


def note(text: str) -> None:
    """One line on stderr, flushed: what the fault matrix (bench/faults.py) timestamps."""
    print(f"gradblock train: {text}", file=sys.stderr, flush=True)


def restart_count() -> int:
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError:
        return 0


# ------------------------------------------------------------------------------ roll call

_COMM_FAILURE = re.compile(r"timed out|timeout|connection closed|connection reset|broken pipe|"
                           r"connection refused|no route to host|network is unreachable|"
                           r"connection abort|peer|socket|gloo|c10d|nccl", re.IGNORECASE)


def is_comm_failure(err: BaseException) -> bool:
    """A collective that failed for want of a peer (not a gradblock named error): one of
    torch.distributed's own errors, or a RuntimeError from the transport (DDP re-raises a
    failed hook future as a plain RuntimeError)."""
    if isinstance(err, ValueError):               # the named errors (frames, packets, settings)
        return False
    dist_error = getattr(torch.distributed, "DistError", None)
    if dist_error is not None and isinstance(err, dist_error):
        return True
    return isinstance(err, RuntimeError) and bool(_COMM_FAILURE.search(str(err)))


def roll_call(rank: int, world: int, tag: str, wait_s: float) -> list[int] | None:
    """Announce this rank in the rendezvous store and wait up to `wait_s` for the others:
    the ranks that did not answer, or None when the store itself cannot be reached."""
    host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not host or not port:
        return None
    try:
        from datetime import timedelta
        store = torch.distributed.TCPStore(host, int(port), world_size=None, is_master=False,
                                           timeout=timedelta(seconds=max(1.0, wait_s)),
                                           wait_for_workers=False)
        key = f"gradblock/rollcall/{restart_count()}/{tag}/"
        store.set(f"{key}{rank}", "here")
        deadline = time.monotonic() + wait_s
        missing = [r for r in range(world) if r != rank]
        while missing and time.monotonic() < deadline:
            missing = [r for r in missing if not store.check([f"{key}{r}"])]
            if missing:
                time.sleep(0.2)
        return missing
    except Exception:  # noqa: BLE001 - the store is gone with its host: say so, never hang
        return None


def peer_lost(err: BaseException, rank: int, world: int, step: int, timeout_s: float
              ) -> PeerLostError:
    """The named error for a failed collective at `step`, after a roll call."""
    missing = roll_call(rank, world, f"step{step}", wait_s=min(15.0, max(2.0, timeout_s / 2)))
    cause = " ".join(str(err).split())[:160]
    if missing is None:
        who = "the rendezvous store did not answer either (rank 0's host or the network is down)"
    elif missing:
        who = f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} did not answer"
    else:
        who = "every rank answered the roll call afterwards (a transient network fault?)"
    return PeerLostError(f"rank {rank}: collective failed at step {step} ({cause}); {who}")


# ------------------------------------------------------------------------------ replica checksums

def _crc(tensors) -> int:
    crc = 0
    for t in tensors:
        crc = zlib.crc32(t.detach().to("cpu").contiguous().numpy().tobytes(), crc)
    return crc


def replica_checksum(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[int]:
    """[CRC-32 of the parameters, CRC-32 of the optimizer's tensors], in a fixed order."""
    params = [p for p in model.parameters()]
    state = optimizer.state_dict()["state"]
    bufs = [v for key in sorted(state) for _, v in sorted(state[key].items())
            if isinstance(v, torch.Tensor)]
    return [_crc(params), _crc(bufs)]


def check_replicas(exchange, model, optimizer, step: int) -> None:
    """Every rank's checksums; `ReplicaDivergenceError` naming the ranks that differ from
    the majority (rank 0's value on a tie). A collective: every rank calls it."""
    mine = replica_checksum(model, optimizer)
    values = exchange.gather_floats([float(v) for v in mine])     # < 2^32: exact in float64
    per_rank = [tuple(values[i:i + 2]) for i in range(0, len(values), 2)]
    if len(set(per_rank)) == 1:
        return
    counts = Counter(per_rank)
    best = max(counts.values())
    majority = per_rank[0] if counts[per_rank[0]] == best else \
        next(v for v in per_rank if counts[v] == best)
    odd = [r for r, v in enumerate(per_rank) if v != majority]
    what = ", ".join(f"rank {r} ({'parameters' if per_rank[r][0] != majority[0] else 'optimizer'})"
                     for r in odd)
    raise ReplicaDivergenceError(f"replicas differ after step {step}: {what} differ from the "
                                 f"other {len(per_rank) - len(odd)} rank(s)")


# ------------------------------------------------------------------------------ fault injection

MARK_HOLD_S = 2.0             # the `mark` fault's pause: the testbed acts within it
FAULT_KINDS = ("kill", "stop", "flip", "perturb", "mark")   # mark: the testbed acts (link down)


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    step: int


def parse_faults(text: str | None) -> list[Fault]:
    """`kind:rank:step[,...]` -> faults; `ConfigError` on anything else."""
    if not text:
        return []
    faults = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3 or parts[0] not in FAULT_KINDS or not all(p.isdigit() for p in parts[1:]):
            raise ConfigError(f"GRADBLOCK_FAULT item {item!r}: expected kind:rank:step with kind "
                              f"one of {', '.join(FAULT_KINDS)}")
        faults.append(Fault(parts[0], int(parts[1]), int(parts[2])))
    return faults


def _flip_one_bit(message: torch.Tensor, *_):
    """Flip bit 0 of the middle word (a payload word of the frame: the CRC must catch it)."""
    if message.numel() == 0:
        return message
    out = message.clone()
    out[out.numel() // 2] ^= 1
    return out


class FaultInjector:
    """The faults of `GRADBLOCK_FAULT` meant for this rank, on the first attempt only."""

    def __init__(self, rank: int, text: str | None = None):
        text = os.environ.get("GRADBLOCK_FAULT") if text is None else text
        faults = parse_faults(text)
        self.faults = [f for f in faults if f.rank == rank] if restart_count() == 0 else []

    def _due(self, kind: str, step: int) -> bool:
        return any(f.kind == kind and f.step == step for f in self.faults)

    def before_step(self, step: int, hook) -> None:
        for f in self.faults:
            if f.step == step:
                note(f"injecting fault {f.kind} on rank {f.rank} at step {step}")
        if self._due("kill", step):
            os.kill(os.getpid(), signal.SIGKILL)
        if self._due("stop", step):
            os.kill(os.getpid(), signal.SIGSTOP)
        if self._due("mark", step):
            # hold the step until the testbed has pulled the cable: a short run could otherwise
            # finish before the link goes down (the fault would land after training)
            time.sleep(MARK_HOLD_S)
        if self.faults and hook is not None and hasattr(hook, "outgoing_filter"):
            hook.outgoing_filter = _flip_one_bit if self._due("flip", step) else None

    def after_step(self, step: int, model: torch.nn.Module) -> None:
        if self._due("perturb", step):
            with torch.no_grad():
                # large enough that later rounding cannot absorb it (one ulp can be)
                p = next(model.parameters()).view(-1)
                p[0] += 1e-3 * (p[0].abs() + 1e-3)
