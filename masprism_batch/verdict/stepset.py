"""The steps to read, best first, with a stated coverage (issue 59): a conformal set over a verdict's reading order.

A verdict ranks some steps (a fitted ranker every step; the zero-training rule only MASPrism's candidates). The
reading order is that ranking, then the steps it left out in the order of `TAILS[tail]`. Held out on labelled
logs, the nonconformity score of a log is how far down its reading order the labelled step sits (`rank`: its
1-based position; `share`: that position over the log's steps; the first labelled step where a log has several,
since any of them is a hit). The set of a new log is the head of its reading order that holds every step whose
score is at most the conformal quantile of the calibration scores at the run's coverage c (`--coverage`):
the ceil((n + 1) c)-th smallest of n scores (the finite-sample correction; past n: the whole log). Where the
calibration scores and the new log's are exchangeable the set holds the labelled step with probability >= c.

Calibrations (the JSON a ranker file entry holds as `stepset`, or the packaged `weights/stepset.json`):
{"score": "rank" | "share", "tail": one of TAILS or LABEL_TAILS, "lead": one of LEADS, "pool": one of POOLS,
"scores": [held-out scores], "agents": {blamed agent: labelled logs} (the "prior" tail), "groups": {system:
[scores]}, "source": "fit" | "packaged" | "dev", "heldout": {...}}. What calibrated a verdict's set is its `set_by`:
"fit:<system>" / "packaged:<system>" (the system's own labelled logs, cross-conformal on `fit`'s folds:
fit/stepset_fit.py), else "dev:zero-training" (the dev systems' held-out verdicts of the zero-training rule,
benchmarks/accuracy/bench_stepset.py: a new system's coverage before a fit is the dev systems' estimate), "none"
where no calibration is packaged.

Cost: O(steps log steps) per trace on host data the verdict already has (a sort of the unranked steps); the
quantile of a calibration is computed once per (calibration, coverage).
"""

from __future__ import annotations

import bisect
import json
import logging
import math
from dataclasses import dataclass
from functools import lru_cache

from masprism_batch.method import weights_dir
from masprism_batch.verdict import reading_model

log = logging.getLogger(__name__)
SCORES = ("rank", "share")
# the order of the steps a verdict did not rank (after the ranked ones): by index (reading from the start), nearest
# to the blamed step first (ties: the earlier), by pass-1 attention inflow from the symptoms (h_score, highest
# first), or the steps before the blamed step nearest first, then those after it in order (a failure's source
# precedes its symptoms). Which one ships is chosen by leave-one-system-out (bench_stepset.py).
TAILS = ("index", "nearest", "h_score", "before")
# tails only a system's labels give (fit/stepset_fit.py): "prior" reads first the steps of the agents its labels blame
# most per step of theirs in the log (on Hand-Crafted the web surfer wrote 19% of the steps and 64% of the blamed
# ones), then by h_score (the calibration holds the label counts, `agents`); "learned" by a small model fitted on
# the labels (verdict/reading_model.py, the calibration's `model`)
LABEL_TAILS = ("prior", "learned")
# what leads the order: every step the verdict ranked ("ranked"), or its blamed step alone ("top": where the rest of
# the verdict's ranking carries less than the tail, as the zero-training candidates on long logs may)
LEADS = ("ranked", "top")
# a set holding more than this share of the log is not a localisation: the verdict says so (`localised` false)
MAX_SHARE = 0.6
# how a calibration of several systems' scores is pooled (dev: chosen by leave-one-system-out, bench_stepset.py)
POOLS = ("pooled", "balanced", "max")
DEV_FILE = "stepset.json"
FORMAT = "masprism-batch stepset"
EPS = 1e-9


@dataclass(frozen=True)
class StepSet:
    """The steps to read, best first (read[0] is the blamed step), at coverage `coverage`, calibrated by `by`."""

    read: list[int]
    steps: int
    coverage: float
    by: str

    @property
    def share(self) -> float:
        return len(self.read) / self.steps if self.steps else 0.0

    @property
    def localised(self) -> bool:
        return bool(self.read) and self.share <= MAX_SHARE + EPS

    def columns(self) -> dict:
        """The attribution columns (schema.ATTRIBUTIONS) of this set."""
        return {"read_steps": list(self.read), "set_size": len(self.read), "set_share": self.share,
                "set_coverage": self.coverage, "set_by": self.by, "localised": self.localised}


EMPTY_COLUMNS = dict(read_steps=[], set_size=0, set_share=None, set_coverage=None, set_by=None, localised=None)


