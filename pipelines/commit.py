"""The Committer: the driver side of a run, shared by both engines (resume, commits, progress, run record).

Only the driver writes outputs (through `shards.ShardStore`), so workers need no access to OUTDIR. A shard is
committed once, when its last pack comes back (entry `shard-<id>`: the shard is done); packs that finished
before are committed as *pieces* of it (`shard-<id>_<k>`, recording the trace ids they settle) whenever
`engine.commit_seconds` passed since the last commit, and on an interruption, so a kill loses at most that
much finished work plus the packs that were running. A resume skips done shards and, in a shard
committed in part, the traces its pieces hold. Every commit: parts first, manifest entry last.
"""

from __future__ import annotations

import logging
import platform
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
from masprism_batch.pipelines.contracts import PackResult
from masprism_batch.pipelines.increment import generation_of
from masprism_batch.pipelines.plan import INGEST_SHARD, InputPlan, Shard, plan_inputs
from masprism_batch.pipelines.progress import Progress, as_progress
from masprism_batch.pipelines.refresh import finish_cut_purge, purge_stale
from masprism_batch.pipelines.resume import bind_header, now_utc, piece_parts, resume_of, settled_ids
from masprism_batch.pipelines.run_summary import (
    PASS_KEYS,
    STAGE_KEYS,
    TOKEN_KEYS,
    RunFacts,
    RunSummary,
    breakdown,
    entry_totals,
    pass_stats,
    split_reasons,
)

from masprism_batch import __version__, schema
from masprism_batch.config import PipelineConfig
from masprism_batch.ingest.common import WARNING_REASONS
from masprism_batch.ingest.outcomes import count_signals
from masprism_batch.ingest.status import outcome_counts
from masprism_batch.outdir.parts import OutdirLock, write_json_atomic
from masprism_batch.outdir.reads import read_dataset
from masprism_batch.outdir.shards import OUTPUT_TABLES, ShardStore
from masprism_batch.stage.budget import Budget

log = logging.getLogger(__name__)


def open_run(inputs: list[str], outdir: Path, cfg: PipelineConfig, engine: str, workers: int, budget: Budget,
             facts: RunFacts, *, fmt: str, select, progress: bool | Progress, lock: OutdirLock,
             ranker_sha256: str | None = None, refresh: bool = False) -> Committer:
    """The start both engines share once the token budget (`stage/budget.resolve_budget`) is settled: it is
    logged and recorded for run.json (`facts`), the inputs are planned and OUTDIR is bound (with `ranker_sha256`,
    the ranker file as the run read it), and the progress line names the budget. `refresh` (--refresh):
    changed files' traces whose content changed are staged again and their old rows archived (refresh.py),
    once OUTDIR is bound and before any shard runs."""
    n = budget.n
    log.info("token budget: %s tokens per packed forward (%s)", f"{n:,}", budget.source)
    facts.token_budget, facts.token_budget_source = n, budget.source
    plan = plan_inputs(list(inputs), outdir, fmt, cfg.engine.traces_per_shard, cfg.ingest, select, refresh)
    if plan.increment is not None:  # run.json and the summary say how many traces were new
        facts.inputs = plan.increment
    committer = Committer(outdir, cfg, plan, engine, workers, progress=progress, lock=lock, ranker_sha256=ranker_sha256)
    if plan.staged:  # a refresh's old rows out of the live outputs (also one a crash cut short)
        purge_stale(outdir, plan.shards, lambda s: generation_of(Path(s.path).name), committer.run_id)
    committer.progress.describe(f"attribute ({engine}, {n:,} tok/pack)")
    return committer


