"""The model stage's category step: every verdict (and its top-ranked steps) gets a failure kind.

Called once per stage call, after the verdicts, while the pass-2 prompts' K/V caches are still held: the
`category_reads` best-ranked steps of each verdict are read with every kind's description as a suffix, all of
them in packed batches (evidence.py), and the log evidence of each top-k step is computed from its text
(log_signals.py). Steps outside the pass-2 prompt (no pass 2: no candidates, or it did not fit) have the log
evidence only; `category_by` says which. A log whose system's entry in the run's ranker file carries kinds
fitted to the team's own labels (`fit`, fit/categories.py) reads those weights instead of the run's.
"""

from __future__ import annotations

import logging
import time
from functools import lru_cache

import numpy as np

from masprism_batch.category import classify, evidence, groups, log_signals
from masprism_batch.category.taxonomy import Taxonomy, load_taxonomy

log = logging.getLogger(__name__)


@lru_cache(maxsize=8)
def _taxonomy(path: str | None) -> Taxonomy:
    return load_taxonomy(path)


@lru_cache(maxsize=8)
def _weights(path: str | None, weights: str | None, model_id: str) -> classify.CategoryModel:
    return classify.load_model(_taxonomy(path), model_id, weights)


def setup(cfg, model_id: str) -> tuple[Taxonomy, classify.CategoryModel] | None:
    """The run's taxonomy and its weights, or None when categories are off."""
    m = cfg.method
    if not m.categories:
        return None
    return _taxonomy(m.taxonomy), _weights(m.taxonomy, m.category_weights, model_id)


def system_weights(policy, trace, tax: Taxonomy, default: classify.CategoryModel,
                   memo: dict | None = None) -> classify.CategoryModel:
    """The kinds `fit` learned for this log's system (its ranker-file entry's `category`, kept where its held-out
    estimate beat zero-training, for this taxonomy), else `default`. `memo`: the entries already read in this
    call (every log of a system reads the same one: parsed and checked once)."""
    try:
        sr = policy.ranker(trace) if policy is not None else None
    except Exception:  # noqa: BLE001 - a refused ranker file is said in the verdict's own error row
        return default
    cat = (sr.entry.get("category") or {}) if sr is not None else {}
    if cat.get("kept") != "fitted" or not cat.get("weights"):
        return default
    memo = {} if memo is None else memo
    if id(cat) not in memo:
        try:
            memo[id(cat)] = classify.CategoryModel.from_json(cat["weights"], tax)
        except ValueError as exc:  # fitted for other words: the run's taxonomy is not the one the fit read
            log.debug("the fitted kinds of %s are not applied (%s)", sr.system, exc)
            memo[id(cat)] = default
    return memo[id(cat)]


def annotate(model, cfg, items: list[tuple], token_budget: int, policy=None) -> dict:
    """items: (trace, r2 or None, sig2 or None, attribution row, step rows) per verdict; fills the category
    columns of the rows in place. `policy`: the run's verdict policy (a system's fitted kinds). Returns
    {"seconds", "tokens"} of the suffix reads."""
    if not cfg.method.categories or not items:
        return {"seconds": 0.0, "tokens": 0}
    tax, cm = setup(cfg, model.model_id)
    t0 = time.perf_counter()
    top_k, n_reads = cfg.method.top_k_candidates, cfg.method.category_reads
    reads, where, plan = [], {}, []
    for it, (_t, r2, s2, _arow, rows) in enumerate(items):
        ranked = sorted((r for r in rows if r.get("final_rank") is not None and r["final_rank"] <= top_k),
                        key=lambda r: r["final_rank"])
        plan.append(ranked)
        cache = getattr(s2, "kv", None) if r2 is not None else None
        for r in ranked[:n_reads]:
            k = r["step"]
            if cache is not None and k < len(r2.step_spans) and r2.step_spans[k][1] > 0:
                where[(it, k)] = len(reads)
                reads.append(evidence.Read(cache, r2.step_spans[k][1]))
    stats: dict = {}
    memo: dict = {}  # a system's fitted kinds, read once per call
    pmi = evidence.description_pmi(model, tax, reads, token_budget, stats)
    for it, (t, r2, s2, arow, _rows) in enumerate(items):
        try:
            _fill(it, t, r2, s2, arow, plan[it], pmi, where, tax, system_weights(policy, t, tax, cm, memo))
        except Exception as exc:  # noqa: BLE001 - a verdict without a kind, never a lost verdict
            log.warning("trace %r: no failure category (%s)", t.trace_id, exc)
    dt = time.perf_counter() - t0
    log.debug("categories: %d verdicts, %d suffix reads (%d tokens) in %.2f s", len(items), len(reads),
              stats.get("tokens", 0), dt)
    return {"seconds": dt, "tokens": stats.get("tokens", 0)}


def _fill(it, t, r2, s2, arow, ranked, pmi, where, tax, cm) -> None:
    """The category columns of one verdict's rows (and its blamed vector and terms)."""
    if not ranked:
        return
    if ranked[0]["step"] != arow["pred_step"]:  # one verdict: the rows' rank 1 is pred_step (stage/rows.py)
        raise AssertionError(f"final rank 1 is step {ranked[0]['step']}, not pred_step {arow['pred_step']}")
    f = np.array([log_signals.step_features(t.steps, r["step"]) for r in ranked])
    P = np.full((len(ranked), len(tax.kinds)), np.nan)
    for j, r in enumerate(ranked):
        if (it, r["step"]) in where:
            P[j] = pmi[where[(it, r["step"])]]
    probs = cm.probs(P, f)
    for j, r in enumerate(ranked):
        if np.isfinite(P[j]).all():
            r["category_pmi"] = P[j].astype(np.float32).tolist()
    # a step with no evidence the layer reads (no description read, and weights that ignore the log: zero-
    # training) gets no kind rather than the first of a uniform guess
    has = np.isfinite(P).all(axis=1) | cm.reads_log()
    for j, r in enumerate(ranked):
        if has[j]:
            r["category"], r["category_family"], r["category_confidence"] = classify.decide(probs[j], tax)
    top = ranked[0]
    if has[0]:
        arow["category"], arow["category_family"] = top["category"], top["category_family"]
        arow["category_confidence"] = top["category_confidence"]
        arow["category_by"] = f"{'model+log' if np.isfinite(P[0]).all() else 'log'}:{tax.name}:{cm.fitted_on}"
    k = top["step"]
    arow["blamed_terms"] = groups.terms_of(t.steps[k].content)
    if r2 is not None and getattr(s2, "kv", None) is not None and k < len(r2.content_spans):
        vec = evidence.pooled_values(s2.kv, *r2.content_spans[k])
        arow["blamed_vector"] = vec.tolist() if vec is not None else None
