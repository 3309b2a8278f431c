"""The Langfuse export: each verdict as Langfuse scores, one JSON object per line, each the body of the public
API's score create (`POST /api/public/scores`, langfuse-python's `CreateScoreRequest`: id, traceId,
observationId, name, value, dataType, comment, metadata). Send each line as is (docs/reporting.md shows how).

- rank 1: name `masprism_failure_attribution`, CATEGORICAL value `failure_source`, on the blamed step's
  observation (its span id in hex) or, where the step has none (a chat log), on the trace alone; and, where the
  verdict has a confidence, a NUMERIC score `masprism_confidence` beside it (Langfuse charts numeric scores);
- lower candidates (`--top-k` > 1, with an observation): CATEGORICAL `candidate`;
- the verdict's failure kind, where it has one: name `masprism_failure_kind`, CATEGORICAL value the kind.

traceId is `ids.export_trace_id`: the log's own id in hex, else the stable id derived from it (the derivation of
Langfuse's `create_trace_id(seed=...)`). Each score's `id` is derived from the trace, step, name and the run's
config, so sending a file twice updates the scores instead of doubling them (Langfuse upserts on id).
`fit --labels` reads these lines back, and Langfuse's own score listings (fit/tool_labels.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from masprism_batch.analytics import export_text as txt
from masprism_batch.analytics import ids
from masprism_batch.analytics.export_rows import (
    ANNOTATION_NAME,
    CATEGORY_ANNOTATION,
    each_verdict,
    hex_ids,
    ranked,
)

CONFIDENCE_SCORE = "masprism_confidence"


def _id(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _meta(a: dict, c: dict, rank: int) -> dict[str, Any]:
    return {"trace_id": a["trace_id"], "span_id": c.get("span_id"), "source": a["source"], "step": c["step"],
            "step_agent": c["agent"], "rank": rank, "blamed_step": a["pred_step"], "blamed_agent": a["pred_agent"],
            "agent_rule": txt.agent_rule(a), "verdict_by": a.get("verdict_by"), "confidence": a.get("confidence"),
            "raw_score": txt.raw_score(c), "model_id": a["model_id"], "config_hash": a["config_hash"],
            **txt.set_fields(a)}


def _score(a: dict, c: dict, rank: int, name: str, value: Any, data_type: str, comment: str) -> dict[str, Any]:
    tid, sid = hex_ids(a, c)
    span = sid or ids.carrying_span(c.get("span_id"))  # a step made of an input message: the span carrying it
    body: dict[str, Any] = {"id": _id(a["trace_id"], c["step"], name, a["config_hash"]), "traceId": tid}
    if span:
        body["observationId"] = span
    return {**body, "name": name, "value": value, "dataType": data_type, "comment": comment,
            "metadata": _meta(a, c, rank)}


def langfuse_scores(outdir: Path, top_k: int = 1) -> Iterator[dict[str, Any]]:
    """Every score body, verdict by verdict (rank 1 first); a verdict whose bodies cannot be built is skipped,
    said (`one_verdict`)."""
    yield from each_verdict(outdir, lambda a: _verdict_scores(a, top_k), "langfuse")


def _verdict_scores(a: dict, top_k: int) -> Iterator[dict[str, Any]]:
    for r, c in ranked(a, top_k):
        if r != 1 and not c.get("span_id"):
            continue  # a chat log's candidates would all land on the trace, under one name: rank 1 only
        yield _score(a, c, r, ANNOTATION_NAME, txt.label(r), "CATEGORICAL", txt.explain(a, c, r))
        if r != 1:
            continue
        if (conf := txt.score(a, 1)) is not None:
            yield _score(a, c, r, CONFIDENCE_SCORE, conf, "NUMERIC",
                         f"P(step {c['step']} is the failure source), calibrated: {txt.verdict_sentence(a)}")
        if a.get("category"):
            yield _score(a, c, r, CATEGORY_ANNOTATION, a["category"], "CATEGORICAL", txt.kind_text(a))
