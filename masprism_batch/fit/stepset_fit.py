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

from masprism_batch.fit import clogit
from masprism_batch.fit.fitting import folds_of
from masprism_batch.verdict import reading_model as rm
from masprism_batch.verdict import stepset as ss
from masprism_batch.verdict.case import LogCase, gold_agent_names

LEVELS = (0.5, 0.8, 0.9)
# labelled logs below which no reading model is tried: its six weights on fewer labels are no better than the
# label prior's counts, and each order tried widens the honest sets (Hand-Crafted, 29 logs a fit: sets 0.60-0.62x
# reading from step 0 with it, 0.57x without; Algorithm-Generated, 62: 0.77x with it, 0.94x without)
MIN_LEARNED = 50
MARGIN = 0.02  # how much smaller (share of a log, held out) another reading order's sets must be to replace the default


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
    blamed step, `probs`: a ranker's step probabilities or None, per case). The reading order is the default (a
    ranker's own order; else the dev systems' choice) or, where the labels name agents, the label prior's
    (`stepset.LABEL_TAILS`) after the verdict's ranked steps or its blamed step alone: the one whose sets at 0.8
    are the smallest share of a log on these labels (another than the default only by MARGIN). The choice is made
    again without each log, reading nothing of it (`criterion`), and that log's calibration score is its score
    under the order so chosen: a new log's order is also chosen on labels that do not include it, so the sets
    cover what they state. Scored under the order chosen with every log instead, picking the smallest of 16
    orders covered 0.73 at 0.8 on Hand-Crafted (bench_stepset.py, 2026-12-03). None without a labelled step."""
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
    own = _own_agents([c for c, _ in ranked])
    agents = _total(own)
    others = [_without(agents, mine) for mine in own]  # each log's order reads the other logs' labels only
    # the default, and where the labels name agents the label prior's order after the verdict's ranked steps or
    # after its blamed step alone: few options, since each one tried widens the honest (nested) sets
    learned = _learned(ranked, sizes, own) if agents and len(ranked) >= MIN_LEARNED else None
    tails = [t for t in ss.LABEL_TAILS if agents and (t != "learned" or learned)]
    options = [default] + [(default[0], t, ld) for t in tails for ld in ss.LEADS if (default[0], t, ld) != default]
    scores, shares = {}, {}
    for score, tail, lead in options:
        scores[(score, tail, lead)] = [
            ss.score_of(ss.reading_order(o, n, tail, c.rows, lead, others[i], learned[0][i] if learned else None),
                        c.gold, n, score)
            for i, ((c, o), n) in enumerate(zip(ranked, sizes, strict=True))]
        shares[(score, tail, lead)] = criterion(scores[(score, tail, lead)], sizes, 0.8, score)
    best = _choose(options, shares, None)
    nested = [scores[_choose(options, shares, i)][i] for i in range(len(ranked))]
    held = {"n": len(nested), "options": len(options), "chosen_without_each": _agreement(options, shares, best)}
    for level in LEVELS:
        cov, share = loo(nested, sizes, level, best[0])
        _, base = loo(step0, sizes, level, "share")
        held.update({f"coverage_{level}": cov, f"share_{level}": share, f"step0_share_{level}": base})
    out = {"score": best[0], "tail": best[1], "lead": best[2], "scores": sorted(nested), "source": source,
           "heldout": held}
    if best[1] == "prior":
        out["agents"] = agents
    if best[1] == "learned":
        out["model"] = learned[1]
    return out


def _learned(ranked: list, sizes: list[int], own: list[dict]) -> tuple[list[dict], dict]:
    """(per log, the reading model fitted without its internal fold (fitting.folds_of); the model fitted on every
    log): verdict/reading_model.py, each log's agent feature counting the other logs' labels only."""
    folds = folds_of(len(ranked))

    def fit(idx: list[int]) -> dict:
        tot = _total(own[i] for i in idx)
        xs = [rm.matrix(ranked[i][0].rows, sizes[i], _without(tot, own[i])) for i in idx]
        golds = [[g for g in ranked[i][0].gold if 0 <= g < sizes[i]] for i in idx]
        w = clogit.solve(xs, golds, [np.zeros(len(x)) for x in xs], np.full(len(rm.FEATURES), rm.L2))
        return {"features": list(rm.FEATURES), "weights": [float(x) for x in w], "agents": tot}

    per: list = [None] * len(ranked)
    for f in sorted(set(folds.tolist())):
        m = fit([i for i in range(len(ranked)) if folds[i] != f])
        for i in np.flatnonzero(folds == f):
            per[int(i)] = m
    return per, fit(list(range(len(ranked))))


def _choose(options: list[tuple], shares: dict, skip: int | None) -> tuple:
    """The option whose sets are the smallest mean share of a log (`criterion`; with log `skip` taken out), the
    default (options[0]) unless another is smaller by MARGIN."""
    best, best_share = None, None
    for o in options:
        m = shares[o][0] if skip is None else shares[o][1][skip]
        if best_share is None or m < best_share - MARGIN:
            best, best_share = o, m
    return best


def _agreement(options, shares, best) -> float:
    """The share of logs without which the same order is chosen (1.0: the choice does not hang on one log)."""
    n = len(shares[best][1])
    return float(np.mean([_choose(options, shares, i) == best for i in range(n)])) if n else 1.0


def _own_agents(cases: list[LogCase]) -> list[dict[str, float]]:
    """Each case's blamed agents, a log with several spreading one count over them (verdict/case.Priors)."""
    out = []
    for c in cases:
        names = gold_agent_names(c)
        out.append({a: 1.0 / len(names) for a in names})
    return out


