"""`rescore` at scale (issue 59 item 4): 10,000 traces re-scored from their cached signals in <= 60 s on this CPU.

    python benchmarks/pipeline/bench_rescore.py [--n 10000] [--src OUTDIR]

The OUTDIR: a real run of the bundled sample (4 Who&When and 2 TRAIL GAIA logs, 5-8 steps each, smollm2-135m:
`attribute masprism_batch/data/sample/who_and_when/{Algorithm-Generated,Hand-Crafted} .../trail/GAIA`, made here
unless --src names one), its committed rows replicated with new trace ids (`<id>#<k>`) into shards of 500 traces,
committed as a run commits them (outdir/shards.ShardStore, run.json and header copied): every row is one a real
run wrote, only the ids are new. Then `pipelines/rescore.rescore` (what `masprism-batch rescore` runs, no model
load) into a new OUTDIR, timed, for two settings: `--ranker packaged` (the benchmark systems' rankers: every step
ranked, the fitted verdict) and `--coverage 0.9` (the rule's verdict, another set). Wall and CPU seconds of the
call; the write of the synthetic OUTDIR is not timed. Rows appended to benchmarks/results/rescore.csv.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.rows import append_rows, commit, hardware  # noqa: E402
from masprism_batch.outdir.manifest import read_json  # noqa: E402
from masprism_batch.outdir.parts import write_json_atomic  # noqa: E402
from masprism_batch.outdir.shards import OUTPUT_TABLES, ShardStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "rescore.csv"
FIELDS = ["date", "commit", "hardware", "setting", "n_traces", "n_steps", "seconds", "cpu_seconds",
          "traces_per_second", "moved_step", "verdict_by", "source_run"]
SAMPLE = ROOT / "masprism_batch" / "data" / "sample"
PER_SHARD = 500


def source_run(work: Path) -> Path:
    """A real run of the bundled sample with the default model (about a minute on this CPU)."""
    from typer.testing import CliRunner

    from masprism_batch.cli import app

    out = work / "src"
    ins = [str(SAMPLE / "who_and_when" / "Algorithm-Generated"), str(SAMPLE / "who_and_when" / "Hand-Crafted"),
           str(SAMPLE / "trail" / "GAIA")]
    res = CliRunner().invoke(app, ["attribute", *ins, "-o", str(out), "--no-progress"])
    if res.exit_code:
        raise SystemExit(res.output)
    return out


def replicate(src: Path, dst: Path, n: int) -> int:
    """`dst`: `src`'s committed rows with new ids, n traces in shards of PER_SHARD; the steps written."""
    store = ShardStore(src)
    tables = {t: pa.concat_tables([pq.read_table(store.part_path(t, sid)) for sid in sorted(store.verified())],
                                  promote_options="default") for t in OUTPUT_TABLES}
    base = tables["attributions"]["trace_id"].to_pylist()
    out, header, steps = ShardStore(dst), store.read_header(), 0
    shard, k = 0, 0
    while k < n:
        ids = [(base[(k + i) % len(base)], f"{base[(k + i) % len(base)]}#{(k + i) // len(base)}")
               for i in range(min(PER_SHARD, n - k))]
        part = {}
        for t in ("traces", "attributions", "step_scores"):
            rows = []
            for old, new in ids:
                sel = tables[t].filter(pc.equal(tables[t]["trace_id"], old))
                rows.append(sel.set_column(sel.schema.get_field_index("trace_id"), "trace_id",
                                           pa.array([new] * sel.num_rows, pa.string())))
            part[t] = pa.concat_tables(rows)
        part["errors"] = tables["errors"].slice(0, 0)
        steps += part["step_scores"].num_rows
        out.commit(f"s{shard:05d}", part, {"attributed": len(ids), "rejected_by_reason": {}, "stage_seconds": {},
                                            "tokens": 0}, header.get("run_id"))
        shard, k = shard + 1, k + len(ids)
    out.write_header(header)
    write_json_atomic(read_json(src / "run.json"), dst / "run.json")
    return steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--src", default=None, help="a finished run to replicate (default: the sample, run here)")
    ap.add_argument("--csv", default=str(RESULTS))
    args = ap.parse_args()
    from masprism_batch.pipelines import rescore as rs

    from masprism_batch.verdict.rankfile import RankerSetting

    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        src = Path(args.src) if args.src else source_run(work)
        big = work / "big"
        steps = replicate(src, big, args.n)
        rows = []
        for setting, updates in (("--ranker packaged", {"ranker": "packaged"}), ("--coverage 0.9", {"coverage": 0.9})):
            cfg = rs.with_settings(rs.run_config(big), updates)
            out = work / f"out-{len(rows)}"
            t0, c0 = time.perf_counter(), time.process_time()
            s = rs.rescore(big, out, cfg, RankerSetting.read(cfg.method.ranker))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            rows.append({"date": datetime.now(timezone.utc).date().isoformat(), "commit": commit(),
                         "hardware": hardware(), "setting": setting, "n_traces": s.traces, "n_steps": steps,
                         "seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
                         "traces_per_second": round(s.traces / wall, 1), "moved_step": s.moved_step,
                         "verdict_by": ";".join(f"{k}={v}" for k, v in sorted(s.by.items())),
                         "source_run": "sample (6 real logs, smollm2-135m) replicated" if not args.src else str(src)})
            print(f"{setting}: {s.traces:,} traces ({steps:,} steps) rescored in {wall:.1f} s wall, {cpu:.1f} s CPU")  # noqa: T201
            shutil.rmtree(out)
        append_rows(Path(args.csv), rows, FIELDS)


if __name__ == "__main__":
    main()
