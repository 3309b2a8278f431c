"""What of a config its hash covers (`PipelineConfig.config_hash`): everything that can change a result, in the
form hashes were first written in, so that a new option at its default keeps every old run's hash, and with it
its OUTDIR and caches (a resume checks the hash; the signal cache is keyed by it)."""

from __future__ import annotations

from masprism_batch.devices import auto_device_type, auto_dtype


def hashed_form(cfg) -> dict:
    """The JSON the hash is taken of: `cfg` (a PipelineConfig) without execution-only settings (device, threads,
    cache paths, the engine section) and without options at the default they had when they were added."""
    data = cfg.model_dump(mode="json")
    # the dtype the numbers are computed in, named as before 2026-11-25 where it is what `auto` meant then
    # (fp32 on CPU, bf16 on GPU): old runs and caches keep their hash, and `auto` resolving to bf16 on a CPU
    # with native bf16 gets another one (other numbers)
    dev = auto_device_type(cfg.model.device)
    dtype = cfg.model.dtype if cfg.model.dtype != "auto" else auto_dtype(dev, cfg.model.name)
    data["model"]["dtype"] = "auto" if dtype == ("bfloat16" if dev == "cuda" else "float32") else dtype
    for k in ("device", "cache_dir", "threads"):
        data["model"].pop(k, None)
    data.pop("engine", None)  # execution only; without it the hash equals the one before the section existed
    if data["method"].get("features") == "verdict":
        data["method"].pop("features")  # the default: verdicts as before the option, same hash
    # the ranker setting under the name it had when hashes were first written: a run's hash, and with it its
    # OUTDIR and caches, stays what it was
    data["method"]["ranker_weights"] = data["method"].pop("ranker")
    if data["method"].get("system") is None:
        data["method"].pop("system", None)  # no named system: the same hash as before the option
    for k, default in (("categories", False), ("taxonomy", None), ("category_weights", None), ("category_reads", 1)):
        if data["method"].get(k) == default:  # categories at their defaults: the hash the verdicts had before
            data["method"].pop(k, None)
    if data["method"].get("coverage") == 0.8:
        data["method"].pop("coverage")  # the default: the same hash as before the option (old OUTDIRs resume)
    for k, default in (("outcomes", None), ("outcome_name", None), ("pass_threshold", 1.0)):
        if data["ingest"].get(k) == default:  # no outcomes given: the hash before the options existed
            data["ingest"].pop(k, None)
    if data.get("ingest") == {k: v for k, v in type(cfg.ingest)().model_dump(mode="json").items()
                              if k not in ("outcomes", "outcome_name", "pass_threshold")}:
        data.pop("ingest")  # default caps: same hash as before the section existed
    return data
