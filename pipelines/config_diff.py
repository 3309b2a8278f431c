"""What differs between the configuration an OUTDIR's run was made with and a new command's, said as the options
a user types (`--ranker`, `--coverage`, `--model`, ...), and whether `rescore` can apply the difference to the
existing results without a new prefill (pipelines/rescore.py). The refusal of `attribute`/`run` on an OUTDIR of
another configuration says it (pipelines/resume.bind_header), instead of two raw config dicts.
"""

from __future__ import annotations

import json
from pathlib import Path

from masprism_batch.config import PipelineConfig
from masprism_batch.outdir.manifest import read_json

# config key -> the option that sets it (others are said as config keys: `--config` file fields)
FLAGS = {"method.ranker": "--ranker", "method.name": "--ranker", "method.system": "--system",
         "method.coverage": "--coverage", "method.features": "--all-features", "ingest.all_runs": "--all-runs",
         "model.name": "--model", "method.taxonomy": "--taxonomy", "method.categories": "--taxonomy",
         "render.max_context": "--max-context"}
# what `rescore` applies from the cached signals (pipelines/rescore.RESCORE_KEYS, under `method`)
RESCORABLE = {"method.ranker", "method.system", "method.coverage", "method.agent_aggregation"}
# never result-changing (config_hash leaves them out)
IGNORED = ("engine.", "model.device", "model.cache_dir", "model.threads")


def _leaves(d: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_leaves(v, key + "."))
        else:
            out[key] = v
    return out


def differences(old: dict, new: PipelineConfig) -> list[tuple[str, object, object]]:
    """(config key, the run's value, this command's) for every result-changing field that differs."""
    try:
        before = PipelineConfig.model_validate(old).model_dump(mode="json")
    except ValueError:
        before = old
    a, b = _leaves(before), _leaves(new.model_dump(mode="json"))
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b))
            if not k.startswith(IGNORED) and a.get(k) != b.get(k)]


def _show(v) -> str:
    return "none" if v is None else json.dumps(v) if not isinstance(v, str) else v


def describe(outdir: Path, new: PipelineConfig) -> str | None:
    """The sentence that names what differs between OUTDIR's run and `new`, and what to do: `rescore` where it
    can apply every difference; None where OUTDIR's run.json does not record its configuration."""
    rec = read_json(Path(outdir) / "run.json")
    old = rec.get("config") if isinstance(rec, dict) else None
    if not isinstance(old, dict):
        return None
    diffs = differences(old, new)
    if not diffs:
        return None
    said = "; ".join(f"{FLAGS.get(k, k)} ({k}): {_show(a)} in the run, {_show(b)} now" for k, a, b in diffs)
    keys = {k for k, _, _ in diffs}
    if keys <= RESCORABLE:
        opts = " ".join(f"{FLAGS[k]} {_show(b) if b is not None else 'rule' if k == 'method.ranker' else '…'}"
                        for k, _, b in diffs if k in FLAGS)
        return (f"{outdir} holds results of another configuration ({said}). These settings apply to its cached "
                f"signals without a new prefill: `masprism-batch rescore {outdir} {opts} -o NEW_OUTDIR` (or "
                f"--in-place, the old verdicts kept in history/); or give `attribute` a new OUTDIR")
    also = sorted(FLAGS.get(k, k) for k in keys & RESCORABLE)
    tail = (f" ({', '.join(also)} alone could be applied to it by `masprism-batch rescore`, no prefill)"
            if also else "")
    return f"{outdir} holds results of another configuration ({said}): use a new OUTDIR{tail}"