def _total(owns) -> dict[str, float]:
    """{blamed agent: labelled logs} summed over the cases' own counts."""
    tot: dict[str, float] = {}
    for mine in owns:
        for a, w in mine.items():
            tot[a] = tot.get(a, 0.0) + w
    return tot


def _without(total: dict[str, float], mine: dict[str, float]) -> dict[str, float]:
    """The agent counts with one log's own labels taken out: its order must not read its own label."""
    return {a: v - mine.get(a, 0.0) for a, v in total.items()}


def _without_each(scores: np.ndarray, level: float) -> np.ndarray:
    """Per log, the conformal quantile at `level` of the other logs' scores: O(n log n), since without log i it is
    one of two order statistics of the whole (S[k-1] or S[k]; +inf past the others)."""
    n = len(scores)
    k = math.ceil(n * level - ss.EPS)  # (n - 1 + 1) * level: the others are n - 1 scores
    if k < 1 or k > n - 1:
        return np.full(n, math.inf)
    srt = np.sort(scores)
    return np.where(scores <= srt[k - 1], srt[k], srt[k - 1])


def criterion(scores: list[float], sizes: list[int], level: float, score: str) -> tuple[float, np.ndarray]:
    """What the choice of a reading order minimises: the mean share of a log in the conformal sets at `level`
    calibrated on the logs' scores, on all of them and (per log i) with log i taken out of both the calibration
    and the mean, so that the choice made without log i reads nothing of it."""
    s = np.asarray(scores, float)
    m = np.asarray(sizes, float)
    n = len(s)
    whole = float(np.mean([ss.size_of(ss.quantile(s, level), int(x), score) / x for x in m]))
    if n < 2:
        return whole, np.full(n, whole)
    q_i = _without_each(s, level)
    share = {q: np.array([ss.size_of(q, int(x), score) / x for x in m]) for q in set(q_i.tolist())}
    return whole, np.array([(share[q].sum() - share[q][i]) / (n - 1) for i, q in enumerate(q_i.tolist())])


def loo(scores: list[float], sizes: list[int], level: float, score: str) -> tuple[float, float]:
    """(achieved coverage, mean set share) of the conformal set at `level`, each log held out of the calibration
    in turn."""
    s = np.asarray(scores, float)
    q_i = _without_each(s, level)
    hit = [bool(x <= q + ss.EPS) for x, q in zip(s, q_i, strict=True)]
    share = [ss.size_of(q, m, score) / m for q, m in zip(q_i, sizes, strict=True)]
    return float(np.mean(hit)), float(np.mean(share))
