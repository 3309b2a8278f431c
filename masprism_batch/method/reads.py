"""What a trace's verdict reads, decided per trace (its system) before any prefill.

Two features cost model work beyond the two passes:
- "counterfactual": the cf_effect column (ranker features cf_z, has_cf; the zero-training rule
  "counterfactual"): one suffix prefill per candidate (method/counterfactual.py);
- "head_attention": per-(layer, head) pass-1 step attention, weighted by the learned head weights into
  attn_in_learned (ranker feature attn_learned_norm; the rule "learned_heads"): the per-head signal path.
Every other feature comes with the two passes anyway.

The model stage computes a costly feature for a trace only when its verdict reads it under the run's
`VerdictPolicy` (verdict/policy.py): the fitted ranker of the trace's system (which declares its `features` and,
where it keeps the zero-training order, its `rule`) or, for a system no ranker was fitted on, the zero-training
rule of the policy's fallback.
`method.features = "all"` (CLI `--all-features`: runs made to fit a ranker) and callers that take the raw
signals (`raw_sink`: fit-heads, benchmarks) get every feature the config enables. This module is the one place
that answers the question; the ranker file format may change and only `_ranker_reads` follows it.
"""

from __future__ import annotations

import logging

from masprism_batch.trace import Trace

log = logging.getLogger(__name__)

COUNTERFACTUAL = "counterfactual"
HEAD_ATTENTION = "head_attention"
COSTLY = (COUNTERFACTUAL, HEAD_ATTENTION)
# step feature (method/ranker.py FEATURES) -> the costly computation behind it
FEATURE_COST = {"cf_z": COUNTERFACTUAL, "has_cf": COUNTERFACTUAL, "attn_learned_norm": HEAD_ATTENTION}
# zero-training rule (verdict/rules.py RULES) -> the costly computation behind the column it orders by
RULE_COST = {"counterfactual": COUNTERFACTUAL, "learned_heads": HEAD_ATTENTION}
# step_scores columns left null when their computation is skipped
COLUMNS = {COUNTERFACTUAL: "cf_effect", HEAD_ATTENTION: "attn_in_learned"}


def enabled(cfg) -> frozenset[str]:
    """The costly features the config lets the stage compute at all."""
    m = cfg.method
    out = set()
    if m.counterfactual_k > 0 and m.run_pass2:
        out.add(COUNTERFACTUAL)
    if m.learned_heads:
        out.add(HEAD_ATTENTION)
    return frozenset(out)


def _ranker_reads(rk) -> set[str]:
    """Costly features read by a fitted entry: its step features, plus its rule where it keeps one."""
    out = {FEATURE_COST[f] for f in (getattr(rk, "features", None) or []) if f in FEATURE_COST}
    if getattr(rk, "verdict", "ranker") != "ranker":  # the system's entry keeps a zero-training order
        out |= {RULE_COST[r] for r in [getattr(rk, "rule", "faithful")] if r in RULE_COST}
    return out


def verdict_reads(policy, trace: Trace) -> frozenset[str]:
    """The costly features the verdict of `trace` reads under the run's `policy` (verdict/policy.py VerdictPolicy;
    a subset of COSTLY), whatever the config enables."""
    if not policy.ranked:  # the faithful method: the pass-2 score order, nothing costly
        return frozenset()
    rk = policy.ranker(trace)
    if rk is not None:
        return frozenset(_ranker_reads(rk))
    rule = policy.fallback.rule
    return frozenset({RULE_COST[rule]} if rule in RULE_COST else ())


def needed(cfg, policy, traces: list[Trace], *, everything: bool = False) -> list[frozenset]:
    """Per trace: the costly features to compute (what its verdict reads under `policy`, or every enabled one
    with `everything` or `method.features = "all"`), restricted to what the config enables. A trace whose
    verdict cannot be resolved (the policy refused its ranker file) gets every enabled feature: its verdict
    raises later, where the error is reported per trace."""
    on = enabled(cfg)
    if everything or getattr(cfg.method, "features", "verdict") == "all":
        return [on] * len(traces)
    memo: dict[tuple, frozenset] = {}
    out = []
    for t in traces:
        key = (t.source, t.system)  # rankers are per system (named, else source or `system` field); rule: global
        if key not in memo:
            try:
                memo[key] = verdict_reads(policy, t) & on
            except Exception as exc:  # noqa: BLE001 - decided again, and reported, by the verdict itself
                log.debug("trace %r: verdict reads not resolved (%s): computing every feature", t.trace_id, exc)
                out.append(on)
                continue
        out.append(memo[key])
    return out
