"""`--refresh`: a nightly rerun re-attributes the traces of changed files whose content changed, with the
old verdicts kept as history (issue 60 item 5).

Without the flag a changed file is said and only its new traces run (increment.py). With it:
1. staging (increment.stage_increment) stages again, in the new generation, each trace of a changed file whose id
   was staged before and whose content (source, system, question, steps) differs from the staged one
   (`digest`); unchanged traces of the file (a log appended to) are skipped as before. The generation's marker
   entry lists them (`refreshed_ids`).
2. before any shard runs (`purge_stale`, from commit.open_run), their rows of older generations are taken out of
   the live outputs: their attribution rows are copied to `OUT/history/` (`outdir/history.archive_attributions`,
   reason `refresh`), then each committed shard holding one is committed again without its rows (traces,
   attributions, step_scores, and errors/ rows of that record), its manifest entry's counts recomputed.
   `OUT/history/refreshed.json` records the generations purged, so a rerun does not scan again; a purge cut short
   is finished by the next run (the marker still lists the ids). While it rewrites shards, `OUT/history/
   purging.json` names them: one cut short between its parts and its entry reads as damaged, and a resume would
   run it again from its staged input, which still holds the old content (a second live row for the trace,
   rejected as a duplicate); `finish_cut_purge` rewrites it instead, before the resume plans (commit.Committer).
The new generation's shards then attribute the new content: one live verdict per trace, the old one in history.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from masprism_batch.outdir.history import HISTORY_DIR, archive_attributions
from masprism_batch.outdir.manifest import read_json, require_regular
from masprism_batch.outdir.parts import write_json_atomic
from masprism_batch.outdir.shards import OUTPUT_TABLES, ShardStore
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)
PURGED = "refreshed.json"  # under OUT/history/: the generations whose stale rows are gone
PURGING = "purging.json"  # under OUT/history/: the shards a purge is rewriting (archived already) and the ids
_CONTENT = ("source", "system", "question", "steps")


def digest(trace: Trace) -> str:
    """What a refresh compares: the trace's content as staged (its id and metadata aside)."""
    row = Trace.from_row(trace.to_row()).to_row()  # the staged form: what a Parquet round trip gives
    blob = json.dumps({k: row[k] for k in _CONTENT}, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def staged_digests(parts: list[Path], ids: set[str] | None = None) -> dict[str, str]:
    """{trace id: digest} of the staged trace parts (first staging wins, as in a run), one row group at a time;
    `ids`: only those."""
    out: dict[str, str] = {}
    for f in parts:
        require_regular(f)
        pf = pq.ParquetFile(f)
        for g in range(pf.num_row_groups):
            for row in pf.read_row_group(g, columns=["trace_id", *_CONTENT]).to_pylist():
                tid = row["trace_id"]
                if tid not in out and (ids is None or tid in ids):
                    out[tid] = digest(Trace.from_row(row))
    return out


def _stale_by_generation(marker: dict | None) -> dict[int, set[str]]:
    return {int(g["generation"]): set(g.get("refreshed_ids") or [])
            for g in (marker or {}).get("generations") or [] if g.get("refreshed_ids")}


def purge_stale(outdir: Path, shards, generation_of_shard, run_id: str) -> int:
    """Take the rows of refreshed traces out of the committed shards of older generations (module docstring);
    `shards`: the plan's shards, `generation_of_shard(shard)`: its generation. The rows archived."""
    outdir = Path(outdir)
    marker = read_json(outdir / "_staging" / "_COMPLETE.json")
    todo = _stale_by_generation(marker)
    done_file = outdir / HISTORY_DIR / PURGED
    done = set((read_json(done_file) or {}).get("generations") or [])
    todo = {g: ids for g, ids in todo.items() if g not in done}
    if not todo:
        return 0
    store = ShardStore(outdir)
    committed = store.committed()
    gen_of = {s.shard_id: generation_of_shard(s) for s in shards}
    archived = 0
    journal = outdir / HISTORY_DIR / PURGING
    for g, ids in sorted(todo.items()):
        older = [sid for sid, e in committed.items() if gen_of.get(e.get("piece_of") or sid, _ingest_gen(sid)) < g]
        hits = [sid for sid in older if _holds(store, sid, ids)]
        cut = read_json(journal) or {}
        done_before = set(cut.get("shards") or []) if cut.get("generation") == g else set()
        fresh = [sid for sid in hits if sid not in done_before]  # a cut-short purge archived the others
        if fresh:
            archived += archive_attributions(outdir, _attributed_in(store, fresh, ids), "refresh")
        if hits:
            write_json_atomic({"generation": g, "ids": sorted(ids), "shards": sorted(set(hits) | done_before)},
                              journal)
        for sid in hits:
            _recommit_without(store, sid, committed[sid], ids, run_id)
        log.info("refresh: %d trace(s) of generation %d re-attributed; their rows taken out of %d older shard(s), "
                 "the old verdicts kept in %s", len(ids), g, len(hits), outdir / HISTORY_DIR)
        done.add(g)
        write_json_atomic({"generations": sorted(done)}, done_file)
        journal.unlink(missing_ok=True)
    return archived


def finish_cut_purge(outdir: Path, run_id: str) -> int:
    """The shards a purge cut short left damaged (`PURGING` names them; some parts rewritten, the entry not),
    rewritten without the refreshed rows from their parts as they are (each part is whole: written atomically)
    and their entry as it was, so that the resume does not run them again; one that does not read is left to
    the resume, as before. The shards rewritten."""
    outdir = Path(outdir)
    cut = read_json(outdir / HISTORY_DIR / PURGING)
    if not isinstance(cut, dict) or not cut.get("shards"):
        return 0
    store = ShardStore(outdir)
    store.committed()
    ids, fixed = set(cut.get("ids") or []), 0
    for sid in cut["shards"]:
        if sid not in store.damaged:
            continue
        try:
            entry = read_json(store.entry_path(sid))
            if not isinstance(entry, dict) or entry.get("shard_id") != sid:
                continue
            _recommit_without(store, sid, entry, ids, run_id)
        except (OSError, ValueError, pa.ArrowException) as exc:
            log.warning("refresh: shard %s, cut short while its old rows were taken out, does not read (%s): it "
                        "is run again", sid, exc)
            continue
        fixed += 1
        log.info("refresh: shard %s, cut short while its old rows were taken out, rewritten without them", sid)
    return fixed


def _ingest_gen(sid: str) -> int:
    """Generation of an ingest-errors shard (`ingest`, `ingest-g0001`); others not in the plan: never older."""
    if sid == "ingest":
        return 0
    if sid.startswith("ingest-g"):
        return int(sid[len("ingest-g"):])
    return 1 << 30


def _read(store: ShardStore, table: str, sid: str) -> pa.Table:
    path = store.part_path(table, sid)
    require_regular(path)
    return pq.read_table(path)


def _key(table: str) -> str:
    return "record_id" if table == "errors" else "trace_id"


def _holds(store: ShardStore, sid: str, ids: set[str]) -> bool:
    keys = pa.array(sorted(ids), pa.string())
    return any(pc.any(pc.is_in(_read(store, t, sid).column(_key(t)), value_set=keys)).as_py()
               for t in OUTPUT_TABLES)


def _attributed_in(store: ShardStore, sids: list[str], ids: set[str]) -> set[str]:
    out: set[str] = set()
    for sid in sids:
        out.update(i for i in _read(store, "attributions", sid).column("trace_id").to_pylist() if i in ids)
    return out


def _recommit_without(store: ShardStore, sid: str, entry: dict, ids: set[str], run_id: str) -> None:
    from masprism_batch.pipelines.run_summary import split_reasons

    keys = pa.array(sorted(ids), pa.string())
    tables = {}
    for t in OUTPUT_TABLES:
        tab = _read(store, t, sid)
        tables[t] = tab.filter(pc.invert(pc.fill_null(pc.is_in(tab.column(_key(t)), value_set=keys), False)))
    errs = tables["errors"]
    rej, warn = split_reasons(Counter(errs.column("reason").to_pylist()) if errs.num_rows else Counter())
    entry = {**entry, "attributed": tables["attributions"].num_rows, "rejected": sum(rej.values()),
             "rejected_by_reason": rej, "warnings": sum(warn.values()), "warnings_by_reason": warn}
    if "trace_ids" in entry:
        entry["trace_ids"] = [i for i in entry["trace_ids"] if i not in ids]
    for k in ("parts", "run_id"):  # the store records them anew
        entry.pop(k, None)
    store.commit(sid, tables, entry, run_id)
