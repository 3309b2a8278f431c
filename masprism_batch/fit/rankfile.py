"""The ranker file `masprism-batch fit` writes and `--ranker` applies (issue 23): plain JSON, versioned.

    {"format": "masprism-batch ranker", "version": 3, "model_id": "smollm2-135m", "date": ..., "config": {...},
     "systems": {"<system>": {"verdict": "ranker" | "prior" | "rule", "rule": "faithful", "agent_rule": ...,
                              "features": [...], "weights": [...], "mean": [...], "std": [...], "priors": {...},
                              "offset": "rule" | "rule_free" | "prior", "offset_scale": 2.0,
                              "calibration": {"a", "b", ...}, "heldout": {...}, "k": 20, "fitted_on": [...]}}}

A log is matched to an entry by its system (`system_key`: the name the user gave with `--system`, else what the
source recorded); logs of other systems get the zero-training rule. The packaged file (`weights/rankers.json`,
fitted on the benchmark systems) applies only when a run names it (`--ranker packaged`, or `eval --dataset`,
which scores the benchmarks themselves): a log is never given a benchmark system's ranker because of its shape.
The features were computed by one model's prefill, so a file is refused for a run of another model.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from masprism_batch.fit import fitting as ft
from masprism_batch.method import calibrate, weights_dir
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)
FORMAT = "masprism-batch ranker"
# 2: agent_rule may be "prior|<zero-training agent rule>"; 3: a ranker's "offset" (what it corrects, fit.OFFSETS;
# absent: "rule"). Older files read as before; a reader of version 2 refuses a version 3 file instead of applying
# a prior-offset ranker as a rule-offset one.
VERSION = 3


class RankerFileError(ValueError):
    """A ranker file that cannot be applied: not one, a newer version, or fitted with another model."""


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
                          None if feats == allf else [allf.index(f) for f in feats], self.entry.get("offset", "rule"))
            p = m.probs(c)
            order = sorted(range(len(p)), key=lambda i: (-p[i], i))
            raw = float(p[order[0]])
        elif self.verdict == "prior" and pri is not None and pri.top_index() is not None and ranked:
            # the label prior re-ranks this log's own candidates (never a fixed position: issue 32)
            order, scores = ft.prior_verdict(c, pri)
            raw, prior_step = pri.pos.get(pri.top_index(), 0.0) / max(pri.n, 1), True  # raw: old Platt files
        else:
            order = list(ranked) + [i for i in range(len(trace.steps)) if i not in set(ranked)]
            raw = ft.rule_confidence(c) if ranked else None
        agent = ft.agent_pick(self.agent_rule, c, p, order[0], pri,
                              ft.prior_agent_order(list(ranked), order[0]) if prior_step else None) if order else None
        cal = self.entry.get("calibration")
        feats = ft.evidence(c, order, p, scores) if order and cal and cal.get("kind") == "evidence" else None
        return order, p, agent, calibrate.confidence(cal, raw, feats, len(trace.steps))


@dataclass
class RankerFile:
    model_id: str
    systems: dict[str, dict]
    meta: dict

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "version": VERSION, "model_id": self.model_id, **self.meta,
                           "systems": self.systems}, indent=1) + "\n"

    def write(self, path: Path) -> None:
        """Atomic: a temporary file in the same folder, renamed over `path` (never a partial ranker file)."""
        path = Path(path)
        text = self.to_json()
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600: readable like every other output instead
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def read(cls, path: Path) -> RankerFile:
        path = Path(path)
        from masprism_batch.fit.rankcheck import (
            load,  # bounded read and parse, every field checked (issue 37)
        )

        d = load(path)
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise RankerFileError(f"{path}: not a masprism-batch ranker file (write one with `masprism-batch fit`)")
        if int(d.get("version", 0)) > VERSION:
            raise RankerFileError(f"{path}: ranker file version {d['version']} is newer than this masprism-batch "
                                  f"reads ({VERSION}): upgrade masprism-batch")
        for s, e in d.get("systems", {}).items():
            unknown = [f for f in e.get("features") or [] if f not in ft.BASE_FEATURES + ft.PRIOR_FEATURES]
            if unknown:
                raise RankerFileError(f"{path}: system {s!r} reads features this version does not compute: {unknown}")
            if e.get("offset", "rule") not in ft.OFFSETS:
                raise RankerFileError(f"{path}: system {s!r} corrects an order this version does not know: "
                                      f"{e.get('offset')!r} (expected one of {', '.join(ft.OFFSETS)})")
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


PACKAGED = "rankers.json"  # the packaged per-system rankers, written by benchmarks/bench_accuracy.py --train-weights
# `--ranker packaged` (config method.ranker_weights = "packaged"): the packaged rankers of the benchmark systems,
# named explicitly; `eval --dataset` names them itself. Without a name no packaged ranker applies.
PACKAGED_NAME = "packaged"


def is_packaged(path: str | None) -> bool:
    return path is not None and str(path) == PACKAGED_NAME


def ranker_for(path: str | None, trace: Trace, model_id: str | None = None, system: str | None = None):
    """The fitted entry (`SystemRanker`) for `trace`'s system (`system`: the name the run gives every log, see
    `system_key`), or None: then the zero-training rule (rules.fallback_rule) decides. `.features` says which
    step features its verdict reads.

    `path`: a ranker file from `masprism-batch fit` (or a folder holding `rankers.json`); "packaged": the packaged
    rankers of the benchmark systems; None: no ranker (every log gets the zero-training verdict). With
    `model_id`, a file `path` fitted on another model is refused (RankerFileError); the packaged rankers then
    simply do not apply (they were fitted on the default model).
    """
    if path is None:
        return None
    packaged = is_packaged(path)
    target = weights_dir() / PACKAGED if packaged else Path(path)
    if target.is_dir():  # a weights folder: its rankers.json if any (a folder with only fallback.json has none)
        target = target / PACKAGED
        if not target.is_file():
            return None
    if not target.is_file():
        if packaged:
            return None
        raise FileNotFoundError(f"ranker file not found: {target}")
    rf = _cached(target)
    if model_id and rf.model_id != model_id:
        if packaged:
            return None
        rf.check_model(model_id, target)
    try:
        return rf.for_trace(trace, system)
    except KeyError as exc:  # pragma: no cover - a malformed entry
        raise RankerFileError(f"{target}: malformed entry {exc}") from exc


_CACHE: dict[tuple[str, float], object] = {}


def _cached(target: Path):
    key = (str(target), target.stat().st_mtime)
    if key not in _CACHE:
        _CACHE[key] = RankerFile.read(target)
    return _CACHE[key]
