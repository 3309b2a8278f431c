"""`rescore`: a new ranker, rule, coverage or system applied to a finished run's OUTDIR from its cached signals,
with no prefill and no model load, into a new OUTDIR or in place (the old verdicts kept in `OUT/history/`).

Each trace's verdict is made by the stage's own function (`stage/rows.decide`) from what the run wrote: the trace
(`traces/`), its step rows (`step_scores/`: every feature a ranker or rule reads, and `pass2_support`, the pass-2
symptoms that point at each candidate) and MASPrism's ranking rebuilt from them (candidates by `masprism_rank`,
their `score`; the pass-2 symptom set is `attributions.symptoms`). So a rescored verdict is the one a fresh
`attribute` with the same settings gives (tests/cli/test_rescore.py). Shard by shard, each shard's parts and
manifest entry committed together (`outdir/shards.ShardStore`), as a run commits them.

In place, the old rows go to `OUT/history/` first and the OUTDIR's header (its config hash, the ranker's SHA-256)
is rebound last: an interrupted in-place rescore leaves each shard old or new (one killed inside its commit is
damaged, and readers say so: the run's own `attribute` command, still bound, re-runs it) and is finished by running
it again (its history file then also holds the rows it had already rescored).

What a rescore cannot do is said before any write: a verdict that reads a feature the run did not compute
(counterfactuals, per-head attention: the run computed them only where its own verdicts read them), and runs
with the failure kinds on (they read the model after the blamed step).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from masprism_batch import schema
from masprism_batch.config import PipelineConfig
from masprism_batch.method import masprism as mp
from masprism_batch.method import reads
from masprism_batch.outdir import manifest
from masprism_batch.outdir.history import archive_attributions
from masprism_batch.outdir.parts import write_json_atomic
from masprism_batch.outdir.shards import MANIFEST_DIR, OUTPUT_TABLES, ShardStore
from masprism_batch.stage import rows as rows_mod
from masprism_batch.trace import Trace
from masprism_batch.verdict.policy import VerdictPolicy

log = logging.getLogger(__name__)
# the settings a rescore applies (config keys under `method`): everything else is the run's own
RESCORE_KEYS = ("ranker", "system", "coverage", "agent_aggregation")


class RescoreError(ValueError):
    """What keeps a rescore from giving a fresh run's verdicts (said as one line, nothing written)."""


@dataclass
class RescoreSummary:
    out: str
    traces: int = 0
    moved_step: int = 0  # verdicts whose blamed step changed
    moved_agent: int = 0
    archived: int = 0  # rows kept in OUT/history/ (in place)
    support_unknown: int = 0  # old OUTDIRs without pass2_support whose candidates' support was not all kept
    seconds: float = 0.0
    by: Counter = field(default_factory=Counter)  # verdict_by of the new verdicts


def run_config(outdir: Path) -> PipelineConfig:
    """The configuration the run in `outdir` was made with (run.json's `config`)."""
    rec = manifest.read_json(Path(outdir) / "run.json")
    if not isinstance(rec, dict) or not isinstance(rec.get("config"), dict):
        raise RescoreError(f"{outdir}: no run.json with its configuration: rescore reads a finished run (re-run "
                           f"the same `attribute` command to finish it)")
    return PipelineConfig.model_validate(rec["config"])


def with_settings(cfg: PipelineConfig, updates: dict) -> PipelineConfig:
    """`cfg` with the rescore settings `updates` (method keys: RESCORE_KEYS, and `name` as `--ranker` sets it)."""
    unknown = set(updates) - {*RESCORE_KEYS, "name"}
    if unknown:
        raise ValueError(f"not a rescore setting: {sorted(unknown)}")
    return cfg.model_copy(update={"method": cfg.method.model_validate({**cfg.method.model_dump(), **updates})})


def check_kept_ranker(src: Path, cfg: PipelineConfig):
    """Without `--ranker` a rescore keeps the run's ranker setting, so it must still name what the run applied:
    RescoreError where its file is gone, or holds another file than the one bound to OUTDIR (its SHA-256 in the
    header: a later `fit --force` to the same path) — applied silently, it moved verdicts the user did not ask to
    change. The setting as read (None: the run had none), for the command's own check not to read it again."""
    from masprism_batch.verdict.rankfile import RankerSetting

    name = cfg.method.ranker
    if name is None:
        return None
    setting = RankerSetting.read(name)
    if isinstance(setting.problem, FileNotFoundError) and not os.path.lexists(setting.path):  # a FIFO: said later
        raise RescoreError(f"the run's ranker file {setting.path} is not found (moved or deleted): name the file "
                           f"with --ranker FILE, or give --ranker rule")
    bound = (ShardStore(src).read_header() or {}).get("ranker_sha256")
    if bound is not None and setting.problem is None and setting.sha256 != bound:
        raise RescoreError(f"the run's ranker file {setting.path or name} changed since the run (another fit "
                           f"written there?): give --ranker {name} to apply it as it is now, or --ranker rule")
    return setting


