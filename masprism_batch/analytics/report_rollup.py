"""The report's roll-up across sources, and which sources the overview breaks out.

A log may name its own source and system (canonical JSON lines): the overview draws the sources with most traces
only, and a roll-up cell names a source's systems with most traces, so the names logs give cannot grow the report
without bound; every trace is still counted.
"""

from __future__ import annotations

from collections import Counter

from masprism_batch.analytics import svg
from masprism_batch.analytics.stats import most_traces

SOURCES_SHOWN = 20


def shown_sources(attr) -> set[str]:
    """The sources the overview breaks out: the SOURCES_SHOWN with most traces. A log may name its own source
    (canonical JSON lines): one per log drew five charts per log (~4 kB), so the rest are counted, not drawn."""
    return set(most_traces(Counter(s or "" for s in attr["source"].to_pylist()), SOURCES_SHOWN))


def rollup(stats, pos: dict, ag: dict, keep: set[str]) -> str:
    """One row per source broken out (`keep`), one for the others, and the total across sources: traces,
    systems, the most-blamed agent, where the blamed step sits, top-1 accuracy where labels exist."""
    top1 = {r["source"]: r for r in stats["accuracy"].to_pylist() if r["metric"] in ("step_top1", "precision@1")}
    rows, tot_n, tot_agents, tot_rel, others = [], 0, Counter(), Counter(), Counter()
    for src in sorted(set(ag) | set(pos)):
        agents, systems = Counter(), Counter()
        for r in ag.get(src, []):
            agents[r["agent"]] += r["n_traces"]
            systems[r["system"] or "-"] += r["n_traces"]
        rel = Counter({r["bin"]: r["n_traces"] for r in pos.get(src, []) if r["measure"] == "relative"})
        n = sum(agents.values())
        tot_n += n
        tot_agents.update({(src, a): k for a, k in agents.items()})
        tot_rel.update(rel)
        if src not in keep:
            others.update(sources=1, traces=n)
            continue
        a, k = agents.most_common(1)[0] if agents else (None, 0)
        acc = top1.get(src)
        rows.append([src or "(none)", n, _systems_cell(systems), f"{a or '-'} ({k / n:.0%})" if n else "-",
                     _median_bin(rel), f"{acc['metric']} {acc['value']:.3f} ({acc.get('sample') or '-'})"
                     if acc and acc["value"] is not None else "-"])
    if others:
        rows.append([f"{others['sources']:,} other sources", others["traces"], "", "-", "-", "-"])
    (s_a, a), k = tot_agents.most_common(1)[0] if tot_agents else ((None, None), 0)
    rows.append(["all sources", tot_n, "", f"{a or '-'} in {s_a or '-'} ({k / tot_n:.0%})" if tot_n else "-",
                 _median_bin(tot_rel), "per source only (metrics differ)"])
    return "<h3>Roll-up across sources</h3>" + svg.table(
        ["source", "traces", "systems", "most-blamed agent (share)", "median blamed position (0 first, 1 last)",
         "top-1 accuracy"], rows)


SYSTEMS_SHOWN = 10


def _systems_cell(systems: Counter) -> str:
    """A source's systems by name; past SYSTEMS_SHOWN, those with most traces and a count of the rest (a log names
    its system: one name per log must not grow the report by a name per log)."""
    if len(systems) <= SYSTEMS_SHOWN:
        return ", ".join(sorted(systems))
    top = sorted(most_traces(systems, SYSTEMS_SHOWN))
    return ", ".join(top) + f" and {len(systems) - SYSTEMS_SHOWN:,} more"


def _median_bin(rel: Counter) -> str:
    n = sum(rel.values())
    if not n:
        return "-"
    acc = 0
    for b in sorted(rel):
        acc += rel[b]
        if acc * 2 >= n:
            return f"{b / 10:.1f}–{(b + 1) / 10:.1f}"
    return "-"
