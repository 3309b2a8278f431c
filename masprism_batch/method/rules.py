"""Zero-training orderings of MASPrism's candidates: what a log of an unknown system gets (issue 13, item 4).

No rule reads a label or anything fitted on labels; each only reorders the faithful method's ranked candidates
with signals any log has. Which rule ships is chosen by leave-one-system-out in benchmarks/bench_accuracy.py
(for each dev system, the rule best on the other three is scored on it); docs/results.md has the table.

- faithful: the paper's pass-2 score order (MASPrism as published);
- earliest: the earliest candidate first (a failure's source precedes its symptoms; among the steps the
  signals point at, the first is the likeliest origin);
- counterfactual: candidates whose removal raised the symptoms' surprise most first (cf_effect, measured for
  the top `counterfactual_k` candidates; the others follow in faithful order);
- learned_heads: candidates by attention inflow through the label-free head weights (attn_in_learned).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from . import weights_dir

log = logging.getLogger(__name__)
RULES = ("faithful", "earliest", "counterfactual", "learned_heads")


def _by(rows: list[dict], key: str, ranked: list[int]) -> list[int]:
    val = {r["step"]: r.get(key) for r in rows}
    measured = [k for k in ranked if val.get(k) is not None and math.isfinite(val[k])]
    measured.sort(key=lambda k: -val[k])  # stable: ties keep the faithful order
    return measured + [k for k in ranked if k not in measured]


def order(rule: str, rows: list[dict], ranked: list[int]) -> list[int]:
    """The candidates `ranked` (faithful order, best first) reordered by `rule`; rows: the trace's step_scores."""
    if rule == "faithful" or not ranked:
        return list(ranked)
    if rule == "earliest":
        return sorted(ranked)
    if rule == "counterfactual":
        return _by(rows, "cf_effect", ranked)
    if rule == "learned_heads":
        return _by(rows, "attn_in_learned", ranked)
    raise ValueError(f"unknown zero-training rule {rule!r}; expected one of {', '.join(RULES)}")


def fallback_rule(path: str | None) -> str:
    """The rule for logs no ranker was fitted on: `fallback.json` in the weights folder (`path`, default the
    packaged one) as bench_accuracy.py --train-weights chose it; "faithful" when there is none."""
    target = (weights_dir() if path is None else Path(path)) / "fallback.json"
    if not target.is_file():
        return "faithful"
    rule = json.loads(target.read_text(encoding="utf-8")).get("rule", "faithful")
    if rule not in RULES:
        log.warning("%s names unknown rule %r: using the faithful order", target, rule)
        return "faithful"
    return rule
