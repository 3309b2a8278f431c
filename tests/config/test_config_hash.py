"""The results hash (`config_hash`) covers what can change a result and nothing that only changes how a run is
executed: engine knobs (shard size, CPU share of the CPU stage, attempts per trace) leave it as it is."""

from __future__ import annotations

import pytest

from masprism_batch.config import PipelineConfig, load_config


@pytest.mark.parametrize("knob,value", [("traces_per_shard", 7), ("cpu_stage_cpus", 1.5), ("attempts_per_trace", 5)])
def test_engine_knob_does_not_change_the_hash(knob, value):
    base = PipelineConfig()
    other = load_config(None, **{f"engine__{knob}": value})
    assert getattr(other.engine, knob) == value
    assert other.config_hash() == base.config_hash()


@pytest.mark.parametrize("key,value", [("method__symptom_ratio", 0.33), ("batch__token_budget", 4096),
                                       ("render__max_context", 1024)])
def test_method_or_render_knob_changes_the_hash(key, value):
    assert load_config(None, **{key: value}).config_hash() != PipelineConfig().config_hash()


def test_traces_per_shard_belongs_to_the_engine_section():
    with pytest.raises(ValueError, match="traces_per_shard"):
        PipelineConfig.model_validate({"batch": {"traces_per_shard": 9, "token_budget": 100}})


def test_hash_of_the_default_config_is_unchanged_by_the_engine_section(monkeypatch):
    # the value written into outputs before the [engine] section existed: old runs stay comparable/resumable.
    # Where `auto` still means fp32 on CPU (no native bf16): on a CPU with it, the default computes in bf16 and
    # hashes differently on purpose (tests/model/test_model_loading.py)
    from masprism_batch import devices

    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: False)
    assert PipelineConfig().config_hash() == PINNED


PINNED = "ed28f9cf0ec67f51"  # PipelineConfig().config_hash() at 989edc4, before the section
