"""What the exports say about a verdict: the score a backend expects ([0, 1]) and the explanation in words,
both from the attributions row as written (`verdict_by`, `pred_agent_rule`, `confidence`), never re-derived.

A backend reads `score` as a quality in [0, 1] (Phoenix's annotation score, OTel's
`gen_ai.evaluation.score.value`); MASPrism's own candidate score is unbounded (0.0 under the label prior, a few
units elsewhere), so it travels as a separate attribute (`raw_score`) and the score is the verdict's calibrated
confidence.
"""

from __future__ import annotations

import math


def agent_rule_words(rule: str | None) -> str:
    """How `pred_agent` was chosen, for each `pred_agent_rule` a verdict can carry (verdict.py, method/rules.py)."""
    rule = rule or "author"
    if rule == "prior" or rule.startswith("prior|"):
        other = rule.split("|", 1)[1] if "|" in rule else "author"
        return f"the label prior: the most often blamed agent present in the log, else {agent_rule_words(other)}"
    if rule.startswith("mix:"):
        beta = rule.split(":", 1)[1]
        return (f"the agent rule mix:{beta}: each agent's share of the log's steps mixed (weight {beta}) with its "
                f"share of the blamed steps")
    return {"author": "the author of the blamed step",
            "aggregate": "the ranker's step probabilities summed per agent",
            "active": "the agent rule active: the agent with most acting steps"}.get(rule, f"the agent rule {rule}")


def verdict_by_words(by: str | None) -> str:
    """What chose `pred_step` (`verdict_by`: "ranker:<system>" | "prior:<system>" | "rule:<name>" |
    "no_symptom:<rule>")."""
    if not by:
        return "an unrecorded verdict (an output written before verdict_by existed)"
    kind, _, name = by.partition(":")
    return {"ranker": f"the ranker fitted on system {name}",
            "prior": f"the label prior fitted on system {name} (most often blamed position first)",
            "rule": f"the zero-training rule {name}",
            "no_symptom": f"no symptom found: the zero-training rule {name}'s fallback order (by position), "
                          f"no evidence; confidence that of a random pick"}.get(kind, by)


def raw_score(c: dict) -> float | None:
    """MASPrism's candidate score as ranked (unbounded; None where the step had none)."""
    s = c.get("score")
    return float(s) if s is not None and math.isfinite(float(s)) else None


def score(a: dict, rank: int) -> float | None:
    """The score a backend gets: the verdict's confidence (calibrated P(pred_step is right), in [0, 1]) on the
    verdict's own row; a lower-ranked candidate has no calibrated probability of its own, so none."""
    conf = a.get("confidence")
    if rank != 1 or conf is None or not math.isfinite(float(conf)):
        return None
    return min(1.0, max(0.0, float(conf)))


SET_FIELDS = ("read_steps", "set_size", "set_coverage", "set_by", "localised")


def set_fields(a: dict) -> dict:
    """The verdict's steps to read (attributions' step-set columns) as every export carries them; nulls in outputs
    written before the step set."""
    return {k: (list(a[k]) if k == "read_steps" and a.get(k) is not None else a.get(k)) for k in SET_FIELDS}


def set_sentence(a: dict) -> str:
    """The steps to read first, in words (empty where the output has no step set)."""
    read = a.get("read_steps")
    if not read:
        return ""
    cov = a.get("set_coverage")
    held = f", which hold the failure's source in {cov:.0%} of held-out logs" if cov is not None else ""
    by = f" (calibrated by {a['set_by']})" if a.get("set_by") else ""
    shown = ", ".join(map(str, read[:20])) + (f", … ({len(read) - 20} more)" if len(read) > 20 else "")
    wide = "; not localised: the set spans most of the log" if a.get("localised") is False else ""
    return f" Read first: step(s) {shown} ({len(read)} of {a.get('n_steps')}){held}{by}{wide}."


def verdict_sentence(a: dict) -> str:
    """The trace's verdict in words, from attributions' columns only."""
    author = a.get("pred_step_agent") or next(
        (c.get("agent") for c in a.get("candidates") or [] if c.get("step") == a["pred_step"]), None)
    conf = a.get("confidence")
    how = f"confidence {conf:.2f}" if conf is not None else "no calibrated confidence"
    return (f"Blamed: step {a['pred_step']} (written by {author or '-'}); blamed agent {a['pred_agent'] or '-'} "
            f"(chosen by {agent_rule_words(a.get('pred_agent_rule'))}). Step chosen by "
            f"{verdict_by_words(a.get('verdict_by'))}, {how}.{set_sentence(a)}")


def explain(a: dict, c: dict, rank: int) -> str:
    sym = ", ".join(str(s) for s in c.get("symptoms") or []) or "none"
    what = "most likely caused the failure" if rank == 1 else "is a candidate cause of the failure"
    raw = raw_score(c)
    return (f"Rank {rank} of {len(a['candidates'] or [])} (MASPrism score {'-' if raw is None else f'{raw:.4g}'}): "
            f"step {c['step']} by agent {c['agent'] or '-'} {what}; symptom steps pointing to it: {sym}. "
            f"{verdict_sentence(a)} Model {a['model_id']}, config {a['config_hash']}.")


def label(rank: int) -> str:
    return "failure_source" if rank == 1 else "candidate"


def agent_rule(a: dict) -> str:
    return a.get("pred_agent_rule") or "author"


def kind_text(a: dict) -> str:
    return (f"Failure kind of blamed step {a['pred_step']} ({a['pred_agent'] or '-'}): {a['category']} "
            f"({a.get('category_family') or '-'}), by {a.get('category_by') or '-'}.")
