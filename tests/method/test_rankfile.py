"""The ranker file: plain versioned JSON, matched by system, refused for another model, written atomically."""

import json

import numpy as np
import pytest

from masprism_batch.method import fit_system as fs
from masprism_batch.method import rankfile as rk
from masprism_batch.method.rankfile import FORMAT, RankerFile, RankerFileError, system_key
from masprism_batch.trace import Trace


def _file(tmp_path, synth, model="smollm2-135m"):
    f = fs.fit_system(synth(40, seed=7), "team/agents")
    path = tmp_path / "ranker.json"
    RankerFile(model, {"team/agents": f.entry}, {"date": "2026-11-25"}).write(path)
    return path, f


def test_plain_json_names_model_features_and_version(tmp_path, synth):
    path, f = _file(tmp_path, synth)
    d = json.loads(path.read_text())
    assert d["format"] == FORMAT and d["version"] == rk.VERSION and d["model_id"] == "smollm2-135m"
    e = d["systems"]["team/agents"]
    assert e["verdict"] == "ranker" and len(e["features"]) == len(e["weights"])
    assert not {"cf_z", "has_cf", "attn_learned_norm"} & set(e["features"])  # the costly signals are not read
    assert [p.name for p in tmp_path.iterdir()] == ["ranker.json"]  # no temporary file left


def test_matched_by_system_other_systems_get_none(tmp_path, synth):
    path, _ = _file(tmp_path, synth)
    rk._CACHE.clear()
    case = synth(1, seed=9)[0]
    sr = rk.ranker_for(str(path), case.trace, "smollm2-135m")
    assert sr.verdict_by == "ranker:team/agents" and sr.features
    order, probs, agent, conf = sr.apply(case.trace, case.rows, case.ranked)
    assert sorted(order) == list(range(len(case.trace.steps))) and abs(probs.sum() - 1) < 1e-9
    assert agent in {s.agent for s in case.trace.steps} and 0 < conf < 1
    other = Trace(trace_id="o", source="langfuse", system="billing-bot", steps=case.trace.steps)
    assert system_key(other) == "billing-bot" and rk.ranker_for(str(path), other, "smollm2-135m") is None


def test_another_model_is_refused_with_a_clear_message(tmp_path, synth):
    path, _ = _file(tmp_path, synth)
    rk._CACHE.clear()
    with pytest.raises(RankerFileError, match="fitted on signals of model 'smollm2-135m'.*refit"):
        rk.ranker_for(str(path), synth(1)[0].trace, "tiny-random")


def test_not_a_ranker_file_or_newer_version_or_unknown_feature(tmp_path, synth):
    bad = tmp_path / "x.json"
    bad.write_text('{"features": []}')
    with pytest.raises(RankerFileError, match="not a masprism-batch ranker file"):
        RankerFile.read(bad)
    path, _ = _file(tmp_path, synth)
    d = json.loads(path.read_text())
    d["version"] = 99
    bad.write_text(json.dumps(d))
    with pytest.raises(RankerFileError, match="newer"):
        RankerFile.read(bad)
    d["version"] = 1
    d["systems"]["team/agents"]["features"][0] = "something_else"
    bad.write_text(json.dumps(d))
    with pytest.raises(RankerFileError, match="something_else"):
        RankerFile.read(bad)
    d = json.loads(path.read_text())
    d["systems"]["team/agents"]["offset"] = "median"  # an order this version cannot compute
    bad.write_text(json.dumps(d))
    with pytest.raises(RankerFileError, match="corrects an order.*median"):
        RankerFile.read(bad)


def test_version_2_entry_without_offset_corrects_the_rule(tmp_path, synth):
    """A version 2 file has no "offset": its ranker is a correction of the rule's order, as it was fitted."""
    from masprism_batch.method import fit as ft

    cases = synth(30, seed=11)
    m = ft.fit_correction(cases, 0.3)
    entry = {"system": "team/agents", "verdict": "ranker", "rule": "faithful", "agent_rule": "author",
             "features": ft.BASE_FEATURES + ft.PRIOR_FEATURES, "weights": m.w.tolist(), "mean": m.mean.tolist(),
             "std": m.std.tolist(), "l2": 0.3, "offset_scale": ft.OFFSET_SCALE, "priors": m.priors.to_json()}
    path = tmp_path / "v2.json"
    path.write_text(json.dumps({"format": FORMAT, "version": 2, "model_id": "m", "systems": {"team/agents": entry}}))
    sr = RankerFile.read(path).for_trace(cases[0].trace)
    for c in synth(5, seed=12):
        assert np.allclose(sr.apply(c.trace, c.rows, c.ranked)[1], m.probs(c))


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path, synth, monkeypatch):
    path, _ = _file(tmp_path, synth)
    before = path.read_text()
    rf = RankerFile.read(path)
    rf.systems["team/agents"]["weights"] = [np.nan]  # still serialisable; make json.dumps fail instead
    monkeypatch.setattr(RankerFile, "to_json", lambda self: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        rf.write(path)
    assert path.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["ranker.json"]


def test_label_prior_verdict_blames_the_most_often_blamed_position(synth):
    from masprism_batch.method import fit as ft
    from masprism_batch.method.rankfile import SystemRanker

    cases = synth(10, seed=11)
    pri = ft.Priors.count(cases)
    entry = {"system": "team/agents", "verdict": "prior", "rule": "faithful", "agent_rule": "author",
             "priors": pri.to_json(), "calibration": {"a": 0.0, "b": 0.0}}
    sr = SystemRanker(entry, "m")
    c = synth(1, seed=12)[0]
    order, probs, agent, conf = sr.apply(c.trace, c.rows, c.ranked)
    top = min(pri.top_index(), len(c.trace.steps) - 1)
    assert order[0] == top and sorted(order) == list(range(len(c.trace.steps))) and probs is None
    assert agent == c.trace.steps[top].agent and conf == 0.5 and sr.verdict_by == "prior:team/agents"
    assert sr.features == []  # a label prior reads no costly signal
