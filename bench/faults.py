"""The fault matrix (docs/reliability.md): `gradblock train --ddp --elastic` under
`torchrun --max-restarts`, one fault injected per run (shim/exchange/resilience.py's GRADBLOCK_FAULT),
compared bit for bit with an uninterrupted run of the same seed.

Every stderr line is timestamped as it arrives: time to detect is from the injector's
"injecting fault" line to the first line that names the failure (PeerLostError, the frame
error, ReplicaDivergenceError, or torchrun's report of a dead worker); time to recover is from
there to the restarted group's "elastic resume" line. A run past `hard_limit_s` is killed and
counted as a hang.
"""
from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from gradblock.codec.errors import GradblockError, UsageError, UsageParser
from gradblock.codec.fileio import write_text

KINDS = ("kill", "stop", "flip", "link")      # link: needs root and the namespace testbed
_DETECT = re.compile(r"PeerLostError|CRC_MISMATCH|Error|failed \(exitcode")
_RESUME = re.compile(r"elastic resume from step (\d+)")


class FaultMatrixError(GradblockError):
    """The matrix cannot run as asked (a work directory that holds earlier cases)."""


@dataclass
class FaultRun:
    kind: str
    rank: int
    step: int
    seed: int
    returncode: int | None
    wall_s: float
    hang: bool
    detect_s: float | None
    recover_s: float | None
    resumed_from: int | None
    bit_identical: bool
    named: str = ""                       # the first line that named the failure
    lines: list[str] = field(default_factory=list, repr=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_args(seed: int, steps: int, *, data: str = "digits") -> list[str]:
    """The run every case trains (small enough for many injections on 2 cores)."""
    return ["--data", data, "--compressor", "coarse", "--k", "2", "--epochs", "2",
            "--batch-size", "32", "--threads", "1", "--no-progress", "--seed", str(seed),
            "--max-steps", str(steps)]


def torchrun(args: list[str], nproc: int, *, max_restarts: int = 0, env: dict | None = None,
             hard_limit_s: float = 600.0) -> tuple[int | None, float, bool, list[tuple[float, str]]]:
    """Run `torchrun ... -m gradblock.cli ARGS`; (returncode, wall s, hung, timestamped lines)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc-per-node", str(nproc), "--max-restarts", str(max_restarts),
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           "-m", "gradblock.cli", *args]
    full_env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=full_env, start_new_session=True)
    lines: list[tuple[float, str]] = []

    def read():
        for line in proc.stdout:
            lines.append((time.monotonic() - t0, line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    hung = False
    try:
        proc.wait(timeout=hard_limit_s)
    except subprocess.TimeoutExpired:
        hung = True
        os.killpg(proc.pid, 9)
        proc.wait()
    reader.join(timeout=5)
    return (None if hung else proc.returncode), time.monotonic() - t0, hung, lines


def _models_equal(a: Path, b: Path, nproc: int) -> bool:
    import torch
    for r in range(nproc):
        pa, pb = a / f"model.rank{r}.pt", b / f"model.rank{r}.pt"
        if not (pa.exists() and pb.exists()):
            return False
        sa = torch.load(pa, weights_only=True)
        sb = torch.load(pb, weights_only=True)
        if sa.keys() != sb.keys() or not all(torch.equal(sa[k], sb[k]) for k in sa):
            return False
    return True


def _fresh(case: Path) -> Path:
    """A case directory that does not exist yet: an old one's checkpoints would be resumed."""
    if case.exists():
        raise FaultMatrixError(f"{case} exists already (a case run before in this --workdir); "
                               f"choose an empty --workdir")
    return case


def reference(workdir: Path, seed: int, steps: int, nproc: int) -> Path:
    """The uninterrupted run of `seed` (trained once per work directory)."""
    out = workdir / f"reference-s{seed}-n{nproc}-t{steps}"
    if not (out / "result.json").exists():
        rc, _, hung, lines = torchrun(["train", "--ddp", *train_args(seed, steps), "--out", str(out)],
                                      nproc)
        if rc != 0:
            tail = "\n".join(line for _, line in lines[-20:])
            raise RuntimeError(f"the reference run of seed {seed} failed (rc {rc}):\n{tail}")
    return out


def inject(workdir: Path, kind: str, rank: int, step: int, seed: int, *, steps: int, nproc: int,
           timeout_s: float = 10.0, checkpoint_every: int = 5, max_restarts: int = 2,
           hard_limit_s: float = 600.0, tag: str = "") -> FaultRun:
    """One run with one fault; compared with `reference(workdir, seed, ...)`."""
    ref = reference(workdir, seed, steps, nproc)
    case = _fresh(workdir / f"{tag}{kind}-r{rank}-t{step}-s{seed}")
    args = ["train", "--ddp", *train_args(seed, steps), "--elastic",
            "--checkpoint", str(case / "ck" / "c.pt"), "--checkpoint-every", str(checkpoint_every),
            "--timeout", str(timeout_s), "--check-every", str(checkpoint_every),
            "--out", str(case / "out")]
    rc, wall, hung, lines = torchrun(args, nproc, max_restarts=max_restarts,
                                     env={"GRADBLOCK_FAULT": f"{kind}:{rank}:{step}"},
                                     hard_limit_s=hard_limit_s)
    t_fault = next((t for t, line in lines if "injecting fault" in line), None)
    detect = next(((t, line) for t, line in lines
                   if t_fault is not None and t >= t_fault and "injecting fault" not in line
                   and _DETECT.search(line)), None)
    resume = next(((t, int(m.group(1))) for t, line in lines if (m := _RESUME.search(line))), None)
    return FaultRun(
        kind=kind, rank=rank, step=step, seed=seed, returncode=rc, wall_s=wall, hang=hung,
        detect_s=None if detect is None or t_fault is None else detect[0] - t_fault,
        recover_s=None if resume is None or detect is None else resume[0] - detect[0],
        resumed_from=None if resume is None else resume[1],
        bit_identical=rc == 0 and _models_equal(ref, case / "out", nproc),
        named="" if detect is None else " ".join(detect[1].split())[:200],
        lines=[line for _, line in lines])


def inject_link_down(workdir: Path, rank: int, step: int, seed: int, *, steps: int, nproc: int,
                     timeout_s: float = 10.0, checkpoint_every: int = 5, max_restarts: int = 3,
                     hard_limit_s: float = 600.0, tag: str = "") -> FaultRun:
    """Each rank in its own network namespace (bench/netns.py) under a torchrun agent of its
    own (static rendezvous at rank 0's address); when rank `rank` reaches `step` its link's
    bridge port goes down (a pulled cable) and comes back up 2 s after the first rank names
    the failure."""
    from .netns import Testbed
    ref = reference(workdir, seed, steps, nproc)
    case = _fresh(workdir / f"{tag}link-r{rank}-t{step}-s{seed}")
    args = ["train", "--ddp", *train_args(seed, steps), "--elastic",
            "--checkpoint", str(case / "ck" / "c.pt"), "--checkpoint-every", str(checkpoint_every),
            "--timeout", str(timeout_s), "--check-every", str(checkpoint_every),
            "--out", str(case / "out")]
    lines: list[tuple[float, str]] = []
    lock = threading.Lock()
    t0 = time.monotonic()
    hung = False
    with Testbed(nproc) as bed:
        port = 29500 + random.Random(f"{rank}{step}{seed}").randrange(1000)
        procs = []
        for w in range(nproc):
            env = bed.rank_env(w, port, dict(os.environ, GRADBLOCK_FAULT=f"mark:{rank}:{step}"))
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nproc),
                   "--node-rank", str(w), "--nproc-per-node", "1", "--max-restarts",
                   str(max_restarts), "--master-addr", bed.address(0), "--master-port", str(port),
                   "-m", "gradblock.cli", *args]
            procs.append(bed.popen(w, cmd, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True))

        def read(proc):
            for line in proc.stdout:
                with lock:
                    lines.append((time.monotonic() - t0, line.rstrip("\n")))

        readers = [threading.Thread(target=read, args=(p,), daemon=True) for p in procs]
        for r in readers:
            r.start()
        port_dev = f"gbp{rank}"
        state = "before"
        deadline = t0 + hard_limit_s
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                hung = True
                break
            with lock:
                seen = list(lines)
            if state == "before" and any("injecting fault" in line for _, line in seen):
                subprocess.run(["ip", "-n", bed.bridge_ns, "link", "set", port_dev, "down"],
                               check=True)
                lines.append((time.monotonic() - t0, f"testbed: {port_dev} down"))
                state = "down"
            elif state == "down" and any(_DETECT.search(line) for _, line in seen
                                         if "testbed:" not in line and "injecting" not in line):
                time.sleep(2.0)
                subprocess.run(["ip", "-n", bed.bridge_ns, "link", "set", port_dev, "up"],
                               check=True)
                lines.append((time.monotonic() - t0, f"testbed: {port_dev} up"))
                state = "up"
            time.sleep(0.1)
        codes = [p.poll() for p in procs]
        for r in readers:
            r.join(timeout=5)
    rc = None if hung else max(abs(c) for c in codes if c is not None)
    t_fault = next((t for t, line in lines if line.startswith("testbed:") and "down" in line), None)
    detect = next(((t, line) for t, line in lines if t_fault is not None and t >= t_fault
                   and not line.startswith("testbed:") and "injecting" not in line
                   and _DETECT.search(line)), None)
    resume = next(((t, int(m.group(1))) for t, line in lines if (m := _RESUME.search(line))), None)
    return FaultRun(
        kind="link", rank=rank, step=step, seed=seed, returncode=rc, wall_s=time.monotonic() - t0,
        hang=hung, detect_s=None if detect is None else detect[0] - t_fault,
        recover_s=None if resume is None or detect is None else resume[0] - detect[0],
        resumed_from=None if resume is None else resume[1],
        bit_identical=rc == 0 and _models_equal(ref, case / "out", nproc),
        named="" if detect is None else " ".join(detect[1].split())[:200],
        lines=[line for _, line in lines])


