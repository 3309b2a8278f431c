"""Accuracy of attributions where traces carry labels, with the random baseline beside each metric.

The numbers are the `eval` command's (masprism_batch.eval: Who&When step top-1/top-3/within-1 and agent;
TRAIL location accuracy, precision and locations predicted at k = 1 and 5, random baselines as exact
expectations). eval scores lists of traces in memory; here the traces are streamed, so each batch is scored
by eval and its per-source means are folded back into sums -- the result is the same as scoring all at once.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from masprism_batch.analytics.insample import RANKED, InSample
from masprism_batch.eval import evaluate
from masprism_batch.eval.predictions import ranked_steps
from masprism_batch.method.calibrate import accuracy_at_coverage
from masprism_batch.method.confidence import auroc
from masprism_batch.trace import Labels, Step, Trace

KS = (1, 5)
DEV_SOURCES = ("who-and-when/", "trail/")  # the datasets the packaged ranker weights were fitted on (README)


def light_trace(row: dict[str, Any]) -> Trace:
    """A Trace with labels, agents, kinds and span ids but no text: all scoring needs, a fraction of the memory."""
    labels = row.get("labels")
    steps = [Step(index=s["index"], agent=s["agent"], content="", role=s.get("role"), kind=s.get("kind") or "other",
                  span_id=s.get("span_id")) for s in row.get("steps") or []]
    return Trace(trace_id=row["trace_id"], source=row.get("source") or "", steps=steps,
                 labels=Labels(**labels) if labels else None)


def gold_steps(row: dict[str, Any]) -> set[int]:
    """The labelled steps of a trace row: Who&When's mistake step, TRAIL's error spans as step indices."""
    lab = row.get("labels") or {}
    if lab.get("mistake_step") is not None:
        return {lab["mistake_step"]}
    gold = {x for x in lab.get("error_locations") or [] if x}
    return {i for i, s in enumerate(row.get("steps") or []) if s.get("span_id") in gold}


def top1_correct(attr: dict[str, Any], row: dict[str, Any]) -> bool | None:
    """Is the blamed step the labelled one (Who&When) / a labelled error span (TRAIL)? None: no usable label."""
    lab = row.get("labels") or {}
    ranked = ranked_steps(attr)
    steps = row.get("steps") or []
    if lab.get("mistake_step") is not None:
        return bool(ranked) and ranked[0] == lab["mistake_step"]
    gold = {x for x in lab.get("error_locations") or [] if x}
    if gold:
        return bool(ranked) and 0 <= ranked[0] < len(steps) and steps[ranked[0]].get("span_id") in gold
    return None


class AccuracyAccumulator:
    """Per-source sums of every metric (method and random baseline), fed one batch of traces at a time."""

    def __init__(self, in_sample: InSample | None = None) -> None:
        self._acc: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0, 0.0])  # n, sum, nb, sumb
        self._seen: set[str] = set()
        self._in_sample = in_sample or InSample()
        self._sample: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # source: scored, ranked, in-sample
        # source -> [(confidence, top-1 hit)] of labelled traces whose verdict carries a confidence
        self._conf: dict[str, list[tuple[float, bool]]] = defaultdict(list)
        # (source, the set's coverage level) -> [(the set holds a labelled step, its share of the log)]
        self._sets: dict[tuple[str, float], list[tuple[bool, float]]] = defaultdict(list)

    def add_batch(self, attrs: dict[str, dict[str, Any]], trace_rows: list[dict[str, Any]]) -> None:
        traces = []
        for r in trace_rows:
            if r["trace_id"] in attrs and r.get("labels") and r["trace_id"] not in self._seen:
                self._seen.add(r["trace_id"])
                traces.append(light_trace(r))
                conf, hit = attrs[r["trace_id"]].get("confidence"), top1_correct(attrs[r["trace_id"]], r)
                if conf is not None and hit is not None:
                    self._conf[r.get("source") or ""].append((float(conf), hit))
                a = attrs[r["trace_id"]]
                gold = gold_steps(r)
                if a.get("read_steps") and a.get("set_coverage") is not None and gold:
                    self._sets[(r.get("source") or "", float(a["set_coverage"]))].append(
                        (bool(gold & set(a["read_steps"])), float(a.get("set_share") or 0.0)))
                c = self._sample[r.get("source") or ""]
                c[0] += 1
                if attrs[r["trace_id"]].get("method", RANKED) == RANKED:
                    c[1] += 1
                    # in-sample only where a fitted entry decided: a zero-training verdict ("rule:...", "no_symptom:...") read no
                    # label, wherever its log came from (packaged rankers apply only when named)
                    by = attrs[r["trace_id"]].get("verdict_by") or ""
                    c[2] += bool(self._in_sample(r["trace_id"])) and not by.startswith(("rule:", "no_symptom:"))
        if not traces:
            return
        res = evaluate([attrs[t.trace_id] for t in traces], traces, on_missing="skip", ks=KS)
        for ds in res["datasets"]:
            for src, m in ds["subsets"].items():
                base = ds["baselines"][src]["random"]
                for metric, v in m.items():
                    if metric in ("n", "n_missing", "n_agent") or v is None:
                        continue
                    n = m["n_agent"] if metric == "agent" else m["n"]
                    nb = base["n_agent"] if metric == "agent" else base["n"]
                    a = self._acc[(src, metric)]
                    a[0] += n
                    a[1] += v * n
                    if base.get(metric) is not None:
                        a[2] += nb
                        a[3] += base[metric] * nb

    def sample(self, source: str) -> tuple[int | None, str]:
        """(traces of `source` the packaged ranker weights were fitted on, or None if unknown; a short label)."""
        scored, ranked, ins = self._sample.get(source, [0, 0, 0])
        if not ranked:
            return None, "n/a: faithful method"
        if not self._in_sample.known:  # the packaged weights were fitted on the Who&When / TRAIL dev data
            return None, "unknown: likely in-sample (dev data)" if source.startswith(DEV_SOURCES) else "unknown"
        return ins, "held out" if ins == 0 else "in-sample" if ins >= ranked else "partly in-sample"

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for (s, m), a in sorted(self._acc.items(), key=lambda kv: (kv[0][0], _order(kv[0][1]))):
            ins, label = self.sample(s)
            out.append({"source": s, "metric": m, "n_traces": int(a[0]), "value": a[1] / a[0] if a[0] else None,
                        "random_baseline": a[3] / a[2] if a[2] else None, "n_in_sample": ins, "sample": label})
        for s, pairs in sorted(self._conf.items()):  # accuracy at coverage: the most confident verdicts first
            ins, label = self.sample(s)
            for frac, (n, acc) in accuracy_at_coverage([c for c, _ in pairs], [h for _, h in pairs]).items():
                out.append({"source": s, "metric": f"{COVERAGE}@{int(frac * 100)}", "n_traces": n, "value": acc,
                            "random_baseline": None, "n_in_sample": ins, "sample": label})
            # does confidence rank the verdicts of this source (not pooled: pooling measures which is easier)?
            out.append({"source": s, "metric": AUROC, "n_traces": len(pairs), "random_baseline": 0.5,
                        "value": auroc([c for c, _ in pairs], [h for _, h in pairs]), "n_in_sample": ins,
                        "sample": label})
        for (s, level), sets in sorted(self._sets.items()):  # the step sets: the coverage achieved at the level
            ins, label = self.sample(s)  # stated, beside what a random set of the same size holds (its share)
            share = sum(x for _, x in sets) / len(sets)
            out.append({"source": s, "metric": f"{SET_COVERAGE}@{level:g}", "n_traces": len(sets),
                        "value": sum(h for h, _ in sets) / len(sets), "random_baseline": share, "n_in_sample": ins,
                        "sample": label})
            out.append({"source": s, "metric": f"{SET_SHARE}@{level:g}", "n_traces": len(sets), "value": share,
                        "random_baseline": None, "n_in_sample": ins, "sample": label})
        return out


# top-1 (step; TRAIL: the blamed span is a labelled one) of the most confident N% of labelled verdicts
COVERAGE = "top1_most_confident"
# AUROC of confidence against a right top-1 (0.5: confidence does not rank; null with only one outcome)
AUROC = "confidence_auroc"
# the step sets at their level (`@0.8`): the share of labelled logs whose `read_steps` holds a labelled step (random
# baseline: the mean set share, what a random set of the same size holds), and the mean share of the log they span
SET_COVERAGE = "set_coverage"
SET_SHARE = "set_share"


def _order(metric: str) -> tuple:
    fixed = ("step_top1", "step_top3", "step_within1", "agent")
    if metric.startswith(COVERAGE):
        return (2, int(metric.rpartition("@")[2]), "")
    if metric == AUROC:
        return (3, 0, "")
    if metric.startswith((SET_COVERAGE, SET_SHARE)):
        return (4, 0, metric)
    if metric in fixed:
        return (0, fixed.index(metric), "")
    name, _, k = metric.partition("@")
    return (1, int(k) if k.isdigit() else 99, name)
