"""Layer-to-engine split (source paper 003, its Algorithms 1-3) for compress engines.

A model's layers (in order, as the gradient arrives) are cut into contiguous runs, one per
engine, so each engine streams one region of memory. Engine e compresses layer j in
cost[e][j] ms (measured: a numba thread's time for that layer, or a hardware engine's cycle
budget at its clock). The makespan is the largest engine total.

- `split_compute_based` (Algorithm 2): engine e's share of the total work is proportional to
  its throughput; layers are accumulated until the share is passed, giving two candidates: the
  critical layer moved to the next engine (RES1) or kept (RES2), compared by Algorithm 1.
- `split_compare` (Algorithm 1): if the standard deviations of the engine times differ by less
  than tau, the smaller mean wins, otherwise the smaller standard deviation.
- `finetune_maximum` (Algorithm 3): up to MAX_STEP times, take the slowest engine and move its
  start one or two layers later (handing them to the previous engine), keeping a candidate when
  Algorithm 1 prefers it; stops when neither move is preferred.
- `optimal_contiguous`: the exact minimum makespan over every contiguous split (dynamic
  programme, O(E * L^2)); `optimal_any`: exact over every assignment (branch and bound, small L);
  `round_robin`: layer j on engine j mod E, the baseline.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from typing import Sequence

from gradblock.codec import fileio
from gradblock.codec.errors import UsageError, UsageParser

Split = list[int]        # start index of each engine's run; engine e owns [starts[e], starts[e+1])


@dataclass(frozen=True)
class Engine:
    name: str
    throughput: float              # relative speed used by Algorithm 2 (elements per ms)


def engine_times(cost: Sequence[Sequence[float]], starts: Split) -> list[float]:
    L = len(cost[0])
    ends = list(starts[1:]) + [L]
    return [sum(cost[e][starts[e]:ends[e]]) for e in range(len(starts))]


def assignment_times(cost: Sequence[Sequence[float]], owner: Sequence[int]) -> list[float]:
    out = [0.0] * len(cost)
    for j, e in enumerate(owner):
        out[e] += cost[e][j]
    return out


def split_compare(t1: Sequence[float], t2: Sequence[float], tau: float) -> int:
    """Algorithm 1: 1 if the first split is preferred, 2 otherwise."""
    m1, m2 = statistics.fmean(t1), statistics.fmean(t2)
    s1, s2 = statistics.pstdev(t1), statistics.pstdev(t2)
    if abs(s1 - s2) < tau:
        return 1 if m1 <= m2 else 2
    return 1 if s1 < s2 else 2


def split_compute_based(work: Sequence[float], engines: Sequence[Engine], cost, tau: float) -> Split:
    """Algorithm 2 on per-layer work (e.g. elements) and engine throughputs."""
    total, speed = float(sum(work)), sum(e.throughput for e in engines)
    shares = [total * e.throughput / speed for e in engines]
    candidates = []
    for keep_critical in (False, True):
        starts, j = [0], 0
        for share in shares[:-1]:
            acc = 0.0
            while j < len(work) and acc + work[j] <= share:
                acc += work[j]
                j += 1
            if keep_critical and j < len(work) and acc < share:
                j += 1                                  # RES2: the critical layer stays here
            starts.append(j)
        candidates.append(starts)
    t1, t2 = (engine_times(cost, s) for s in candidates)
    return candidates[0] if split_compare(t1, t2, tau) == 1 else candidates[1]


def finetune_maximum(cost, starts: Split, tau: float, max_step: int = 100) -> Split:
    """Algorithm 3: move the slowest engine's start later by one or two layers."""
    L = len(cost[0])
    best = list(starts)
    for _ in range(max_step):
        times = engine_times(cost, best)
        slow = max(range(len(times)), key=times.__getitem__)
        if slow == 0:                    # the first engine's start is fixed at layer 0: move its end
            moves = [_shift(best, 1, -1, L), _shift(best, 1, -2, L)] if len(best) > 1 else []
        else:
            moves = [_shift(best, slow, +1, L), _shift(best, slow, +2, L)]
        moves = [m for m in moves if m is not None]
        improved = False
        for m in moves:
            if max(engine_times(cost, m)) < max(times) and split_compare(engine_times(cost, m), times, tau) == 1:
                best, improved = m, True
                break
        if not improved:
            break
    return best


