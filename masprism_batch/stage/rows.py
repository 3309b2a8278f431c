"""Output rows of one attributed trace: its `attributions` row and its `step_scores` rows (schema.py).

Built by the model stage (`stage.attribute.attribute_traces`) from the method's results; kept apart so the stage reads as
the order of work and this module as the table layout.
"""

from __future__ import annotations

import numpy as np

from masprism_batch.method import masprism as mp
from masprism_batch.method.sparse_attn import row_tail
from masprism_batch.verdict import stepset
from masprism_batch.verdict.confidence import rule_confidence
from masprism_batch.verdict.decide import agent_by, fitted_verdict, masprism_verdict
from masprism_batch.verdict.stepset import EMPTY_COLUMNS


def decide(t, rows: list[dict], ranking, cfg, policy):
    """(ranking, verdict) of one trace from its step rows and MASPrism's ranking, the step rows' final columns
    filled: what the stage does after the passes, and what `rescore` does from a finished run's rows (no prefill,
    pipelines/rescore.py), so a rescored verdict is a fresh run's."""
    # MASPrism's scores as step_scores stores them (float32), as the rows hold every feature: the verdict reads
    # exactly what the run writes, so `rescore` and `fit`, which read it back, see what the run saw
    ranking = mp.Ranking(ranking.ranked, {k: float(np.float32(v)) for k, v in ranking.scores.items()},
                         ranking.support, ranking.symptoms, ranking.nll, ranking.notes)
    if cfg.method.name == "ranked":
        ranking, verdict = fitted_verdict(t, rows, ranking, cfg, policy)
    else:
        verdict = masprism_verdict(t, ranking)
        verdict.confidence = rule_confidence(t, rows, ranking, policy.fallback.calibration)
    final_columns(rows, verdict)
    # the steps to read at the run's coverage, calibrated for this log's system where its entry holds one (O(steps))
    sr = policy.ranker(t) if cfg.method.name == "ranked" else None
    verdict.stepset = stepset.for_verdict(t, rows, verdict, sr.entry if sr is not None else None, cfg.method.coverage)
    return ranking, verdict


def final_columns(rows: list[dict], v) -> None:
    """step_scores: the paper's internal rank under its own name, and the final method's probability and rank."""
    final = {k: r + 1 for r, k in enumerate(v.order)}
    for row in rows:
        row["masprism_rank"] = row.get("rank")
        row["final_rank"] = final.get(row["step"])
        row["final_prob"] = _f(v.probs.get(row["step"])) if v.probs is not None else None


# the failure-kind columns (masprism_batch/category/annotate.py fills them when `method.categories` is on)
VERDICT_KIND_COLUMNS = ("category", "category_family", "category_confidence", "category_by", "blamed_vector",
                        "blamed_terms")
STEP_KIND_COLUMNS = ("category", "category_family", "category_confidence", "category_pmi")


def attribution_row(t, ranking, model_id, chash, cfg, r1, r2, sec1, sec2, now, verdict) -> dict:
    steps = t.steps
    cands = [{"step": k, "agent": steps[k].agent, "span_id": steps[k].span_id,
              "score": float(ranking.scores.get(k, 0.0)), "symptoms": ranking.support.get(k, [])}
             for k in ranking.ranked]
    top = ranking.ranked[0] if ranking.ranked else None
    assert top == (verdict.order[0] if verdict.order else None)
    starts = [s.start_time for s in steps if s.start_time is not None]
    return {
        # the system the run names (--system) wins over the one the log records: a ranker was matched by it
        "trace_id": t.trace_id, "source": t.source, "system": cfg.method.system or t.system, "n_steps": len(steps),
        "pred_step": top, "pred_agent": verdict.agent,
        "pred_span_id": steps[top].span_id if top is not None else None,
        "candidates": cands, "symptoms": list(ranking.symptoms), "method": cfg.method.name,
        "model_id": model_id, "config_hash": chash,
        "tokens_pass1": len(r1.input_ids), "tokens_pass2": len(r2.input_ids) if r2 else 0,
        "seconds_pass1": sec1, "seconds_pass2": sec2,
        "trace_start": min(starts) if starts else None, "attributed_at": now,
        "pred_step_agent": steps[top].agent if top is not None else None,
        "pred_agent_rule": verdict.rule, "agent_ranking": verdict.agent_ranking,
        "verdict_by": verdict.by, "confidence": verdict.confidence, "agent_by": agent_by(t, verdict),
        **dict.fromkeys(VERDICT_KIND_COLUMNS),  # null unless the (opt-in) failure kinds fill them
        **(verdict.stepset.columns() if verdict.stepset is not None else EMPTY_COLUMNS),
    }


def step_rows(t, p1, ranking, flags, r1, s1, extra=None) -> list[dict]:
    """attention_pass1: row i of A, A[i, :i+1], complete for a dense A; a row-sparse A (a long log) writes the
    row's tail from its first non-zero column (method/sparse_attn.full_row restores the leading zeros)."""
    rank = {k: r + 1 for r, k in enumerate(ranking.ranked)}
    A = s1.step_attn
    rows = []
    for i, st in enumerate(t.steps):
        s, e = r1.step_spans[i]
        nll2 = ranking.nll[i] if ranking.nll is not None and ranking.nll is not p1.nll else None
        rows.append({
            "trace_id": t.trace_id, "step": i, "agent": st.agent, "span_id": st.span_id, "kind": st.kind,
            "tokens_pass1": e - s, "nll_pass1": _f(p1.nll[i]), "nll_pass2": _f(nll2),
            "h_score": _f(p1.h_score[i]), "score": _f(ranking.scores[i]) if i in ranking.scores else None,
            "rank": rank.get(i), "is_symptom": i in p1.symptoms, "is_candidate": i in p1.candidates,
            "has_failure_word": bool(flags[i]), "attention_pass1": row_tail(A, i).astype(np.float32, copy=False).tolist(),
            **{k: _f(v[i]) for k, v in (extra or {}).items()},
            **dict.fromkeys(STEP_KIND_COLUMNS),
            "pass2_support": list(ranking.support[i]) if i in ranking.support else None,
        })
    return rows


def _f(x) -> float | None:
    """A float32 column's value as stored (the verdict reads the rows before they are written)."""
    return None if x is None or not np.isfinite(x) else float(np.float32(x))
