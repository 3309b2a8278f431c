from datetime import date, datetime, timezone

import duckdb
import pyarrow.parquet as pq
import pytest
from analytics_synth import hand_specs, random_specs, write_outdir

from masprism_batch.analytics import AnalyticsInputError, compute_stats, write_stats
from masprism_batch.analytics.stats import STATS_SCHEMAS


def _rows(t, *keys):
    return {tuple(r[k] for k in keys): r for r in t.to_pylist()}


def test_hand_checked_numbers(tmp_path):
    write_outdir(tmp_path, hand_specs())
    s = compute_stats(tmp_path)
    ba = _rows(s["blamed_agents"], "source", "system", "agent")
    assert set(ba) == {("ww", "X", "B"), ("ww", "Y", "C"), ("tr", "Z", "B")}
    assert ba[("ww", "X", "B")]["n_traces"] == 2 and ba[("ww", "X", "B")]["share"] == 1.0

    day = _rows(s["blamed_by_day"], "day", "day_basis", "source", "agent")
    assert day[(date(2026, 11, 20), "trace_start", "ww", "B")]["n_traces"] == 1  # h1
    assert day[(date(2026, 11, 20), "attributed_at", "ww", "B")]["n_traces"] == 1  # h2 logged no times
    assert day[(date(2026, 11, 21), "trace_start", "ww", "C")]["n_traces"] == 1  # h3

    pos = _rows(s["step_position"], "source", "measure", "bin")
    assert {k[2]: v["n_traces"] for k, v in pos.items() if k[:2] == ("ww", "absolute")} == {0: 1, 1: 1, 2: 1}
    assert {k[2] for k in pos if k[:2] == ("ww", "relative")} == {0, 3, 9}  # 0/1, 1/3, 2/2
    assert pos[("tr", "relative", 3)]["bin_lo"] == pytest.approx(0.3)

    w = _rows(s["symptom_words"], "source", "word")
    assert {k: (v["n_symptom_steps"], v["n_traces"]) for k, v in w.items()} == {
        ("ww", "error"): (2, 2), ("ww", "traceback"): (1, 1), ("ww", "timeout"): (1, 1),
        ("tr", "failed"): (1, 1), ("tr", "error"): (1, 1)}

    nll = _rows(s["nll_by_agent"], "source", "agent")
    assert (nll[("ww", "A")]["n_steps"], nll[("ww", "A")]["mean_nll_pass1"]) == (4, pytest.approx(2.0))
    assert (nll[("ww", "B")]["mean_nll_pass1"], nll[("ww", "B")]["n_blamed"]) == (pytest.approx(3.5), 2)
    assert (nll[("ww", "C")]["mean_nll_pass1"], nll[("ww", "C")]["n_blamed"]) == (pytest.approx(8 / 3), 1)

    acc = {(r["source"], r["metric"]): (r["n_traces"], r["value"], r["random_baseline"])
           for r in s["accuracy"].to_pylist()}
    assert acc[("ww", "step_top1")] == (2, 0.5, pytest.approx((1 / 4 + 1 / 3) / 2))
    assert acc[("ww", "step_top3")] == (2, 1.0, pytest.approx((3 / 4 + 1) / 2))
    assert acc[("ww", "step_within1")] == (2, 0.5, pytest.approx((3 / 4 + 2 / 3) / 2))
    assert acc[("ww", "agent")] == (2, 0.5, pytest.approx((1 / 4 + 2 / 3) / 2))  # "b" matches "B"
    # TRAIL: gold {s1, s3}; predicted s1 then s2; random picks among the 4 LLM spans
    assert acc[("tr", "location_acc@1")] == (1, 0.5, pytest.approx(1 * 2 / (4 * 2)))
    assert acc[("tr", "precision@1")] == (1, 1.0, pytest.approx(0.5))
    assert acc[("tr", "location_acc@5")] == (1, 0.5, pytest.approx(1.0))
    assert acc[("tr", "precision@5")] == (1, 0.5, pytest.approx(0.5))
    assert acc[("tr", "n_pred@5")] == (1, 2.0, pytest.approx(4.0))

    (tp,) = s["throughput"].to_pylist()
    assert tp["hour"] == datetime(2026, 11, 20, 22, tzinfo=timezone.utc)
    assert (tp["n_traces"], tp["tokens"], tp["seconds"]) == (4, 600, pytest.approx(6.0))
    assert tp["tokens_per_s"] == pytest.approx(100.0)


