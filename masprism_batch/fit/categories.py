"""A system's failure kinds fitted to a team's own labels: what `fit` learns from the `category` of each labelled step.

The labels (a labels file's `category` column, or a TRAIL annotation's category per error) name kinds of the run's
taxonomy (`--taxonomy`, in the team's own words). The category layer (category/classify.py: logit_k = a z_k + b_k
+ W_k . f) is refitted on them from the evidence the run itself read: the log's (category/log_signals.py,
recomputed from the trace) and the model's where the run read the descriptions after that step
(`step_scores.category_pmi`; a labelled step the run did not read has the log's evidence only, as such a step
has when a verdict blames it). No new prefill.

Held out as the step verdict is: folds of logs (never an error of a log both fitted on and scored), the fitted
kinds against zero-training on the same held-out labelled steps; a hit is a step whose predicted kind is one of
its labelled kinds. The fitted kinds are kept only where they beat zero-training by Z paired standard errors
(the step verdict's margin), and never below MIN_ERRORS labelled errors (small-k safety: a handful of labels
would otherwise steer 20 kinds). The entry reports both estimates and the family balanced accuracy beside them.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from masprism_batch.category import classify, log_signals
from masprism_batch.category.taxonomy import Taxonomy

log = logging.getLogger(__name__)

MIN_ERRORS = 20  # labelled errors (a step and one of its kinds) below which zero-training is kept
FOLDS = 5
Z = 1.0  # the step verdict's margin (fit/system.py Z): paired standard errors the fitted kinds must win by
# L2 toward zero-training, per parameter, over the labelled errors: one error's worth. The packaged TRAIL
# calibration's 10 (bench_category.py: 20 kinds from two systems' 463 errors) kept ~50 errors of a planted kind
# from being learned at all (held out 0.5-0.65 where 1.0 reaches 1.0, tests/fit/test_categories.py); the
# held-out choice against zero-training is what guards a small label set here, as for the step verdict.
L2 = 1.0


@dataclass
class KindData:
    """One row per labelled (step, kind) of a system: the log it is in, the step, the kind's index, the model's
    evidence (nan: not read) and the log's."""

    logs: np.ndarray
    steps: np.ndarray
    y: np.ndarray
    pmi: np.ndarray
    f: np.ndarray


def kind_data(cases, tax: Taxonomy, problems: list[str]) -> KindData | None:
    """The labelled kinds of a system's LogCases (`gold_kinds`); a category no kind of `tax` resolves to is
    reported once per spelling and skipped. None when no labelled step has a kind."""
    cols: dict[str, list] = {"logs": [], "steps": [], "y": [], "pmi": [], "f": []}
    unknown: dict[str, int] = {}
    for c in cases:
        by_step = {r["step"]: r for r in c.rows}
        for k, kinds in sorted(c.gold_kinds.items()):
            pmi = by_step.get(k, {}).get("category_pmi")
            z = np.asarray(pmi, dtype=np.float64) if pmi is not None and len(pmi) == len(tax.kinds) else \
                np.full(len(tax.kinds), np.nan)
            feats = None
            for raw in kinds:
                name = tax.resolve(raw)
                if name is None:
                    unknown[raw] = unknown.get(raw, 0) + 1
                    continue
                feats = feats if feats is not None else log_signals.step_features(c.trace.steps, k)
                for key, v in (("logs", c.key), ("steps", k), ("y", tax.index(name)), ("pmi", z), ("f", feats)):
                    cols[key].append(v)
    for raw, n in sorted(unknown.items()):
        problems.append(f"category {raw[:80]!r}: no kind of taxonomy {tax.name!r} ({n} labelled step(s)): skipped")
    if not cols["y"]:
        return None
    return KindData(np.array(cols["logs"]), np.array(cols["steps"]), np.array(cols["y"]),
                    np.array(cols["pmi"], dtype=np.float64), np.array(cols["f"], dtype=np.float64))


def fit_weights(d: KindData, idx: np.ndarray, tax: Taxonomy, fitted_on: str) -> classify.CategoryModel:
    """The category layer fitted on rows `idx` from zero-training (family-balanced, L2 toward it)."""
    y = d.y[idx]
    return classify.fit(classify.model_evidence(d.pmi[idx]), d.f[idx], y, len(tax.kinds), tax.digest(), l2=L2,
                        fitted_on=fitted_on, weight=classify.family_weights(y, tax))


