"""Issue 34 item 4 and Inspect AI: JSON lines read line by line in each line's own format, UTF-16 / UTF-32
files with a byte-order mark, zip containers (members read as the files they are; Inspect `.eval` as one log)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from ingest_synth import SEED, rng, text

from masprism_batch.ingest import read_inputs

REAL = Path(__file__).resolve().parents[1] / "data" / "formats" / "_real"


def _read(path, fmt="auto"):
    errors: list[dict] = []
    return list(read_inputs([str(path)], fmt, errors.append)), errors


def _chat(r) -> tuple[dict, str, str]:
    q, a = f"Q {text(r, 3, 60)}", f"A {text(r, 3, 60)}"
    return {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}, q, a


def test_mixed_json_lines_read_each_line_in_its_own_format(tmp_path):
    r = rng("mixed")
    chat, q, a = _chat(r)
    canon = {"trace_id": f"c-{r.getrandbits(32)}", "steps": [{"agent": "x", "content": text(r, 3, 40)}]}
    tau = {"task_id": 3, "reward": 1.0, "traj": [{"role": "user", "content": f"T {text(r, 3, 40)}"},
                                                 {"role": "assistant", "content": text(r, 3, 40)}]}
    lines = [chat, canon, {"task_id": 4, "reward": 0.0, "traj": "lost"}, tau, {"event": "heartbeat"}]
    order = list(range(len(lines)))
    r.shuffle(order)
    (tmp_path / "mixed.jsonl").write_text("\n".join(json.dumps(lines[i]) for i in order) + "\n")
    traces, errors = _read(tmp_path / "mixed.jsonl")
    assert sorted(t.source for t in traces) == ["jsonl", "openai", "tau-bench"], f"seed {SEED}"
    got = {t.source: t for t in traces}
    assert [s.content for s in got["openai"].steps] == [q, a] and got["openai"].question == q
    assert got["jsonl"].trace_id == canon["trace_id"]
    line = {i: order.index(i) + 1 for i in range(len(lines))}
    rows = {e["record_id"]: e for e in errors}
    tau_id = f"tau-bench/mixed#{line[2]}/task-4"  # τ-bench names a rejected result by its trace id (line in it)
    assert set(rows) == {tau_id, f"line {line[4]}"}, errors
    bad_tau, unknown = rows[tau_id], rows[f"line {line[4]}"]
    assert bad_tau["reason"] == "invalid_record" and "τ-bench" in bad_tau["message"]  # its own format's reason
    assert "traj" in bad_tau["message"] and "OpenAI" not in bad_tau["message"]
    assert unknown["reason"] == "unknown_format"


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_utf16_and_utf32_with_a_bom_read_as_utf8(tmp_path, codec, suffix):
    r = rng(f"bom-{codec}-{suffix}")
    chat, q, a = _chat(r)
    body = json.dumps(chat, ensure_ascii=False) + "\n"
    (tmp_path / f"u8{suffix}").write_bytes(body.encode("utf-8"))
    (tmp_path / f"wide{suffix}").write_bytes("\ufeff".encode(codec) + body.encode(codec))
    (ref,), e1 = _read(tmp_path / f"u8{suffix}")
    (got,), e2 = _read(tmp_path / f"wide{suffix}")
    assert e1 == e2 == [] and [s.content for s in got.steps] == [s.content for s in ref.steps] == [q, a]


def test_zip_members_read_as_their_files_and_named_in_rows(tmp_path):
    r = rng("zip")
    chat, q, _ = _chat(r)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("runs/chat.json", json.dumps(chat))
        z.writestr("runs/more.jsonl", json.dumps(_chat(r)[0]) + "\n" + json.dumps({"event": 1}) + "\n")
        z.writestr("README.txt", "not data")
        z.writestr("broken.json", "{")
    (tmp_path / "export.zip").write_bytes(buf.getvalue())
    traces, errors = _read(tmp_path)  # a folder walk picks up the .zip
    assert len(traces) == 2 and traces[0].question == q and traces[0].trace_id.startswith("openai/chat~")
    assert sorted((e["reason"], e["input_path"].rsplit("/", 2)[-2:][-1]) for e in errors) == [
        ("invalid_json", "broken.json"), ("unknown_format", "more.jsonl")]
    (tmp_path / "bad.zip").write_bytes(b"PK\x03\x04" + bytes(r.randrange(256) for _ in range(64)))
    _, errors = _read(tmp_path / "bad.zip")
    assert [e["reason"] for e in errors] == ["invalid_zip"]


def test_inspect_eval_zip_and_json_log_are_the_same_sample():
    (z,), e1 = _read(REAL / "inspect_ai" / "log_formats.eval")
    (j,), e2 = _read(REAL / "inspect_ai" / "log_formats.json")
    assert e1 == e2 == [] and z.source == j.source == "inspect" and z.system == "popularity"
    assert [(s.role, s.content) for s in z.steps] == [(s.role, s.content) for s in j.steps]
    assert [s.role for s in z.steps] == ["system", "user", "assistant"] and z.steps[1].content == z.question
    assert "Positive posts about myself" in z.question and z.metadata["scores"] == {"match": "I"}


def test_inspect_tool_calls_name_their_function(tmp_path):
    r = rng("inspect")
    cmd, out = f"ls {text(r, 1, 20)}", text(r, 1, 80)
    log = {"version": 2, "status": "success", "eval": {"task": "ctf", "run_id": "R1", "model": "m"}, "samples": [{
        "id": 7, "epoch": 2, "input": "Find the flag.", "target": "flag{x}", "scores": {"includes": {"value": "C"}},
        "messages": [
            {"role": "user", "content": "Find the flag.", "source": "input"},
            {"role": "assistant", "content": [{"type": "reasoning", "reasoning": "List files first."},
                                              {"type": "text", "text": "Looking."}],
             "tool_calls": [{"id": "c1", "function": "bash", "arguments": {"cmd": cmd}}]},
            {"role": "tool", "content": out, "tool_call_id": "c1", "function": "bash",
             "error": {"type": "timeout", "message": "took too long"}}]}]}
    (tmp_path / "log.json").write_text(json.dumps(log))
    (t,), errors = _read(tmp_path / "log.json")
    assert errors == [] and t.trace_id == "inspect/ctf/R1/7#2" and t.question == "Find the flag."
    assert t.steps[1].content == "Reasoning: List files first.\nLooking.\nTool call: bash(" + json.dumps(
        {"cmd": cmd}, ensure_ascii=False) + ")"
    assert t.steps[2].agent == "bash" and t.steps[2].content.endswith("Error (timeout): took too long")
    assert t.metadata["scores"] == {"includes": "C"} and t.metadata["epoch"] == 2