def test_random_run_matches_duckdb(tmp_path, rng):
    """Stats of a fresh random run agree with the same figures computed by DuckDB straight from the Parquet."""
    specs = random_specs(rng, rng.randint(20, 60)) + random_specs(rng, rng.randint(5, 15), spans=True)
    for i, sp in enumerate(specs):
        sp["trace_id"] += f"-{i}"
    write_outdir(tmp_path, specs, rows_per_part=rng.randint(3, 11))
    paths = write_stats(tmp_path)
    assert set(paths) == set(STATS_SCHEMAS)
    for name, p in paths.items():
        assert pq.read_schema(p).equals(STATS_SCHEMAS[name], check_metadata=False), name
    d = str(tmp_path)
    con = duckdb.connect()
    want = con.execute(f"""
        SELECT source, system, pred_agent, count(*) FROM read_parquet('{d}/attributions/*.parquet')
        GROUP BY ALL""").fetchall()
    got = con.execute(f"SELECT source, system, agent, n_traces FROM read_parquet('{d}/stats/blamed_agents.parquet')"
                      ).fetchall()
    assert sorted(got, key=str) == sorted(want, key=str)
    want = con.execute(f"""
        SELECT a.source, s.agent, count(*), avg(s.nll_pass1), avg(s.nll_pass2), count_if(s.step = a.pred_step)
        FROM read_parquet('{d}/step_scores/*.parquet') s JOIN read_parquet('{d}/attributions/*.parquet') a
        USING (trace_id) GROUP BY ALL""").fetchall()
    got = con.execute(f"""SELECT source, agent, n_steps, mean_nll_pass1, mean_nll_pass2, n_blamed
                          FROM read_parquet('{d}/stats/nll_by_agent.parquet')""").fetchall()
    key = {(r[0], r[1]): r for r in want}
    assert len(got) == len(want)
    for r in got:
        w = key[(r[0], r[1])]
        assert r[2] == w[2] and r[5] == w[5]
        assert r[3] == pytest.approx(w[3], rel=1e-5) and (r[4] is None) == (w[4] is None)
    acc = compute_stats(tmp_path)["accuracy"].to_pylist()
    n_labelled = sum(1 for s in specs if s["labels"] and s["labels"].get("mistake_step") is not None)
    for r in acc:
        if not r["metric"].startswith("n_pred"):
            assert 0.0 <= r["value"] <= 1.0 and 0.0 <= r["random_baseline"] <= 1.0
    assert sum(r["n_traces"] for r in acc if r["metric"] == "step_top3") == n_labelled
    by = {(r["source"], r["metric"]): r["value"] for r in acc}
    for (src, m), v in by.items():
        if m == "step_top1":
            assert v <= by[(src, "step_top3")] + 1e-12
    pos = compute_stats(tmp_path)["step_position"].to_pylist()
    n_pred = sum(1 for s in specs if s["ranked"])
    assert sum(r["n_traces"] for r in pos if r["measure"] == "relative") == n_pred
    assert sum(r["n_traces"] for r in pos if r["measure"] == "absolute") == n_pred


def test_missing_inputs(tmp_path):
    with pytest.raises(AnalyticsInputError, match="attributions"):
        compute_stats(tmp_path)
    write_outdir(tmp_path, hand_specs())
    (tmp_path / "run.json").write_text("{not json")
    import shutil
    shutil.rmtree(tmp_path / "traces")
    shutil.rmtree(tmp_path / "step_scores")
    s = compute_stats(tmp_path)  # optional inputs absent: those tables are empty, the others still right
    assert s["accuracy"].num_rows == 0 and s["nll_by_agent"].num_rows == 0 and s["runs"].num_rows == 0
    assert s["blamed_agents"].num_rows == 3


def test_null_timestamps_do_not_break_grouping(tmp_path, rng):
    specs = random_specs(rng, rng.randint(6, 15))
    nulls = rng.sample(range(len(specs)), k=rng.randint(1, len(specs) - 1))
    for i in nulls:
        specs[i]["attributed_at"], specs[i]["day_offset"] = None, None
    write_outdir(tmp_path, specs)
    s = compute_stats(tmp_path)
    days = s["blamed_by_day"].to_pylist()
    assert sum(r["n_traces"] for r in days if r["day"] is None) == len(nulls)
    assert days[-1]["day"] is None  # unknown days sort last
    assert sum(r["n_traces"] for r in s["throughput"].to_pylist() if r["hour"] is None) == len(nulls)


def test_accuracy_equals_eval_over_all_traces_at_once(tmp_path, rng):
    """Stats score traces batch by batch (parts of 3..9 rows here); the folded means equal one eval call."""
    from masprism_batch.eval import evaluate
    from masprism_batch.outdir import reads as outdir_reads
    from masprism_batch.trace import Trace

    specs = random_specs(rng, rng.randint(20, 50)) + random_specs(rng, rng.randint(10, 20), spans=True)
    for i, sp in enumerate(specs):
        sp["trace_id"] += f"-{i}"
        for s in sp["steps"]:
            s["kind"] = rng.choice(["llm", "tool"]) if s["span_id"] else "message"
    write_outdir(tmp_path, specs, rows_per_part=rng.randint(3, 9))
    got = {(r["source"], r["metric"]): r for r in compute_stats(tmp_path)["accuracy"].to_pylist()}
    traces = [Trace.from_row(r) for r in outdir_reads.read_dataset(tmp_path / "traces").to_pylist()]
    res = evaluate(outdir_reads.read_dataset(tmp_path / "attributions").to_pylist(), traces, on_missing="skip", ks=(1, 5))
    n_checked = 0
    for ds in res["datasets"]:
        for src, m in ds["subsets"].items():
            base = ds["baselines"][src]["random"]
            for metric, v in m.items():
                if metric in ("n", "n_missing", "n_agent") or v is None:
                    continue
                r = got.pop((src, metric))
                assert r["value"] == pytest.approx(v) and r["random_baseline"] == pytest.approx(base[metric])
                assert r["n_traces"] == (m["n_agent"] if metric == "agent" else m["n"])
                n_checked += 1
    assert got == {} and n_checked >= 4


