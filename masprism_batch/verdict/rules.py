"""Zero-training orderings of MASPrism's candidates: what a log of an unknown system gets.

No rule reads a label or anything fitted on labels; each only reorders the faithful method's ranked candidates
with signals any log has. Which rule ships is chosen by leave-one-system-out in benchmarks/accuracy/bench_accuracy.py
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
from dataclasses import dataclass
from pathlib import Path

from masprism_batch.method import weights_dir
from masprism_batch.trace import norm_agent

log = logging.getLogger(__name__)
RULES = ("faithful", "earliest", "counterfactual", "learned_heads")
# Zero-training agent rules: "most_active" is the "most active agent"
# baseline itself (most steps of any kind, ties to the first to speak, as eval counts it): the floor, equal to the
# baseline on every system by construction. "guard:<tau>" keeps that floor unless the step verdict's top-5
# candidates (1/position votes) give one other agent at least a `tau` share of their votes. "author" blames the
# blamed step's author; "active" the agent with most acting steps; "mix:<beta>" scores each agent by
# (1 - beta) * its share of the acting steps + beta * its share of the candidates' votes. Which one ships is chosen
# by leave-one-system-out (benchmarks/accuracy/agent_rules.py), and a rule other than the floor only where, picked on other
# systems, it helped on a held-out one; the grids are fixed a priori because a finer one overfits.
AGENT_MIX = (0.25, 0.5, 0.75)
AGENT_GUARD = (0.5, 0.75)
FLOOR = "most_active"
AGENT_RULES = (FLOOR, *[f"guard:{t}" for t in AGENT_GUARD], "author", "active", *[f"mix:{b}" for b in AGENT_MIX])
RELAY_ROLES = {"tool", "system"}
PERSON_ROLES = {"user", "human"}


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


def agent_verdict(rule: str, trace, rows: list[dict], order: list[int]) -> str | None:
    """The blamed agent of `trace` under a zero-training agent `rule`; `order`: the steps best first."""
    if not order:
        return None
    if rule == "author":
        return trace.steps[order[0]].agent
    ranking = agent_ranking(rule, trace, order)
    return ranking[0][0] if ranking else trace.steps[order[0]].agent


def agent_ranking(rule: str, trace, order: list[int]) -> list[tuple[str, float]]:
    """[(agent, score)] best first under an `active` / `mix:<b>` rule (ties: the blamed step's author, then the agent
    that speaks first)."""
    steps = trace.steps
    if rule == FLOOR or rule.startswith("guard:"):
        return _guarded(rule, steps, order)
    beta = 0.0 if rule == "active" else float(rule.split(":", 1)[1]) if rule.startswith("mix:") else None
    if beta is None:
        raise ValueError(f"unknown agent rule {rule!r}; expected one of {', '.join(AGENT_RULES)}")
    names: dict[str, str] = {}
    share: dict[str, float] = {}
    acting = [s for s in steps if acts(s)] or steps  # a log with no acting step counts every step
    for s in acting:
        if norm_agent(s.agent):
            key = norm_agent(s.agent)
            names.setdefault(key, s.agent)
            share[key] = share.get(key, 0.0) + 1.0 / len(acting)
    votes = {k: 0.0 for k in share}
    for pos, k in enumerate(order[:5]):
        a = norm_agent(steps[k].agent)
        if a in votes:
            votes[a] += 1.0 / (pos + 1)
    tot = sum(votes.values()) or 1.0
    score = {a: (1 - beta) * share[a] + beta * votes[a] / tot for a in share}
    first: dict[str | None, int] = {}
    for i, s in enumerate(steps):
        first.setdefault(norm_agent(s.agent), i)
    # ties (equally active agents): the blamed step's author, the one evidence the counts lack; then who spoke first
    author = norm_agent(steps[order[0]].agent) if order else None
    return [(names[a], score[a]) for a in sorted(score, key=lambda a: (-score[a], a != author, first.get(a, 0)))]


def _votes(steps, order: list[int]) -> dict[str, float]:
    """Each agent's share of the top-5 candidates' votes (1/position)."""
    votes: dict[str, float] = {}
    for pos, k in enumerate(order[:5]):
        a = norm_agent(steps[k].agent)
        if a is not None:
            votes[a] = votes.get(a, 0.0) + 1.0 / (pos + 1)
    tot = sum(votes.values()) or 1.0
    return {a: v / tot for a, v in votes.items()}


def _guarded(rule: str, steps, order: list[int]) -> list[tuple[str, float]]:
    """most_active: agents by their share of all steps, ties to the first to speak (eval's "most active agent");
    guard:<tau>: the same, unless one other agent holds at least `tau` of the candidates' votes: it goes first."""
    names: dict[str, str] = {}
    count: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, s in enumerate(steps):
        a = norm_agent(s.agent)
        if a is not None:
            names.setdefault(a, s.agent)
            count[a] = count.get(a, 0) + 1
            first.setdefault(a, i)
    ranked = sorted(count, key=lambda a: (-count[a], first[a]))
    score = {a: count[a] / len(steps) for a in ranked}
    if rule.startswith("guard:") and ranked:
        tau = float(rule.split(":", 1)[1])
        votes = _votes(steps, order)
        mover = min(votes, key=lambda a: (-votes[a], first.get(a, 0))) if votes else None
        if mover is not None and mover != ranked[0] and mover in score and votes[mover] >= tau:
            ranked = [mover] + [a for a in ranked if a != mover]
            score[mover] = max(score.values()) + votes[mover]  # first, and by how much the votes moved it
    return [(names[a], score[a]) for a in ranked]


def acts(step) -> bool:
    """Whether `step` is an agent acting: tool outputs and system turns relay, they do not decide; a user / human
    turn is the person's unless the step names an agent of its own (AG2 group chats log the other agents'
    messages with role "user" under their names: Who&When Algorithm-Generated's experts speak so)."""
    role = (step.role or "").lower()
    if step.kind == "tool" or role in RELAY_ROLES:
        return False
    return role not in PERSON_ROLES or norm_agent(step.agent) not in (None, *PERSON_ROLES)


@dataclass(frozen=True)
class Fallback:
    """What a log of a system no ranker was fitted on gets: the zero-training step rule, agent rule and the
    calibration of that verdict's confidence (method/calibrate.py), as `fallback.json` of a weights folder
    says (bench_accuracy.py --train-weights chose them by leave-one-system-out)."""

    rule: str = "faithful"
    # without one, the floor: the "most active agent" baseline itself ("author" and "mix:0.5" fell below it on
    # unseen systems)
    agent_rule: str = FLOOR
    calibration: dict | None = None


def read_fallback(path: str | None = None) -> Fallback:
    """`fallback.json` of the weights folder `path` (a ranker *file*, "packaged" or None: the packaged folder);
    no file: the paper's order and the floor agent rule, uncalibrated. An unknown rule is warned about and
    replaced by its default."""
    # "packaged" is the packaged folder even where the working directory holds a folder of that name
    folder = Path(path) if path is not None and path != "packaged" and Path(path).is_dir() else weights_dir()
    target = folder / "fallback.json"  # a user's folder's: checked when its setting was read (rankcheck)
    d = json.loads(target.read_text(encoding="utf-8-sig")) if target.is_file() else {}
    rule = d.get("rule", "faithful")
    if rule not in RULES:
        log.warning("fallback.json names unknown rule %r: using the faithful order", rule)
        rule = "faithful"
    agent = d.get("agent_rule", FLOOR)
    if agent not in AGENT_RULES and not known_agent_rule(agent):
        log.warning("fallback.json names unknown agent rule %r: using %r", agent, FLOOR)
        agent = FLOOR
    return Fallback(rule, agent, d.get("calibration"))


def known_agent_rule(rule: str) -> bool:
    """A guard / mix rule off the shipped grids (e.g. benchmarks' finer grids) is still well formed."""
    head, _, tail = rule.partition(":")
    try:
        return head in ("guard", "mix") and 0.0 <= float(tail) <= 1.0
    except ValueError:
        return False
