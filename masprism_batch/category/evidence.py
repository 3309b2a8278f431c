"""The model's evidence for a step's failure kind: how readily it reads each kind's description after that step.

For a step k of a prompt whose K/V are cached (the pass-2 prompt, `signals(..., keep_kv=True)`), `LEAD` and
then each kind's description are read as if they followed the first `step_spans[k][1]` tokens (the log up to
and including step k), reusing the cached K/V: one tree-shaped sequence per step, LEAD once and the
descriptions side by side (tree_read.py), the steps of a call in packed batches. The score of a kind is the mean NLL of its description tokens there, minus the same description's NLL
after `LEAD` alone (no log: read once per model and taxonomy, `baseline`), a pointwise mutual information: how
much the log up to step k makes this description *more* likely than it is on its own. Long and rare words cost
the same in both reads, so they cancel.

Beside it, the pooled value vectors of the model's last layer over step k's tokens in that same cache: how the
model read the step, a label-free representation the failure groups cluster (groups.py). Zero decoded tokens.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import numpy as np

from masprism_batch.category.taxonomy import Taxonomy
from masprism_batch.category.tree_read import TreeRead, branch_nll
from masprism_batch.render import buckets
from masprism_batch.render.encoding import encoder_for

log = logging.getLogger(__name__)

LEAD = "\nWhat went wrong in this step:"
TREE_TOKENS = 2048  # description tokens per tree sequence (TRAIL's 20 kinds: about 250, the byte-level test model 1,031: one tree)
_BASELINES: dict[tuple, np.ndarray] = {}
_LOCK = threading.Lock()


@dataclass
class Read:
    """One step to read: the cached prompt's K/V (forward.KVCache), and the token where step k ends."""

    cache: object
    prefix_len: int


def suffixes(tok, taxonomy: Taxonomy) -> tuple[list[int], list[list[int]]]:
    """The stem (LEAD) ids and each kind's description ids (read as branches after it)."""
    enc = encoder_for(tok)
    lead, *descs = enc.encode([LEAD] + [" " + k.description for k in taxonomy.kinds])
    return list(lead), [list(d) for d in descs]


def baseline(model, taxonomy: Taxonomy, cache, stem: list[int], branches: list[list[int]]) -> np.ndarray:
    """Per kind: the description's mean NLL after LEAD with no log before it (prefix length 0 of any cache), read
    once per process for a model and taxonomy."""
    key = (model.model_id, str(getattr(model, "dtype", "")), taxonomy.digest())
    with _LOCK:
        if key not in _BASELINES:
            _BASELINES[key] = np.concatenate([branch_nll(model, [TreeRead(cache, 0)], stem, branches[c])[0]
                                              for c in chunks(branches)])
        return _BASELINES[key]


def chunks(branches: list[list[int]], limit: int | None = None) -> list[slice]:
    """The kinds cut into runs of at most `limit` description tokens (a single longer description alone): one
    tree sequence each. A tree's mask and attention are square in its tokens, so reading every kind in one tree
    made memory grow with the square of the kinds (2,000 kinds: past 22 GB); runs of a fixed size keep it linear.
    Each branch sees only the prefix, the stem and itself, so cutting changes no number."""
    limit = TREE_TOKENS if limit is None else limit
    out, start, used = [], 0, 0
    for i, b in enumerate(branches):
        if used and used + len(b) > limit:
            out.append(slice(start, i))
            start, used = i, 0
        used += len(b)
    out.append(slice(start, len(branches)))
    return out


def description_pmi(model, taxonomy: Taxonomy, reads: list[Read], token_budget: int,
                    stats: dict | None = None) -> np.ndarray:
    """[len(reads), kinds] float64: mean description NLL after the step minus after nothing (nan where a read
    does not fit the context or failed). Each read is one tree sequence (tree_read.py: LEAD once, every
    description beside each other); reads go through the model in packed batches of <= token_budget tokens."""
    out = np.full((len(reads), len(taxonomy.kinds)), np.nan)
    if not reads:
        return out
    stem, branches = suffixes(model.tokenizer, taxonomy)
    base = baseline(model, taxonomy, reads[0].cache, stem, branches)
    for c in chunks(branches):
        per = len(stem) + sum(map(len, branches[c]))
        if stats is not None:
            stats["tokens"] = stats.get("tokens", 0) + per * len(reads)
        for group in buckets.pack([per] * len(reads), token_budget):
            try:
                out[group, c] = branch_nll(model, [TreeRead(reads[i].cache, reads[i].prefix_len) for i in group],
                                           stem, branches[c]) - base[None, c]
            except Exception as exc:  # noqa: BLE001 - a failed batch loses that evidence; the log's stays
                log.warning("category reads: a batch of %d steps failed (%s); they keep the log evidence only",
                            len(group), exc)
    return out


def pooled_values(cache, s: int, e: int) -> np.ndarray | None:
    """Mean over tokens [s, e) of the last layer's V (all KV heads, flattened), unit length; None if empty."""
    if cache is None or not 0 <= s < e <= cache.n_tokens:
        return None
    v = cache.v[-1][s:e].float().mean(0).reshape(-1).cpu().numpy().astype(np.float32)
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v
