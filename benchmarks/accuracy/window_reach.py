"""How much of the step-to-step attention A a sliding-window layer could see at all, on the dev logs.

A query of a sliding-window layer (Gemma 3: W = 512) sees only the last W tokens, so its step mass between steps
i > j is exactly zero when step j's last token lies W or more tokens before step i's first, and partial when only
part of j is in reach. Per benchmark folder: the share of step pairs (i > j) out of reach entirely, the share in
reach only in part, and the tokens per log, with each step's text tokenized by the model's tokenizer (the pass-1
render adds a short header per step and may cut long steps, so the real distances are near these). No forward.

    python benchmarks/accuracy/window_reach.py --model gemma3-270m --data ../shared/data [--window 512]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.append(str(Path(__file__).resolve().parents[2]))


def reach(lengths: list[int], window: int) -> tuple[int, int, int]:
    """(pairs i > j, pairs with j wholly W or more tokens back of i's first token, pairs partly so)."""
    ends = np.cumsum(lengths)
    starts = ends - np.asarray(lengths)
    n = len(lengths)
    i, j = np.tril_indices(n, -1)
    # a token of step i at position p sees step j's tokens u with p - W < u; i's last token sees the most of j
    out = (ends[i] - 1) - (ends[j] - 1) >= window  # even i's last token cannot see j's last token
    part = ~out & ((ends[i] - 1) - starts[j] >= window)  # j's first token out of reach of i's last
    return len(i), int(out.sum()), int(part.sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gemma3-270m")
    ap.add_argument("--data", type=Path, default=Path("../shared/data"))
    ap.add_argument("--window", type=int, default=512)
    args = ap.parse_args()
    from masprism_batch import ingest
    from masprism_batch.config import ModelConfig
    from masprism_batch.model import load_tokenizer

    tok = load_tokenizer(ModelConfig(name=args.model))
    print(f"{'folder':<40}{'logs':>6}{'tokens/log':>12}{'pairs':>9}{'out of reach':>14}{'partly':>9}")
    for folder in ("who_and_when/Algorithm-Generated", "who_and_when/Hand-Crafted", "trail/GAIA", "trail/SWE_Bench"):
        traces = list(ingest.read_inputs([str(args.data / folder)], on_error=lambda row: None))
        pairs = out = part = 0
        toks = []
        for tr in traces:
            lengths = [max(1, len(ids)) for ids in tok([s.content for s in tr.steps], add_special_tokens=False)["input_ids"]]
            p, o, q = reach(lengths, args.window)
            pairs, out, part, toks = pairs + p, out + o, part + q, toks + [sum(lengths)]
        print(f"{folder:<40}{len(traces):>6}{np.median(toks):>12.0f}{pairs:>9}{out / max(pairs, 1):>14.1%}"
              f"{part / max(pairs, 1):>9.1%}")


if __name__ == "__main__":
    main()
