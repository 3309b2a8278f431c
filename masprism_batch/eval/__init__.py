"""Evaluation of attribution rows against labelled traces (method doc, "Evaluation protocol").

    evaluate(rows, traces) -> {"datasets": [who-and-when result, trail result], "unscored": {...}}
    score_who_and_when(rows, traces) / score_trail(rows, traces, ks=(1, 5))
        -> {"dataset", "subsets": {SUBSET: {"n", "n_missing", metric: value}},
            "baselines": {SUBSET: {BASELINE: {"n", metric: value}}}, "excluded": {reason: n_traces}}
    format_tables(result) -> str (rich tables, baselines beside the method)

Subsets are trace sources (e.g. who-and-when/Hand-Crafted, trail/GAIA). Metric values are fractions in
[0, 1] (None when no case has the needed label). Rows are schema.ATTRIBUTIONS dicts; traces carry labels.
"""

from masprism_batch.eval.predictions import ranked_steps
from masprism_batch.eval.scoring import dataset_of, evaluate
from masprism_batch.eval.table import format_tables, tables
from masprism_batch.eval.trail_metrics import score_trail
from masprism_batch.eval.who_and_when_metrics import score_who_and_when

__all__ = ["evaluate", "score_who_and_when", "score_trail", "format_tables", "tables", "ranked_steps",
           "dataset_of"]
