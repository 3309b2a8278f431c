"""Label-free failure groups: the blamed steps of a run grouped by how the model read them and what they say.

A verdict's point is its blamed step's pooled pass-2 values (attributions.blamed_vector, evidence.py: how the
model read the step) beside a hashed bag of the step's most frequent words (attributions.blamed_terms: what it
says), each part unit length and weighted
`VECTOR_WEIGHT` / `1 - VECTOR_WEIGHT`. Points are clustered by mini-batch k-means (Sculley 2010): the best of three
k-means++ seedings of a seeded reservoir sample (each refined on it), then `EPOCHS` passes of mini-batches with per-centre learning rates, then one pass
assigning every verdict. Memory holds the centres, the sample, one batch and per-group word counts (pruned),
never every point: a million verdicts stream through (benchmarks/accuracy/bench_groups.py measures 100k).
The same points in the same order and the same seed give the same groups.

Each group is named by its most distinctive words (the largest contributions p(w|g) log(p(w|g)/p(w)) to the
KL divergence of its word distribution from the run's) and shown with the verdicts nearest its centre.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

TEXT_DIM = 256
VECTOR_WEIGHT = 0.5
EPOCHS = 3
SAMPLE = 10_000  # reservoir for k-means++ seeding
WORDS_KEPT = 5_000  # per group word counts are pruned to this many when they double it
_WORD = re.compile(r"[a-z][a-z_]{2,24}")
_STOP = frozenset("the and for with that this from are was were not but you your have has had will can its".split())


def words(text: str | None, limit: int = 4000) -> list[str]:
    t = (text or "")[:limit].lower()
    return [w for w in _WORD.findall(t) if w not in _STOP]


def terms_of(text: str | None, n: int = 24) -> list[str]:
    """What a verdict keeps of its blamed step's text (attributions.blamed_terms): its n most frequent words
    (ties alphabetical), so groups read one column of one table, never the logs again."""
    return [w for w, _ in sorted(Counter(words(text)).items(), key=lambda wc: (-wc[1], wc[0]))[:n]]


@lru_cache(maxsize=1 << 16)
def _bucket(w: str) -> int:
    return int.from_bytes(hashlib.blake2b(w.encode(), digest_size=4).digest(), "little") % TEXT_DIM


def text_vector(ws: list[str]) -> np.ndarray:
    v = np.zeros(TEXT_DIM, dtype=np.float32)
    for w, c in Counter(ws).items():
        v[_bucket(w)] += math.log1p(c)
    n = float(np.linalg.norm(v))
    return v / n if n else v


@dataclass
class Item:
    key: str  # trace id
    vector: list[float] | np.ndarray | None  # blamed_vector (None: no pass-2 read)
    terms: list[str] | None  # blamed_terms: the step's words (terms_of), most frequent first


def points(items: list[Item], dim: int) -> tuple[np.ndarray, list[list[str]]]:
    """[n, dim + TEXT_DIM] float32 points and each item's words."""
    X = np.zeros((len(items), dim + TEXT_DIM), dtype=np.float32)
    ws = []
    for i, it in enumerate(items):
        if it.vector is not None and len(it.vector) == dim:
            v = np.asarray(it.vector, dtype=np.float32)
            n = float(np.linalg.norm(v))
            X[i, :dim] = VECTOR_WEIGHT * v / n if n else 0.0
        w = list(it.terms or [])
        X[i, dim:] = (1 - VECTOR_WEIGHT) * text_vector(w)
        ws.append(w)
    return X, ws


@dataclass
class Groups:
    centres: np.ndarray
    names: list[str]
    sizes: list[int]
    exemplars: list[list[str]]  # per group, the keys nearest its centre
    assign: dict[str, int] = field(default_factory=dict)  # key -> group (only when asked to keep them)


