"""What to label next (issue 59 item 3): the N logs whose labels would help the next `fit` most, picked from a
run's verdicts, and the labels file a team fills in.

The one selection both `masprism-batch pick` (cli/pick.py) and its benchmark
(benchmarks/accuracy/bench_label_picker.py) call: `pick(candidates, n)`, deterministic:
- a sample that keeps the run's own mix of verdicts: within each system, the logs ordered by how uncertain their
  verdict is (`uncertainty`: a low `confidence`, a large step set `set_share`) and picked at evenly spaced places
  of that order, from the surest to the least sure. The fit decides by its internal folds whether to correct the
  zero-training rule; labels on the least certain verdicts only made the rule look worse on those folds than on
  the logs it is then applied to (GAIA at 10 labels: 0.085 below random picks, docs/accuracy.md), labels spread
  over the whole range do not;
- systems in turn, so every system of the run gets labels;
- no near-duplicates: logs with the same near-duplicate key (the same task text and length) are picked once;
- logs already labelled (`exclude`) are never picked.
`pick_uncertain_first` is the first design (least certain first, agents and positions spread), kept for the
benchmark's comparison. It reads the verdict and never recomputes it (analytics/).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from masprism_batch.trace import norm_agent

POSITION_BINS = 5
UNKNOWN = 0.5  # the uncertainty a verdict without confidence or step set gets for that part


@dataclass(frozen=True)
class Candidate:
    """One attributed log as the picker reads it (attributions columns; `dup_key`: equal for near-duplicates)."""

    trace_id: str
    system: str | None
    n_steps: int
    pred_step: int | None
    pred_agent: str | None
    confidence: float | None
    set_share: float | None = None
    dup_key: object = None

    @property
    def uncertainty(self) -> float:
        """In [0, 1]: half the verdict's doubt (1 - confidence), half the share of the log its step set spans."""
        conf = UNKNOWN if self.confidence is None else min(max(self.confidence, 0.0), 1.0)
        share = UNKNOWN if self.set_share is None else min(max(self.set_share, 0.0), 1.0)
        return 0.5 * (1.0 - conf) + 0.5 * share

    @property
    def position(self) -> int | None:
        if self.pred_step is None or self.n_steps <= 0:
            return None
        return min(POSITION_BINS - 1, POSITION_BINS * self.pred_step // self.n_steps)


def pick(candidates: Iterable[Candidate], n: int, exclude: Collection[str] = ()) -> list[Candidate]:
    """The `n` candidates to label next (see the module docstring), each system's from its surest to its least
    sure verdict."""
    skip = set(exclude)
    by_system: dict[object, list[Candidate]] = {}
    seen: set = set()
    for c in sorted(candidates, key=lambda c: (c.uncertainty, c.trace_id)):
        if c.trace_id in skip or (c.dup_key is not None and c.dup_key in seen):
            continue
        if c.dup_key is not None:
            seen.add(c.dup_key)
        by_system.setdefault(c.system, []).append(c)
    quota = Counter()
    systems = sorted(by_system, key=lambda s: (s is None, str(s)))
    while sum(quota.values()) < n and any(quota[s] < len(by_system[s]) for s in systems):
        for s in systems:  # systems in turn, while each has logs left
            if sum(quota.values()) < n and quota[s] < len(by_system[s]):
                quota[s] += 1
    out: list[Candidate] = []
    for s in systems:
        logs, m = by_system[s], quota[s]
        if m:
            at = [round(i * (len(logs) - 1) / (m - 1)) for i in range(m)] if m > 1 else [len(logs) // 2]
            out += [logs[i] for i in at]  # m <= len(logs): evenly spaced places are distinct
    return out


def pick_uncertain_first(candidates: Iterable[Candidate], n: int, exclude: Collection[str] = ()) -> list[Candidate]:
    """The first design, kept for the benchmark: the least certain verdicts first, each further pick of a system,
    a blamed agent or a position band already picked dividing a log's worth; near-duplicates once."""
    pool = [c for c in candidates if c.trace_id not in set(exclude)]
    pool.sort(key=lambda c: c.trace_id)  # ties go to the smaller id, whatever the input order
    chosen: list[Candidate] = []
    systems, agents, positions = Counter(), Counter(), Counter()
    dups: set = set()
    while len(chosen) < n and pool:
        fewest = min(systems[c.system] for c in pool)  # systems in turn
        best, best_gain = None, -1.0
        for c in pool:
            if systems[c.system] != fewest or (c.dup_key is not None and c.dup_key in dups):
                continue
            gain = c.uncertainty / (1.0 + agents[norm_agent(c.pred_agent)] + positions[c.position])
            if gain > best_gain:
                best, best_gain = c, gain
        if best is None:  # only near-duplicates of picked logs are left in the turn's systems
            pool = [c for c in pool if c.dup_key is None or c.dup_key not in dups]
            if not pool:
                break
            continue
        chosen.append(best)
        pool.remove(best)
        systems[best.system] += 1
        agents[norm_agent(best.pred_agent)] += 1
        positions[best.position] += 1
        if best.dup_key is not None:
            dups.add(best.dup_key)
    return chosen


def labelled_ids(path) -> set[str]:
    """Trace ids a labels file (`fit --labels`: CSV or JSON lines, `trace_id` and `step` or `span_id`) labels;
    rows with both blank (a picked file not filled in yet) label nothing. Lines that do not parse are fit's to
    report: here they label nothing."""
    import csv
    import json
    from pathlib import Path

    lines = [ln for ln in Path(path).read_text(encoding="utf-8", errors="replace").removeprefix("\ufeff").splitlines()
             if ln.strip()]
    rows: list[dict] = []
    if lines and lines[0].lstrip().startswith("{"):
        for ln in lines:
            try:
                obj = json.loads(ln)
            except ValueError:
                continue
            if isinstance(obj, dict):
                rows.append(obj)
    elif lines:
        rows = list(csv.DictReader(lines))
    from masprism_batch.trace import unsheet

    ids = {str(r["trace_id"]) for r in rows if r.get("trace_id") not in (None, "")
           and any(r.get(k) not in (None, "") for k in ("step", "span_id"))}
    return ids | {unsheet(i) for i in ids}  # a picked file's ids as `pick` guarded them for a spreadsheet
