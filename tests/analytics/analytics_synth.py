"""Synthetic run OUTDIRs (the schemas of masprism_batch.schema, written with masprism_batch.io): no model."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

from masprism_batch import schema
from masprism_batch.io import DatasetWriter

T0 = datetime(2026, 11, 20, 22, 30, tzinfo=timezone.utc)


def write_outdir(outdir: Path, specs: list[dict], errors: list[dict] | None = None,
                 rows_per_part: int = 7) -> Path:
    """Each spec: trace_id, source, system, steps [{agent, content, span_id?}], labels|None, ranked [steps],
    scores [float per ranked], symptoms [steps], nll [per step], day_offset (int|None), attributed_at."""
    with DatasetWriter(outdir / "traces", schema.TRACES, rows_per_part) as wt, \
            DatasetWriter(outdir / "attributions", schema.ATTRIBUTIONS, rows_per_part) as wa, \
            DatasetWriter(outdir / "step_scores", schema.STEP_SCORES, rows_per_part * 5) as ws:
        for sp in specs:
            steps = sp["steps"]
            n = len(steps)
            start = None if sp.get("day_offset") is None else T0 + timedelta(days=sp["day_offset"])
            step_rows = [{"index": i, "agent": s["agent"], "role": s["agent"], "kind": s.get("kind", "message"),
                          "content": s["content"], "span_id": s.get("span_id"), "parent_span_id": None,
                          "start_time": None if start is None else start + timedelta(seconds=i)}
                         for i, s in enumerate(steps)]
            wt.write({"trace_id": sp["trace_id"], "source": sp["source"], "system": sp["system"],
                      "question": sp.get("question", "q?"), "steps": step_rows, "labels": sp.get("labels"),
                      "metadata": "{}"})
            ranked, scores = sp["ranked"], sp["scores"]
            cands = [{"step": k, "agent": steps[k]["agent"], "span_id": steps[k].get("span_id"), "score": sc,
                      "symptoms": sp["symptoms"]} for k, sc in zip(ranked, scores, strict=True)]
            top = ranked[0] if ranked else None
            wa.write({"trace_id": sp["trace_id"], "source": sp["source"], "system": sp["system"], "n_steps": n,
                      "pred_step": top, "pred_agent": steps[top]["agent"] if top is not None else None,
                      "pred_span_id": steps[top].get("span_id") if top is not None else None,
                      "candidates": cands, "symptoms": sp["symptoms"], "method": "masprism",
                      "model_id": sp.get("model_id", "tiny-random"), "config_hash": "c0ffee",
                      "tokens_pass1": sp.get("tokens", 100), "tokens_pass2": sp.get("tokens2", 50),
                      "seconds_pass1": sp.get("seconds", 1.0), "seconds_pass2": sp.get("seconds2", 0.5),
                      "trace_start": start, "attributed_at": sp.get("attributed_at", T0)})
            rank = {k: r + 1 for r, k in enumerate(ranked)}
            for i, s in enumerate(steps):
                ws.write({"trace_id": sp["trace_id"], "step": i, "agent": s["agent"], "span_id": s.get("span_id"),
                          "kind": s.get("kind", "message"), "tokens_pass1": 10 + i, "nll_pass1": sp["nll"][i],
                          "nll_pass2": sp["nll2"][i] if sp.get("nll2") else None, "h_score": 0.1 * i,
                          "score": scores[ranked.index(i)] if i in rank else None, "rank": rank.get(i),
                          "is_symptom": i in sp["symptoms"], "is_candidate": i in rank,
                          "has_failure_word": False,
                          "attention_pass1": [round(1.0 / (i + 1), 4)] * (i + 1)})
    if errors:
        with DatasetWriter(outdir / "errors", schema.ERRORS) as we:
            we.write_many(errors)
    return outdir


AGENTS = ["Orchestrator", "WebSurfer", "Coder", "Assistant", "ComputerTerminal"]
WORDS = ["all good", "Error: file not found", "Traceback (most recent call last)", "timed out waiting",
         "the answer is 42", "cannot open page", "fine"]


def random_specs(rng: random.Random, n: int, spans: bool = False) -> list[dict]:
    specs = []
    for t in range(n):
        n_steps = rng.randint(1, 13)
        steps = [{"agent": rng.choice(AGENTS), "content": " ".join(rng.choices(WORDS, k=rng.randint(1, 3))),
                  "span_id": f"{rng.getrandbits(64):016x}" if spans else None} for _ in range(n_steps)]
        ranked = rng.sample(range(n_steps), k=min(n_steps, rng.randint(0, 5)))
        labels = None
        if rng.random() < 0.7:
            if spans:
                locs = sorted({steps[rng.randrange(n_steps)]["span_id"] for _ in range(rng.randint(1, 3))})
                labels = {"mistake_step": None, "mistake_agent": None, "error_locations": locs,
                          "error_impacts": ["HIGH"] * len(locs), "error_categories": ["x"] * len(locs)}
            else:
                g = rng.randrange(n_steps)
                labels = {"mistake_step": g, "mistake_agent": steps[g]["agent"].upper(), "error_locations": None,
                          "error_impacts": None, "error_categories": None}
        specs.append({"trace_id": f"t{t}-{rng.getrandbits(32):x}", "source": rng.choice(["src/A", "src/B"]),
                      "system": rng.choice(["S1", "S2", None]), "steps": steps, "labels": labels,
                      "ranked": ranked, "scores": sorted((rng.uniform(0.1, 9) for _ in ranked), reverse=True),
                      "symptoms": sorted(rng.sample(range(n_steps), k=rng.randint(0, n_steps))),
                      "nll": [rng.uniform(0.5, 6) for _ in range(n_steps)],
                      "nll2": [rng.uniform(0.5, 6) for _ in range(n_steps)] if rng.random() < 0.5 else None,
                      "day_offset": rng.choice([None, 0, 1, 3]),
                      "attributed_at": T0 + timedelta(minutes=rng.randint(0, 150)),
                      "tokens": rng.randint(10, 5000), "seconds": rng.uniform(0.01, 3)})
    return specs
