"""Issue 37 items 1 and 2: one hostile record costs that record, never the file; no string that is not UTF-8
reaches an output. Before: a `start_time` of more than 4,300 digits or `metadata` JSON text nested 3,000 deep
ended the reading of a canonical JSON-lines file (999 of 1,000 good traces in neither traces/ nor errors/), and a
lone surrogate in an error row (an OpenAI `role`, a file name that is not UTF-8) made ingest/run/attribute exit 1
on every try."""

from __future__ import annotations

import json
import os

import pytest
from ingest_synth import SEED, rng, text
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_REJECTED, app
from masprism_batch.ingest import read_inputs
from masprism_batch.outdir.reads import read_dataset
from masprism_batch.schema import clean_text, error_row

HOSTILE = {
    "digits": lambda r: {"steps": [{"agent": "a", "content": "x", "start_time": str(r.randint(1, 9)) * 4400}]},
    "huge_int": lambda r: {"steps": [{"agent": "a", "content": "x", "start_time": 10 ** r.randint(400, 4000)}]},
    "deep_meta_text": lambda r: {"steps": [{"agent": "a", "content": "x"}],
                                 "metadata": "[" * 3000 + "]" * 3000},
    "deep_meta": lambda r: {"steps": [{"agent": "a", "content": "x"}], "metadata": {"k": None}},  # filled below
}


def _good(r, i: int) -> dict:
    return {"trace_id": f"g{i}-{r.randrange(16**6):06x}", "source": "app",
            "steps": [{"agent": r.choice(["planner", "coder"]), "content": text(r, 1, 40)}
                      for _ in range(r.randint(1, 4))]}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_one_hostile_line_costs_only_that_line(tmp_path, kind):
    r = rng(f"isolation-{kind}")
    good = [_good(r, i) for i in range(1000)]
    bad = {"trace_id": "hostile", "source": "app", **HOSTILE[kind](r)}
    lines = [json.dumps(g) for g in good]
    at = r.randrange(len(lines))
    if kind == "deep_meta":  # metadata as a JSON object 3,000 deep: the line parses (deep fallback), then is refused
        line = json.dumps(bad).replace('{"k": null}', '{"k": ' * 3000 + "1" + "}" * 3000)
    else:
        line = json.dumps(bad)
    lines.insert(at, line)
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    errors: list[dict] = []
    got = [t.trace_id for t in read_inputs([str(tmp_path / "in.jsonl")], "auto", errors.append)]
    assert got == [g["trace_id"] for g in good], f"seed {SEED}"
    [e] = errors
    assert e["reason"] == "invalid_record" and e["record_id"] == "hostile", e
    assert f"line {at + 1}:" in e["message"], e  # the line is named, so it can be found


def test_error_rows_are_valid_utf8():
    row = error_row(stage="ingest", reason="invalid_record", message='role "\ud800" bad',
                    input_path=os.fsdecode(b"in/bad\xff.json"), record_id="id\udfff")
    assert row["message"] == 'role "\ufffd" bad' and row["record_id"] == "id\ufffd"
    assert row["input_path"] == "in/bad\\xff.json"  # the byte that is not UTF-8 stays recognisable
    for v in row.values():
        if isinstance(v, str):
            v.encode("utf-8")
    assert clean_text("plain é 🙂") == "plain é 🙂" and clean_text(None) is None


