"""Resuming a run: what OUTDIR binds (its header) and what it already holds (whole shards, pieces of shards).

- `resume_config`: the shard size recorded when OUTDIR was planned wins over the option (shard identity); the
  header it returns holds the token budget the run began with (`stage/budget.resolve_budget` keeps it).
- `bind_header`: `_manifest/HEADER.json` holds the config hash, model, staging, shard size, the ranker file's
  SHA-256 (a re-fitted file between a crash and the resume would mix two rankers' verdicts) and the
  run id; another configuration is refused, except over a header whose run committed no attribution.
- pieces (`commit.Committer`): finished packs of a shard committed before the shard is done; `resume_of` gives a
  pending shard the trace ids they settled, so the resume runs only the rest.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
from masprism_batch.pipelines.plan import INGEST_SHARD, Shard

from masprism_batch.config import PipelineConfig
from masprism_batch.outdir.manifest import read_json as read_marker
from masprism_batch.outdir.shards import OUTPUT_TABLES, ShardStore

log = logging.getLogger(__name__)


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


def resume_config(outdir: Path, cfg: PipelineConfig) -> tuple[PipelineConfig, dict | None]:
    """(cfg, OUTDIR's header or None) with what OUTDIR's first run fixed, so that a resume stays the same run:
    a different `traces_per_shard` would plan other row ranges and write committed traces a second time. The
    value recorded when OUTDIR was first planned (HEADER, or the staging marker of an older OUTDIR) wins over the
    option, with a warning. The header also holds the token budget the run began with, which
    `stage/budget.resolve_budget` keeps."""
    header = ShardStore(outdir).read_header()
    old = (header or {}).get("traces_per_shard")
    if old is None:
        old = ((read_marker(Path(outdir) / "_staging" / "_COMPLETE.json") or {}).get("key") or {}).get(
            "traces_per_shard")
    if old is not None and int(old) != cfg.engine.traces_per_shard:
        log.warning("%s was planned with traces_per_shard=%d; resuming with it (shard identity), not %d",
                    outdir, int(old), cfg.engine.traces_per_shard)
        cfg = cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"traces_per_shard": int(old)})})
    return cfg, header


def piece_parts(committed: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Committed pieces (entries with `piece_of`) by the shard they belong to."""
    out: dict[str, list[dict[str, Any]]] = {}
    for e in committed.values():
        if e.get("piece_of"):
            out.setdefault(e["piece_of"], []).append(e)
    return out


def resume_of(shard: Shard, pieces: list[dict[str, Any]]) -> Shard:
    """`shard` with what its committed pieces already settled (its traces, its read rejections)."""
    if not pieces:
        return shard
    done = sorted({t for e in pieces for t in e.get("trace_ids") or []})
    return dataclasses.replace(shard, done=tuple(done), errors_done=any(e.get("shard_errors") for e in pieces))


def settled_ids(tables: dict[str, pa.Table]) -> list[str]:
    """Trace ids a committed pack settles: its traces, and the traces its CPU stage rejected for crashing a
    worker (they are in no pack). The shard's read rejections are settled as a whole (`shard_errors`)."""
    ids = set(tables["traces"].column("trace_id").to_pylist())
    errs = tables["errors"]
    if errs.num_rows:
        for e in errs.select(["record_id", "stage", "reason"]).to_pylist():
            if e["stage"] == "render" and e["reason"] == "worker_crashed" and e["record_id"]:
                ids.add(e["record_id"])
    return sorted(ids)


def _ranker_part(header: dict) -> dict:
    return {"ranker_sha256": header["ranker_sha256"]} if "ranker_sha256" in header else {}


def bind_header(store: ShardStore, cfg: PipelineConfig, staged: bool, ranker_sha256: str | None = None) -> str:
    """OUTDIR's header (`_manifest/HEADER.json`) checked against this run, or written: the run id. Refused
    (ValueError): outputs of `attribute`'s older layout, another configuration, or the same ranker path whose
    file changed: `ranker_sha256`, the SHA-256 of the ranker file as the run read it (`RankerSetting`), is
    bound, not only its path (config hash)."""
    header = {"config_hash": cfg.config_hash(), "model": cfg.model.name, "staged": staged,
              "traces_per_shard": cfg.engine.traces_per_shard}
    ranker = ranker_sha256
    if ranker is not None:
        header["ranker_sha256"] = ranker
    old = store.read_header()
    foreign = [p for t in OUTPUT_TABLES for p in (store.outdir / t).glob("[!.]*.parquet")
               if not p.name.startswith("shard-")]
    if foreign:  # e.g. an `attribute` run: mixing would duplicate traces
        raise ValueError(f"{store.outdir} holds outputs not written by `run` ({foreign[0]}); use a new OUTDIR")
    if old is not None and _other_config(old, header) and _nothing_attributed(store, cfg, old, header):
        log.warning("%s: its run of another configuration (%s) committed no attribution: this run takes "
                    "it over", store.outdir, old.get("config_hash"))
        old = None
    if old is None:
        run_id = uuid.uuid4().hex
        store.write_header({**header, "run_id": run_id, "created_at": now_utc().isoformat(),
                            "ingest": cfg.ingest.model_dump(mode="json"), "token_budget": cfg.batch.token_budget})
    elif _other_config(old, header) and not _other_config({**old, **_ranker_part(header)}, header):
        raise ValueError(f"the ranker file {cfg.method.ranker} changed since this OUTDIR's run began "
                         f"(SHA-256 {old['ranker_sha256'][:12]}... then, {header['ranker_sha256'][:12]}... now): "
                         f"resuming would mix two rankers' verdicts in {store.outdir}; restore the file, or use a "
                         f"new OUTDIR for the new ranker")
    elif _other_config(old, header):
        from masprism_batch.pipelines.config_diff import describe  # the options that differ, as CLI flags

        raise ValueError(describe(store.outdir, cfg) or
                         f"{store.outdir} holds results of another configuration (config hash "
                         f"{old.get('config_hash')}, model {old.get('model')}; this run: {header['config_hash']}, "
                         f"{header['model']}): use a new OUTDIR")
    elif not old.get("run_id") or ("ranker_sha256" in header and "ranker_sha256" not in old):
        # an OUTDIR of an older version: bound to a run id and its ranker's content from now on
        run_id = old.get("run_id") or uuid.uuid4().hex
        store.write_header({**old, **_ranker_part(header), "run_id": run_id})
    else:
        run_id = old["run_id"]
    return run_id


def _other_config(old: dict, header: dict) -> bool:
    """Another configuration than OUTDIR's header; an older header without a key (shard size, ranker digest)
    is bound by the others. The ranker's digest only ever differs with the same path (the path is in the
    config hash)."""
    keys = set(header) | ({"ranker_sha256"} & set(old))
    return any(k in old and old[k] != header.get(k) if k in ("traces_per_shard", "ranker_sha256") else
               old.get(k) != header.get(k) for k in keys)


def _nothing_attributed(store: ShardStore, cfg: PipelineConfig, old: dict, header: dict) -> bool:
    """A header whose run committed nothing but the staging's rejections (it failed on its configuration
    before any shard) binds no result: another configuration may take the OUTDIR over, provided the staging
    it reuses is the same (same ingest caps, shard size and staging)."""
    same_staging = (old.get("staged") == header["staged"]
                    and old.get("traces_per_shard") == header["traces_per_shard"]
                    and old.get("ingest") == cfg.ingest.model_dump(mode="json"))
    entries = {p.stem for p in store.manifest_dir.glob("shard-*.json")}
    return same_staging and entries <= {f"shard-{INGEST_SHARD}"}
