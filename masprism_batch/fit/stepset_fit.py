"""A fitted system's step-set calibration (issue 59): cross-conformal on `fit`'s own internal folds.

Each labelled log's held-out verdict (the option the fit chose, scored in the internal fold it was held out in:
fit/system.py) gives its reading order as a run would build it (verdict/stepset.py) and so its nonconformity score;
which reading order (what leads it, how the unranked steps follow) and which score are those whose sets are
smallest on these held-out verdicts.
Those held-out scores are the calibration a run applies to the system's new logs (the ranker file entry's
`stepset`), for any `--coverage`: with the labels counts a team has (10-100), every log counts once as
calibration instead of a split-off calibration set (cross-conformal; its guarantee is close to, not exactly,
the split one's, and measured held out in benchmarks/accuracy/bench_stepset.py).

What `fit` prints comes from the same scores: leave-one-out over them, the share of logs whose labelled step the
set held (achieved coverage) and the set's mean share of the log, beside the share that reading from step 0 needs
for the same coverage.
"""

from __future__ import annotations

import math

import numpy as np

from masprism_batch.verdict import stepset as ss
from masprism_batch.verdict.case import LogCase

LEVELS = (0.5, 0.8, 0.9)
MARGIN = 0.05  # how much smaller (share of a log, held out) another reading order's sets must be to replace the default  # the coverage levels whose held-out figures `fit` records and prints


def verdict_order(verdict: str, top: int, ranked: list[int], probs=None) -> list[int]:
    """The steps a run's verdict ranks, best first, as verdict/decide.py builds them: a ranker every step by its
    probability; the label prior its blamed step, then the rule's candidates; the rule its candidates."""
    if verdict == "ranker" and probs is not None:
        return sorted(range(len(probs)), key=lambda k: (-probs[k], k))
    if verdict == "prior":
        return [top] + [k for k in ranked if k != top]
    return list(ranked) if ranked else [top]


def fit_stepset(cases: list[LogCase], tops: list[int], probs: list, verdict: str, source: str = "fit") -> dict | None:
    """The calibration of a system's step sets from its labelled `cases` and their held-out verdicts (`tops`: the
    blamed step, `probs`: a ranker's step probabilities or None, per case). The reading order (what leads it, the
    order of the steps the verdict left out) and the score are the ones whose sets, held out leave-one-out at 0.8,
    are the smallest share of a log on these labels (ties: the dev calibration's, chosen by leave-one-system-out);
    a handful of options, so the choice costs little of the coverage (measured in bench_stepset.py). None without
    a labelled step in any log."""
    dev = ss.dev_calibration() or {}
    # a ranker orders every step: its own order is the default; other verdicts start from the dev systems' choice
    default = (dev.get("score", "share"), dev.get("tail", "index"),
               "ranked" if verdict == "ranker" else dev.get("lead", "ranked"))
    ranked = [(c, verdict_order(verdict, top, c.ranked, p)) for c, top, p in zip(cases, tops, probs, strict=True)]
    ranked = [(c, o) for c, o in ranked if any(0 <= g < len(c.trace.steps) for g in c.gold)]
    if not ranked:
        return None
    sizes = [len(c.trace.steps) for c, _ in ranked]
    step0 = [ss.score_of(list(range(n)), c.gold, n, "share") for (c, _), n in zip(ranked, sizes, strict=True)]
    options = [default] + [(sc, t, ld) for ld in ss.LEADS for t in ss.TAILS for sc in ss.SCORES
                           if (sc, t, ld) != default]
    best, best_share, best_scores = None, None, None
    for score, tail, lead in options:
        scores = [ss.score_of(ss.reading_order(o, n, tail, c.rows, lead), c.gold, n, score)
                  for (c, o), n in zip(ranked, sizes, strict=True)]
        share = loo(scores, sizes, 0.8, score)[1]
        # another order only where its sets are smaller by MARGIN of a log: picking the smallest of 16 on the
        # same labels otherwise buys sets that cover less than they state (Hand-Crafted, 36 logs: 0.73 at 0.8)
        if best_share is None or share < best_share - MARGIN:
            best, best_share, best_scores = (score, tail, lead), share, scores
    score, tail, lead = best
    held = {"n": len(best_scores)}
    for level in LEVELS:
        cov, share = loo(best_scores, sizes, level, score)
        _, base = loo(step0, sizes, level, "share")
        held.update({f"coverage_{level}": cov, f"share_{level}": share, f"step0_share_{level}": base})
    return {"score": score, "tail": tail, "lead": lead, "scores": sorted(best_scores), "source": source,
            "heldout": held}


def loo(scores: list[float], sizes: list[int], level: float, score: str) -> tuple[float, float]:
    """(achieved coverage, mean set share) of the conformal set at `level`, each log held out of the calibration
    in turn: O(n log n) (the k-th smallest of the others is S[k-1] or S[k] of the sorted whole)."""
    s = np.asarray(scores, float)
    n = len(s)
    srt = np.sort(s)
    k = math.ceil(n * level - ss.EPS)  # (n - 1 + 1) * level: the others are n - 1 scores
    hit, share = [], []
    for x, m in zip(s, sizes, strict=True):
        if k > n - 1 or k < 1:
            q = math.inf
        else:
            q = srt[k] if x <= srt[k - 1] else srt[k - 1]
        size = ss.size_of(q, m, score)
        hit.append(x <= q + ss.EPS)
        share.append(size / m)
    return float(np.mean(hit)), float(np.mean(share))
