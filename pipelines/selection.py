"""Which ingested traces a run attributes: all, the first N (`--limit`), a reproducible sample (`--sample N
--seed S`), optionally only one labelled dataset (`eval --dataset`).

Selection is part of planning: it is applied to the one ingest stream while it is staged (`staging.stage_raw`),
so the rejections of that ingest are kept (OUTDIR/errors) and the selection is part of the staging key. A
re-run into the same OUTDIR with another selection is therefore refused (never reported as done over the
outputs of the first one), and the same command resumes.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

from masprism_batch.trace import Trace


@dataclass(frozen=True)
class Selection:
    limit: int | None = None  # the first N traces in input order (smoke runs)
    sample: int | None = None  # N traces: smallest hashes of (seed, trace id), round-robin over sources
    seed: int = 0
    dataset: str | None = None  # eval: only traces of this labelled dataset (eval.dataset_of)

    def __post_init__(self):
        if self.limit is not None and self.sample is not None:
            raise ValueError("--limit and --sample exclude each other")

    @property
    def everything(self) -> bool:
        return self.limit is None and self.sample is None and self.dataset is None

    def key(self) -> dict | None:
        """What enters the staging key: None for "everything", so older stagings keep their key."""
        return None if self.everything else asdict(self)

    def apply(self, traces: Iterable[Trace]) -> Iterator[Trace]:
        if self.dataset is not None:
            from masprism_batch.eval import dataset_of

            traces = (t for t in traces if dataset_of(t) == self.dataset)
        if self.sample is not None:
            yield from _sample(traces, self.sample, self.seed)
            return
        for n, t in enumerate(traces, 1):
            yield t
            if self.limit is not None and n >= self.limit:
                return


def _sample(traces: Iterable[Trace], n: int, seed: int) -> list[Trace]:
    """A deterministic sample independent of input order: per source the n traces with the smallest hash of
    (seed, trace id) (memory: n traces per source), then taken round-robin over sources so each is represented."""
    heaps: dict[str, list] = {}
    for i, t in enumerate(traces):
        h = int.from_bytes(hashlib.blake2b(f"{seed}\0{t.trace_id}".encode(), digest_size=8).digest(), "big")
        heap = heaps.setdefault(t.source or "", [])
        item = (-h, t.trace_id, -i, t)  # max-heap on the hash: the largest kept hash is evicted first
        if len(heap) < n:
            heapq.heappush(heap, item)
        elif item[:3] > heap[0][:3]:
            heapq.heapreplace(heap, item)
    queues = [sorted(v, key=lambda x: x[:3], reverse=True) for _, v in sorted(heaps.items())]
    chosen: list[Trace] = []
    while len(chosen) < n and any(queues):
        for q in queues:
            if q and len(chosen) < n:
                chosen.append(q.pop(0)[3])
    return chosen