def _kmeanspp(S: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    C = [S[rng.integers(len(S))]]
    d2 = ((S - C[0]) ** 2).sum(1)
    for _ in range(1, k):
        p = d2 / d2.sum() if d2.sum() > 0 else np.full(len(S), 1 / len(S))
        C.append(S[rng.choice(len(S), p=p)])
        d2 = np.minimum(d2, ((S - C[-1]) ** 2).sum(1))
    return np.stack(C)


def _seed_centres(S: np.ndarray, k: int, rng: np.random.Generator, tries: int = 3, iters: int = 10) -> np.ndarray:
    """The best of `tries` k-means++ seedings of the sample, each refined by `iters` Lloyd steps on it (by the
    sample's inertia): one unlucky seeding would otherwise split a group and merge two others for good, since
    the streamed passes only move centres toward their own points."""
    best, best_cost = None, np.inf
    for _ in range(tries):
        C = _kmeanspp(S, k, rng)
        for _ in range(iters):
            g, _ = _nearest(S, C)
            C = np.stack([S[g == j].mean(0) if (g == j).any() else C[j] for j in range(k)])
        cost = float(_nearest(S, C)[1].sum())
        if cost < best_cost:
            best, best_cost = C, cost
    return best


def _nearest(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = (X * X).sum(1)[:, None] - 2 * X @ C.T + (C * C).sum(1)[None, :]
    g = d.argmin(1)
    return g, d[np.arange(len(X)), g]


def n_groups(n: int, k: int | None = None) -> int:
    """k when given, else about sqrt(n / 2) between 2 and 12 (a dashboard reads a dozen groups, not hundreds)."""
    return max(1, min(n, k if k else max(2, min(12, round(math.sqrt(n / 2))))))


def fit_groups(batches: Callable[[], Iterable[list[Item]]], dim: int, k: int | None = None, seed: int = 0,
               keep_assign: bool = True, n_exemplars: int = 3) -> Groups:
    """batches(): a fresh iterator of item batches each call (the data is read EPOCHS + 2 times)."""
    rng = np.random.default_rng(seed)
    sample, seen = [], 0
    for b in batches():  # pass 1: reservoir sample (seeded), count
        X, _ = points(b, dim)
        for x in X:
            seen += 1
            if len(sample) < SAMPLE:
                sample.append(x)
            else:
                j = rng.integers(seen)
                if j < SAMPLE:
                    sample[j] = x
    if not seen:
        return Groups(np.zeros((0, dim + TEXT_DIM), np.float32), [], [], [])
    k = n_groups(seen, k)
    C = _seed_centres(np.stack(sample), k, rng).astype(np.float64)
    counts = np.zeros(k)
    for _ in range(EPOCHS):  # mini-batch k-means: each centre moves by 1/(its count so far)
        for b in batches():
            X, _ = points(b, dim)
            g, _ = _nearest(X, C)
            for j in np.unique(g):
                xs = X[g == j]
                counts[j] += len(xs)
                C[j] += (xs.sum(0) - len(xs) * C[j]) / counts[j]
    return _assign(batches, dim, C.astype(np.float32), keep_assign, n_exemplars)


def _assign(batches, dim: int, C: np.ndarray, keep: bool, n_ex: int) -> Groups:
    k = len(C)
    sizes = [0] * k
    per_group: list[Counter] = [Counter() for _ in range(k)]
    total: Counter = Counter()
    near: list[list] = [[] for _ in range(k)]  # max-heaps of (-distance, key) of size n_ex
    assign: dict[str, int] = {}
    for b in batches():
        X, ws = points(b, dim)
        g, d = _nearest(X, C)
        for it, gi, di, w in zip(b, g.tolist(), d.tolist(), ws, strict=True):
            sizes[gi] += 1
            uniq = set(w)
            per_group[gi].update(uniq)
            total.update(uniq)
            if len(per_group[gi]) > 2 * WORDS_KEPT:
                per_group[gi] = Counter(dict(per_group[gi].most_common(WORDS_KEPT)))
            if len(total) > 8 * WORDS_KEPT:
                total = Counter(dict(total.most_common(4 * WORDS_KEPT)))
            entry = (-di, it.key)
            if len(near[gi]) < n_ex:
                heapq.heappush(near[gi], entry)
            elif entry > near[gi][0]:
                heapq.heapreplace(near[gi], entry)
            if keep:
                assign[it.key] = gi
    n = sum(sizes)
    names = [_name(per_group[j], sizes[j], total, n) for j in range(k)]
    ex = [[key for _, key in sorted(near[j], key=lambda e: (-e[0], e[1]))] for j in range(k)]
    return Groups(C, names, sizes, ex, assign)


def _name(counts: Counter, size: int, total: Counter, n: int, terms: int = 3) -> str:
    """The group's most distinctive words: largest p(w|g) log(p(w|g) / p(w)), words in >= 2 of its verdicts
    (or any, in a group of one)."""
    if not size:
        return "(empty)"
    scored = []
    for w, c in counts.items():
        if c < 2 and size > 1:
            continue
        p, q = c / size, max(total.get(w, c), c) / n
        scored.append((p * math.log(p / q), w))
    scored.sort(key=lambda s: (-s[0], s[1]))
    return ", ".join(w for _, w in scored[:terms]) or "(no words)"


def batched(items: Iterable[Item], size: int = 4096) -> Iterator[list[Item]]:
    buf = []
    for it in items:
        buf.append(it)
        if len(buf) == size:
            yield buf
            buf = []
    if buf:
        yield buf
