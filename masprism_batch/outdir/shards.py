"""The exactly-once layer of the batch engines: one input shard's outputs, committed together or not at all.

One input shard's outputs (traces, attributions, step_scores, errors) are written as
`<table>/shard-<id>.parquet` (deterministic names, so a retried commit overwrites instead of duplicating) and
then a manifest entry `_manifest/shard-<id>.json` is renamed into place. The entry is the commit point: a shard
without one is not committed, and `clean()` deletes its parts before a resumed run writes them again. Every file
is written through `outdir.parts`' atomic writers.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from masprism_batch.outdir import manifest
from masprism_batch.outdir.parts import write_json_atomic, write_table_atomic

log = logging.getLogger(__name__)


OUTPUT_TABLES = ("traces", "attributions", "step_scores", "errors")
MANIFEST_DIR = "_manifest"
_SHARD_ID = re.compile(r"^[0-9a-z][0-9a-z_-]{0,63}$")


class ShardStore:
    """Per-shard atomic commit of the four output tables plus a manifest entry (see module docstring). An entry
    records each part's rows, bytes and SHA-256 and the run id (HEADER.json) that also sits in each part's
    Parquet metadata; `committed()` trusts only shards whose parts match (`manifest.check_part`)."""

    def __init__(self, outdir: Path | str):
        self.outdir = Path(outdir)
        self.manifest_dir = self.outdir / MANIFEST_DIR
        self.damaged: dict[str, str] = {}  # shard id -> what is wrong (filled by committed())

    @staticmethod
    def _check_id(shard_id: str) -> str:
        # Shard ids become file names: accept only the engine's own hex/slug ids, never free text.
        if not _SHARD_ID.match(shard_id):
            raise ValueError(f"invalid shard id {shard_id!r}")
        return shard_id

    def part_path(self, table: str, shard_id: str) -> Path:
        return self.outdir / table / f"shard-{self._check_id(shard_id)}.parquet"

    def entry_path(self, shard_id: str) -> Path:
        return self.manifest_dir / f"shard-{self._check_id(shard_id)}.json"

    def committed(self) -> dict[str, dict[str, Any]]:
        """Committed shards: a readable manifest entry whose parts all match it. Any mismatch, a missing part
        included (a resume removes an entry before its parts, so no live writer leaves one), and an unreadable
        entry, lands in `self.damaged` (shard id -> the file and what is wrong with it). Entries are read
        without blocking and only if regular files (`manifest.read_control`)."""
        out: dict[str, dict[str, Any]] = {}
        self.damaged = {}
        if not self.manifest_dir.is_dir():
            return out
        run_id = (self.read_header() or {}).get("run_id")
        for p in sorted(self.manifest_dir.glob("shard-*.json")):
            sid = p.stem[len("shard-"):]
            try:
                entry = json.loads(manifest.read_control(p) or "null")
                if not isinstance(entry, dict) or entry.get("shard_id") != sid:
                    raise ValueError("not the entry of this shard")
            except manifest.OutdirUnsafe:
                raise
            except (OSError, ValueError) as e:
                self.damaged[sid] = f"{p}: unreadable manifest entry ({e})"
                continue
            if entry.get("run_id", run_id) != run_id:
                self.damaged[sid] = f"{p}: entry of another run ({entry.get('run_id')}, this OUTDIR is run {run_id})"
                continue
            recs = entry.get("parts") or {}
            problems = {t: manifest.check_part(self.part_path(t, sid), recs.get(t), entry.get("run_id"))
                        for t in OUTPUT_TABLES}
            bad = {t: why for t, why in problems.items() if why}
            if not bad:
                out[sid] = entry
            else:
                t, why = next(iter(bad.items()))
                self.damaged[sid] = f"{self.part_path(t, sid)}: {why}"
        return out

    def verified(self) -> dict[str, dict[str, Any]]:
        """`committed()` for readers: a damaged shard is an error naming the file, never silently dropped."""
        out = self.committed()
        if self.damaged:
            sid, why = next(iter(sorted(self.damaged.items())))
            more = f" (and {len(self.damaged) - 1} more damaged shard(s))" if len(self.damaged) > 1 else ""
            raise manifest.DamagedOutput(
                f"damaged output: {why}{more}; re-run the same `run`/`attribute` command on {self.outdir}: it "
                f"re-runs exactly the damaged shards")
        return out

    @staticmethod
    def _own(d: Path) -> None:
        """Refused at start (`manifest.refuse_links`); checked again where files are deleted or written, so a
        link planted in the table folders during the run is not followed either."""
        if d.is_symlink():
            raise manifest.OutdirUnsafe(f"{d} is a symbolic link: OUTDIR is a tree this tool owns and it never "
                                        f"follows a link inside it; remove it or use a new OUTDIR")

    def clean(self) -> int:
        """Delete temporary files and parts of uncommitted shards, damaged ones included (their entries too, so
        a resume re-runs exactly those); returns how many files were removed. Never follows a link: the caller
        refused an OUTDIR holding one (`manifest.refuse_links`)."""
        keep = set(self.committed())
        for sid, why in sorted(self.damaged.items()):
            log.warning("damaged shard %s (%s): its files are removed and it is run again", sid, why)
        removed = 0
        # entries first: a reader beside this clean-up then sees a shard uncommitted, never an entry whose
        # parts are gone (which it must report as damage)
        for d in [self.manifest_dir] + [self.outdir / t for t in OUTPUT_TABLES]:
            self._own(d)
            if not d.is_dir():
                continue
            for p in d.iterdir():
                stale = p.name.startswith(".tmp-")
                if not stale and p.name.startswith("shard-"):
                    sid = p.name[len("shard-"):].rsplit(".", 1)[0]
                    stale = sid not in keep
                if stale:
                    p.unlink()
                    removed += 1
        if removed:
            log.info("removed %d temporary or uncommitted files under %s", removed, self.outdir)
        return removed

    def commit(self, shard_id: str, tables: dict[str, pa.Table], entry: dict[str, Any],
               run_id: str | None = None) -> None:
        """Write every part (empty ones too, so 'committed' is checkable), each stamped with `run_id`, then the
        manifest entry with each part's rows, bytes and SHA-256."""
        missing = set(OUTPUT_TABLES) - set(tables)
        if missing:
            raise ValueError(f"commit of shard {shard_id} lacks tables {sorted(missing)}")
        parts = {}
        for name in OUTPUT_TABLES + (MANIFEST_DIR,):
            self._own(self.outdir / name)
        for name in OUTPUT_TABLES:
            path = self.part_path(name, shard_id)
            write_table_atomic(manifest.with_run_id(tables[name], run_id), path, durable=True)
            parts[name] = manifest.part_record(path, tables[name].num_rows)
        write_json_atomic({**entry, "shard_id": shard_id, "run_id": run_id, "parts": parts},
                          self.entry_path(shard_id))

    def read_header(self) -> dict[str, Any] | None:
        p = self.manifest_dir / "HEADER.json"
        text = manifest.read_control(p)
        if text is None:
            return None
        try:
            header = json.loads(text)
            if not isinstance(header, dict):
                raise ValueError(f"a {type(header).__name__}, not an object")
        except (OSError, ValueError) as e:
            raise manifest.DamagedOutput(f"{p} is unreadable ({e}): it records this OUTDIR's configuration and "
                                         f"run id; restore it or use a new OUTDIR") from None
        return header

    def write_header(self, header: dict[str, Any]) -> None:
        write_json_atomic(header, self.manifest_dir / "HEADER.json")