@pytest.mark.parametrize("command", ["ingest", "attribute", "run"])
def test_surrogate_role_and_non_utf8_file_name_rejected_alone(tmp_path, command):
    r = rng(f"utf8-{command}")
    src = tmp_path / "in"
    src.mkdir()
    good = [_good(r, i) for i in range(r.randint(3, 6))]
    (src / "good.jsonl").write_text("\n".join(json.dumps(g) for g in good) + "\n", encoding="utf-8")
    chat = [{"messages": [{"role": "user", "content": text(r, 3, 30)},
                          {"role": "assistant", "content": text(r, 3, 30)}]} for _ in range(2)]
    lines = [json.dumps(c) for c in chat]
    lines.insert(1, '{"messages": [{"role": "\\ud800", "content": "hi"}]}')  # the 87-byte line of the issue
    (src / "chat.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        with open(os.path.join(os.fsencode(src), b"bad\xff.json"), "wb") as f:
            f.write(b"{not json")
    except OSError:
        pytest.skip("this filesystem refuses file names that are not UTF-8")
    out = tmp_path / "out"
    args = [command, str(src), "-o", str(out), "--no-progress"]
    if command != "ingest":
        args += ["--model", "tiny-random"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == EXIT_REJECTED, res.output  # done, some inputs rejected; not 1 (internal error)
    errs = read_dataset(out / "errors").to_pylist()
    assert sorted(e["reason"] for e in errs) == ["invalid_json", "invalid_record"], errs
    assert any(e["input_path"].endswith("bad\\xff.json") for e in errs), errs
    want = {g["trace_id"] for g in good}
    table = "traces" if command == "ingest" else "attributions"
    got = {t["trace_id"] for t in read_dataset(out / table).to_pylist()}
    chats = got - want  # lines 1 and 3 of chat.jsonl, named by their runs' content (ingest/run_ids.py)
    assert want <= got and len(chats) == 2 and all(c.startswith("openai/") for c in chats), f"seed {SEED}"
    asked = {t["question"] for t in read_dataset(out / "traces").to_pylist() if t["trace_id"] in chats}
    assert asked == {c["messages"][0]["content"] for c in chat}, f"seed {SEED}"


@pytest.mark.parametrize("bad_time", ["9" * 5000, 10**400])
def test_hostile_span_time_costs_only_its_trace(tmp_path, bad_time):
    """A grouped format (OTLP: several traces per file): a span time of 5,000 digits (int()'s limit) or an integer
    beyond any float ended the file as one internal_error; now that span's time is unknown and every trace reads."""
    r = rng("otlp-time")

    def span(tid: str, k: int, t) -> dict:
        said = [{"role": "assistant", "parts": [{"type": "text", "content": text(r, 5, 40)}]}]
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(said)}
        return {"traceId": tid, "spanId": f"{k:016x}", "name": "chat", "startTimeUnixNano": t,
                "attributes": [{"key": a, "value": {"stringValue": v}} for a, v in attrs.items()]}

    tids = [f"{r.randrange(16**32):032x}" for _ in range(3)]
    spans = [span(tid, k, str(1_700_000_000_000_000_000 + k)) for k, tid in enumerate(tids)]
    spans[1]["startTimeUnixNano"] = bad_time
    doc = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": spans}]}]}
    (tmp_path / "otel.json").write_text(json.dumps(doc), encoding="utf-8")
    errors: list[dict] = []
    got = {t.trace_id: t for t in read_inputs([str(tmp_path / "otel.json")], "auto", errors.append)}
    assert set(got) == set(tids) and errors == [], (errors, f"seed {SEED}")
    assert got[tids[1]].steps[0].start_time is None and got[tids[0]].steps[0].start_time is not None


def test_overlong_line_is_rejected_alone(tmp_path):
    """A JSON line over max_record_bytes ended the reading of its file; now it is skipped in bounded chunks and
    the lines after it are read. Only a line past max_file_bytes (a one-line bomb) still ends the file."""
    from masprism_batch.config import IngestConfig

    r = rng("long-line")
    good = [_good(r, i) for i in range(r.randint(20, 60))]
    lines = [json.dumps(g) for g in good]
    at = r.randrange(len(lines))
    lines.insert(at, json.dumps({"trace_id": "long", "steps": [{"agent": "a", "content": "x" * 5000}]}))
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    errors: list[dict] = []
    limits = IngestConfig(max_record_bytes=2048, max_file_bytes=1 << 20)
    got = [t.trace_id for t in read_inputs([str(tmp_path / "in.jsonl")], "auto", errors.append, limits=limits)]
    assert got == [g["trace_id"] for g in good], f"seed {SEED}"
    assert [(e["reason"], e["record_id"]) for e in errors] == [("record_too_large", f"line {at + 1}")]
    errors.clear()
    got = list(read_inputs([str(tmp_path / "in.jsonl")], "auto", errors.append,
                           limits=IngestConfig(max_record_bytes=2048, max_file_bytes=4096)))
    assert len(got) == at and [e["reason"] for e in errors] == ["record_too_large"]
    assert "rest of the file" in errors[0]["message"]