def reading_order(order: list[int], n: int, tail: str = "index", rows: list[dict] | None = None,
                  lead: str = "ranked", agents: dict | None = None, model: dict | None = None) -> list[int]:
    """Every step of an n-step log, best first: `order` (the verdict's ranked steps, order[0] the blamed step;
    with `lead` "top" only the blamed step), then the others by `tail` (TAILS, LABEL_TAILS); `rows`: the log's
    step_scores (h_score, agent) for the `h_score` and `prior` tails; `agents`: {blamed agent (trace.norm_agent):
    labelled logs} for `prior`; `model` (verdict/reading_model.py) for `learned`."""
    if lead == "top":
        order = order[:1]
    elif lead != "ranked":
        raise ValueError(f"unknown reading-order lead {lead!r}; expected one of {', '.join(LEADS)}")
    seen = set(order)
    rest = [k for k in range(n) if k not in seen]
    top = order[0] if order else 0
    if tail == "index":
        pass
    elif tail == "nearest":
        rest.sort(key=lambda k: (abs(k - top), k))
    elif tail == "before":
        rest.sort(key=lambda k: (0, top - k) if k < top else (1, k))
    elif tail == "h_score":
        h = {r["step"]: r.get("h_score") for r in rows or []}
        rest.sort(key=lambda k: -_finite(h.get(k)))  # stable: ties keep the index order
    elif tail == "prior":
        rest.sort(key=reading_model.prior_key(rows, agents or {}))
    elif tail == "learned":
        s = reading_model.scores(model, rows, n)
        rest.sort(key=lambda k: (-s[k], k))
    else:
        raise ValueError(f"unknown reading-order tail {tail!r}; expected one of {', '.join(TAILS + LABEL_TAILS)}")
    return [*order, *rest]


def _finite(x) -> float:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else -math.inf


def score_of(order: list[int], gold, n: int, score: str = "share") -> float | None:
    """The nonconformity score of a labelled log: where its first labelled step sits in its full reading order
    `order` (1-based rank, or rank / n); None where no labelled step is in the log."""
    pos = {k: i for i, k in enumerate(order)}
    ranks = [pos[g] + 1 for g in gold if g in pos]
    if not ranks or n <= 0:
        return None
    r = min(ranks)
    if score == "rank":
        return float(r)
    if score == "share":
        return r / n
    raise ValueError(f"unknown set score {score!r}; expected one of {', '.join(SCORES)}")


def quantile(scores, coverage: float) -> float:
    """The conformal quantile of calibration `scores` at `coverage`: the ceil((n + 1) coverage)-th smallest,
    +inf where that is past n (too few calibration logs for the level: the set is the whole log)."""
    if not 0.0 < coverage < 1.0:
        raise ValueError(f"coverage must be strictly between 0 and 1, got {coverage}")
    s = sorted(float(x) for x in scores)
    k = math.ceil((len(s) + 1) * coverage - EPS)
    return s[k - 1] if 1 <= k <= len(s) else math.inf


def size_of(q: float, n: int, score: str) -> int:
    """How many steps of an n-step log hold every score <= q: at least 1 (the blamed step), at most n."""
    if n <= 0:
        return 0
    if math.isinf(q):
        return n
    k = math.floor(q + EPS) if score == "rank" else math.floor(q * n + EPS)
    return max(1, min(n, k))


def balanced_quantile(groups, coverage: float) -> float:
    """The smallest score s at which the mean over groups (systems) of #{scores <= s} / (n_g + 1) reaches
    `coverage`: each group counts the same whatever its size, each with its own finite-sample correction (the
    new log counted above every score); +inf where no score reaches it."""
    if not 0.0 < coverage < 1.0:
        raise ValueError(f"coverage must be strictly between 0 and 1, got {coverage}")
    gs = [sorted(float(x) for x in g) for g in groups if len(g)]
    if not gs:
        return math.inf

    def reaches(s: float) -> bool:
        return sum(bisect.bisect_right(g, s) / (len(g) + 1) for g in gs) / len(gs) >= coverage - EPS

    # the mean CDF is monotone in s (and so is its float sum, each term computed alike), so the first distinct
    # score reaching the level is found by bisection: log2(scores) probes, not one per score (a file holding
    # thousands of groups made that hours)
    cands = sorted({x for g in gs for x in g})
    lo, hi = 0, len(cands)
    while lo < hi:
        mid = (lo + hi) // 2
        if reaches(cands[mid]):
            hi = mid
        else:
            lo = mid + 1
    return cands[lo] if lo < len(cands) else math.inf


def quantile_of(cal: dict, coverage: float) -> float:
    """A calibration's quantile at `coverage` under its `pool`: "pooled" (default: every score one log),
    "balanced" (`balanced_quantile` over its `groups`, one per dev system), "max" (the largest of the groups'
    own quantiles: at least the level on every calibration system)."""
    pool, groups = cal.get("pool", "pooled"), cal.get("groups")
    if pool == "balanced" and groups:
        return balanced_quantile(list(groups.values()), coverage)
    if pool == "max" and groups:
        return max(quantile(g, coverage) for g in groups.values())
    return quantile(cal["scores"], coverage)