def plan(kinds, count: int, nproc: int, steps: int, seed: int = 0) -> list[tuple[str, int, int, int]]:
    """`count` faults of each kind: ranks, steps and training seeds drawn from `seed`."""
    rnd = random.Random(seed)
    cases = []
    for i in range(count):              # kinds interleaved: a run cut short still covers each
        for kind in kinds:
            cases.append((kind, rnd.randrange(nproc), rnd.randrange(2, steps - 2), i % 3))
    return cases


def summarise(runs: list[FaultRun]) -> list[dict]:
    rows = []
    for kind in sorted({r.kind for r in runs}, key=lambda k: (KINDS + (k,)).index(k)):
        rs = [r for r in runs if r.kind == kind]
        det = sorted(r.detect_s for r in rs if r.detect_s is not None)
        rec = sorted(r.recover_s for r in rs if r.recover_s is not None)
        med = (lambda v: v[len(v) // 2] if v else None)   # noqa: E731
        rows.append({"kind": kind, "injected": len(rs), "hangs": sum(r.hang for r in rs),
                     "failed_runs": sum(r.returncode not in (0,) for r in rs),
                     "bit_identical": sum(r.bit_identical for r in rs),
                     "detect_s_median": med(det), "detect_s_max": det[-1] if det else None,
                     "recover_s_median": med(rec), "recover_s_max": rec[-1] if rec else None})
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    def f(v):
        return "n/a" if v is None else f"{v:.1f}"
    out = ["| fault | injected | hangs | runs not finished | bit-identical to the uninterrupted run "
           "| detect s (median / max) | recover s (median / max) |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['kind']} | {r['injected']} | {r['hangs']} | {r['failed_runs']} | "
                   f"{r['bit_identical']} / {r['injected']} | {f(r['detect_s_median'])} / "
                   f"{f(r['detect_s_max'])} | {f(r['recover_s_median'])} / {f(r['recover_s_max'])} |")
    out.append("")
    out.append(f"{meta['workers']} ranks, gloo (on 127.0.0.1; `link`: each rank in its own network "
               f"namespace, joined by a bridge), {meta['steps']} steps of digits / coarse k=2, "
               f"--timeout {meta['timeout_s']} s, --checkpoint-every {meta['checkpoint_every']}, "
               f"--max-restarts 2 (`link`: 3); {meta['machine']}; `{meta['command']}`.")
    return "\n".join(out) + "\n"


def _earlier_runs(json_path: Path | None, cases, meta: dict) -> list[FaultRun]:
    """The runs an earlier, cut-short matrix with the same settings wrote to `json_path`
    (the plan is seeded, so they are this plan's first cases): the matrix goes on after them."""
    if json_path is None or not Path(json_path).exists():
        return []
    try:
        saved = json.loads(Path(json_path).read_text())
        same = all(saved["meta"].get(k) == meta[k] for k in ("workers", "steps", "timeout_s",
                                                             "checkpoint_every"))
        runs = [FaultRun(**r) for r in saved["runs"]] if same else []
    except (OSError, ValueError, KeyError, TypeError):
        return []
    planned = [(r.kind, r.rank, r.step, r.seed) for r in runs]
    return runs if planned == [tuple(c) for c in cases[:len(runs)]] else []


def run_matrix(workdir: Path, kinds=KINDS, count: int = 20, nproc: int = 3, steps: int = 24,
               timeout_s: float = 10.0, json_path: Path | None = None, progress: bool = True,
               command: str = "") -> dict:
    from tqdm import tqdm
    workdir.mkdir(parents=True, exist_ok=True)
    cases = plan(kinds, count, nproc, steps)
    import platform
    meta = {"workers": nproc, "steps": steps, "timeout_s": timeout_s, "checkpoint_every": 5,
            "machine": f"{platform.machine()} {os.cpu_count()} cores", "command": command}
    runs = _earlier_runs(json_path, cases, meta)
    result = {"meta": meta, "summary": summarise(runs), "runs": []}
    for i, (kind, rank, step, seed) in enumerate(tqdm(cases, desc="faults", unit="run",
                                                       disable=not progress)):
        if i < len(runs):                   # done by an earlier run of this matrix
            continue
        run = inject_link_down if kind == "link" else partial(inject, kind=kind)
        runs.append(run(workdir, rank=rank, step=step, seed=seed, steps=steps, nproc=nproc,
                        timeout_s=timeout_s, tag=f"{i:03d}-"))
        result = {"meta": meta, "summary": summarise(runs),
                  "runs": [{k: v for k, v in asdict(r).items() if k != "lines"} for r in runs]}
        if json_path is not None:           # after every run: a matrix cut short keeps its runs
            write_text(json_path, json.dumps(result, indent=2) + "\n")
    return result


DOC = Path(__file__).resolve().parents[1] / "docs" / "reliability.md"
BEGIN, END = "<!-- faults:begin -->", "<!-- faults:end -->"


def write_doc(table: str, doc: Path = DOC) -> None:
    """Replace the generated block of docs/reliability.md (between its markers)."""
    text = doc.read_text() if doc.exists() else ""
    block = f"{BEGIN}\n{table.rstrip()}\n{END}"
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    write_text(doc, text)


def faults_main(argv: list[str]) -> int:
    """`gradblock faults`: the matrix; writes its JSON and the table in docs/reliability.md's
    generated section (when --doc names it). Exit 1 when any run hung, did not finish, or
    ended with parameters that differ from the uninterrupted run."""
    import shlex
    import tempfile

    p = UsageParser(prog="gradblock faults", description=faults_main.__doc__)
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    p.add_argument("--count", type=int, default=20, help="faults of each kind")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--timeout", type=float, default=10.0, help="--timeout of each run (s)")
    p.add_argument("--json", default=None, help="write every run and the summary here")
    p.add_argument("--workdir", default=None, help="keep the runs here (default: a temp dir)")
    p.add_argument("--doc", action="store_true",
                   help="write the table into docs/reliability.md between its faults markers")
    p.add_argument("--from-json", default=None,
                   help="render a saved matrix's table (with --doc: into the page) without running")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    args = p.parse_args(argv)
    if args.from_json:
        try:
            saved = json.loads(Path(args.from_json).read_text())
            text = markdown(saved["summary"], saved["meta"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UsageError(f"gradblock faults: --from-json {args.from_json}: not a fault matrix "
                             f"JSON ({e})") from None
        print(text, end="")
        if args.doc:
            write_doc(text)
        return 0
    if args.count < 1 or args.workers < 2 or args.steps < 8 or args.timeout <= 0:
        raise UsageError("gradblock faults: --count >= 1, --workers >= 2, --steps >= 8 and "
                         "--timeout > 0 are needed")
    command = "gradblock faults " + " ".join(shlex.quote(a) for a in argv)
    with tempfile.TemporaryDirectory(prefix="gradblock-faults-") as tmp:
        work = Path(args.workdir) if args.workdir else Path(tmp)
        result = run_matrix(work, args.kinds, args.count, args.workers, args.steps, args.timeout,
                            Path(args.json) if args.json else None, args.progress, command)
    text = markdown(result["summary"], result["meta"])
    print(text, end="")
    if args.doc:
        write_doc(text)
    bad = [r for r in result["summary"]
           if r["hangs"] or r["failed_runs"] or r["bit_identical"] != r["injected"]]
    return 1 if bad else 0
