"""The ranker file `masprism-batch fit` writes and `--ranker` applies: plain JSON, versioned.

    {"format": "masprism-batch ranker", "version": 3, "model_id": "smollm2-135m", "date": ..., "config": {...},
     "systems": {"<system>": {"verdict": "ranker" | "prior" | "rule", "rule": "faithful", "agent_rule": ...,
                              "features": [...], "weights": [...], "mean": [...], "std": [...], "priors": {...},
                              "offset": "rule" | "rule_free" | "position" | "prior", "offset_scale": 2.0,
                              "calibration": {"kind": "fitted", ...}, "heldout": {...}, "k": 20,
                              "fitted_on": [...]}}}

A log is matched to an entry by its system (`system_key`: the name the user gave with `--system`, else what the
source recorded); logs of other systems get the zero-training rule. The packaged file (`weights/rankers.json`,
fitted on the benchmark systems) applies only when a run names it (`--ranker packaged`, or `eval --dataset`,
which scores the benchmarks themselves): a log is never given a benchmark system's ranker because of its shape.
The features were computed by one model's prefill, so a file is refused for a run of another model.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from masprism_batch.fit import fitting as ft
from masprism_batch.fit import verdict_confidence as vc
from masprism_batch.fit.rankcheck import FORMAT, VERSION, RankerFileError, is_packaged, read_checked, target

# the names a `--ranker` setting uses, defined beside the reader that resolves them (rankcheck.target)
from masprism_batch.fit.rankcheck import PACKAGED as PACKAGED
from masprism_batch.fit.rankcheck import PACKAGED_NAME as PACKAGED_NAME
from masprism_batch.outdir.parts import atomic_output
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)


def system_key(trace: Trace, named: str | None = None) -> str:
    """The system a log belongs to: `named` (the run's `--system`, config `method.system`) when given; else a
    dataset-qualified source (who-and-when/<subset>, trail/<dataset>: set by ingest only for a benchmark's own
    folders), else the trace's `system` field (service name, framework, as the source recorded it), else its
    source."""
    if named:
        return named
    src = trace.source or "unknown"
    return src if "/" in src else (trace.system or src)


@dataclass
class SystemRanker:
    entry: dict
    model_id: str

    @property
    def system(self) -> str:
        return self.entry["system"]

    @property
    def verdict(self) -> str:
        return self.entry.get("verdict", "rule")

    @property
    def rule(self) -> str:
        return self.entry.get("rule", "faithful")

    @property
    def features(self) -> list[str]:
        """Step features the verdict reads (none when the system falls back to the rule)."""
        return list(self.entry.get("features") or []) if self.verdict == "ranker" else []

    @property
    def agent_rule(self) -> str:
        return self.entry.get("agent_rule", "author")

    @property
    def verdict_by(self) -> str:
        return {"ranker": f"ranker:{self.system}", "prior": f"prior:{self.system}"}.get(self.verdict, f"rule:{self.rule}")

    def priors(self) -> ft.Priors | None:
        p = self.entry.get("priors")
        return ft.Priors.from_json(p) if p else None

    def apply(self, trace: Trace, rows: list[dict], ranked: list[int]):
        """(order of every step best first, step probabilities or None, agent, confidence) for one log;
        `ranked`: the zero-training rule's order of its candidates."""
        c = ft.FitCase(trace, rows, [], [], ranked)
        pri = self.priors()
        p, scores, prior_step = None, None, False
        if self.verdict == "ranker":
            allf = ft.BASE_FEATURES + ft.PRIOR_FEATURES
            feats = self.entry.get("features") or allf
            m = ft.Fitted(np.asarray(self.entry["weights"]), np.asarray(self.entry["mean"]),
                          np.asarray(self.entry["std"]), pri or ft.Priors(), float(self.entry.get("l2", 0.0)),
                          float(self.entry.get("offset_scale", ft.OFFSET_SCALE)),
                          None if feats == allf else [allf.index(f) for f in feats], self.entry["offset"])
            p = m.probs(c)
            order = sorted(range(len(p)), key=lambda i: (-p[i], i))
        elif self.verdict == "prior" and pri is not None and pri.top_index() is not None and ranked:
            # the label prior re-ranks this log's own candidates (never a fixed position)
            order, scores = ft.prior_verdict(c, pri)
            prior_step = True
        else:
            order = list(ranked) + [i for i in range(len(trace.steps)) if i not in set(ranked)]
        agent = ft.agent_pick(self.agent_rule, c, p, order[0], pri,
                              ft.prior_agent_order(list(ranked), order[0]) if prior_step else None) if order else None
        cal = self.entry.get("calibration")
        return order, p, agent, vc.apply(cal, c, order, p, scores) if order and cal else None


@dataclass
class RankerFile:
    model_id: str
    systems: dict[str, dict]
    meta: dict

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "version": VERSION, "model_id": self.model_id, **self.meta,
                           "systems": self.systems}, indent=1) + "\n"

    def write(self, path: Path) -> None:
        """Atomic (outdir.parts.atomic_output): never a partial ranker file at `path`."""
        text = self.to_json()
        with atomic_output(path) as f:
            f.write(text)

    @classmethod
    def read(cls, path: Path) -> RankerFile:
        """A ranker file read bounded and every field checked (rankcheck.read_checked), or RankerFileError."""
        d = read_checked(Path(path))
        meta = {k: v for k, v in d.items() if k not in ("format", "version", "model_id", "systems")}
        return cls(d["model_id"], d.get("systems", {}), meta)

    def check_model(self, model_id: str, path) -> None:
        if model_id and self.model_id != model_id:
            raise RankerFileError(f"ranker file {path} was fitted on signals of model {self.model_id!r}; this run "
                                  f"uses {model_id!r}. Its weights mean nothing for another model: refit with "
                                  f"`masprism-batch fit` on runs of {model_id!r}, or drop --ranker")

    def for_trace(self, trace: Trace, named: str | None = None) -> SystemRanker | None:
        e = self.systems.get(system_key(trace, named))
        return SystemRanker(e, self.model_id) if e is not None else None


def load(setting: str | None, model_id: str | None = None) -> RankerFile | None:
    """The ranker file a run names (`method.ranker_weights`), read once: None without one, for "packaged"
    when no packaged file applies to `model_id` (they were fitted on the default model), and for a folder
    without rankers.json (it may hold only fallback.json). A named file that is missing raises
    FileNotFoundError; one fitted on another model than `model_id` RankerFileError."""
    if setting is None:
        return None
    path = target(setting)
    if not path.is_file():
        if is_packaged(setting) or Path(setting).is_dir():
            return None
        raise FileNotFoundError(f"ranker file not found: {path}")
    rf = RankerFile.read(path)
    if model_id and rf.model_id != model_id:
        if is_packaged(setting):
            return None
        rf.check_model(model_id, path)
    return rf
