"""Driver side of a run, shared by both engines: resume, per-shard commit, progress, run record.

Only the driver writes outputs (through `io.ShardStore`), so workers need no access to OUTDIR and a shard is
committed once, after all of its packs came back: parts first, manifest entry last.
"""

from __future__ import annotations

import logging
import platform
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from tqdm import tqdm

from masprism_batch import __version__, schema
from masprism_batch.config import PipelineConfig
from masprism_batch.io import OUTPUT_TABLES, ShardStore, write_json_atomic

from .plan import INGEST_SHARD, InputPlan, Shard
from .stages import now_utc
from .work import result_to_tables

log = logging.getLogger(__name__)
STAGE_KEYS = ("seconds_read", "seconds_render", "seconds_model", "seconds_commit")


@dataclass
class RunSummary:
    outdir: str
    engine: str
    workers: int
    traces_in: int
    attributed: int
    rejected: int
    rejected_by_reason: dict[str, int]
    shards_total: int
    shards_run: int
    shards_skipped: int
    wall_seconds: float
    traces_per_second: float
    tokens_per_second: float
    run_json: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return 3 if self.rejected else 0


class Committer:
    """Collects pack results per shard and commits a shard when its last pack arrives."""

    def __init__(self, outdir: Path, cfg: PipelineConfig, plan: InputPlan, engine: str, workers: int,
                 progress: bool = True):
        self.outdir, self.cfg, self.plan = Path(outdir), cfg, plan
        self.engine, self.workers = engine, workers
        self.store = ShardStore(self.outdir)
        self.t0 = time.perf_counter()
        self.started_at = now_utc()
        self._open: dict[str, list[dict[str, Any]]] = {}
        self._done: set[str] = set()
        self.shards_run = 0
        self.traces_done = 0
        self.tokens_done = 0
        self._check_header()
        self.store.clean()
        committed = self.store.committed()
        if plan.ingest_errors is not None and INGEST_SHARD not in committed:
            tables = {"traces": schema.TRACES.empty_table(), "attributions": schema.ATTRIBUTIONS.empty_table(),
                      "step_scores": schema.STEP_SCORES.empty_table(), "errors": plan.ingest_errors}
            self.store.commit(INGEST_SHARD, tables, self._entry(INGEST_SHARD, tables, {}, "raw inputs"))
        self.pending: list[Shard] = [s for s in plan.shards if s.shard_id not in committed]
        self.skipped = len(plan.shards) - len(self.pending)
        total = sum(s.stop - s.start for s in self.pending)
        self.bar = tqdm(total=total, unit="trace", desc=f"attribute ({engine})", dynamic_ncols=True,
                        disable=not progress or None, smoothing=0.1)
        self._last_log = time.perf_counter()
        if self.skipped:
            log.info("resuming: %d of %d shards already committed", self.skipped, len(plan.shards))

    def _check_header(self) -> None:
        header = {"config_hash": self.cfg.config_hash(), "model": self.cfg.model.name, "staged": self.plan.staged}
        old = self.store.read_header()
        foreign = [p for t in OUTPUT_TABLES for p in (self.outdir / t).glob("[!.]*.parquet")
                   if not p.name.startswith("shard-")]
        if foreign:  # e.g. an `attribute` run: mixing would duplicate traces
            raise ValueError(f"{self.outdir} holds outputs not written by `run` ({foreign[0]}); use a new OUTDIR")
        if old is None:
            self.store.write_header({**header, "created_at": now_utc().isoformat()})
        elif any(old.get(k) != v for k, v in header.items()):
            raise ValueError(f"{self.outdir} holds results of another configuration ({old}); "
                             f"this run is {header}: use a new OUTDIR")

    def _entry(self, sid: str, tables: dict[str, pa.Table], stats: dict[str, float], label: str) -> dict:
        errs = tables["errors"]
        reasons = Counter(errs.column("reason").to_pylist()) if errs.num_rows else Counter()
        return {"label": label, "attributed": tables["attributions"].num_rows, "rejected": errs.num_rows,
                "rejected_by_reason": dict(reasons), "tokens": stats.get("tokens", 0),
                "stage_seconds": {k: stats.get(k, 0.0) for k in STAGE_KEYS}, "engine": self.engine,
                "committed_at": now_utc().isoformat()}

    def add(self, result: dict[str, Any]) -> None:
        sid = result["shard_id"]
        parts = self._open.setdefault(sid, []) if sid not in self._done else None
        if parts is None or any(p["pack_index"] == result["pack_index"] for p in parts):
            # never expected from Ray Data, but a duplicated result must not become a duplicated row
            log.warning("ignoring a repeated result for shard %s pack %s", sid, result["pack_index"])
            return
        parts.append(result)
        self.traces_done += int(result["n_traces"])
        self.tokens_done += int(result["tokens"])
        self.bar.update(int(result["n_records"]))
        elapsed = max(time.perf_counter() - self.t0, 1e-9)
        self.bar.set_postfix_str(f"{self.tokens_done / elapsed:,.0f} tok/s", refresh=False)
        if self.bar.disable and time.perf_counter() - self._last_log > 30:
            self._last_log = time.perf_counter()
            log.info("progress: %d traces, %.2f traces/s, %.0f tokens/s", self.traces_done,
                     self.traces_done / elapsed, self.tokens_done / elapsed)
        if len(parts) == int(result["n_packs"]):
            self._commit(sid, self._open.pop(sid))

    def _commit(self, sid: str, parts: list[dict[str, Any]]) -> None:
        t0 = time.perf_counter()
        parts.sort(key=lambda p: p["pack_index"])
        per = [result_to_tables(p) for p in parts]
        tables = {k: pa.concat_tables([t[k] for t in per]) for k in OUTPUT_TABLES}
        stats = {k: float(sum(p[k] for p in parts)) for k in STAGE_KEYS if k != "seconds_commit"}
        stats["tokens"] = int(sum(p["tokens"] for p in parts))
        stats["seconds_commit"] = time.perf_counter() - t0
        self.store.commit(sid, tables, self._entry(sid, tables, stats, parts[0]["label"]))
        self._done.add(sid)
        self.shards_run += 1

    def finish(self, extra: dict[str, Any] | None = None) -> RunSummary:
        self.bar.close()
        if self._open:
            raise RuntimeError(f"run ended with {len(self._open)} incomplete shards: {sorted(self._open)}")
        committed = self.store.committed()
        missing = [s.shard_id for s in self.plan.shards if s.shard_id not in committed]
        if missing:
            raise RuntimeError(f"{len(missing)} shards were not committed (first: {missing[0]})")
        wall = time.perf_counter() - self.t0
        reasons: Counter = Counter()
        stage: Counter = Counter()
        for e in committed.values():
            reasons.update(e["rejected_by_reason"])
            stage.update(e["stage_seconds"])
        attributed = sum(e["attributed"] for e in committed.values())
        rejected = sum(e["rejected"] for e in committed.values())
        record = {
            "engine": self.engine, "workers": self.workers, "model": self.cfg.model.name,
            "config_hash": self.cfg.config_hash(), "config": self.cfg.model_dump(mode="json"),
            "counts": {"in": attributed + rejected, "attributed": attributed, "rejected": rejected,
                       "rejected_by_reason": dict(sorted(reasons.items())),
                       "tokens": sum(e["tokens"] for e in committed.values())},
            "shards": {"total": len(committed), "run": self.shards_run, "skipped": self.skipped},
            "stage_seconds_total": {k: round(v, 3) for k, v in stage.items()},
            "this_invocation": {
                "started_at": self.started_at.isoformat(), "finished_at": now_utc().isoformat(),
                "wall_seconds": round(wall, 3), "traces": self.traces_done, "tokens": self.tokens_done,
                "traces_per_second": round(self.traces_done / wall, 4) if wall else 0.0,
                "tokens_per_second": round(self.tokens_done / wall, 2) if wall else 0.0, **(extra or {})},
            "host": {"python": sys.version.split()[0], "platform": platform.platform(),
                     "masprism_batch": __version__},
        }
        path = self.outdir / "run.json"
        write_json_atomic(record, path)
        inv = record["this_invocation"]
        return RunSummary(str(self.outdir), self.engine, self.workers, record["counts"]["in"], attributed,
                          rejected, record["counts"]["rejected_by_reason"], len(committed), self.shards_run,
                          self.skipped, wall, inv["traces_per_second"], inv["tokens_per_second"], str(path),
                          extra or {})


def summary_dict(s: RunSummary) -> dict[str, Any]:
    return asdict(s)
