"""Signal cache of bench_accuracy.py: runs the stage (pass 1 windows, pass 2, counterfactuals) once per trace
and keeps what every ranker / head-weight variant needs, so refitting them costs no prefill.

    python benchmarks/accuracy/accuracy_extract.py --data ../shared/data --work /tmp/masprism-accuracy [--model smollm2-135m]

One file per trace (`<work>/<config_hash>/<sha>.npz` + `.json`): written atomically, so a killed run resumes.
Traces are processed round-robin across the four dev systems, so a partial cache covers all of them.
Label fields are stored for scoring only; nothing here reads them to compute a signal.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import time
from pathlib import Path

import numpy as np

from masprism_batch.config import PipelineConfig, load_config
from masprism_batch.ingest import read_inputs
from masprism_batch.trace import Trace

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("accuracy_extract")
SYSTEMS = {  # system name -> input folder under --data (the leave-one-system-out units)
    "who-and-when/Algorithm-Generated": "who_and_when/Algorithm-Generated",
    "who-and-when/Hand-Crafted": "who_and_when/Hand-Crafted",
    "trail/GAIA": "trail/GAIA",
    "trail/SWE_Bench": "trail/SWE_Bench",
}


def extract_config(model: str, **overrides) -> PipelineConfig:
    # the faithful method runs in the stage; every ranker is applied afterwards on the cached signals
    # fp32: the dev figures (docs/results.md) and their cache are fp32 whatever `auto` means on this CPU
    overrides.setdefault("model__dtype", "float32")
    return load_config(None, model__name=model, method__name="masprism", **overrides)


def trace_key(t: Trace) -> str:
    return hashlib.sha256(t.trace_id.encode()).hexdigest()[:20]


def load_systems(data: Path) -> dict[str, list[Trace]]:
    out = {}
    for name, sub in SYSTEMS.items():
        if (data / sub).exists():
            out[name] = sorted(read_inputs([str(data / sub)]), key=lambda t: t.trace_id)
    return out


def round_robin(systems: dict[str, list[Trace]]) -> list[tuple[str, Trace]]:
    order, i = [], 0
    while any(i < len(v) for v in systems.values()):
        order += [(k, v[i]) for k, v in systems.items() if i < len(v)]
        i += 1
    return order


def _save(path: Path, arrays: dict, meta: dict) -> None:
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path.with_suffix(".npz"))
    tmpj = path.with_suffix(".tmp.json")
    tmpj.write_text(json.dumps(meta, default=str))
    os.replace(tmpj, path.with_suffix(".json"))  # the .json is the completion marker


def extract_one(t: Trace, model, cfg: PipelineConfig) -> tuple[dict, dict]:
    from masprism_batch.stage.attribute import attribute_traces

    raw: dict = {}
    out = attribute_traces([t], model, cfg, raw_sink=lambda _t, d: raw.update(d))
    if not raw:
        return {}, {"error": [e["reason"] + ": " + e["message"] for e in out.errors]}
    p1, s1, s2 = raw["p1"], raw["sig1"], raw["sig2"]
    arr = {"nll1": p1.nll, "A1": s1.step_attn, "flags": raw["flags"],
           "symptoms": np.asarray(p1.symptoms, dtype=np.int64), "candidates": np.asarray(p1.candidates, dtype=np.int64)}
    if s1.step_attn_heads is not None:
        arr["A1h"] = s1.step_attn_heads.astype(np.float16)
    if s2 is not None:
        arr["nll2"] = raw["ranking"].nll
        arr["A2"] = s2.step_attn
        if s2.step_attn_heads is not None:
            arr["A2h"] = s2.step_attn_heads.astype(np.float16)
    if raw["cf"] is not None:
        arr["D"] = raw["cf"]
    a = out.attributions[0]
    meta = {"trace_id": t.trace_id, "attribution": a, "rows": raw["rows"],
            "ranking": {"ranked": raw["ranking"].ranked, "scores": {str(k): v for k, v in raw["ranking"].scores.items()}}}
    return arr, meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--work", default="/tmp/masprism-accuracy")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--limit", type=int, default=None, help="first N traces of the round-robin order")
    ap.add_argument("--shard", default="0/1", help="I/N: this process takes every N-th trace from the I-th "
                    "(run N processes with --threads 1 on a shared CPU: one thread each scales better)")
    ap.add_argument("--threads", type=int, default=None)
    # issue 23: the fitted rankers read neither counterfactuals nor per-head attention (their ablations lost
    # nothing, docs/results.md), so the cache for them can skip both (about half the time per trace)
    ap.add_argument("--counterfactual-k", type=int, default=None)
    ap.add_argument("--no-learned-heads", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from masprism_batch.model.loader import load_model

    extra = {} if args.counterfactual_k is None else {"method__counterfactual_k": args.counterfactual_k}
    if args.no_learned_heads:
        extra["method__learned_heads"] = False
    cfg = extract_config(args.model, model__threads=args.threads, **extra)
    si, sn = (int(x) for x in args.shard.split("/"))
    out = Path(args.work) / f"cache-{cfg.config_hash()}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(cfg.model_dump_json(indent=1))
    model = load_model(cfg.model, cfg.signals)
    todo = round_robin(load_systems(Path(args.data)))[: args.limit][si::sn]
    t_all = time.perf_counter()
    for n, (system, t) in enumerate(todo):
        path = out / trace_key(t)
        if path.with_suffix(".json").exists():
            continue
        t0 = time.perf_counter()
        arr, meta = extract_one(t, model, cfg)
        meta.update(system=system, seconds=time.perf_counter() - t0)
        _save(path, arr, meta)
        a = meta.get("attribution") or {}
        log.info("%d/%d %s %s: %.1f s, %s + %s tokens", n + 1, len(todo), system, t.trace_id, meta["seconds"],
                 a.get("tokens_pass1"), a.get("tokens_pass2"))
    log.info("done in %.0f s -> %s", time.perf_counter() - t_all, out)


if __name__ == "__main__":
    main()
