"""CSSGD coded exchange (source paper 001, §2.1-2.4) on int32-quantised partial gradients.

n workers, redundancy r (1 <= r < n). The batch is cut into C(n, r) equal sample blocks, one per
r-subset S of the workers (its Algorithm 2): every worker in S computes block S's gradient and
quantises it to int32 codes G_S (the contract's quantiser, R = 10 as in the paper).

Every worker needs every block it lacks. For each (r+1)-subset T and each k in T, worker k
multicasts to T \\ {k} ONE packet (its Algorithm 3):

    P(T, k) = sum over j in T \\ {k} of segment pos(k, T \\ {j}) of G_{T \\ {j}}      (mod 2**32)

where G_S is cut into r segments (np.array_split boundaries) and pos(k, S) is k's index in
sorted S. Receiver j knows G_{T \\ {j'}} for every j' != j in T (it is a member of each), so it
subtracts those r-1 terms and is left with segment pos(k, T \\ {j}) of G_{T \\ {j}} (its
Algorithm 4). The r senders k in T \\ {j} deliver all r segments. Addition and subtraction of
int32 codes wrap modulo 2**32 (a group), so the recovered codes are exact whatever overflowed
on the way: this is why the paper quantises to int32 before coding.

Load (words put on the network, one multicast counted once): coded n * C(n-1, r) packets of
ceil(d / r) words; uncoded with the same redundancy, each worker receives each missing block
once: n * (C(n, r) - C(n-1, r-1)) * d words. Their ratio is 1/r when r divides d (the paper's
relation (19)); with r = 1 both equal the plain all-to-all of n * (n - 1) * d words.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from math import comb
from typing import Mapping, Sequence

import numpy as np

from gradblock.codec.errors import GradblockError

Block = tuple[int, ...]          # a sorted r-subset of worker ranks: a sample block's label

# C(n, r) blocks and C(n, r+1) multicast groups: keep both small enough to enumerate.
MAX_WORKERS = 16


class CodedConfigError(GradblockError):
    """Workers / redundancy outside what the coded exchange supports."""


def check_config(n: int, r: int) -> None:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or not 2 <= n <= MAX_WORKERS:
        raise CodedConfigError(f"workers must be an integer in [2, {MAX_WORKERS}], got {n!r}")
    if not isinstance(r, (int, np.integer)) or isinstance(r, bool) or not 1 <= r < n:
        raise CodedConfigError(f"redundancy must be an integer in [1, workers-1={n - 1}], got {r!r}")


def assign_blocks(n: int, r: int) -> list[Block]:
    """Algorithm 2: one sample block per r-subset of workers, in lexicographic order."""
    check_config(n, r)
    return list(combinations(range(n), r))


def blocks_of(worker: int, blocks: Sequence[Block]) -> list[Block]:
    """The blocks a worker computes (C(n-1, r-1) of them)."""
    return [b for b in blocks if worker in b]


def multicast_groups(n: int, r: int) -> list[Block]:
    """Every (r+1)-subset of workers: one round of multicasts each."""
    check_config(n, r)
    return list(combinations(range(n), r + 1))


def segment_bounds(d: int, r: int) -> np.ndarray:
    """Boundaries of the r segments of a length-d gradient (np.array_split's rule)."""
    return np.array([i * (d // r) + min(i, d % r) for i in range(r + 1)], dtype=np.int64)


def packet_words(d: int, r: int) -> int:
    return -(-d // r)


def _segment(g: np.ndarray, bounds: np.ndarray, pos: int, width: int) -> np.ndarray:
    out = np.zeros(width, dtype=np.int32)
    seg = g[bounds[pos]:bounds[pos + 1]]
    out[:seg.size] = seg
    return out


def encode_packet(group: Block, sender: int, known: Mapping[Block, np.ndarray], d: int) -> np.ndarray:
    """Algorithm 3: the packet `sender` multicasts to group \\ {sender}."""
    r = len(group) - 1
    bounds, width = segment_bounds(d, r), packet_words(d, r)
    acc = np.zeros(width, dtype=np.int32)
    for j in group:
        if j == sender:
            continue
        block = tuple(w for w in group if w != j)
        with np.errstate(over="ignore"):
            acc += _segment(known[block], bounds, block.index(sender), width)   # wraps mod 2**32
    return acc


def decode_packet(group: Block, sender: int, receiver: int, packet: np.ndarray,
                  known: Mapping[Block, np.ndarray], d: int) -> tuple[Block, int, np.ndarray]:
    """Algorithm 4: subtract what `receiver` knows; returns (block, segment index, segment)."""
    r = len(group) - 1
    bounds, width = segment_bounds(d, r), packet_words(d, r)
    acc = packet.astype(np.int32, copy=True)
    for j in group:
        if j in (sender, receiver):
            continue
        block = tuple(w for w in group if w != j)
        with np.errstate(over="ignore"):
            acc -= _segment(known[block], bounds, block.index(sender), width)
    missing = tuple(w for w in group if w != receiver)
    pos = missing.index(sender)
    return missing, pos, acc[:bounds[pos + 1] - bounds[pos]]


@dataclass
class ExchangeResult:
    blocks: list[Block]
    recovered: list[dict[Block, np.ndarray]]     # per worker: every block's int32 codes
    words_sent: int                              # coded: one multicast counted once
    messages: int
    per_worker_words: list[int] = field(default_factory=list)


def coded_exchange(codes: Mapping[Block, np.ndarray], n: int, r: int) -> ExchangeResult:
    """Run the whole coded exchange in one process. `codes[S]` is block S's int32 codes
    (every worker of S holds the same array). Returns what each worker ends up knowing."""
    blocks = assign_blocks(n, r)
    d = _check_codes(codes, blocks)
    known = [{b: codes[b] for b in blocks_of(w, blocks)} for w in range(n)]
    parts: list[dict[Block, dict[int, np.ndarray]]] = [{} for _ in range(n)]
    words = messages = 0
    per_worker = [0] * n
    for group in multicast_groups(n, r):
        for sender in group:
            packet = encode_packet(group, sender, known[sender], d)
            words += packet.size
            messages += 1
            per_worker[sender] += packet.size
            for receiver in group:
                if receiver != sender:
                    block, pos, seg = decode_packet(group, sender, receiver, packet, known[receiver], d)
                    parts[receiver].setdefault(block, {})[pos] = seg
    recovered = []
    for w in range(n):
        full = dict(known[w])
        for block, segs in parts[w].items():
            full[block] = np.concatenate([segs[p] for p in range(r)]).astype(np.int32)
        recovered.append(full)
    return ExchangeResult(blocks, recovered, words, messages, per_worker)


def uncoded_words(n: int, r: int, d: int) -> int:
    """Words on the network when each worker receives each block it lacks once (unicast)."""
    return n * (comb(n, r) - comb(n - 1, r - 1)) * d


def coded_words(n: int, r: int, d: int) -> int:
    return n * comb(n - 1, r) * packet_words(d, r)


def load_ratio_formula(r: int) -> float:
    """The paper's relation (19): coded load = uncoded load (same redundancy) / r."""
    return 1.0 / r


def global_sum(known: Mapping[Block, np.ndarray], blocks: Sequence[Block]) -> np.ndarray:
    """Exact int64 sum over every block (the contract's exchange sum, spec §5)."""
    total = np.zeros(next(iter(known.values())).size, dtype=np.int64)
    for b in blocks:
        total += known[b]
    return total


def _check_codes(codes: Mapping[Block, np.ndarray], blocks: Sequence[Block]) -> int:
    sizes = set()
    for b in blocks:
        if b not in codes:
            raise CodedConfigError(f"no codes for block {b}")
        arr = codes[b]
        if not isinstance(arr, np.ndarray) or arr.dtype != np.int32 or arr.ndim != 1:
            raise CodedConfigError(f"block {b}: codes must be a 1-D int32 array")
        sizes.add(arr.size)
    if len(sizes) != 1:
        raise CodedConfigError(f"every block must have the same length, got {sorted(sizes)}")
    return sizes.pop()
