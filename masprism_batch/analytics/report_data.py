"""The drill-down data of the report: which traces go in, and each one's compact JSON payload.

At 100,000 traces the page cannot carry every trace's text and N x N attention, so the drill-down holds a
deterministic sample (hash of trace id, round-robin over sources so each is represented; traces asked for
by id first) under a byte budget. Step text is cut per step and per trace; attention is quantised to one
byte per cell of the lower triangle (row-normalised, base64). The overview charts still cover every trace.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from masprism_batch.analytics import load
from masprism_batch.analytics.accuracy import top1_correct
from masprism_batch.analytics.svg import visible
from masprism_batch.method.sparse_attn import full_row

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DrillLimits:
    max_traces: int = 1000  # traces in the drill-down
    step_chars: int = 800  # characters of one step's text
    trace_chars: int = 16_000  # characters of one trace's text (all steps together)
    heatmap_max_steps: int = 256  # larger traces show no heatmap (256^2/2 bytes ~ 44 kB of base64)
    budget_bytes: int = 14_000_000  # JSON of the whole drill-down; the page stays under ~15 MB


def sample_ids(attr: pa.Table, limits: DrillLimits, include: list[str] | None = None) -> list[str]:
    """Deterministic: same OUTDIR, same sample; round-robin across sources."""
    ids, sources = attr["trace_id"].to_pylist(), attr["source"].to_pylist()
    known = set(ids)
    chosen = [t for t in dict.fromkeys(include or []) if t in known]
    missing = [t for t in (include or []) if t not in known]
    if missing:
        log.warning("%d requested trace id(s) not in attributions/ (first: %r)", len(missing), missing[0])
    by_src: dict[str, list[str]] = defaultdict(list)
    for t, s in zip(ids, sources, strict=True):
        by_src[s or ""].append(t)
    queues = [sorted(v, key=lambda t: hashlib.blake2b(t.encode(), digest_size=8).digest())
              for _, v in sorted(by_src.items())]
    taken = set(chosen)
    pos = [0] * len(queues)
    while len(chosen) < limits.max_traces and any(p < len(q) for p, q in zip(pos, queues, strict=True)):
        for qi, q in enumerate(queues):
            while pos[qi] < len(q) and q[pos[qi]] in taken:
                pos[qi] += 1
            if pos[qi] < len(q) and len(chosen) < limits.max_traces:
                chosen.append(q[pos[qi]])
                taken.add(q[pos[qi]])
                pos[qi] += 1
    return chosen


# Every string of the drill-down that comes from a trace or the OUTDIR (ids, sources, agent names, step text, span
# ids, labels) passes through `mark_bidi`: report.js shows them as text, so a bidirectional control (U+202E turns the
# text around it: "invoice\u202Efdp.exe" shows as "invoiceexe.pdf"), a zero width (U+200B: "Plan\u200Bner" shows as
# "Planner"), NUL or another control character would reach the screen raw. It is svg.visible, the one neutraliser
# of the whole report (SVG, HTML and this JSON alike): each such character becomes a visible \uXXXX escape; the
# stored data is unchanged (ingest accepts them as ordinary characters).
def mark_bidi(text: Any) -> Any:
    """`text` with every control, bidirectional control, other format character and lone surrogate shown as a
    visible `\\uXXXX` escape (svg.visible); non-strings (None, numbers) unchanged."""
    return visible(text) if isinstance(text, str) else text


def _cut(text: str | None, n: int) -> tuple[str, bool]:
    text = text or ""
    return (text, False) if len(text) <= n else (text[:n], True)


def _quantise_attention(rows: list[list[float] | None], n: int) -> str | None:
    """Lower triangle of A, each row divided by its max (so every row's top target is 255), as base64."""
    # a long log stores each row as its tail (method/sparse_attn.full_row): shorter rows are padded, not refused
    if n == 0 or n > 4096 or len(rows) != n or any(not r or len(r) > i + 1 for i, r in enumerate(rows)):
        return None
    out = np.zeros(n * (n + 1) // 2, dtype=np.uint8)
    off = 0
    for i, r in enumerate(rows):
        a = np.nan_to_num(full_row(r, i), nan=0.0, posinf=0.0, neginf=0.0).clip(min=0)
        m = a.max() if a.size else 0
        if m > 0:
            out[off: off + i + 1] = np.rint(255 * a / m).astype(np.uint8)
        off += i + 1
    return base64.b64encode(out.tobytes()).decode("ascii")


def _num(x: Any) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 4)


def build_payloads(outdir: Path, attr: pa.Table, ids: list[str], limits: DrillLimits) -> list[dict[str, Any]]:
    return list(payloads_by_id(outdir, attr, ids, limits).values())


def payloads_by_id(outdir: Path, attr: pa.Table, ids: list[str], limits: DrillLimits) -> dict[str, dict[str, Any]]:
    """The drill-down payloads in `ids` order, keyed by the trace id as stored (a payload's `id` is the id as
    shown, `mark_bidi`'s escapes in it: two logs' ids may show alike, so nothing is looked up by it)."""
    want = set(ids)
    arows = {r["trace_id"]: r for r in attr.filter(pc.is_in(attr["trace_id"], pa.array(ids, pa.string())))
             .to_pylist()} if ids else {}
    steps_by: dict[str, list[dict]] = defaultdict(list)
    seen: set[tuple[str, int]] = set()
    for r in load.read(outdir, "step_scores", trace_ids=want).to_pylist():
        if (r["trace_id"], r["step"]) not in seen:  # a trace attributed twice: its first step rows
            seen.add((r["trace_id"], r["step"]))
            steps_by[r["trace_id"]].append(r)
    traces = {r["trace_id"]: r for r in load.read(outdir, "traces", columns=["trace_id", "question", "steps",
                                                                            "labels"], trace_ids=want).to_pylist()}
    out: dict[str, dict[str, Any]] = {}
    used, left_out = 2, []  # the list's brackets
    for tid in ids:
        p = _payload(arows[tid], sorted(steps_by.get(tid, []), key=lambda r: r["step"]), traces.get(tid), limits)
        size = len(json.dumps(p, ensure_ascii=False)) + (2 if out else 0)  # and the ", " before every item but the first
        if used + size > limits.budget_bytes:
            left_out.append(tid)  # this trace only: a smaller one after it may still fit (one huge log first in
            continue  # the sample left every later trace out)
        used += size
        out[tid] = p
    if left_out:
        log.warning("drill-down byte budget (%d): %d trace(s) left out (first: %.80r), %d in", limits.budget_bytes,
                    len(left_out), left_out[0], len(out))
    return out


def _author(tsteps: list[dict], scores: list[dict], step: int | None) -> str | None:
    """Author of the blamed step for outputs written before attributions carried pred_step_agent."""
    if step is None:
        return None
    if step < len(tsteps):
        return tsteps[step].get("agent")
    return next((r.get("agent") for r in scores if r["step"] == step), None)


def _payload(a: dict, scores: list[dict], trace: dict | None, limits: DrillLimits) -> dict[str, Any]:
    n = a["n_steps"] or len(scores)
    tsteps = (trace or {}).get("steps") or []
    per_step = max(80, min(limits.step_chars, limits.trace_chars // max(1, n)))
    by_step = {r["step"]: r for r in scores}
    steps = []
    for i in range(n):
        s = by_step.get(i, {})
        t = tsteps[i] if i < len(tsteps) else {}
        text, cut = _cut(t.get("content"), per_step)
        steps.append({"a": mark_bidi(s.get("agent", t.get("agent"))), "k": mark_bidi(s.get("kind", t.get("kind"))),
                      "t": mark_bidi(text), "c": cut, "sp": mark_bidi(t.get("span_id") or s.get("span_id")),
                      "n1": _num(s.get("nll_pass1")), "n2": _num(s.get("nll_pass2")), "h": _num(s.get("h_score")),
                      "r": s.get("final_rank") if "final_rank" in s else s.get("rank"),
                      "fw": bool(s.get("has_failure_word"))})
    labels = (trace or {}).get("labels")
    ok = top1_correct(a, trace) if trace else None
    heat = None
    if n <= limits.heatmap_max_steps and len(scores) == n:
        heat = _quantise_attention([by_step[i].get("attention_pass1") if i in by_step else None
                                    for i in range(n)], n)
    q, qcut = _cut((trace or {}).get("question"), limits.step_chars)
    return {
        "id": mark_bidi(a["trace_id"]), "src": mark_bidi(a["source"]), "sys": mark_bidi(a["system"]), "n": n,
        "pred": a["pred_step"], "agent": mark_bidi(a["pred_agent"]),
        "rule": mark_bidi(a.get("pred_agent_rule") or "author"),
        "pa": mark_bidi(a.get("pred_step_agent") or _author(tsteps, scores, a["pred_step"])), "q": mark_bidi(q),
        "qc": qcut, "sym": a["symptoms"] or [],
        "cands": [[c["step"], _num(c["score"]), mark_bidi(c["agent"]), c["symptoms"] or []]
                  for c in a["candidates"] or []],
        "gold": None if not labels else {"step": labels.get("mistake_step"),
                                         "agent": mark_bidi(labels.get("mistake_agent")),
                                         "locs": [mark_bidi(x) for x in labels.get("error_locations") or []]},
        "ok": ok, "steps": steps, "attn": heat,
        # what decided the step (ranker:<system> | rule:<name>) and P(it is right), calibrated
        "by": mark_bidi(a.get("verdict_by")), "conf": _num(a.get("confidence")),
        "why": mark_bidi(a.get("agent_by")),  # why the blamed agent, beside the step's author
        "cat": mark_bidi(a.get("category")), "catc": _num(a.get("category_confidence")),  # what went wrong
        # the steps to read first, best first, at the run's coverage (null: an output written before the step set)
        "set": list(a["read_steps"]) if a.get("read_steps") else None, "setc": _num(a.get("set_coverage")),
        "setb": mark_bidi(a.get("set_by")), "loc": a.get("localised"),
    }
