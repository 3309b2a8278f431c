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

from masprism_batch.outdir.parts import atomic_output
from masprism_batch.trace import Trace
from masprism_batch.verdict import case, correction
from masprism_batch.verdict import confidence as vc
from masprism_batch.verdict.rankcheck import (
    FALLBACK,
    FORMAT,
    VERSION,
    RankerFileError,
    check_fallback,
    is_packaged,
    read_checked,
    target,
)

# the names a `--ranker` setting uses, defined beside the reader that resolves them (rankcheck.target)
from masprism_batch.verdict.rankcheck import PACKAGED as PACKAGED
from masprism_batch.verdict.rankcheck import PACKAGED_NAME as PACKAGED_NAME

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

    def priors(self) -> case.Priors | None:
        p = self.entry.get("priors")
        return case.Priors.from_json(p) if p else None

    def apply(self, trace: Trace, rows: list[dict], ranked: list[int]):
        """(order of every step best first, step probabilities or None, agent, confidence) for one log;
        `ranked`: the zero-training rule's order of its candidates."""
        c = case.LogCase(trace, rows, [], [], ranked)
        pri = self.priors()
        p, scores, prior_step = None, None, False
        if self.verdict == "ranker":
            allf = case.BASE_FEATURES + case.PRIOR_FEATURES
            feats = self.entry.get("features") or allf
            m = correction.Fitted(np.asarray(self.entry["weights"]), np.asarray(self.entry["mean"]),
                          np.asarray(self.entry["std"]), pri or case.Priors(), float(self.entry.get("l2", 0.0)),
                          float(self.entry.get("offset_scale", case.OFFSET_SCALE)),
                          None if feats == allf else [allf.index(f) for f in feats], self.entry["offset"])
            p = m.probs(c)
            order = sorted(range(len(p)), key=lambda i: (-p[i], i))
        elif self.verdict == "prior" and pri is not None and pri.top_index() is not None and ranked:
            # the label prior re-ranks this log's own candidates (never a fixed position)
            order, scores = correction.prior_verdict(c, pri)
            prior_step = True
        else:
            order = list(ranked) + [i for i in range(len(trace.steps)) if i not in set(ranked)]
        agent = correction.agent_pick(self.agent_rule, c, p, order[0], pri,
                              correction.prior_agent_order(list(ranked), order[0]) if prior_step else None) if order else None
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
        d, _sha = read_checked(Path(path))
        return cls(d["model_id"], systems_of(d), meta_of(d))

    def check_model(self, model_id: str, path) -> None:
        if model_id and self.model_id != model_id:
            raise RankerFileError(f"ranker file {path} was fitted on signals of model {self.model_id!r}; this run "
                                  f"uses {model_id!r}. Its weights mean nothing for another model: refit with "
                                  f"`masprism-batch fit` on runs of {model_id!r}, or drop --ranker")

    def for_trace(self, trace: Trace, named: str | None = None) -> SystemRanker | None:
        e = self.systems.get(system_key(trace, named))
        return SystemRanker(e, self.model_id) if e is not None else None


def systems_of(d: dict) -> dict[str, dict]:
    """A checked file's entries by system, each naming its system: the key it is filed under (a log is matched by
    it) where a hand-written entry leaves `system` out (rankcheck refuses one naming another)."""
    return {n: e if "system" in e else {**e, "system": n} for n, e in d.get("systems", {}).items()}


def _check_folder_fallback(ranker: str) -> None:
    """A user's `--ranker FOLDER`: its fallback.json, which rules.read_fallback reads, checked (RankerFileError)."""
    folder = Path(ranker)
    if not is_packaged(ranker) and folder.is_dir() and (folder / FALLBACK).exists():
        check_fallback(folder / FALLBACK)


def meta_of(d: dict) -> dict:
    """What a parsed ranker file holds beside its format, version, model and systems (date, config, ...)."""
    return {k: v for k, v in d.items() if k not in ("format", "version", "model_id", "systems")}


@dataclass(frozen=True)
class RankerSetting:
    """The run's ranker setting (`--ranker`, config `method.ranker`), read once when the run starts: the file it
    names, the SHA-256 of the bytes read (bound to OUTDIR by pipelines/resume.py, so a file changed between a crash
    and the resume is refused instead of mixing two rankers' verdicts) and the file parsed and checked, or the
    problem that keeps it from applying (missing, not a ranker file). The CLI's checks, the OUTDIR binding and
    the verdict policy of every pack (per model actor under Ray, shipped with it) read this one object."""

    ranker: str | None = None
    path: Path | None = None
    sha256: str | None = None
    file: RankerFile | None = None
    problem: Exception | None = None

    @classmethod
    def read(cls, ranker: str | None) -> RankerSetting:
        """None without a setting, or where it names no file: "packaged" without a packaged file, a folder
        without rankers.json (it may hold only fallback.json)."""
        if ranker is None:
            return cls()
        path = target(ranker)
        if not path.is_file():
            if is_packaged(ranker) or Path(ranker).is_dir():
                try:
                    _check_folder_fallback(ranker)  # what every log then gets
                except RankerFileError as exc:
                    return cls(ranker, Path(ranker) / FALLBACK, problem=exc)
                return cls(ranker)
            return cls(ranker, path, problem=FileNotFoundError(f"ranker file not found: {path}"))
        try:
            d, sha = read_checked(path)
            _check_folder_fallback(ranker)  # what the systems the file does not name get
        except RankerFileError as exc:
            return cls(ranker, path, problem=exc)
        return cls(ranker, path, sha, RankerFile(d["model_id"], systems_of(d), meta_of(d)))

    def for_model(self, model_id: str | None = None) -> RankerFile | None:
        """The file that applies to a run of `model_id`: None without one, and for "packaged" fitted on another
        model (they were fitted on the default model). A named file that could not be read raises its problem;
        one fitted on another model than `model_id` RankerFileError."""
        if self.problem is not None:
            raise self.problem.with_traceback(None)
        rf = self.file
        if rf is None or not model_id or rf.model_id == model_id:
            return rf
        if is_packaged(self.ranker):
            return None
        rf.check_model(model_id, self.path)
        return rf