def _predict(m: classify.CategoryModel, d: KindData, idx: np.ndarray, tax: Taxonomy) -> np.ndarray:
    """Kind index per row; -1 where the layer reads no evidence (not read, and weights that ignore the log: a run
    gives such a step no kind, category/annotate.py)."""
    has = np.isfinite(d.pmi[idx]).all(axis=1) | m.reads_log()
    return np.array([tax.index(classify.decide(p, tax)[0]) if h else -1
                     for p, h in zip(m.probs(d.pmi[idx], d.f[idx]), has, strict=True)], dtype=int)


def _steps(d: KindData) -> dict[tuple, list[int]]:
    """(log, step) -> the rows (one per labelled kind) of that step."""
    out: dict[tuple, list[int]] = {}
    for i, key in enumerate(zip(d.logs.tolist(), d.steps.tolist(), strict=True)):
        out.setdefault(key, []).append(i)
    return out


def family_balanced(tax: Taxonomy, labelled: list[set[int]], pred: list[int]) -> float | None:
    """Mean over the labelled families of the share of their steps whose predicted family is one labelled there."""
    fam = [k.family for k in tax.kinds]
    rec: dict[str, list[bool]] = {}
    for kinds, p in zip(labelled, pred, strict=True):
        fams = {fam[k] for k in kinds}
        for f in fams:
            rec.setdefault(f, []).append(p >= 0 and fam[p] in fams)
    return float(np.mean([np.mean(v) for v in rec.values()])) if rec else None


def fit_kinds(d: KindData, tax: Taxonomy, system: str, seed: int = 0) -> dict:
    """The ranker-file entry's `category`: the held-out estimates, which kinds are kept and (kept "fitted") the
    weights fitted on every labelled error of the system."""
    steps = _steps(d)
    keys = list(steps)
    labelled = [{int(d.y[i]) for i in steps[k]} for k in keys]
    logs = sorted(set(d.logs.tolist()))
    out = {"taxonomy": tax.name, "taxonomy_digest": tax.digest(), "errors": int(len(d.y)), "steps": len(keys),
           "logs": len(logs), "model_read": int(np.isfinite(d.pmi).all(axis=1).sum()), "kept": "zero-training", "z": Z}
    zero = classify.CategoryModel.zero(tax)
    first = np.array([steps[k][0] for k in keys])  # a step's evidence is the same on each of its kind rows
    zero_pred = _predict(zero, d, first, tax).tolist()
    zero_hits = np.array([p in s for p, s in zip(zero_pred, labelled, strict=True)], dtype=float)
    out["zero_training"] = float(zero_hits.mean())
    out["zero_training_family_balanced"] = family_balanced(tax, labelled, zero_pred)
    if len(d.y) < MIN_ERRORS or len(logs) < 2:
        out["note"] = (f"{len(d.y)} labelled errors in {len(logs)} logs (fewer than {MIN_ERRORS} errors or 2 logs): "
                       "the zero-training kinds are kept")
        return out
    fold_of = dict(zip(logs, np.random.default_rng(seed).permutation(len(logs)) % min(FOLDS, len(logs)), strict=True))
    step_fold = np.array([fold_of[k[0]] for k in keys])
    row_fold = np.array([fold_of[x] for x in d.logs.tolist()])
    fit_pred = np.zeros(len(keys), dtype=int)
    for f in sorted(set(step_fold.tolist())):
        m = fit_weights(d, np.flatnonzero(row_fold != f), tax, system)
        test = np.flatnonzero(step_fold == f)
        fit_pred[test] = _predict(m, d, first[test], tax)
    fit_hits = np.array([p in s for p, s in zip(fit_pred.tolist(), labelled, strict=True)], dtype=float)
    diff = fit_hits - zero_hits
    se = float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else float("inf")
    out.update(fitted=float(fit_hits.mean()), fitted_family_balanced=family_balanced(tax, labelled, fit_pred.tolist()),
               margin_se=se)
    if diff.mean() > 0 and diff.mean() > Z * se:
        out["kept"] = "fitted"
        out["weights"] = fit_weights(d, np.arange(len(d.y)), tax, f"fit:{system}").to_json()
    return out
