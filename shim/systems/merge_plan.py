"""DLGS layer-gradient merging (source paper 000, §3): the iteration-time model of its
equations (2)-(8), the paper's greedy merge (its Algorithm 2, O(L^2)) and an exact optimum.

Layers are numbered 1..L from the input; backward runs L -> 1. A plan cuts that backward order
into contiguous groups; a group's tensors are sparsified in one call and sent in one collective.
For a group G (layers processed hi -> lo), with D = the sum of its sizes:

    tau_b = end of the previous group's sparsification (t_f for the first group)     (3), (6)
    backward of every layer in G runs back to back: tau_s = tau_b + sum t_b            (4)
    sparsify the merged tensor:     t_s(D)   (compute device, serial with backward)
    communicate: tau_c = max(tau_s + t_s(D), end of the previous group's comm)           (5)
                 t_c(G) = alpha + beta * (sum of its layers' frame bytes)
    t_iter = end of the last group's communication                                       (7)

The exact optimum minimises t_iter over all 2^(L-1) plans (8) with a dynamic programme over
group boundaries that keeps, per boundary, the Pareto front of (compute free, network free)
times: both transitions are non-decreasing in both times, so a dominated state can never lead
to a better finish, and the front is exact. Brute force checks it for small L in the tests.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import Callable, Sequence

import numpy as np

from gradblock.codec.errors import UsageError


@dataclass(frozen=True)
class LayerTimes:
    """Measured inputs of the model, all in milliseconds, layers in backward order (L first)."""
    names: tuple[str, ...]
    sizes: tuple[int, ...]             # elements per layer
    backward_ms: tuple[float, ...]     # t_b per layer
    forward_ms: float                  # t_f
    sparsify_a_ms: float               # t_s(n) = a + b * n
    sparsify_b_ms: float
    comm_alpha_ms: float               # t_c(bytes) = alpha + beta * bytes
    comm_beta_ms: float
    wire_bytes: tuple[int, ...]        # bytes each layer puts on the wire (its compressed frame)

    def __post_init__(self):
        L = len(self.sizes)
        if L < 1 or not len(self.names) == len(self.backward_ms) == len(self.wire_bytes) == L:
            raise UsageError("names, sizes, backward_ms and wire_bytes must have one length >= 1")
        if min(self.sizes) < 0 or min(self.wire_bytes) < 0 or not all(0 <= t < float("inf")
                                                                          for t in self.backward_ms):
            raise UsageError("sizes, wire bytes and backward times must be finite and >= 0")
        for f in ("forward_ms", "sparsify_a_ms", "sparsify_b_ms", "comm_alpha_ms", "comm_beta_ms"):
            v = getattr(self, f)
            if not (v >= 0 and v != float("inf")):
                raise UsageError(f"{f} must be a finite number >= 0, got {v!r}")

    def t_s(self, n: int) -> float:
        return self.sparsify_a_ms + self.sparsify_b_ms * n

    def t_c(self, nbytes: int) -> float:
        return self.comm_alpha_ms + self.comm_beta_ms * nbytes


Plan = list[tuple[int, int]]       # groups as half-open [start, end) ranges of backward order


def groups_from_cuts(L: int, cuts: Sequence[int]) -> Plan:
    """Cuts are the backward-order positions 1..L-1 where a new group starts."""
    edges = [0, *sorted(cuts), L]
    return [(a, b) for a, b in zip(edges, edges[1:])]


def iteration_time(t: LayerTimes, plan: Plan) -> float:
    """Equations (3)-(7) for one plan."""
    comp, net = t.forward_ms, 0.0
    for a, b in plan:
        comp += sum(t.backward_ms[a:b]) + t.t_s(sum(t.sizes[a:b]))
        net = max(comp, net) + t.t_c(sum(t.wire_bytes[a:b]))
    return net


def timeline(t: LayerTimes, plan: Plan) -> list[dict]:
    """Per group: its layers and the start/end times of sparsification and communication."""
    out, comp, net = [], t.forward_ms, 0.0
    for a, b in plan:
        n = sum(t.sizes[a:b])
        comp += sum(t.backward_ms[a:b])
        s0 = comp
        comp += t.t_s(n)
        c0 = max(comp, net)
        net = c0 + t.t_c(sum(t.wire_bytes[a:b]))
        out.append({"layers": list(t.names[a:b]), "elements": n, "wire_bytes": sum(t.wire_bytes[a:b]),
                    "sparsify_start_ms": s0,
                    "comm_start_ms": c0, "comm_end_ms": net})
    return out


def no_merge(t: LayerTimes) -> Plan:
    return [(i, i + 1) for i in range(len(t.sizes))]


def greedy(t: LayerTimes) -> Plan:
    """The paper's Algorithm 2: scan from the output layer; merge a layer into the next one in
    backward order whenever that shortens the modelled iteration. O(L) candidates x O(L) model."""
    cuts = set(range(1, len(t.sizes)))
    best = iteration_time(t, groups_from_cuts(len(t.sizes), cuts))
    for c in range(1, len(t.sizes)):
        trial = cuts - {c}
        time = iteration_time(t, groups_from_cuts(len(t.sizes), trial))
        if time < best:
            cuts, best = trial, time
    return groups_from_cuts(len(t.sizes), cuts)


def exact(t: LayerTimes) -> Plan:
    """Minimum of (8) over all plans: DP over boundaries with Pareto fronts of (comp, net)."""
    L = len(t.sizes)
    size_pre = [0, *accumulate(t.sizes)]
    back_pre = [0.0, *accumulate(t.backward_ms)]
    bytes_pre = [0, *accumulate(t.wire_bytes)]
    # front[i]: non-dominated (comp, net, plan) after the groups covering positions [0, i)
    front: list[list[tuple[float, float, Plan]]] = [[] for _ in range(L + 1)]
    front[0] = [(t.forward_ms, 0.0, [])]
    for i in range(L):
        for comp, net, plan in front[i]:
            for j in range(i + 1, L + 1):
                n = size_pre[j] - size_pre[i]
                c = comp + (back_pre[j] - back_pre[i]) + t.t_s(n)
                net2 = max(c, net) + t.t_c(bytes_pre[j] - bytes_pre[i])
                front[j] = _insert(front[j], (c, net2, plan + [(i, j)]))
    return min(front[L], key=lambda s: (s[1], len(s[2])))[2]


def _insert(front, state):
    c, n, _ = state
    if any(c2 <= c and n2 <= n for c2, n2, _ in front):
        return front
    return [s for s in front if not (c <= s[0] and n <= s[1])] + [state]


def brute_force(t: LayerTimes) -> Plan:
    """Every plan (2^(L-1)); for tests on small L."""
    L = len(t.sizes)
    if L > 16:
        raise UsageError("brute force is for L <= 16")
    best = None
    for mask in range(1 << (L - 1)):
        plan = groups_from_cuts(L, [c + 1 for c in range(L - 1) if mask >> c & 1])
        time = iteration_time(t, plan)
        if best is None or time < best[0]:
            best = (time, plan)
    return best[1]


PLANNERS: dict[str, Callable[[LayerTimes], Plan]] = {"none": no_merge, "dlgs_greedy": greedy,
                                                      "exact": exact}


def fit_line(xs, ys) -> tuple[float, float]:
    """Least-squares a + b*x, both clamped at 0 (a time model cannot go negative): the cost
    models above (t_s(n), alpha + beta * bytes) fitted from measurements."""
    A = np.vstack([np.ones(len(xs)), np.asarray(xs, float)]).T
    (a, b), *_ = np.linalg.lstsq(A, np.asarray(ys, float), rcond=None)
    return max(float(a), 0.0), max(float(b), 0.0)
