"""The ranker file: plain versioned JSON, matched by system, refused for another model, written atomically."""

import json

import numpy as np
import pytest

from masprism_batch.fit import system as fs
from masprism_batch.trace import Trace
from masprism_batch.verdict import case as vcase
from masprism_batch.verdict import correction as vcorr
from masprism_batch.verdict import rankfile as rk
from masprism_batch.verdict.rankfile import FORMAT, RankerFile, RankerFileError, system_key


def _load(ranker, model_id=None):
    """The file a run of `model_id` applies for the setting `ranker`, read as a run reads it (once)."""
    return rk.RankerSetting.read(ranker).for_model(model_id)


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
    case = synth(1, seed=9)[0]
    rf = _load(str(path), "smollm2-135m")
    sr = rf.for_trace(case.trace)
    assert sr.verdict_by == "ranker:team/agents" and sr.features
    order, probs, agent, conf = sr.apply(case.trace, case.rows, case.ranked)
    assert sorted(order) == list(range(len(case.trace.steps))) and abs(probs.sum() - 1) < 1e-9
    assert agent in {s.agent for s in case.trace.steps} and 0 < conf < 1
    other = Trace(trace_id="o", source="langfuse", system="billing-bot", steps=case.trace.steps)
    assert system_key(other) == "billing-bot" and rf.for_trace(other) is None


def test_another_model_is_refused_with_a_clear_message(tmp_path, synth):
    path, _ = _file(tmp_path, synth)
    with pytest.raises(RankerFileError, match="fitted on signals of model 'smollm2-135m'.*refit"):
        _load(str(path), "tiny-random")
    assert _load(rk.PACKAGED_NAME, "tiny-random") is None  # the packaged rankers simply do not apply
    assert _load(str(tmp_path), "smollm2-135m") is None  # a folder without rankers.json: only a fallback
    path.rename(tmp_path / rk.PACKAGED)
    assert _load(str(tmp_path), "smollm2-135m").model_id == "smollm2-135m"  # a folder: its rankers.json
    with pytest.raises(FileNotFoundError, match="ranker file not found"):
        _load(str(tmp_path / "nothing.json"))


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
    d["version"] = rk.VERSION - 1  # older: refused too (refit), never read as the current format
    bad.write_text(json.dumps(d))
    with pytest.raises(RankerFileError, match="older.*refit"):
        RankerFile.read(bad)
    d["version"] = rk.VERSION
    d["systems"]["team/agents"]["features"][0] = "something_else"
    bad.write_text(json.dumps(d))
    with pytest.raises(RankerFileError, match="something_else"):
        RankerFile.read(bad)
    d = json.loads(path.read_text())
    d["systems"]["team/agents"]["offset"] = "median"  # an order this version cannot compute
    bad.write_text(json.dumps(d))
    with pytest.raises(RankerFileError, match="corrects an order.*median"):
        RankerFile.read(bad)