class Committer:
    """Collects pack results per shard; commits a shard when its last pack arrives, and the packs that finished
    before as pieces of it every `engine.commit_seconds` and on `flush` (an interruption). `progress`: the
    display it reports to (`progress.Progress`), or True/False for the default one."""

    def __init__(self, outdir: Path, cfg: PipelineConfig, plan: InputPlan, engine: str, workers: int,
                 progress: bool | Progress = True, lock: OutdirLock | None = None, ranker_sha256: str | None = None):
        self.outdir, self.cfg, self.plan, self.lock = Path(outdir), cfg, plan, lock
        self.ranker_sha256 = ranker_sha256
        self.engine, self.workers = engine, workers
        self.store = ShardStore(self.outdir)
        self.t0 = time.perf_counter()
        self.started_at = now_utc()
        self._open: dict[str, list[PackResult]] = {}  # finished packs not committed yet, per shard
        self._seen: dict[str, set[int]] = {}  # pack indices received per shard (this invocation)
        self._expect: dict[str, int] = {}  # packs of a shard, once its last pack told
        self._done: set[str] = set()
        self._next_piece: dict[str, int] = {}
        self.commit_seconds = float(getattr(cfg.engine, "commit_seconds", 60.0))
        self._last_commit = time.perf_counter()
        self.shards_run = 0
        self.pieces_run = 0
        self.traces_done = 0
        self.tokens_done = 0
        self.traces_committed = 0  # by this invocation (shards and pieces)
        self.tokens_committed = 0
        self._mine: list[dict] = []  # entries this invocation committed: run.json `this_invocation`
        self._check_header()
        if plan.staged:  # before clean() removes, as damaged, a shard a refresh was cut short rewriting
            finish_cut_purge(self.outdir, self.run_id)
        self.store.clean()
        committed = self.store.committed()
        if plan.ingest_errors is not None and INGEST_SHARD not in committed:
            tables = {"traces": schema.TRACES.empty_table(), "attributions": schema.ATTRIBUTIONS.empty_table(),
                      "step_scores": schema.STEP_SCORES.empty_table(), "errors": plan.ingest_errors}
            self._mine.append(self._entry(INGEST_SHARD, tables, {}, "raw inputs"))
            self.store.commit(INGEST_SHARD, tables, self._mine[-1], self.run_id)
        for sid, errs in plan.increment_errors.items():  # the rejections of inputs added since (increment.py)
            if sid not in committed:
                tables = {**{t: getattr(schema, t.upper()).empty_table() for t in ("traces", "attributions",
                                                                                   "step_scores")}, "errors": errs}
                self._mine.append(self._entry(sid, tables, {}, "raw inputs added"))
                self.store.commit(sid, tables, self._mine[-1], self.run_id)
        pieces = piece_parts(committed)
        for sid, es in pieces.items():
            self._next_piece[sid] = 1 + max(int(e["shard_id"].rsplit("_", 1)[1]) for e in es)
        self.pending: list[Shard] = [resume_of(s, pieces.get(s.shard_id, [])) for s in plan.shards
                                     if s.shard_id not in committed]
        self.skipped = len(plan.shards) - len(self.pending)
        self.traces_total = sum(s.stop - s.start for s in plan.shards)
        left = sum(s.stop - s.start - len(s.done) for s in self.pending)
        self.traces_before = self.traces_total - left
        self.progress = as_progress(progress)
        self.progress.begin(left, f"attribute ({engine})")
        if self.traces_before and self.pending:
            log.info("resuming: %d of %d done (%d of %d shards whole, %d in part); %d traces to run",
                     self.traces_before, self.traces_total, self.skipped, len(plan.shards),
                     sum(1 for s in self.pending if s.done), left)

    def progress_counts(self) -> tuple[int, int]:
        """(traces committed in OUTDIR, traces planned): what an interruption message reports."""
        return self.traces_before + self.traces_committed, self.traces_total

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def _check_header(self) -> None:
        self.run_id = bind_header(self.store, self.cfg, self.plan.staged, self.ranker_sha256)

    def _entry(self, sid: str, tables: dict[str, pa.Table], stats: dict[str, float], label: str) -> dict:
        errs = tables["errors"]
        reasons = Counter(errs.column("reason").to_pylist()) if errs.num_rows else Counter()
        rej, warn = split_reasons(reasons)
        return {"label": label, "attributed": tables["attributions"].num_rows, "rejected": sum(rej.values()),
                "rejected_by_reason": rej, "warnings": sum(warn.values()), "warnings_by_reason": warn,
                "tokens": stats.get("tokens", 0),
                "stage_seconds": {k: stats.get(k, 0.0) for k in STAGE_KEYS + PASS_KEYS},
                "stage_tokens": {k: int(stats.get(k, 0)) for k in TOKEN_KEYS}, "engine": self.engine,
                "committed_at": now_utc().isoformat()}

    def add(self, result: PackResult) -> None:
        sid, idx = result.shard_id, result.pack_index
        seen = self._seen.setdefault(sid, set())
        if sid in self._done or idx in seen:
            # never expected from Ray Data, but a duplicated result must not become a duplicated row
            log.warning("ignoring a repeated result for shard %s pack %s", sid, idx)
            return
        seen.add(idx)
        if result.n_packs:  # the shard's last pack knows the count (`pack_work.shard_packs`); it may come first
            self._expect[sid] = result.n_packs
        self._open.setdefault(sid, []).append(result)
        self.traces_done += result.n_traces
        self.tokens_done += result.tokens
        elapsed = max(time.perf_counter() - self.t0, 1e-9)
        self.progress.on_pack(result.n_records, self.traces_done, self.tokens_done, elapsed)
        if len(seen) == self._expect.get(sid):
            self._commit(sid, self._open.pop(sid))
        elif time.perf_counter() - self._last_commit >= self.commit_seconds:
            self.flush()

    def flush(self) -> None:
        """Commit every finished pack now, as pieces of their shards (the time bound, or an interruption)."""
        for sid in list(self._open):
            parts = self._open.pop(sid)
            if parts:
                self._commit(sid, parts, piece=True)

    def _commit(self, sid: str, parts: list[PackResult], piece: bool = False) -> None:
        t0 = time.perf_counter()
        parts.sort(key=lambda p: p.pack_index)
        per = [p.tables() for p in parts]
        tables = {k: pa.concat_tables([t[k] for t in per]) for k in OUTPUT_TABLES}
        stats = {k: float(sum(getattr(p, k) for p in parts)) for k in STAGE_KEYS if k != "seconds_commit"}
        stats["tokens"] = int(sum(p.tokens for p in parts))
        stats.update(pass_stats(tables["attributions"], parts))
        stats["seconds_commit"] = time.perf_counter() - t0
        entry = self._entry(sid, tables, stats, parts[0].label)
        cid = sid
        if piece:
            k = self._next_piece.get(sid, 0)
            self._next_piece[sid] = k + 1
            cid = f"{sid}_{k}"
            entry.update(piece_of=sid, trace_ids=settled_ids(tables),
                         shard_errors=any(p.pack_index == 0 for p in parts))
        self.store.commit(cid, tables, entry, self.run_id)
        self._mine.append(entry)
        if self.lock is not None:
            self.lock.touch()
        self._last_commit = time.perf_counter()
        self.traces_committed += sum(p.n_traces for p in parts)
        self.tokens_committed += int(stats["tokens"])
        if piece:
            self.pieces_run += 1
        else:
            self._done.add(sid)
            self.shards_run += 1

    def finish(self, facts: RunFacts | None = None) -> RunSummary:
        self.progress.close()
        if self._open:
            raise RuntimeError(f"run ended with {len(self._open)} incomplete shards: {sorted(self._open)}")
        committed = self.store.committed()
        missing = [s.shard_id for s in self.plan.shards if s.shard_id not in committed]
        if missing:
            raise RuntimeError(f"{len(missing)} shards were not committed (first: {missing[0]})")
        wall = time.perf_counter() - self.t0
        reasons, stage, tokens = entry_totals(committed.values())
        rej_by, warn_by = split_reasons(dict(reasons))
        whole = sum(1 for e in committed.values() if not e.get("piece_of"))
        attributed = sum(e["attributed"] for e in committed.values())
        rejected, warnings = sum(rej_by.values()), sum(warn_by.values())
        distinct = self._distinct_inputs()
        signals = count_signals(read_dataset(self.outdir / "errors", columns=["reason", "message"]).to_pylist())
        if distinct != attributed + rejected:
            log.error("run.json: %d distinct input records, but %d attributed + %d rejected rows: some input "
                      "was written twice", distinct, attributed, rejected)
        record = {
            "engine": self.engine, "workers": self.workers, "model": self.cfg.model.name,
            "config_hash": self.cfg.config_hash(), "config": self.cfg.model_dump(mode="json"),
            # attributed, rejected, succeeded (set aside), warnings: the counts every output states
            "counts": {"in": distinct, **outcome_counts(attributed, {**rej_by, **warn_by}, signals),
                       "tokens": sum(e["tokens"] for e in committed.values())},
            "shards": {"total": whole, "run": self.shards_run, "skipped": self.skipped,
                       "pieces": len(committed) - whole, "pieces_run": self.pieces_run},
            "stage_seconds_total": {k: round(v, 3) for k, v in stage.items()},
            "stage_tokens_total": {k: int(tokens.get(k, 0)) for k in TOKEN_KEYS},
            "this_invocation": {
                "started_at": self.started_at.isoformat(), "finished_at": now_utc().isoformat(),
                "wall_seconds": round(wall, 3), "traces": self.traces_done, "tokens": self.tokens_done,
                "traces_per_second": round(self.traces_done / wall, 4) if wall else 0.0,
                "tokens_per_second": round(self.tokens_done / wall, 2) if wall else 0.0,
                **self._invocation_totals(), **(facts.as_json() if facts is not None else {})},
            "host": {"python": sys.version.split()[0], "platform": platform.platform(),
                     "masprism_batch": __version__},
        }
        path = self.outdir / "run.json"
        write_json_atomic(record, path)
        inv = record["this_invocation"]
        return RunSummary(str(self.outdir), self.engine, self.workers, record["counts"]["in"], attributed,
                          rejected, rej_by, whole, self.shards_run,
                          self.skipped, wall, inv["traces_per_second"], inv["tokens_per_second"], str(path),
                          facts or RunFacts(), warnings, warn_by, breakdown=breakdown(record),
                          traces_resumed=self.traces_before, succeeded_by_signal=signals)

    def _invocation_totals(self) -> dict:
        """What this invocation committed, apart from what the whole OUTDIR holds (`counts`, `shards`,
        `stage_seconds_total` at the top of run.json): its counts, shards and stage seconds and tokens."""
        reasons, stage, tokens = entry_totals(self._mine)
        return {"counts": outcome_counts(sum(e["attributed"] for e in self._mine), dict(reasons)),
                "shards_run": self.shards_run, "pieces_run": self.pieces_run, "shards_skipped": self.skipped,
                "stage_seconds": {k: round(v, 3) for k, v in stage.items()},
                "stage_tokens": {k: int(tokens.get(k, 0)) for k in TOKEN_KEYS}}

    def _distinct_inputs(self) -> int:
        """Distinct input records over committed shards: attributed trace ids, plus rejection rows distinct by
        (input path, record id, reason) (file-level rows without a record id count one each, and so does each
        `duplicate_trace_id` row: a trace id repeated three times in one file is two rejected copies, which
        share path, id and reason). Warning rows are about kept traces and are not inputs of their own."""
        ids = set(read_dataset(self.outdir / "attributions", columns=["trace_id"]).column("trace_id").to_pylist())
        n = len(ids)
        seen = set()
        errs = read_dataset(self.outdir / "errors", columns=["input_path", "record_id", "reason"]).to_pylist()
        for e in errs:
            if e["reason"] in WARNING_REASONS:
                continue
            if e["record_id"] is None or e["reason"] == "duplicate_trace_id":
                n += 1  # a whole file, or one repeated copy of a trace: every such row is an input of its own
            elif (k := (e["input_path"], e["record_id"], e["reason"])) not in seen:
                seen.add(k)
                n += 1
        return n
