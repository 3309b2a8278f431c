"""What a fitted ranker entry does to one log at run time: the order it corrects (its offset), the corrected
step probabilities (`Fitted.probs`), the label prior's re-ranking, the verdict's evidence and the agent rules a
fitted entry may name. The fit that chooses the weights is fit/fitting.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from masprism_batch.method import ranker as rk
from masprism_batch.trace import Trace
from masprism_batch.verdict import rules
from masprism_batch.verdict.case import BASE_FEATURES, OFFSET_SCALE, LogCase, Priors, design, rule_offset

# What the ranker corrects (its offset, the order it is shrunk toward), each tried by internal CV (fit/system.py):
# - "rule": the zero-training rule's order at OFFSET_SCALE;
# - "rule_free": the rule's order with its scale learned beside w, unpenalised: where the rule is weak on a
#   system (Hand-Crafted 2.8%), the fit can turn it down instead of spending w against it;
# - "position": the label prior over every step (position_offset: how often each index was blamed), for a
#   system whose failures sit at a few positions. Its limit at infinite strength is one fixed position, which
#   fit/system.py never ships (MAX_MODAL, on held-out folds and on the fit's own logs), so a ranker on it ships
#   only where the log's evidence (w) moves the verdict off that position. That guard, not issue 32's first
#   confinement of this order to the rule's candidates ("prior"), keeps a verdict reading the log; the
#   confinement cost GAIA 1.7 points of the dev 5-fold step figure (8 fold seeds; elsewhere 0.0-1.1: results.md).
# - "prior" (read, no longer fitted): the rule's candidates re-ranked by the label prior (prior_offset).
OFFSETS = ("rule", "rule_free", "position")
READ_OFFSETS = (*OFFSETS, "prior")  # what a ranker file may hold: files fitted before "position" returned
POS_COL = len(BASE_FEATURES)  # pos_prior's column in design()


def position_offset(x: np.ndarray, scale: float = OFFSET_SCALE) -> np.ndarray:
    """The label prior over every step: scale x its index's share of the blamed positions over the top share
    (x: design() rows)."""
    p = x[:, POS_COL]
    top = p.max() if p.size else 0.0
    return scale * p / top if top > 0 else np.zeros(len(p))


def prior_offset(x: np.ndarray, ranked: list[int], scale: float = OFFSET_SCALE) -> np.ndarray:
    """The label prior re-ranking the log's own candidates: candidate k at position pos of the rule's order scores
    scale x (share(k) + 1/(pos + 1)) / 2, share = its index's share of the blamed positions over the top share
    (x: design() rows); every other step 0. The most blamed position goes first only where it is a candidate."""
    share = position_offset(x, 1.0)
    off = np.zeros(len(share))
    for pos, k in enumerate(ranked):
        # ties (a blamed position one place down the rule's order) go to the rule's order
        off[k] = scale * ((share[k] + 1.0 / (pos + 1)) / 2 - 1e-3 * pos)
    return off


@dataclass
class Fitted:
    """A fitted correction: scores = offset + ((X - mean) / std) @ w (offset: READ_OFFSETS)."""

    w: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    priors: Priors
    l2: float
    offset_scale: float = OFFSET_SCALE
    cols: list[int] | None = None  # a file's ranker over a subset of BASE_FEATURES + PRIOR_FEATURES
    offset: str = "rule"

    def probs(self, c: LogCase) -> np.ndarray:
        full = design(c, self.priors, loo=False)
        x = full[:, self.cols] if self.cols is not None else full
        x = (x - self.mean) / self.std
        s = offset_of(self.offset, c, full, self.offset_scale) + x @ self.w
        e = np.exp(s - s.max())
        return e / e.sum()


def offset_of(kind: str, c: LogCase, x: np.ndarray, scale: float) -> np.ndarray:
    if kind == "position":
        return position_offset(x, scale)
    if kind == "prior":
        return prior_offset(x, c.ranked, scale)
    return rule_offset(len(c.trace.steps), c.ranked, scale)



def prior_verdict(c: LogCase, priors: Priors) -> tuple[list[int], np.ndarray]:
    """(every step best first, scores) of the label-prior verdict: the log's candidates re-ranked by the prior
    (prior_offset), then the other steps in index order."""
    off = prior_offset(np.concatenate([np.zeros((len(c.trace.steps), POS_COL)), priors.features(c.trace)], axis=1),
                       c.ranked)
    order = sorted(c.ranked, key=lambda k: -off[k])
    return order + [i for i in range(len(c.trace.steps)) if i not in set(c.ranked)], off


def evidence(c: LogCase, order: list[int], probs: np.ndarray | None = None, scores=None) -> dict[str, float]:
    """The verdict's evidence features (method/confidence.py): a ranker's step probabilities, else `scores`
    (the label prior's), else MASPrism's Score over the rule's candidates."""
    from masprism_batch.method import confidence as cf

    return cf.evidence(len(c.trace.steps), c.rows, order, probs if probs is not None else scores)


def agent_pick(rule: str, c: LogCase, probs: np.ndarray | None, top: int, priors: Priors | None,
               order: list[int] | None = None) -> str | None:
    """The blamed agent under `rule`: author | aggregate (summed step probabilities) | prior|<rule> (the most often
    blamed agent of the training labels present in this log, else the zero-training agent `<rule>`'s) | any
    zero-training agent rule, on `order` (default: the blamed step, then the rule's candidates)."""
    author = c.trace.steps[top].agent
    if rule.startswith("prior|"):
        return (priors.top_agent(c.trace) if priors is not None else None) or agent_pick(
            rule.split("|", 1)[1], c, probs, top, None, order)
    if rule == "aggregate" and probs is not None:
        ag = rk.agent_scores(c.trace, probs)
        return min(ag, key=lambda a: (-ag[a], a)) if ag else author
    if rule in ("author", "aggregate"):
        return author
    return rules.agent_verdict(rule, c.trace, c.rows, order or [top] + [k for k in c.ranked if k != top])


def prior_agent_order(ranked: list[int], top: int) -> list[int]:
    """What a zero-training agent rule reads under the label-prior step verdict: the rule's candidates without
    the prior's step (wherever `ranked` puts it), so that a position prior casts no agent votes."""
    return [k for k in ranked if k != top] or [top]


def agent_rule_used(sr, t: Trace, order: list[int]) -> tuple[str, list[dict] | None]:
    """The agent rule that chose a fitted system's agent where its ranker did not decide the step
    (`pred_agent_rule` / `agent_by` say what decided): "prior|<rule>" whose agent is absent from this log fell back
    to <rule>, "aggregate" without step probabilities to the author; with a zero-training agent rule, its own
    ranking of the agents, on the order that rule read (`agent_pick`)."""
    rule, pri = sr.agent_rule, sr.priors()
    if rule.startswith("prior|"):
        if pri is not None and pri.top_agent(t):
            return rule, None
        rule = rule.split("|", 1)[1]
    if rule in ("author", "aggregate") or not order:
        return ("author" if rule == "aggregate" else rule), None
    prior_step = sr.verdict == "prior" and pri is not None and pri.top_index() is not None
    read = prior_agent_order(order, order[0]) if prior_step else order
    return rule, [{"agent": a, "score": float(x)} for a, x in rules.agent_ranking(rule, t, read)]