def _shift(starts: Split, e: int, by: int, L: int) -> Split | None:
    new = list(starts)
    new[e] += by
    lo = new[e - 1] if e > 0 else 0
    hi = new[e + 1] if e + 1 < len(new) else L
    return new if lo <= new[e] <= hi else None


def paper_split(work, engines, cost, tau: float, max_step: int = 100) -> Split:
    return finetune_maximum(cost, split_compute_based(work, engines, cost, tau), tau, max_step)


def optimal_contiguous(cost) -> Split:
    """Exact minimum makespan over contiguous splits (engines in the given order)."""
    E, L = len(cost), len(cost[0])
    pre = [[0.0] for _ in range(E)]
    for e in range(E):
        for c in cost[e]:
            pre[e].append(pre[e][-1] + c)
    INF = float("inf")
    # best[e][j]: minimum makespan of engines 0..e covering layers [0, j); arg for the path
    best = [[INF] * (L + 1) for _ in range(E)]
    arg = [[0] * (L + 1) for _ in range(E)]
    for j in range(L + 1):
        best[0][j] = pre[0][j]
    for e in range(1, E):
        for j in range(L + 1):
            for i in range(j + 1):
                v = max(best[e - 1][i], pre[e][j] - pre[e][i])
                if v < best[e][j]:
                    best[e][j], arg[e][j] = v, i
    starts, j = [0] * E, L
    for e in range(E - 1, 0, -1):
        starts[e] = j = arg[e][j]
    return starts


def optimal_any(cost, limit: int = 14) -> list[int]:
    """Exact minimum makespan over every assignment of layers to engines (branch and bound)."""
    E, L = len(cost), len(cost[0])
    if L > limit:
        raise UsageError(f"exhaustive assignment is for at most {limit} layers, got {L}")
    order = sorted(range(L), key=lambda j: -min(cost[e][j] for e in range(E)))
    best = [float("inf"), None]
    owner = [0] * L
    loads = [0.0] * E

    def go(k: int) -> None:
        if max(loads) >= best[0]:
            return
        if k == L:
            best[0], best[1] = max(loads), list(owner)
            return
        j = order[k]
        for e in sorted(range(E), key=lambda e: loads[e] + cost[e][j]):
            loads[e] += cost[e][j]
            owner[j] = e
            go(k + 1)
            loads[e] -= cost[e][j]

    go(0)
    return best[1]


def round_robin(L: int, E: int) -> list[int]:
    return [j % E for j in range(L)]


def owners_from_split(starts: Split, L: int) -> list[int]:
    out, ends = [], list(starts[1:]) + [L]
    for e, (a, b) in enumerate(zip(starts, ends)):
        out += [e] * (b - a)
    return out


# ------------------------------------------------------------------- measured costs and CLI

def numba_layer_costs(shapes, repeats: int = 3, k: int = 1) -> list[float]:
    """ms per layer of the numba in-place compress step on one thread (median of repeats)."""
    import numpy as np                       # lazily: the planners above need neither numpy nor numba

    from gradblock.fastpath import fast
    from gradblock.refmodel.quantiser import QuantConfig
    cfg = QuantConfig.from_range(10.0)
    rng = np.random.default_rng(0)
    out = []
    for shape in shapes:
        g = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        block = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        words = np.zeros(fast.max_step_words(g.size, block, k) + 64, np.uint32)
        samples = []
        for i in range(repeats + 1):
            r = np.zeros(g.size, np.int32)
            t0 = time.perf_counter()
            fast.compress_step(g, r, cfg, k, None, 0, 8, words)
            if i:
                samples.append((time.perf_counter() - t0) * 1e3)
        out.append(statistics.median(samples))
    return out


def hw_layer_costs(shapes, fmax_mhz: float, k: int = 1, latency_cycles: int = 64) -> list[float]:
    """ms per layer of compress_engine: n + 2*k_eff*B + latency cycles at fmax (docs/hw.md)."""
    out = []
    for shape in shapes:
        n = 1
        for d in shape:
            n *= d
        block = n // shape[0] if len(shape) > 1 else 1
        blocks = n // block if block else 0
        cycles = n + 2 * min(k, blocks) * block + latency_cycles
        out.append(cycles / (fmax_mhz * 1e3))
    return out