def check_rescorable(old: PipelineConfig, new: PipelineConfig, policy: VerdictPolicy, traces: list[Trace],
                     rows: dict[str, list[dict]], old_policy: VerdictPolicy | None) -> None:
    """RescoreError where the new verdicts would not be a fresh run's: the failure kinds on, or a verdict that
    reads a costly feature (method/reads.py) the run did not compute, naming which and what to re-run."""
    if old.method.categories:
        raise RescoreError("this run has the failure kinds on (--taxonomy): they read the model after the blamed "
                           "step, which a rescore cannot; re-run `attribute` with the new --ranker into a new OUTDIR")
    if new.method.name != old.method.name:
        raise RescoreError("--ranker masprism and the ranked method differ in what the run computed; re-run "
                           "`attribute` into a new OUTDIR")
    need = reads.needed(new, policy, traces)
    had = reads.needed(old, old_policy, traces) if old_policy is not None else None
    lacking: Counter = Counter()
    for i, t in enumerate(traces):
        for feat in need[i]:
            col = reads.COLUMNS[feat]
            computed = (had[i] if had is not None else set()) | (
                {feat} if any(r.get(col) is not None for r in rows.get(t.trace_id, [])) else set())
            if feat not in computed:
                lacking[feat] += 1
    if lacking:
        what = ", ".join(f"{feat} ({reads.COLUMNS[feat]}) for {n:,} trace(s)" for feat, n in sorted(lacking.items()))
        raise RescoreError(f"the new verdicts read features this run did not compute: {what}. Re-run `attribute` "
                           f"on the same logs with --all-features into a new OUTDIR (it computes them for every "
                           f"trace; later rescores then need no new run), or with the new --ranker itself")


def base_ranking(rows: list[dict], att: dict) -> tuple[mp.Ranking, bool]:
    """MASPrism's ranking of one trace as the stage had it before the verdict, from its step rows and its old
    attribution row; and whether every candidate's pass-2 support was known (outputs written before
    `pass2_support` keep it only for the candidates the old verdict listed)."""
    cands = sorted((r for r in rows if (r.get("masprism_rank") or r.get("rank")) is not None),
                   key=lambda r: r.get("masprism_rank") or r.get("rank"))
    ranked = [r["step"] for r in cands]
    scores = {r["step"]: (float(r["score"]) if r.get("score") is not None else math.nan) for r in cands}
    listed = {c["step"]: list(c.get("symptoms") or []) for c in att.get("candidates") or []}
    support, known = {}, True
    for r in cands:
        if r.get("pass2_support") is not None:
            support[r["step"]] = list(r["pass2_support"])
        elif r["step"] in listed:
            support[r["step"]] = listed[r["step"]]
        else:
            support[r["step"]], known = [], False
    return mp.Ranking(ranked, scores, support, list(att.get("symptoms") or [])), known


class _Tokens:
    """What `stage/rows.attribution_row` reads of a prompt (its length); the run's counts are kept as they were."""

    def __init__(self, n: int):
        self.input_ids = range(n)


def rescore_tables(tables: dict[str, pa.Table], cfg: PipelineConfig, policy: VerdictPolicy, now: datetime,
                   summary: RescoreSummary) -> dict[str, pa.Table]:
    """One shard's four tables with new attributions and step_scores (traces and errors as they were)."""
    traces = {r["trace_id"]: r for r in tables["traces"].to_pylist()}
    steps: dict[str, list[dict]] = {}
    for r in _full(tables["step_scores"], "step_scores").to_pylist():
        steps.setdefault(r["trace_id"], []).append(r)
    chash = cfg.config_hash()
    att_out, steps_out = [], []
    for att in _full(tables["attributions"], "attributions").to_pylist():
        t = Trace.from_row(traces[att["trace_id"]])
        rows = sorted(steps.get(t.trace_id, []), key=lambda r: r["step"])
        base, known = base_ranking(rows, att)
        summary.support_unknown += not known
        ranking, verdict = rows_mod.decide(t, rows, base, cfg, policy)
        new = rows_mod.attribution_row(t, ranking, att["model_id"], chash, cfg, _Tokens(att["tokens_pass1"] or 0),
                                       _Tokens(att["tokens_pass2"]) if att["tokens_pass2"] else None,
                                       att["seconds_pass1"], att["seconds_pass2"], now, verdict)
        summary.traces += 1
        summary.moved_step += new["pred_step"] != att["pred_step"]
        summary.moved_agent += new["pred_agent"] != att["pred_agent"]
        summary.by[new["verdict_by"]] += 1
        att_out.append(new)
        steps_out.extend(rows)
    return {"traces": tables["traces"], "errors": tables["errors"],
            "attributions": _table(att_out, "attributions"), "step_scores": _table(steps_out, "step_scores")}


def _full(table: pa.Table, name: str) -> pa.Table:
    """`table` with every column of its schema: columns added after the run was written read as nulls."""
    sch = schema.TABLES[name]
    for f in sch:
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table


