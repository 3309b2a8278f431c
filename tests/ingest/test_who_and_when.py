"""Who&When adapter: synthetic records (fresh random each run) and the real files in ../shared/data."""

from __future__ import annotations

import json

import pytest
from ingest_synth import SEED, rng, who_and_when, write_json

from masprism_batch.ingest import read_inputs
from masprism_batch.ingest.who_and_when import agent_of_role


@pytest.mark.parametrize("subset", ["Algorithm-Generated", "Hand-Crafted"])
def test_synthetic_records(tmp_path, subset):
    r = rng(subset)
    hand = subset == "Hand-Crafted"
    docs = {}
    for i in range(r.randint(3, 7)):
        doc, expect = who_and_when(r, hand)
        stem = str(r.randrange(10**6)) + f"_{i}"
        write_json(tmp_path / subset / f"{stem}.json", doc, gz=r.random() < 0.5)
        docs[f"{subset}/{stem}"] = (doc, expect)
    errors: list[dict] = []
    traces = {t.trace_id: t for t in read_inputs([str(tmp_path)], on_error=errors.append)}
    assert errors == [], f"seed {SEED}"
    assert set(traces) == set(docs)
    for tid, (doc, expect) in docs.items():
        t = traces[tid]
        assert t.source == f"who-and-when/{subset}"
        assert t.system == ("Magentic-One" if hand else "CaptainAgent")
        assert t.question == doc["question"]
        assert [(s.agent, s.role) for s in t.steps] == expect
        assert [s.content for s in t.steps] == [m["content"] for m in doc["history"]]
        assert [s.index for s in t.steps] == list(range(len(expect)))
        assert {s.kind for s in t.steps} == {"message"}
        ms = int(doc["mistake_step"])
        assert t.labels.mistake_step == ms and t.labels.mistake_agent == doc["mistake_agent"]
        assert t.steps[ms].agent == doc["mistake_agent"]
        # ground truth must be nowhere the model can read: only in `labels`
        readable = json.dumps(t.metadata) + "".join(s.content for s in t.steps) + (t.question or "")
        assert "GROUND-TRUTH-" not in readable and "REASON-" not in readable
        assert not {k for k in t.metadata if k.startswith(("mistake", "is_correct", "ground"))}
        assert ("system_prompt" in t.metadata) == (not hand)


def test_role_suffix_stripping():
    assert agent_of_role("Orchestrator (-> WebSurfer)") == "Orchestrator"
    assert agent_of_role("Orchestrator (termination condition)") == "Orchestrator"
    assert agent_of_role("WebSurfer") == "WebSurfer"
    assert agent_of_role("Agent (a) (b)") == "Agent (a)"


def test_out_of_range_label_keeps_trace(tmp_path):
    doc, _ = who_and_when(rng("oob"), True)
    doc["mistake_step"] = str(len(doc["history"]) + 3)
    write_json(tmp_path / "Hand-Crafted" / "x.json", doc)
    errors: list[dict] = []
    [t] = list(read_inputs([str(tmp_path)], on_error=errors.append))
    assert t.labels.mistake_step is None and t.labels.mistake_agent == doc["mistake_agent"]
    assert [e["reason"] for e in errors] == ["invalid_label"]


def test_real_who_and_when(shared_data):
    errors: list[dict] = []
    traces = list(read_inputs([str(shared_data / "who_and_when")], on_error=errors.append))
    assert [(e["reason"], e["input_path"].rsplit("/", 1)[-1]) for e in errors] == [("skipped_file", "LICENSE")]
    by_subset = {s: [t for t in traces if t.source == f"who-and-when/{s}"] for s in ("Algorithm-Generated", "Hand-Crafted")}
    assert len(by_subset["Algorithm-Generated"]) == 78 and len(by_subset["Hand-Crafted"]) == 36
    for t in traces:
        raw = json.loads((shared_data / "who_and_when" / f"{t.trace_id}.json").read_text())
        assert len(t.steps) == len(raw["history"])
        assert t.labels.mistake_step == int(raw["mistake_step"])
        assert set(t.metadata) <= {"subset", "question_ID", "level", "system_prompt"}
    # the labelled agent is the acting agent of the labelled step in nearly every record (case-insensitive);
    # the few exceptions are label noise of the dataset, not of the adapter
    agree = sum(t.steps[t.labels.mistake_step].agent.lower() == t.labels.mistake_agent.lower() for t in traces)
    assert agree / len(traces) > 0.9


@pytest.mark.parametrize("hand", [False, True])
def test_shape_outside_the_benchmark_folders_is_not_the_benchmark(tmp_path, hand):
    """Issue 32: a log in the Who&When shape is a benchmark system's only in that benchmark's folder; elsewhere its
    system is unknown (the user names it), its id comes from its own path, and agents are read as logged."""
    r = rng(f"any-folder-{hand}")
    folder = "team-" + "".join(r.choice("abcdefgh") for _ in range(6))
    doc, expect = who_and_when(r, hand)
    write_json(tmp_path / folder / "0.json", doc)
    errors: list[dict] = []
    [t] = list(read_inputs([str(tmp_path)], on_error=errors.append))
    assert errors == [], f"seed {SEED}"
    assert (t.trace_id, t.source, t.system) == (f"{folder}/0", "who-and-when", None)
    assert "subset" not in t.metadata
    assert [s.agent for s in t.steps] == [a for a, _ in expect]
