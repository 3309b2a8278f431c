"""Synthetic run OUTDIRs (the schemas of masprism_batch.schema, written with masprism_batch.outdir.parts): no model."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

from masprism_batch import schema
from masprism_batch.outdir.parts import DatasetWriter

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
                      "trace_start": start, "attributed_at": sp.get("attributed_at", T0),
                      "confidence": sp.get("confidence"), "verdict_by": sp.get("verdict_by"),
                      "pred_agent_rule": sp.get("pred_agent_rule"), "category": sp.get("category"),
                      "category_family": sp.get("category_family"),
                      "category_confidence": sp.get("category_confidence")})
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


def _nulls(sch, n: int, names: tuple[str, ...]) -> dict:
    """Null columns `names` of pyarrow schema `sch`, n rows: columns the synthetic run does not fill."""
    import pyarrow as pa

    return {k: pa.nulls(n, sch.field(k).type) for k in names}


def write_large_outdir(outdir: Path, n: int, seed: int, parts: int = 10, chars: int = 160) -> Path:
    """A scale OUTDIR (e.g. 100,000 traces) built with vectorised Arrow arrays, not row dicts."""
    import numpy as np
    import pyarrow as pa

    from masprism_batch.outdir.parts import write_table_atomic

    g = np.random.default_rng(seed)
    agents = np.array(AGENTS + [f"Expert_{i}" for i in range(40)], dtype=object)
    srcs = np.array(["who-and-when/Algorithm-Generated", "who-and-when/Hand-Crafted", "trail/GAIA"], dtype=object)
    words = np.array(["ok ", "Error: not found ", "Traceback ", "timeout ", "fine ", "cannot "], dtype=object)
    for p in range(parts):
        m = n // parts + (p < n % parts)
        ids = np.array([f"p{p}-t{i}-{g.integers(1 << 30):x}" for i in range(m)], dtype=object)
        ns = g.integers(3, 31, m)
        off = np.concatenate([[0], np.cumsum(ns)]).astype(np.int32)
        total = int(off[-1])
        src = srcs[g.integers(0, 3, m)]
        step_idx = (np.arange(total) - np.repeat(off[:-1], ns)).astype(np.int32)
        step_agent = agents[g.integers(0, len(agents), total)]
        pred = (g.random(m) * ns).astype(np.int32)
        pred_agent = step_agent[off[:-1] + pred]
        k = np.minimum(ns, 5)
        coff = np.concatenate([[0], np.cumsum(k)]).astype(np.int32)
        cstep = np.concatenate([np.r_[pr, np.setdiff1d(np.arange(n_), [pr])[: kk - 1]]
                                for pr, n_, kk in zip(pred, ns, k, strict=True)]).astype(np.int32)
        csym = pa.ListArray.from_arrays(np.arange(len(cstep) + 1, dtype=np.int32) * 0, pa.array([], pa.int32()))
        cands = pa.StructArray.from_arrays(
            [pa.array(cstep), pa.array(step_agent[np.repeat(off[:-1], k) + cstep]), pa.nulls(len(cstep), pa.string()),
             pa.array(np.sort(g.random(len(cstep)))[::-1] * 10), csym],
            fields=list(schema.CANDIDATE_TYPE))
        sym_steps = (ns - 1).astype(np.int32)
        t0 = pa.scalar(T0)
        attr = pa.table({
            "trace_id": ids, "source": src, "system": np.where(src == "trail/GAIA", "smolagents", "CaptainAgent"),
            "n_steps": ns.astype(np.int32), "pred_step": pred, "pred_agent": pred_agent,
            "pred_span_id": pa.nulls(m, pa.string()),
            "candidates": pa.ListArray.from_arrays(coff, cands),
            "symptoms": pa.ListArray.from_arrays(np.arange(m + 1, dtype=np.int32), pa.array(sym_steps)),
            "method": ["masprism"] * m, "model_id": ["tiny-random"] * m, "config_hash": ["c0ffee"] * m,
            "tokens_pass1": g.integers(500, 4000, m), "tokens_pass2": g.integers(200, 2000, m),
            "seconds_pass1": g.random(m), "seconds_pass2": g.random(m),
            "trace_start": pa.nulls(m, pa.timestamp("us", tz="UTC")),
            "attributed_at": pa.array([t0.value + int(x) for x in g.integers(0, 3600e6 * 30, m)],
                                      pa.timestamp("us", tz="UTC")),
            "pred_step_agent": pred_agent, "pred_agent_rule": ["author"] * m,  # the faithful method's verdict
            "agent_ranking": pa.nulls(m, schema.ATTRIBUTIONS.field("agent_ranking").type),
            "verdict_by": ["rule:faithful"] * m, "confidence": g.random(m),
            "agent_by": ["author: the blamed step's author"] * m,
            **_nulls(schema.ATTRIBUTIONS, m, ("category", "category_family", "category_confidence", "category_by",
                                             "blamed_vector", "blamed_terms",  # the opt-in failure kinds: off
                                             "read_steps", "set_size", "set_share", "set_coverage", "set_by",
                                             "localised")),  # no step set: a run from before issue 59
        }, schema=schema.ATTRIBUTIONS)
        write_table_atomic(attr, outdir / "attributions" / f"part-{p:03d}.parquet")
        att_len = step_idx + 1
        aoff = np.concatenate([[0], np.cumsum(att_len)]).astype(np.int32)
        rank = np.full(total, -1, np.int32)
        rank[np.repeat(off[:-1], k) + cstep] = np.concatenate([np.arange(1, kk + 1) for kk in k])
        scores = pa.table({
            "trace_id": np.repeat(ids, ns), "step": step_idx, "agent": step_agent, "span_id": pa.nulls(total, pa.string()),
            "kind": ["message"] * total, "tokens_pass1": g.integers(5, 200, total).astype(np.int32),
            "nll_pass1": g.uniform(1, 8, total).astype(np.float32), "nll_pass2": g.uniform(1, 8, total).astype(np.float32),
            "h_score": g.random(total).astype(np.float32),
            "score": pa.array(np.where(rank > 0, g.random(total), np.nan), pa.float32(), from_pandas=True),
            "rank": pa.array(np.where(rank > 0, rank, 0), mask=rank < 0),
            "is_symptom": step_idx == np.repeat(sym_steps, ns), "is_candidate": rank > 0,
            "has_failure_word": g.random(total) < 0.2,
            "attention_pass1": pa.ListArray.from_arrays(aoff, pa.array(g.random(int(aoff[-1])).astype(np.float32))),
            "cf_effect": pa.nulls(total, pa.float32()), "attn_in_learned": pa.nulls(total, pa.float32()),
            # the faithful method: its own rank is the final one (rank 1 = pred_step), no probabilities
            "masprism_rank": pa.array(np.where(rank > 0, rank, 0), mask=rank < 0),
            "final_prob": pa.nulls(total, pa.float32()),
            "final_rank": pa.array(np.where(rank > 0, rank, 0), mask=rank < 0),
            **_nulls(schema.STEP_SCORES, total, ("category", "category_family", "category_confidence", "category_pmi",
                                               "pass2_support")),
        }, schema=schema.STEP_SCORES)
        write_table_atomic(scores, outdir / "step_scores" / f"part-{p:03d}.parquet")
        content = ["".join(words[g.integers(0, len(words), 4)]) + "x" * chars for _ in range(total)]
        steps = pa.StructArray.from_arrays(
            [pa.array(step_idx), pa.array(step_agent), pa.array(step_agent), pa.array(["message"] * total),
             pa.array(content, pa.large_string()), pa.nulls(total, pa.string()), pa.nulls(total, pa.string()),
             pa.nulls(total, pa.timestamp("us", tz="UTC")), pa.nulls(total, pa.large_string())],  # no recorded error
            fields=list(schema.STEP_TYPE))
        gold = (g.random(m) * ns).astype(np.int32)
        labels = pa.StructArray.from_arrays(
            [pa.array(gold), pa.array(step_agent[off[:-1] + gold]), pa.nulls(m, pa.list_(pa.string())),
             pa.nulls(m, pa.list_(pa.string())), pa.nulls(m, pa.list_(pa.string()))], fields=list(schema.LABELS_TYPE))
        traces = pa.table({"trace_id": ids, "source": src, "system": attr["system"], "question": ["q?"] * m,
                           "steps": pa.ListArray.from_arrays(off, steps), "labels": labels, "metadata": ["{}"] * m,
                           "run_status": ["failed"] * m},
                          schema=schema.TRACES)
        write_table_atomic(traces, outdir / "traces" / f"part-{p:03d}.parquet")
    return outdir


def _step(agent, content, span=None):
    return {"agent": agent, "content": content, "span_id": span, "kind": "llm" if span else "message"}


def hand_specs():
    """Four traces whose every statistic is worked out by hand (test_analytics_stats.test_hand_checked_numbers)."""
    return [
        {"trace_id": "h1", "source": "ww", "system": "X", "day_offset": 0,
         "steps": [_step("A", "ok"), _step("B", "Error: x"), _step("A", "fine"), _step("C", "Traceback here")],
         "labels": {"mistake_step": 1, "mistake_agent": "b"}, "ranked": [1, 3], "scores": [2.0, 1.0],
         "symptoms": [1, 3], "nll": [1.0, 2.0, 3.0, 4.0]},
        {"trace_id": "h2", "source": "ww", "system": "X", "day_offset": None,
         "steps": [_step("A", "fine"), _step("A", "timeout error"), _step("B", "ok")],
         "labels": {"mistake_step": 0, "mistake_agent": "A"}, "ranked": [2, 0, 1], "scores": [3.0, 2.0, 1.0],
         "symptoms": [1], "nll": [2.0, 2.0, 5.0]},
        {"trace_id": "h3", "source": "ww", "system": "Y", "day_offset": 1,
         "steps": [_step("C", "a"), _step("C", "b")], "labels": None, "ranked": [0], "scores": [1.0],
         "symptoms": [], "nll": [1.0, 3.0]},
        {"trace_id": "s1", "source": "tr", "system": "Z", "day_offset": 0,
         "steps": [_step("A", "x", "s0"), _step("B", "y", "s1"), _step("B", "z", "s2"), _step("A", "failed. Error", "s3")],
         "labels": {"error_locations": ["s1", "s3"]}, "ranked": [1, 2], "scores": [5.0, 4.0], "symptoms": [3],
         "nll": [1.0, 1.0, 1.0, 1.0]},
    ]