def _table(rows: list[dict], name: str) -> pa.Table:
    sch = schema.TABLES[name]
    return pa.Table.from_pylist([{c: r.get(c) for c in sch.names} for r in rows], schema=sch)


def _read_shard(store: ShardStore, sid: str) -> dict[str, pa.Table]:
    return {t: pq.read_table(store.part_path(t, sid)) for t in OUTPUT_TABLES}


def rescore(src: Path, dst: Path | None, new: PipelineConfig, ranker_setting, progress=None) -> RescoreSummary:
    """Rescore the finished run in `src` under config `new` (the run's with RESCORE_KEYS changed) and the ranker
    setting read once (`RankerSetting`), into the new OUTDIR `dst`, or in place (dst None) with the old verdicts
    kept in `src/history/`. The caller holds the OUTDIR locks. `progress(done, total)`: after each shard."""
    t0 = time.perf_counter()
    src = Path(src)
    old = run_config(src)
    store = ShardStore(src)
    entries = store.verified()
    header = store.read_header() or {}
    ids = [sid for sid in sorted(entries)]
    # every trace, read once here for the checks (traces and step rows are small beside a prefill)
    traces, rows, model_id = [], {}, None
    for sid in ids:
        tb = _read_shard(store, sid)
        done = set(tb["attributions"].column("trace_id").to_pylist())
        traces += [Trace.from_row(r) for r in tb["traces"].to_pylist() if r["trace_id"] in done]
        for r in _full(tb["step_scores"], "step_scores").select(["trace_id", *reads.COLUMNS.values()]).to_pylist():
            rows.setdefault(r["trace_id"], []).append(r)
        model_id = model_id or next(iter(tb["attributions"].column("model_id").to_pylist()), None)
    policy = VerdictPolicy.load(new.method, model_id, ranker_setting)
    if policy.refused is not None:
        raise RescoreError(f"--ranker {new.method.ranker}: {policy.refused}")
    check_rescorable(old, new, policy, traces, rows, _old_policy(old, header, model_id))
    del traces, rows
    summary = RescoreSummary(str(dst or src))
    target = ShardStore(dst) if dst is not None else store
    now = datetime.now(timezone.utc)
    if dst is None:
        summary.archived = archive_attributions(src, None, "rescore")
        run_id = header.get("run_id")
    else:
        run_id = uuid.uuid4().hex
        if (src / "_staging").is_dir():  # the inputs as staged: a later `attribute` into dst resumes from them
            shutil.copytree(src / "_staging", dst / "_staging")
    for n, sid in enumerate(ids, 1):
        tables = rescore_tables(_read_shard(store, sid), new, policy, now, summary)
        entry = {k: v for k, v in entries[sid].items() if k not in ("shard_id", "run_id", "parts")}
        target.commit(sid, tables, entry, run_id)
        if progress is not None:
            progress(n, len(ids))
    bound = {**header, "config_hash": new.config_hash(), "run_id": run_id}
    bound.pop("ranker_sha256", None)
    if ranker_setting is not None and ranker_setting.sha256 is not None:
        bound["ranker_sha256"] = ranker_setting.sha256
    target.write_header(bound)
    summary.seconds = time.perf_counter() - t0
    _write_run_json(src, Path(dst or src), new, summary)
    return summary


def _old_policy(old: PipelineConfig, header: dict, model_id: str | None) -> VerdictPolicy | None:
    """The run's own verdict policy, where its ranker file still reads as it did (same SHA-256): what it
    computed for each trace. None where that cannot be known (the step rows' columns then say)."""
    from masprism_batch.verdict.rankfile import RankerSetting

    setting = RankerSetting.read(old.method.ranker)
    if setting.problem is not None or header.get("ranker_sha256") not in (None, setting.sha256):
        return None
    try:
        policy = VerdictPolicy.load(old.method, model_id, setting)
    except (OSError, ValueError):
        return None
    return None if policy.refused is not None else policy


def _write_run_json(src: Path, dst: Path, new: PipelineConfig, s: RescoreSummary) -> None:
    rec = manifest.read_json(src / "run.json") or {}
    rec = {**rec, "config_hash": new.config_hash(), "config": new.model_dump(mode="json"),
           "rescore": {"from": str(src), "at": datetime.now(timezone.utc).isoformat(), "traces": s.traces,
                       "moved_step": s.moved_step, "moved_agent": s.moved_agent, "archived": s.archived,
                       "seconds": round(s.seconds, 3), "settings": {k: getattr(new.method, k) for k in RESCORE_KEYS}}}
    write_json_atomic(rec, dst / "run.json")


def refuse_target(dst: Path) -> None:
    """A new OUTDIR must be new or empty: a rescore never mixes into another run's results."""
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise RescoreError(f"{dst} exists and is not empty: give a new OUTDIR, or --in-place")
    if (dst / MANIFEST_DIR).exists():
        raise RescoreError(f"{dst} holds a run: give a new OUTDIR")