def test_a_ranker_entry_names_the_order_it_corrects(tmp_path, synth):
    """`offset` (what a ranker corrects) is part of every ranker entry `fit` writes: one without it is refused,
    and a written one applies exactly the fitted model, for every order this version fits and for "prior" (the
    candidates re-ranked by the label prior), which it no longer fits but still reads from older fits."""
    from masprism_batch.fit import fitting as ft

    assert set(vcorr.OFFSETS) < set(vcorr.READ_OFFSETS) and "prior" in vcorr.READ_OFFSETS
    cases = synth(30, seed=11)
    for offset in vcorr.READ_OFFSETS:
        m = ft.fit_correction(cases, 0.3, offset)
        entry = {"system": "team/agents", "verdict": "ranker", "rule": "faithful", "agent_rule": "author",
                 "features": vcase.BASE_FEATURES + vcase.PRIOR_FEATURES, "weights": m.w.tolist(), "mean": m.mean.tolist(),
                 "std": m.std.tolist(), "l2": 0.3, "offset_scale": m.offset_scale, "priors": m.priors.to_json()}
        path = tmp_path / "r.json"
        doc = {"format": FORMAT, "version": rk.VERSION, "model_id": "m", "systems": {"team/agents": entry}}
        path.write_text(json.dumps(doc))
        with pytest.raises(RankerFileError, match="offset"):
            RankerFile.read(path)
        entry["offset"] = m.offset
        path.write_text(json.dumps(doc))
        sr = RankerFile.read(path).for_trace(cases[0].trace)
        for c in synth(5, seed=12):
            assert np.allclose(sr.apply(c.trace, c.rows, c.ranked)[1], m.probs(c)), offset


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path, synth, monkeypatch):
    path, _ = _file(tmp_path, synth)
    before = path.read_text()
    rf = RankerFile.read(path)
    rf.systems["team/agents"]["weights"] = [np.nan]  # still serialisable; make json.dumps fail instead
    monkeypatch.setattr(RankerFile, "to_json", lambda self: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        rf.write(path)
    assert path.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["ranker.json"]


def test_label_prior_verdict_re_ranks_the_logs_own_candidates(synth, np_rng):
    """Issue 32: the label prior moves the most often blamed position first only where it is one of the log's
    own candidates; elsewhere the rule's order stands. Never one fixed step for every log."""

    from masprism_batch.verdict.rankfile import SystemRanker

    seed = int(np_rng.integers(1 << 30))
    cases = synth(10, seed=seed)
    pri = vcase.Priors.count(cases)
    from masprism_batch.verdict import rules

    entry = {"system": "team/agents", "verdict": "prior", "rule": "faithful", "agent_rule": "author",
             "priors": pri.to_json(), "calibration": rules.read_fallback(None).calibration}  # an evidence one
    sr = SystemRanker(entry, "m")
    tops = []
    for c in synth(30, seed=seed + 1):
        order, probs, agent, conf = sr.apply(c.trace, c.rows, c.ranked)
        assert sorted(order) == list(range(len(c.trace.steps))) and probs is None, seed
        assert order[0] in c.ranked and agent == c.trace.steps[order[0]].agent, seed
        # the prior only moves a more often blamed candidate ahead, and the most blamed one when it leads anyway
        assert pri.pos.get(order[0], 0.0) >= pri.pos.get(c.ranked[0], 0.0), seed
        if c.ranked[0] == pri.top_index():
            assert order[0] == c.ranked[0], seed
        if not any(pri.pos.get(k, 0.0) for k in c.ranked):
            assert order[0] == c.ranked[0], seed  # no candidate was ever blamed: the rule's order stands
        assert 1 / len(c.trace.steps) <= conf < 1, seed
        tops.append(order[0])
    assert len(set(tops)) > 1 and sr.verdict_by == "prior:team/agents"
    assert sr.features == []  # a label prior reads no costly signal


def test_packaged_rankers_give_verdicts_that_differ_between_logs(synth, np_rng):
    """Issue 32: no packaged entry names one step for every log of its system: applied to random logs of that
    system, each gives several distinct verdicts, none for most of them; the zero-training agent rule shipped is
    a known one and the shipped confidence reads the verdict's evidence."""

    from masprism_batch.method import weights_dir
    from masprism_batch.verdict import rules
    from masprism_batch.verdict.rankfile import PACKAGED, RankerFile, SystemRanker

    rf = RankerFile.read(weights_dir() / PACKAGED)
    seed = int(np_rng.integers(1 << 30))
    for name, entry in rf.systems.items():
        sr = SystemRanker(entry, rf.model_id)
        tops = [sr.apply(c.trace, c.rows, c.ranked)[0][0] for c in synth(40, seed=seed, source=name)]
        share = max(tops.count(x) for x in tops) / len(tops)
        assert len(set(tops)) > 1 and share <= 0.75, (name, seed, entry["verdict"], share)
    assert rules.read_fallback(None).agent_rule in rules.AGENT_RULES
    assert (rules.read_fallback(None).calibration or {}).get("kind") == "evidence"


# Issue 37: a ranker file is a user's input, checked completely before any of it is applied.
def _tampered(d: dict, how: str, rng) -> str:
    """Change one field of a valid file `d` the way `how` says; returns the field the error must name."""
    e = d["systems"]["team/agents"]
    i = int(rng.integers(0, len(e["weights"])))
    if how == "negative prior index":
        e["priors"]["pos"] = {str(-int(rng.integers(1, 9))): 100.0}
        return "priors.pos"
    if how == "relpos bin out of range":
        e["priors"]["relpos"] = {str(int(rng.integers(10, 99))): 1.0}
        return "priors.relpos"
    if how == "NaN weight":
        e["weights"][i] = float("nan")
        return f"weights[{i}]"
    if how == "infinite mean":
        e["mean"][i] = float("inf") * (1 if rng.random() < .5 else -1)
        return f"mean[{i}]"
    if how == "zero std":
        e["std"][i] = 0.0
        return f"std[{i}]"
    if how == "string weight":
        e["weights"][i] = "0.5"
        return f"weights[{i}]"
    if how == "short weights":
        e["weights"] = e["weights"][: int(rng.integers(0, len(e["weights"])))]
        return "weights"
    if how == "missing std":
        del e["std"]
        return "std"
    if how == "NaN calibration":
        e["calibration"]["w"][0] = float("nan")
        return "calibration.w[0]"
    if how == "boolean prior count":
        e["priors"]["n"] = True
        return "priors.n"
    if how == "unknown verdict":
        e["verdict"] = "oracle"
        return "verdict"
    if how == "unknown rule":
        e["rule"] = "magic"
        return "rule"
    if how == "unknown agent rule":
        e["agent_rule"] = "prior|oracle"
        return "agent_rule"
    if how == "entry not an object":
        d["systems"]["team/agents"] = [1, 2]
        return "systems['team/agents']"
    if how == "version not a number":
        d["version"] = "three"
        return "version"
    # a value no fit writes, each past what the softmax of the step scores survives: the verdict was NaN
    # probabilities, a NaN confidence and step 0 blamed, silently
    if how == "huge weight":
        e["weights"] = [1e308 * (1 if rng.random() < .5 else -1) for _ in e["weights"]]
        return "weights[0]"
    if how == "huge mean":
        e["mean"][i] = -1e300
        return f"mean[{i}]"
    if how == "tiny std":
        e["std"][i] = 1e-300
        return f"std[{i}]"
    if how == "huge prior count":
        e["priors"]["pos"]["0"] = 1e308
        return "priors.pos"
    if how == "system renamed":  # a hand edit of the one field, not the key a log is matched by
        e["system"] = "another-team/agents"
        return "systems['team/agents'].system"
    if how == "deep value":
        node: list = []
        d["notes"] = node
        for _ in range(int(rng.integers(20, 60))):
            node.append([])
            node = node[0]
        return "nested deeper"
    raise AssertionError(how)


TAMPERS = ["negative prior index", "relpos bin out of range", "NaN weight", "infinite mean", "zero std",
           "string weight", "short weights", "missing std", "NaN calibration", "boolean prior count",
           "unknown verdict", "unknown rule", "unknown agent rule", "entry not an object", "version not a number",
           "deep value", "huge weight", "huge mean", "tiny std", "huge prior count", "system renamed"]


@pytest.mark.parametrize("how", TAMPERS)
def test_each_tampered_value_is_refused_naming_its_field(tmp_path, synth, how, np_rng):
    path, _ = _file(tmp_path, synth)
    d = json.loads(path.read_text())
    assert d["systems"]["team/agents"]["verdict"] == "ranker"
    field = _tampered(d, how, np_rng)
    path.write_text(json.dumps(d))  # NaN and Infinity written as JSON's common extension, as Python writes them
    with pytest.raises(RankerFileError) as err:
        RankerFile.read(path)
    assert field in str(err.value) and str(path) in str(err.value)


def test_a_5000_deep_file_or_a_fifo_is_one_error_not_a_crash(tmp_path):
    import os

    deep = tmp_path / "deep.json"
    deep.write_text('{"format": "masprism-batch ranker", "x": ' + "[" * 5000 + "]" * 5000 + "}")
    with pytest.raises(RankerFileError, match="deep.json"):
        RankerFile.read(deep)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # opened without blocking: refused at once, not waited on for a writer
    with pytest.raises(RankerFileError, match="not a regular file"):
        RankerFile.read(fifo)


def test_a_valid_file_passes_and_its_digest_follows_its_content(tmp_path, synth):
    path, _ = _file(tmp_path, synth)
    RankerFile.read(path)  # every field of a fitted file is in its domain
    before = rk.RankerSetting.read(str(path)).sha256
    d = json.loads(path.read_text())
    d["date"] = "2026-11-27"
    path.write_text(json.dumps(d))
    assert rk.RankerSetting.read(str(path)).sha256 != before and rk.RankerSetting.read(None).sha256 is None


def test_a_fitted_confidence_of_the_first_issue_48_round_still_reads_and_applies(tmp_path, synth, np_rng):
    """Files written while a fitted system's confidence read (zero_training, gap, agrees) stay valid and give the
    confidence their own calibration says; a feature this version does not compute is refused."""
    from masprism_batch.method import calibrate
    from masprism_batch.verdict import confidence as vconf

    seed = int(np_rng.integers(1 << 30))
    rng = np.random.default_rng(seed)
    path, f = _file(tmp_path, synth)
    old = ["zero_training", "gap", "agrees"]
    X = rng.random((40, 3))
    cal = calibrate.fit_monotone(X, rng.random(40) < 0.5, old)
    cal["zero_training"] = f.entry["calibration"]["zero_training"]
    d = json.loads(path.read_text())
    d["systems"]["team/agents"]["calibration"] = cal
    path.write_text(json.dumps(d))
    sr = RankerFile.read(path).systems["team/agents"]
    sr = rk.SystemRanker(sr, "smollm2-135m")
    for c in synth(5, seed=seed):
        order, p, _, conf = sr.apply(c.trace, c.rows, c.ranked)
        x = vconf.features(c, order, p, None, cal["zero_training"])
        assert conf == pytest.approx(vconf.confidence(cal, {k: x[k] for k in old}, len(c.trace.steps))), seed
    d["systems"]["team/agents"]["calibration"]["features"][1] = "p_oracle"
    path.write_text(json.dumps(d))
    with pytest.raises(RankerFileError, match="features this version does not compute"):
        RankerFile.read(path)


def test_an_entry_without_its_system_field_is_named_by_its_key(tmp_path, synth):
    """The key under `systems` is what a log is matched by; an entry without a `system` field (written by hand)
    was a KeyError traceback out of the run the first time a verdict was named."""
    path, _ = _file(tmp_path, synth)
    d = json.loads(path.read_text())
    del d["systems"]["team/agents"]["system"]
    path.write_text(json.dumps(d))
    case = synth(1, seed=9)[0]
    sr = _load(str(path), "smollm2-135m").for_trace(case.trace)
    assert sr.verdict_by == "ranker:team/agents"
    order, probs, _agent, conf = sr.apply(case.trace, case.rows, case.ranked)
    assert np.isfinite(probs).all() and 0 < conf < 1


@pytest.mark.parametrize("key", ["weights", "systems", "score"])
def test_a_key_written_twice_is_refused_naming_it(tmp_path, synth, key):
    """JSON keeps the last of two equal keys: a hand-edited file with a second `weights` (or `systems`, or a step
    set's `score`) applied one of them without a word."""
    path, _ = _file(tmp_path, synth)
    text = path.read_text()
    at = text.index(f'"{key}":')
    path.write_text(text[:at] + f'"{key}": 0, ' + text[at:])  # the first of the two; the file's own is the last
    with pytest.raises(RankerFileError, match=f"'{key}'.*twice"):
        RankerFile.read(path)
    assert rk.RankerSetting.read(str(path)).problem is not None


def test_a_file_saved_with_a_byte_order_mark_and_crlf_reads_as_written(tmp_path, synth):
    """An editor on Windows saves a hand-edited file with a UTF-8 byte order mark and CRLF line ends: it was
    refused as 'not a readable ranker file (Unexpected UTF-8 BOM)'; the same JSON reads the same."""
    path, _ = _file(tmp_path, synth)
    plain = RankerFile.read(path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n"))
    assert RankerFile.read(path).systems == plain.systems


@pytest.mark.parametrize("text,field", [
    ("{not json", "not a readable"),
    ("[1, 2]", "must be an object"),
    ('{"agent_rule": 5}', "agent_rule"),
    ('{"calibration": {"kind": "evidence", "features": ["nope"], "mean": [0], "std": [1], "w": [1], "b": 0}}',
     "calibration.features"),
    ('{"calibration": {"kind": "evidence", "features": ["margin"], "mean": [0], "std": [1], "w": [1e308], '
     '"b": 0}}', "calibration.w[0]"),
    ('{"rule": "faithful", "rule": "paper"}', "twice"),
])
def test_a_folders_fallback_beside_its_ranker_file_is_checked_when_read(tmp_path, synth, text, field):
    """`--ranker FOLDER` reads FOLDER/fallback.json beside its rankers.json (the verdict and confidence of the
    systems the file does not name): it was read unchecked at the run's first verdict, so garbage, a list, an
    agent rule that is a number or a calibration of unknown features were a JSONDecodeError, AttributeError or
    KeyError traceback out of the command. Now the setting names the file and the field before anything runs."""
    path, _ = _file(tmp_path, synth)
    path.rename(tmp_path / rk.PACKAGED)
    (tmp_path / "fallback.json").write_text(text, encoding="utf-8")
    setting = rk.RankerSetting.read(str(tmp_path))
    assert isinstance(setting.problem, RankerFileError), setting
    assert "fallback.json" in str(setting.problem) and field in str(setting.problem), setting.problem
    (tmp_path / rk.PACKAGED).unlink()  # a folder holding only a fallback: what every log then gets
    assert field in str(rk.RankerSetting.read(str(tmp_path)).problem)


def test_a_folders_own_valid_fallback_and_a_folder_named_packaged_in_the_cwd(tmp_path, synth, monkeypatch):
    from masprism_batch.method import weights_dir
    from masprism_batch.verdict import rules

    path, _ = _file(tmp_path, synth)
    path.rename(tmp_path / rk.PACKAGED)
    (tmp_path / "fallback.json").write_bytes(b"\xef\xbb\xbf" + (weights_dir() / "fallback.json").read_bytes())
    assert rk.RankerSetting.read(str(tmp_path)).problem is None
    assert rules.read_fallback(str(tmp_path)).calibration == rules.read_fallback(None).calibration
    # `--ranker packaged` in a folder holding a folder named "packaged": the packaged fallback, not ./packaged/'s
    # (it read ./packaged/fallback.json, or with none there ran uncalibrated)
    (tmp_path / "cwd" / "packaged").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "cwd")
    assert rules.read_fallback(rk.PACKAGED_NAME) == rules.read_fallback(None)
