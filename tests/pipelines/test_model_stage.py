"""The engines' default model stage (`model_stage.ModelStage`) reads the run's verdict policy once, not once per pack,
and writes what the stage called pack by pack writes."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
from masprism_batch.pipelines import run_local
from masprism_batch.pipelines.model_stage import attribute_traces
from pipeline_fakes import make_corpus

from masprism_batch.config import load_config
from masprism_batch.model import load_model
from masprism_batch.verdict import policy as policy_mod


def _rows(outdir: Path) -> list[dict]:
    rows = ds.dataset(outdir / "attributions").to_table().to_pylist()
    skip = ("seconds_pass1", "seconds_pass2", "attributed_at")
    return sorted(({k: v for k, v in r.items() if k not in skip} for r in rows), key=lambda r: r["trace_id"])


def test_policy_is_read_once_per_run(tmp_path, monkeypatch, seed):
    make_corpus(tmp_path / "in", 9, 2, seed=seed)
    cfg = load_config(None, model__name="tiny-random", batch__token_budget=160, engine__traces_per_shard=4)
    model = load_model(cfg.model, cfg.signals)
    loads = []
    real = policy_mod.VerdictPolicy.load.__func__

    def counted(cls, *a, **k):
        loads.append(a)
        return real(cls, *a, **k)

    monkeypatch.setattr(policy_mod.VerdictPolicy, "load", classmethod(counted))
    s = run_local([str(tmp_path / "in")], tmp_path / "A", cfg, model=model, progress=False)
    assert s.attributed == 9 and len(loads) == 1
    packs = run_local([str(tmp_path / "in")], tmp_path / "B", cfg, model=model, progress=False,
                      attribute=attribute_traces)  # the policy read for each pack
    assert len(loads) > 2, "the corpus should make several packs"
    assert packs.attributed == 9 and _rows(tmp_path / "A") == _rows(tmp_path / "B")
