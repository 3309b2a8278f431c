"""`stats` table `run_status`: how many runs of each status (as their logs or the team's outcomes grade it,
ingest/status.py, ingest/outcomes.py) were attributed, and how many runs graded passed were only listed (errors/
rows `succeeded_run`, by the signal that graded them; `--all-runs` attributes them). Older outputs without the
column count their attributed runs as "unknown".

`outdir_counts`: the one set of counts every output states (ingest.status.outcome_counts), from OUTDIR's rows."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa

from masprism_batch.analytics import load

# set_aside_by: for runs not attributed, the signal that graded them passed (ingest/outcomes.SIGNALS)
SCHEMA = pa.schema([("run_status", pa.string()), ("attributed", pa.bool_()), ("n_traces", pa.int64()),
                    ("set_aside_by", pa.string())])


def run_status_table(outdir: Path, attributed_ids: set[str]) -> pa.Table:
    counts: Counter = Counter()
    traces = load.read(outdir, "traces", columns=["trace_id", "run_status"], trace_ids=attributed_ids)
    seen = set()
    for tid, st in zip(traces["trace_id"].to_pylist(), traces["run_status"].to_pylist(), strict=True):
        if tid not in seen:  # a trace staged twice (a resumed run) counts once
            seen.add(tid)
            counts[(st or "unknown", True)] += 1
    counts[("unknown", True)] += len(attributed_ids - seen)
    from masprism_batch.ingest.outcomes import signal_of

    errors = load.read(outdir, "errors", columns=["record_id", "reason", "message"])
    skipped: dict[str, str] = {}
    for r in errors.to_pylist():
        if r["reason"] == "succeeded_run" and r["record_id"] not in attributed_ids:
            skipped.setdefault(r["record_id"], signal_of(r["message"]))
    by_signal = Counter(skipped.values())
    rows = [{"run_status": s, "attributed": a, "n_traces": n, "set_aside_by": None}
            for (s, a), n in sorted(counts.items()) if n]
    rows += [{"run_status": "succeeded", "attributed": False, "n_traces": n, "set_aside_by": sig}
             for sig, n in sorted(by_signal.items())]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def split_line(table: pa.Table) -> str:
    """One line for terminals and the report: attributed runs by status, and the succeeded runs listed only."""
    rows = table.to_pylist()
    done = ", ".join(f"{r['n_traces']:,} {r['run_status']}" for r in rows if r["attributed"])
    aside = [r for r in rows if not r["attributed"]]
    skipped = sum(r["n_traces"] for r in aside)
    by = ", ".join(f"{r.get('set_aside_by') or 'run_status'} x{r['n_traces']:,}" for r in aside)
    return (f"runs attributed: {done or 'none'}; succeeded runs not attributed: {skipped:,}"
            + (f" (graded by {by}; errors/ reason succeeded_run; --all-runs attributes them)" if skipped else ""))


def outdir_counts(outdir: Path) -> dict:
    """`outcome_counts` of a run's OUTDIR as its tables hold it (stats, report): what run.json states."""
    attributed = load.read(outdir, "attributions", columns=["trace_id"]).num_rows
    from masprism_batch.ingest.outcomes import count_signals
    from masprism_batch.ingest.status import outcome_counts

    errors = load.read(outdir, "errors", columns=["reason", "message"])
    return outcome_counts(attributed, dict(Counter(errors["reason"].to_pylist())), count_signals(errors.to_pylist()))
