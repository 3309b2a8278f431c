"""Issue 37 item 6: inputs bounded where they enter. An agent name is repeated in every pass-1 step header, so a
1 MiB name cost ~1.1M pass-1 tokens (180 s for a 3-step trace) before it was capped like step content."""

from __future__ import annotations

import json

from ingest_synth import SEED, rng, text

from masprism_batch.config import IngestConfig, RenderConfig
from masprism_batch.ingest import read_inputs
from masprism_batch.ingest.caps import apply_caps, cap_name
from masprism_batch.model.tiny import tiny_tokenizer
from masprism_batch.render import pass1


def test_cap_name_is_bounded_utf8_and_idempotent(rng):
    r = rng
    for _ in range(200):
        cap = r.randint(16, 300)
        name = "".join(r.choice("aé漢🙂") for _ in range(r.randint(0, 400)))
        cut = cap_name(name, cap)
        assert len(cut.encode()) <= cap
        assert cut == name if len(name.encode()) <= cap else (cut.endswith("…") and name.startswith(cut[:-1]))
        assert cap_name(cut, cap) == cut


def test_mebibyte_agent_name_is_bounded_in_pass1_tokens(tmp_path):
    r = rng("agent-cap")
    huge = "".join(r.choice("abcdefgh") for _ in range(1 << 20))  # 1 MiB agent name
    steps = [{"agent": huge if i != 1 else "coder", "content": text(r, 5, 60)} for i in range(3)]
    rec = {"trace_id": "big-agent", "source": "app", "steps": steps,
           "labels": {"mistake_step": 0, "mistake_agent": huge}}
    (tmp_path / "in.jsonl").write_text(json.dumps(rec) + "\n", encoding="utf-8")
    errors: list[dict] = []
    [t] = list(read_inputs([str(tmp_path / "in.jsonl")], "auto", errors.append))
    cap = IngestConfig().max_agent_bytes
    assert [e["reason"] for e in errors] == ["step_truncated"] and "agent name" in errors[0]["message"]
    assert len(t.steps[0].agent.encode()) <= cap and huge.startswith(t.steps[0].agent[:-1])
    assert t.steps[1].agent == "coder" and t.labels.mistake_agent == t.steps[0].agent  # the label still matches
    assert apply_caps(t) is t  # idempotent: staging and the in-place Parquet reader apply it again
    rendered = pass1.render_one(t, tiny_tokenizer(), RenderConfig(max_context=8192))
    tokens = len(rendered.input_ids)
    content = sum(len(s.content.encode()) for s in t.steps)
    assert tokens < 3 * cap + content + 2048, f"{tokens} pass-1 tokens for a 3-step trace (seed {SEED})"


def _bomb(path, r, n_good: int, bomb_steps: int, value_bytes: int, dictionary: bool = True) -> list[str]:
    """A small canonical Parquet file: `n_good` ordinary rows and one row whose steps repeat one
    `value_bytes` value `bomb_steps` times (held once in a dictionary page, or compressed ~1000:1)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from masprism_batch import schema
    from masprism_batch.trace import Step, Trace

    big = r.choice("abc") * value_bytes
    good = [Trace(trace_id=f"g{i}-{r.randrange(16**6):06x}", source="app",
                  steps=[Step(index=0, agent="a", content=text(r, 1, 40))]) for i in range(n_good)]
    bomb = Trace(trace_id="bomb", source="app", steps=[Step(index=k, agent="a", content=big) for k in range(bomb_steps)])
    rows = [t.to_row() for t in good]
    rows.insert(r.randrange(len(rows) + 1), bomb.to_row())
    pq.write_table(pa.Table.from_pylist(rows, schema=schema.TRACES), path, compression="zstd",
                   use_dictionary=dictionary, row_group_size=len(rows))
    return [t.trace_id for t in good]


def test_parquet_dictionary_bomb_rejected_by_row_before_decoding(tmp_path):
    """One row decodes to 400 MiB through a dictionary page (a few kB on disk): refused from its lengths alone,
    the rows beside it ingested; the pyarrow pool never holds the decoded row (peak checked in a subprocess)."""
    import subprocess
    import sys

    r = rng("parquet-bomb")
    good = _bomb(tmp_path / "bomb.parquet", r, r.randint(20, 40), 400, 1 << 20)
    assert (tmp_path / "bomb.parquet").stat().st_size < 200_000
    code = ("import json, resource, sys; from masprism_batch.ingest import read_inputs\n"
            "errs = []; before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "ids = [t.trace_id for t in read_inputs([sys.argv[1]], 'auto', errs.append)]\n"
            "grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024\n"
            "print(json.dumps({'ids': ids, 'errs': [[e['reason'], e['record_id']] for e in errs], 'grew': grew}))")
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path / "bomb.parquet")], capture_output=True,
                         text=True, timeout=300)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert sorted(out["ids"]) == sorted(good), f"seed {SEED}"
    assert [e[0] for e in out["errs"]] == ["record_too_large"], out["errs"]
    assert out["grew"] < 150 * 1024**2, f"peak memory grew {out['grew'] / 1e6:.0f} MB reading a 400 MiB row"


def test_parquet_row_group_over_the_cap_is_not_read(tmp_path):
    """A plainly encoded row group that claims more than max_file_bytes uncompressed is refused from the footer,
    in ingest and in the in-place reader of `run` (read_shard), one rejection per row there."""
    from masprism_batch.pipelines.plan import Shard, read_shard

    r = rng("parquet-group")
    path = tmp_path / "group.parquet"
    good = _bomb(path, r, r.randint(3, 8), 8, 1 << 20, dictionary=False)
    limits = IngestConfig(max_file_bytes=4 << 20)
    errors: list[dict] = []
    assert list(read_inputs([str(path)], "auto", errors.append, limits=limits)) == []
    [e] = errors
    assert e["reason"] == "record_too_large" and "max_file_bytes" in e["message"] and e["record_id"].startswith("rows 1-")
    n = len(good) + 1
    traces, errs = read_shard(Shard("s", str(path), 0, n, "label", {}, ()), limits)
    assert traces == [] and len(errs) == n and {x["reason"] for x in errs} == {"record_too_large"}
    # within the cap, the same file is read whole, the bomb row included (its steps then cut by max_step_bytes)
    traces, errs = read_shard(Shard("s", str(path), 0, n, "label", {}, ()), IngestConfig())
    assert sorted(t.trace_id for t in traces) == sorted([*good, "bomb"])
