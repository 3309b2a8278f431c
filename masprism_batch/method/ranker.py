"""The step features a fitted ranker reads, and agents ranked by their steps' summed probability.

The faithful method ranks at most K candidates by a hand-written score. A fitted ranker (fit/fitting.py, applied
by verdict/rankfile.py) gives every step a linear score over features the two prefill passes already produce (NLL,
attention inflow, symptom/candidate marks, the pass-2 score) and over trace structure (position, agent
turn-taking, failure words); a softmax over the trace's steps gives P(step is the failure source).
No free text is decoded and no label is read at inference.
"""

from __future__ import annotations

import re

import numpy as np

from masprism_batch.method.sparse_attn import full_row
from masprism_batch.trace import Trace

FEATURES = [
    "rel_pos", "log_index", "is_first", "is_last", "nll1_z", "nll2_z", "h_norm", "attn_in_norm",
    "is_symptom", "is_candidate", "score_norm", "recip_rank", "has_failure_word", "failure_follows",
    "log_chars", "agent_share", "agent_first", "agent_turn_log", "input_role", "is_tool", "has_code",
    "cf_z", "has_cf", "attn_learned_norm",
]
_CODE = re.compile(r"```|\bdef |\bimport |exitcode", re.IGNORECASE)
_INPUT_ROLES = {"user", "human", "tool", "system"}


def _z(x: np.ndarray) -> np.ndarray:
    x = np.where(np.isfinite(x), x, np.nan)
    if np.all(np.isnan(x)):
        return np.zeros_like(x)
    mu, sd = np.nanmean(x), np.nanstd(x)
    return np.nan_to_num((x - mu) / (sd if sd > 1e-9 else 1.0))


def _norm(x: np.ndarray) -> np.ndarray:
    m = np.max(np.abs(x)) if x.size else 0.0
    return x / m if m > 0 else np.zeros_like(x)


def _col(rows, key, default=np.nan) -> np.ndarray:
    return np.array([default if r.get(key) is None else r[key] for r in rows], dtype=np.float64)


def step_features(trace: Trace, rows: list[dict]) -> np.ndarray:
    """[N, F] features of one trace from its step_scores rows (ordered by step)."""
    n = len(trace.steps)
    idx = np.arange(n, dtype=np.float64)
    nll1, nll2 = _col(rows, "nll_pass1"), _col(rows, "nll_pass2")
    nll2 = np.where(np.isfinite(nll2), nll2, nll1)
    attn_in = np.zeros(n)
    for r in rows:
        m = r["step"]
        row = full_row(r.get("attention_pass1"), m)  # a long log's rows are stored as tails
        attn_in[: min(m, len(row))] += row[:m]
    fw = _col(rows, "has_failure_word", 0.0)
    follows = np.array([fw[i + 1 : i + 3].any() for i in range(n)], dtype=np.float64)
    rank = _col(rows, "rank", 0.0)
    cf = _col(rows, "cf_effect")  # counterfactual effect on the symptoms: measured for a few candidates only
    agents = [(s.agent or "").lower() for s in trace.steps]
    counts: dict[str, int] = {}
    turn = np.zeros(n)
    for i, a in enumerate(agents):
        turn[i] = counts.get(a, 0)
        counts[a] = counts.get(a, 0) + 1
    cols = {
        "rel_pos": idx / max(n - 1, 1), "log_index": np.log1p(idx), "is_first": (idx == 0) * 1.0,
        "is_last": (idx == n - 1) * 1.0, "nll1_z": _z(nll1), "nll2_z": _z(nll2),
        "h_norm": _norm(_col(rows, "h_score", 0.0)), "attn_in_norm": _norm(attn_in),
        "is_symptom": _col(rows, "is_symptom", 0.0), "is_candidate": _col(rows, "is_candidate", 0.0),
        "score_norm": _norm(np.nan_to_num(_col(rows, "score", 0.0))),
        "recip_rank": np.where(rank > 0, 1.0 / np.maximum(rank, 1), 0.0), "has_failure_word": fw,
        "failure_follows": follows, "log_chars": np.log1p([len(s.content or "") for s in trace.steps]),
        "agent_share": np.array([counts[a] / n for a in agents]), "agent_first": (turn == 0) * 1.0,
        "agent_turn_log": np.log1p(turn),
        "input_role": np.array([(s.role or "").lower() in _INPUT_ROLES for s in trace.steps], dtype=np.float64),
        "is_tool": np.array([s.kind == "tool" for s in trace.steps], dtype=np.float64),
        "has_code": np.array([bool(_CODE.search(s.content or "")) for s in trace.steps], dtype=np.float64),
        "cf_z": _z(cf), "has_cf": np.isfinite(cf) * 1.0,
        "attn_learned_norm": _norm(np.nan_to_num(_col(rows, "attn_in_learned", 0.0))),
    }
    return np.stack([np.asarray(cols[f], dtype=np.float64) for f in FEATURES], axis=1)


def agent_scores(trace: Trace, probs: np.ndarray) -> dict[str, float]:
    """P(agent) = sum of its steps' probabilities (case-insensitive names, first spelling kept)."""
    out: dict[str, float] = {}
    names: dict[str, str] = {}
    for s, p in zip(trace.steps, probs, strict=True):
        key = (s.agent or "").lower()
        names.setdefault(key, s.agent or "")
        out[key] = out.get(key, 0.0) + float(p)
    return {names[k]: v for k, v in out.items()}
