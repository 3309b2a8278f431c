"""Evidence cache of bench_category.py: every labelled TRAIL error's step, read as the stage reads a blamed step.

    nice python benchmarks/accuracy/category_extract.py --data ../shared/data --work /tmp/masprism-category

"Located by the label": the error's span (`location`) is given, so this measures *what* went wrong apart from
*where*. Each trace is rendered as the stage's pass-2 prompt (render_pass2, the labelled error steps as its key
steps, complete where the context allows; no anomaly note), prefilled once with its K/V kept, and every error
step's kind descriptions are read after it from that cache (category/evidence.py, packed suffix batches), as
the stage does for the blamed step; the log evidence comes from the same category/log_signals.py. Prompts are
--max-context tokens (1,024 by default, half the stage's 2,048: a shared 2-core CPU). One file per
trace (`<work>/<model>/<split>/<trace>.npz`), written atomically: a killed run resumes. Labels are stored for
scoring only; nothing here reads them to compute evidence (the key steps of the prompt are the labelled ones,
which is what "located by the label" means).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import numpy as np

from masprism_batch.category import evidence, log_signals
from masprism_batch.category.taxonomy import TRAIL
from masprism_batch.config import load_config
from masprism_batch.ingest import read_inputs
from masprism_batch.render import pass1
from masprism_batch.render import prompt as render

log = logging.getLogger("category_extract")
SPLITS = ("GAIA", "SWE_Bench")


def labelled_errors(t) -> list[tuple[int, str]]:
    """(step index, raw category) of each labelled error whose span is a step of the trace (others are counted
    by the caller as unlocated)."""
    lab = t.labels
    if lab is None or not lab.error_locations:
        return []
    by_span = {s.span_id: s.index for s in t.steps if s.span_id}
    return [(by_span[loc], cat) for loc, cat in zip(lab.error_locations, lab.error_categories or [], strict=False)
            if loc in by_span]


def extract_trace(model, rcfg, t) -> dict | None:
    errs = labelled_errors(t)
    if not errs:
        return None
    steps = sorted({k for k, _ in errs})
    r2 = render.render_pass2(t, model.tokenizer, rcfg, set(steps), None)
    end = r2.step_spans[steps[-1]][1]  # nothing after the last labelled step is read: the prefill stops there
    (sig,) = model.signals([r2.input_ids[:end]], [r2.step_ids()[:end]], keep_kv=True)
    reads = [evidence.Read(sig.kv, r2.step_spans[k][1]) for k in steps]
    pmi = evidence.description_pmi(model, TRAIL, reads, 8192)
    feats = np.array([log_signals.step_features(t.steps, k) for k in steps])
    vecs = [evidence.pooled_values(sig.kv, *r2.content_spans[k]) for k in steps]
    row = {k: j for j, k in enumerate(steps)}
    return {"step": np.array([k for k, _ in errs]), "category": np.array([c for _, c in errs]),
            "pmi": pmi[[row[k] for k, _ in errs]], "log": feats[[row[k] for k, _ in errs]],
            "vec": np.stack([vecs[row[k]] for k, _ in errs]),
            "text": np.array([(t.steps[k].content or "")[:2000] for k, _ in errs]),
            "tokens": np.array(end)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--work", default="/tmp/masprism-category")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=1)
    # the stage reads at 2,048 (render.max_context); 1,024 halves this benchmark's prefill on a shared CPU
    ap.add_argument("--max-context", type=int, default=1024)
    ap.add_argument("--shard", default="0/1", help="i/n: this process takes every n-th trace from the i-th "
                    "(run n processes with one thread each on an n-core machine)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from masprism_batch.model import load_model

    cfg = load_config(None, model__name=args.model, model__dtype="float32", model__threads=args.threads,
                      render__max_context=args.max_context)
    model = load_model(cfg.model, cfg.signals)
    rcfg = pass1.render_config(cfg, model.max_context)
    todo, unlocated = [], {}
    for split in SPLITS:
        (Path(args.work) / args.model / split).mkdir(parents=True, exist_ok=True)
        traces = sorted(read_inputs([str(Path(args.data) / "trail" / split)]), key=lambda t: t.trace_id)
        unlocated[split] = sum((len(t.labels.error_locations) if t.labels and t.labels.error_locations else 0)
                               - len(labelled_errors(t)) for t in traces)
        todo.append([(split, t) for t in traces if t.labels and t.labels.error_locations])
    # round-robin over the splits, so a partial cache already covers both
    order = [x for i in range(max(map(len, todo))) for x in (lst[i] for lst in todo if i < len(lst))]
    shard, n_shards = (int(x) for x in args.shard.split("/"))
    for i, (split, t) in enumerate(order):
        if i % n_shards != shard:
            continue
        dst = Path(args.work) / args.model / split / f"{t.trace_id}.npz"
        if dst.exists():
            continue
        t0 = time.perf_counter()
        try:
            got = extract_trace(model, rcfg, t)
        except render.TraceTooLong:  # more steps than headers fit in --max-context: the stage's own size
            got = extract_trace(model, rcfg.model_copy(update={"max_context": min(2048, model.max_context)}), t)
        if got is None:
            continue
        tmp = dst.with_suffix(".tmp.npz")
        np.savez(tmp, **got)
        os.replace(tmp, dst)
        log.info("%d/%d %s %s: %d errors, %d tokens, %.1f s", i + 1, len(order), split, t.trace_id,
                 len(got["step"]), int(got["tokens"]), time.perf_counter() - t0)
    for split, n in unlocated.items():
        (Path(args.work) / args.model / split / "_unlocated.json").write_text(json.dumps({"unlocated_errors": n}))
        log.info("%s: %d labelled errors whose span is not a step (not scored)", split, n)

if __name__ == "__main__":
    main()