def test_a_trace_attributed_twice_counts_once(tmp_path):
    specs = hand_specs()
    again = dict(specs[0], ranked=[3, 1], attributed_at=datetime(2026, 11, 21, 9, tzinfo=timezone.utc))
    write_outdir(tmp_path / "a", specs[:3])
    write_outdir(tmp_path / "b", [again])
    import shutil
    for d in ("attributions", "traces", "step_scores"):
        for f in (tmp_path / "b" / d).iterdir():
            shutil.copy(f, tmp_path / "a" / d / f"dup-{f.name}")
    s = compute_stats(tmp_path / "a")
    assert sum(r["n_traces"] for r in s["blamed_agents"].to_pylist()) == 3
    acc = {r["metric"]: r for r in s["accuracy"].to_pylist() if r["source"] == "ww"}
    assert acc["step_top1"]["n_traces"] == 2 and acc["step_top1"]["value"] == 0.0  # h1's later run blames step 3
    nll = {r["agent"]: r["n_steps"] for r in s["nll_by_agent"].to_pylist() if r["source"] == "ww"}
    assert nll == {"A": 4, "B": 2, "C": 3}  # h1's steps once


def test_report_reuses_fresh_stats_only(tmp_path, rng):
    import os

    from masprism_batch.analytics.stats import cached_or_compute

    write_outdir(tmp_path, random_specs(rng, rng.randint(5, 15)))
    write_stats(tmp_path)
    p = tmp_path / "stats" / "blamed_agents.parquet"
    poisoned = pq.read_table(p).to_pylist()
    for r in poisoned:
        r["n_traces"] += 1000  # a marker only a reused table can carry
    import pyarrow as pa
    pq.write_table(pa.Table.from_pylist(poisoned, schema=STATS_SCHEMAS["blamed_agents"]), p)
    assert cached_or_compute(tmp_path)["blamed_agents"].to_pylist() == poisoned  # fresh: reused
    newer = max(f.stat().st_mtime for f in (tmp_path / "stats").iterdir()) + 5
    part = next((tmp_path / "attributions").glob("*.parquet"))
    os.utime(part, (newer, newer))  # the run wrote again after `stats`
    assert all(r["n_traces"] < 1000 for r in cached_or_compute(tmp_path)["blamed_agents"].to_pylist())


def test_accuracy_at_coverage_and_what_decided_the_verdicts(tmp_path):
    """Issue 23: the most confident verdicts are scored first (top 25/50/100%), and stats count verdicts by what
    decided them; runs written before these columns read as 'unknown (older run)'."""
    import pyarrow as pa

    from masprism_batch.analytics.accuracy import COVERAGE, AccuracyAccumulator
    from masprism_batch.analytics.stats import verdicts

    acc = AccuracyAccumulator()
    attrs, rows = {}, []
    for i, (conf, right) in enumerate([(0.9, True), (0.8, True), (0.3, False), (0.2, True)]):
        tid = f"t{i}"
        attrs[tid] = {"trace_id": tid, "pred_step": 1 if right else 0, "candidates": [], "method": "ranked",
                      "confidence": conf, "pred_agent": "A"}
        rows.append({"trace_id": tid, "source": "ww", "labels": {"mistake_step": 1, "mistake_agent": "A"},
                     "steps": [{"index": j, "agent": "A", "kind": "message", "span_id": None} for j in range(3)]})
    acc.add_batch(attrs, rows)
    got = {r["metric"]: (r["n_traces"], r["value"]) for r in acc.rows() if r["metric"].startswith(COVERAGE)}
    assert got == {f"{COVERAGE}@25": (1, 1.0), f"{COVERAGE}@50": (2, 1.0), f"{COVERAGE}@100": (4, 0.75)}
    # issue 32: and whether confidence ranks them (2 of the 3 right verdicts are above the wrong one)
    from masprism_batch.analytics.accuracy import AUROC

    auc = next(r for r in acc.rows() if r["metric"] == AUROC)
    assert auc["value"] == pytest.approx(2 / 3) and auc["random_baseline"] == 0.5 and auc["n_traces"] == 4
    attr = pa.Table.from_pylist([
        {"source": "s", "system": "x", "verdict_by": "ranker:x", "confidence": 0.5},
        {"source": "s", "system": "x", "verdict_by": "ranker:x", "confidence": 0.7},
        {"source": "s", "system": "y", "verdict_by": None, "confidence": None}])
    v = {(r["system"], r["verdict_by"]): (r["n_traces"], r["mean_confidence"]) for r in verdicts(attr).to_pylist()}
    assert v[("x", "ranker:x")] == (2, pytest.approx(0.6)) and v[("y", "unknown (older run)")] == (1, None)