def _parse_engines(text: str) -> list[tuple[str, int, float | None]]:
    """'numba:2,hw:2@150' -> [('numba', 2, None), ('hw', 2, 150.0)]"""
    out = []
    for part in text.split(","):
        kind, _, rest = part.partition(":")
        count, _, mhz = rest.partition("@")
        if kind not in ("numba", "hw") or not count.isdigit() or int(count) < 1:
            raise UsageError(f"engine spec {part!r}: expected numba:COUNT or hw:COUNT@MHZ")
        if kind == "hw":
            try:
                f = float(mhz)
            except ValueError:
                raise UsageError(f"engine spec {part!r}: hw engines need @MHZ (the ECP5 Fmax)") from None
            if not 0 < f < 10_000:
                raise UsageError(f"engine spec {part!r}: MHz out of range")
            out.append((kind, int(count), f))
        else:
            out.append((kind, int(count), None))
    if sum(c for _, c, _ in out) > 16:
        raise UsageError("at most 16 engines")
    return out


def split_report(names, shapes, engines: list[Engine], cost, tau: float) -> dict:
    L, E = len(shapes), len(engines)
    work = [float(max(1, _size(s))) for s in shapes]
    plans = {"paper": owners_from_split(paper_split(work, engines, cost, tau), L),
             "optimal_contiguous": owners_from_split(optimal_contiguous(cost), L),
             "round_robin": round_robin(L, E)}
    if L <= 14:
        plans["optimal_any"] = optimal_any(cost)
    rows = {}
    for name, owner in plans.items():
        times = assignment_times(cost, owner)
        rows[name] = {"makespan_ms": max(times), "engine_ms": times,
                      "mean_ms": statistics.fmean(times), "std_ms": statistics.pstdev(times),
                      "layers": [[names[j] for j in range(L) if owner[j] == e] for e in range(E)]}
    return {"engines": [e.name for e in engines], "layers": L, "plans": rows}


def _size(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def split_main(argv: list[str]) -> int:
    from .workloads import ARCHITECTURES, architecture
    p = UsageParser(prog="gradblock split",
                                description="split a model's layers over compress engines (paper 003)")
    p.add_argument("--model", choices=sorted(ARCHITECTURES), default="resnet20")
    p.add_argument("--engines", default="numba:2,hw:1@150",
                   help="numba:COUNT (numba threads, measured) and hw:COUNT@MHZ (compress_engine cycles)")
    p.add_argument("--tau", type=float, default=0.05, help="Algorithm 1's threshold on the std (ms)")
    p.add_argument("--layers", type=int, default=0, help="only the first N layers (0: all)")
    p.add_argument("--json", dest="json_out")
    args = p.parse_args(argv)
    spec = _parse_engines(args.engines)
    if args.layers < 0 or args.tau < 0:
        raise UsageError("--layers and --tau must be >= 0")
    arch = architecture(args.model)
    params = arch.params[:args.layers] if args.layers else arch.params
    names, shapes = [q.name for q in params], [q.shape for q in params]
    engines, cost = [], []
    numba_cost = numba_layer_costs(shapes) if any(k == "numba" for k, _, _ in spec) else None
    for kind, count, mhz in spec:
        row = numba_cost if kind == "numba" else hw_layer_costs(shapes, mhz)
        for i in range(count):
            label = f"numba{i}" if kind == "numba" else f"hw{i}@{mhz:g}MHz"
            engines.append(Engine(label, sum(_size(s) for s in shapes) / max(sum(row), 1e-12)))
            cost.append(list(row))
    report = split_report(names, shapes, engines, cost, args.tau)
    for name, row in report["plans"].items():
        print(f"{name:<20} makespan {row['makespan_ms']:9.3f} ms   std {row['std_ms']:8.3f} ms")
    if args.json_out:
        fileio.write_text(args.json_out, json.dumps(report, indent=2))
    return 0
