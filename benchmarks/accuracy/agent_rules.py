"""The zero-training agent rule for systems without a ranker (issue 23, item 7), chosen by leave-one-system-out
over every dev system with agent labels, and the agent labels this needs on TRAIL GAIA.

Agent labels: Who&When names the blamed agent (`mistake_agent`). TRAIL names error *spans*; on GAIA (a manager
CodeAgent, a managed `search_agent` and the harness's final reformulation call) the ingest gives every step the
agent whose AGENT span encloses it, so `trail_agent_label` derives a label: the agent of the steps that hold the
annotated error locations when they all belong to one agent; a trace whose errors sit in several agents, whose
error location is not a step, or without annotation is skipped (and counted: `label_census`). SWE-Bench has a
single CodeAgent, so its agent question is empty and it does not count.

Choice: for each held-out system, every rule in `rules.AGENT_RULES` is judged on the other systems by the worst
(over systems) one-sided 95% lower bound of its per-trace margin over "most active agent" (the baseline as
eval.who_and_when_metrics counts it), ties by the worst mean margin, then the average mean margin, then the least
reliance on the step verdict (the floor `most_active` first, author last): where the labels cannot tell rules
apart, the rule closest to the baseline is the safe one. What ships (fallback.json "agent_rule", `ship`): the
floor `most_active` (the baseline itself), unless the rule picked on all systems was also picked for some held-out
system on the others and there beat the baseline, and no held-out system's pick fell below it: the step evidence
may move the blame only where moving it has been shown to help on a system it was not chosen on (issue 32: a
rule picked by its gain on one system fell 16 points below the baseline on a system in none of the data).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from masprism_batch.eval.who_and_when_metrics import _majority
from masprism_batch.trace import norm_agent
from masprism_batch.verdict import rules as zr

DERIVED = ("trail/GAIA",)  # TRAIL systems with more than one agent: their agent labels are derived
FINE = (zr.FLOOR, *[f"guard:{t / 10:g}" for t in range(3, 10)], "author", "active",
        *[f"mix:{b / 10:g}" for b in range(1, 10)])  # sensitivity grid, never shipped
BASELINE = "baseline: majority_agent"
RANDOM = "baseline: random"


def trail_agent_label(trace) -> tuple[str | None, str]:
    """(blamed agent, "labelled") or (None, why skipped) for a TRAIL trace: the agent of the annotated spans."""
    lab = trace.labels
    locs = set(lab.error_locations or []) if lab is not None else set()
    if not locs:
        return None, "no annotation"
    by_span = {s.span_id: s for s in trace.steps}
    if not locs <= set(by_span):
        return None, "error location not a step"
    agents = {norm_agent(by_span[x].agent) for x in locs}
    if None in agents:
        return None, "error step without an agent"
    if len(agents) > 1:
        return None, "errors in several agents"
    return by_span[next(iter(locs))].agent, "labelled"


def gold_agent(system: str, trace) -> str | None:
    """The normalised blamed agent of a dev trace, None where the system or the trace has no agent label."""
    if system.startswith("who-and-when/"):
        return norm_agent(trace.labels.mistake_agent) if trace.labels is not None else None
    if system in DERIVED:
        return norm_agent(trail_agent_label(trace)[0])
    return None


def label_census(cases) -> dict[str, tuple[Counter, Counter]]:
    """Per derived system: (why each trace got or lacks a label, how often each agent is the label)."""
    out: dict[str, tuple[Counter, Counter]] = {}
    for c in cases:
        if c.system in DERIVED:
            agent, why = trail_agent_label(c.trace)
            reasons, agents = out.setdefault(c.system, (Counter(), Counter()))
            reasons[why] += 1
            if agent is not None:
                agents[agent] += 1
                # a log where a second agent acts more than once: the agent question is open there
                acting = Counter(norm_agent(x.agent) for x in c.trace.steps if zr.acts(x))
                reasons["labelled, two agents acting twice or more"] += sum(n >= 2 for n in acting.values()) >= 2
    return out


def lower_bound(d, z: float = 1.64) -> float:
    """One-sided 95% lower confidence bound of the mean margin over the baseline (per trace)."""
    x = np.asarray(d, dtype=float)
    if x.size < 2:
        return float(x.mean()) if x.size else -1.0
    return float(x.mean() - z * x.std(ddof=1) / np.sqrt(x.size))


def reliance(ar: str) -> float:
    """How much `ar` leans on the step verdict (the floor most_active 0, active 0.01, guard:t 1 - t, mix:b b,
    author 1): the tie-break, least first."""
    if ar in (zr.FLOOR, "active", "author"):
        return {zr.FLOOR: 0.0, "active": 0.01, "author": 1.0}[ar]
    head, _, x = ar.partition(":")
    return 1.0 - float(x) if head == "guard" else float(x)


def pick(margins: dict[str, dict[str, list[float]]], systems: list[str]) -> str:
    """The rule most surely not below "most active agent" on every one of `systems` (see the module doc); the
    floor where there is no other system to judge on."""
    if not systems:
        return zr.FLOOR
    def key(ar):
        m = margins[ar]
        means = [float(np.mean(m[s])) if m.get(s) else -1.0 for s in systems]
        return min(lower_bound(m.get(s, [])) for s in systems), min(means), float(np.mean(means)), -reliance(ar)

    return max(margins, key=key)


def hits(cases, orders: dict[str, list[int]], agent_rules) -> tuple[dict, dict]:
    """({rule: {system: [hit]}}, {system: [baseline hit]}) over the traces with an agent label."""
    per = {ar: {} for ar in agent_rules}
    base: dict[str, list[float]] = {}
    for c in cases:
        gold = gold_agent(c.system, c.trace)
        if gold is None:
            continue
        order = orders[c.trace.trace_id]
        base.setdefault(c.system, []).append(float(_majority(c.trace) == gold))
        # random agent (eval's baseline): a uniformly random step's author, in expectation
        per.setdefault(RANDOM, {}).setdefault(c.system, []).append(
            sum(norm_agent(s.agent) == gold for s in c.trace.steps) / max(len(c.trace.steps), 1))
        for ar in agent_rules:
            got = norm_agent(zr.agent_verdict(ar, c.trace, c.rows, order)) == gold
            per[ar].setdefault(c.system, []).append(float(got))
    return per, base


def agent_loso(cases, orders: dict[str, list[int]], agent_rules=zr.AGENT_RULES) -> dict:
    """LOSO over the systems with agent labels; `orders`: each trace's steps best first (the zero-training
    step rule's). Returns accuracies per rule and system, the baseline's, the pick per held-out system and the
    rule picked on all systems."""
    per, base = hits(cases, orders, agent_rules)
    rand = per.pop(RANDOM)
    systems = sorted(base)
    margins = {ar: {s: list(np.subtract(per[ar][s], base[s])) for s in systems} for ar in agent_rules}
    picked = {held: pick(margins, [s for s in systems if s != held]) for held in systems}
    res = {"systems": systems, "n": {s: len(base[s]) for s in systems},
           "acc": {ar: {s: float(np.mean(per[ar][s])) for s in systems} for ar in agent_rules},
           "base": {s: float(np.mean(base[s])) for s in systems},
           "random": {s: float(np.mean(rand[s])) for s in systems},
           "lb": {ar: {s: lower_bound(margins[ar][s]) for s in systems} for ar in agent_rules},
           "picked": picked, "chosen": {h: float(np.mean(per[picked[h]][h])) for h in systems},
           "best_on_all": pick(margins, systems)}
    res["shipped"] = ship(res)
    return res


def ship(res: dict) -> str:
    """The floor `most_active`, unless the rule picked on every system was picked for a held-out system on the
    others and beat the baseline there, while no held-out pick fell below it (module doc)."""
    best = res["best_on_all"]
    below = [s for s in res["systems"] if res["chosen"][s] < res["base"][s] - 1e-9]
    helped = [s for s in res["systems"] if res["picked"][s] == best and res["chosen"][s] > res["base"][s] + 1e-9]
    return best if best == zr.FLOOR or (helped and not below) else zr.FLOOR


def emit(res: dict, out: list) -> None:
    """Tidy rows (benchmarks/results/accuracy.csv) of every rule, the LOSO choice and the baseline."""
    def row(system, method, protocol, value):
        out.append({"system": system, "method": method, "protocol": protocol, "metric": "agent",
                    "value": round(float(value), 4), "spread": ""})

    for s in res["systems"]:
        for ar, acc in res["acc"].items():
            row(s, f"zero-training agent rule: {ar}", "no training", acc[s])
        row(s, "zero-training agent rule chosen by leave-one-system-out", "leave-one-system-out", res["chosen"][s])
        row(s, "zero-training agent rule shipped: " + res["shipped"], "leave-one-system-out (shipping guard)",
            res["acc"][res["shipped"]][s])
        if s in DERIVED:  # Who&When's baseline row comes from its scorer; TRAIL's has no agent metric
            row(s, BASELINE, "no training (derived agent labels)", res["base"][s])
            row(s, RANDOM, "no training (derived agent labels)", res["random"][s])


def markdown_section(res: dict, fine: dict, census: dict, step_rule: str, bare: dict | None = None) -> list[str]:
    """The "Zero-training agent rule" section of docs/results.md."""
    rules = list(res["acc"])
    shipped = res["shipped"]
    out = ["## Zero-training agent rule (systems without a ranker)", "",
           "Protocol: **leave-one-system-out** over the dev systems with agent labels (`benchmarks/accuracy/agent_rules.py`). "
           f"Agent accuracy (exact) of each zero-training agent rule on the step order of the zero-training rule "
           f"`{step_rule}`, and the rule chosen for each held-out system on the *other* systems: the best "
           "worst-case one-sided 95% lower bound of its per-trace margin over \"most active agent\", ties by the "
           "worst then the average mean margin, then the rule leaning least on the step verdict. `most_active`: the "
           "baseline itself (most steps, ties to the first to speak), the floor; `guard:t`: the floor unless the "
           "top-5 candidates (1/position votes) give one other agent at least a share t of their votes; `author`: "
           "the blamed step's author; `active`: the agent with most acting steps (tool outputs, system turns and "
           "unnamed user turns do not count; ties: the author); `mix:b`: (1-b) x that share + b x the agent's share "
           "of the candidates' votes. Random: a uniformly random step's author, in expectation.", "",
           "| held-out system | labelled logs | chosen on the others | its agent accuracy (LOSO) | shipped "
           f"(`{shipped}`) | most active agent | random | " + " | ".join(rules) + " |",
           "|---|---|---|---|---|---|---|" + "---|" * len(rules)]
    for s in res["systems"]:
        out.append(f"| {s} | {res['n'][s]} | {res['picked'][s]} | {res['chosen'][s]:.3f} | "
                   f"{res['acc'][shipped][s]:.3f} | {res['base'][s]:.3f} | {res['random'][s]:.3f} | "
                   + " | ".join(f"{res['acc'][ar][s]:.3f}" for ar in rules) + " |")
    below = [s for s in res["systems"] if res["chosen"][s] < res["base"][s] - 1e-9]
    best = res["best_on_all"]
    helped = [s for s in res["systems"] if res["picked"][s] == best and res["chosen"][s] > res["base"][s] + 1e-9]
    why = ("it is the floor" if best == shipped == zr.FLOOR else
           f"picked on the others for {', '.join(helped)}, it beat the baseline there, and no held-out pick fell "
           "below it" if shipped == best else
           f"the rule best on all systems, `{best}`, " + (
               "was never picked for a held-out system where it then beat the baseline" if not helped else
               "beat the baseline where picked held out, but the held-out picks fell below it on " + ", ".join(below))
           + ": the step evidence has not been shown to help on a system it was not chosen on, so the floor ships")
    out += ["", f"Shipped for any system without a ranker: **`{shipped}`** ({why}). Its margin over most active "
            "agent: " + ", ".join(f"{s} {res['acc'][shipped][s] - res['base'][s]:+.3f}" for s in res["systems"])
            + "; held out, the rule picked on the other systems is "
            + ("at or above \"most active agent\" on every system." if not below else
               "below \"most active agent\" on " + ", ".join(below) + "."), ""]
    for s, (cnt, agents) in sorted(census.items()):
        contested = cnt["labelled, two agents acting twice or more"]
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(cnt.items()) if not why.startswith("labelled"))
        out.append(f"{s} agent labels, derived: the agent of the steps holding TRAIL's annotated error spans when "
                   f"they all belong to one agent; {cnt['labelled']} of {sum(cnt.values()) - contested} logs "
                   f"labelled (skipped: {skipped or 'none'}); in {contested} of them two agents act twice or more "
                   "(in the others the manager never delegated); blamed: " + ", ".join(f"{a} {n}" for a, n in agents.most_common())
                   + ". TRAIL SWE-Bench has one agent and does not count.")
    fine_below = [s for s in fine["systems"] if fine["chosen"][s] < fine["base"][s] - 1e-9]
    out += ["", "How fragile the choice is: with finer grids (`guard:0.3` ... `guard:0.9`, `mix:0.1` ... `mix:0.9`, "
            "never shipped) LOSO picks " + ", ".join(f"{s}: `{fine['picked'][s]}` {fine['chosen'][s]:.3f}"
                                                  for s in fine["systems"])
            + (f"; below the baseline on {', '.join(fine_below)}" if fine_below else "; never below the baseline")
            + f", and the shipping guard would ship `{fine['shipped']}`. Per-system lower bounds of the margin over "
            "most active agent: " + "; ".join(f"{ar} " + "/".join(f"{res['lb'][ar][s]:+.3f}" for s in res["systems"])
                                              for ar in rules) + f" ({' / '.join(res['systems'])})."]
    if bare:  # the same LOSO without the derived labels: what the derived system changes
        bad = [s for s in bare["systems"] if bare["chosen"][s] < bare["base"][s] - 1e-9]
        out[-1] += (" Without the derived labels (" + ", ".join(DERIVED) + ") LOSO picks " + ", ".join(
            f"{s}: `{bare['picked'][s]}` {bare['chosen'][s]:.3f} (most active {bare['base'][s]:.3f})"
            for s in bare["systems"]) + (f": below the baseline on {', '.join(bad)}" if bad else "")
            + f"; the shipping guard would ship `{bare['shipped']}`.")
    return out + [""]