_QUANTILES: dict[tuple[int, float], tuple[dict, float]] = {}


def cached_quantile(cal: dict, coverage: float) -> float:
    """`quantile_of` a calibration dict, computed once per (calibration object, coverage) in this process: a run
    holds its calibrations for its whole length (the packaged one read once, a ranker file's entries), so each
    trace pays a lookup, not a sort of the calibration scores."""
    key = (id(cal), float(coverage))
    hit = _QUANTILES.get(key)
    if hit is None or hit[0] is not cal:  # an id reused by another object after the first was freed
        if len(_QUANTILES) > 1024:
            _QUANTILES.clear()
        hit = _QUANTILES[key] = (cal, quantile_of(cal, coverage))
    return hit[1]


def step_set(order: list[int], n: int, cal: dict | None, coverage: float, by: str,
             rows: list[dict] | None = None) -> StepSet:
    """The set of one log: the head of its reading order under calibration `cal` (None: the whole log, by
    "none": nothing calibrated it)."""
    if cal is None:
        return StepSet(reading_order(order, n, "index", rows), n, coverage, "none")
    full = reading_order(order, n, cal.get("tail", "index"), rows, cal.get("lead", "ranked"), cal.get("agents"),
                         cal.get("model"))
    k = size_of(cached_quantile(cal, coverage), n, cal.get("score", "share"))
    return StepSet(full[:k], n, coverage, by)


@lru_cache(maxsize=4)
def _dev(path: str) -> dict | None:
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        log.warning("no packaged step-set calibration at %s: every set is the whole log", p)
        return None
    d = json.loads(p.read_text(encoding="utf-8"))
    problem = check(d)
    if problem:
        log.warning("packaged step-set calibration %s not used: %s", p, problem)
        return None
    return d


def dev_calibration() -> dict | None:
    """The zero-training rule's calibration on the dev systems, packaged (`weights/stepset.json`), read once."""
    return _dev(str(weights_dir() / DEV_FILE))


def calibration_for(entry: dict | None) -> tuple[dict | None, str]:
    """(calibration, set_by) of a log whose system has the ranker-file `entry` (None: no fitted system): the
    entry's own (`stepset`, calibrated on its labelled logs), else the dev systems' zero-training one."""
    own = (entry or {}).get("stepset")
    if own:
        return own, f"{own.get('source', 'fit')}:{entry.get('system', '')}"
    dev = dev_calibration()
    return (dev, "dev:zero-training") if dev is not None else (None, "none")


def for_verdict(trace, rows: list[dict], verdict, entry: dict | None, coverage: float) -> StepSet | None:
    """The set of `verdict` on `trace` (None when nothing is blamed); `entry`: its system's ranker-file entry."""
    if not verdict.order:
        return None
    cal, by = calibration_for(entry)
    return step_set(list(verdict.order), len(trace.steps), cal, coverage, by, rows)


def check(cal, max_scores: int = 1_000_000) -> str | None:
    """What is wrong with a calibration dict (a user's ranker file may hold one), or None."""
    if not isinstance(cal, dict):
        return "must be an object"
    if cal.get("score", "share") not in SCORES:
        return f"score must be one of {', '.join(SCORES)}"
    if cal.get("tail", "index") not in TAILS + LABEL_TAILS:
        return f"tail must be one of {', '.join(TAILS + LABEL_TAILS)}"
    if (cal.get("tail") == "prior" or cal.get("agents") is not None) and (
            problem := reading_model.check_agents(cal.get("agents"), "agents")):
        return problem
    if cal.get("tail") == "learned" and (problem := reading_model.check(cal.get("model"))):
        return problem
    if cal.get("lead", "ranked") not in LEADS:
        return f"lead must be one of {', '.join(LEADS)}"
    s = cal.get("scores")
    if not isinstance(s, list) or not s or len(s) > max_scores:
        return f"scores must be a non-empty list of at most {max_scores:,} numbers"
    hi = 1.0 if cal.get("score", "share") == "share" else math.inf
    for i, x in enumerate(s):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or not 0 < x <= hi + EPS:
            return f"scores[{i}]: {json.dumps(x)[:40]} is not a score in (0, {hi:g}]"
    if not isinstance(cal.get("source", "fit"), str):
        return "source must be a string"
    if cal.get("pool", "pooled") not in POOLS:
        return f"pool must be one of {', '.join(POOLS)}"
    groups = cal.get("groups")
    if groups is not None:
        if not isinstance(groups, dict) or not groups:
            return "groups must be an object of score lists"
        for name, g in groups.items():
            problem = check({"score": cal.get("score", "share"), "scores": g}, max_scores)
            if problem:
                return f"groups[{str(name)[:40]!r}]: {problem}"
    return None
