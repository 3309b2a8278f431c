"""What `fit` says beside its estimates: one summary line for the label rows it could not use (a labels file of
another run listed 58 "unknown trace ... row skipped" lines before the 3-line result; each row's own message
with --verbose), and how far each system's fitted confidence ranks its verdicts."""

from __future__ import annotations

import re
from collections import Counter
from itertools import islice

from masprism_batch.verdict.confidence import flat_rate

# (phrase in labels.from_file's / build_cases' message, the reason as the summary names it)
_REASONS = [("unknown trace", "trace in none of the runs"), ("is not an integer", "step not an integer"),
            ("out of range", "step out of range"), ("is not a step of trace", "span not a step of its trace"),
            ("neither step nor span_id", "no step or span_id"),
            ("not labelled yet", "not labelled yet (step and agent blank)"),
            ("step_scores rows for", "step_scores do not match the trace's steps"),
            ("no kind of taxonomy", "category not a kind of the taxonomy"),
            ("category is not a string", "category not a string"), ("no trace_id", "no trace_id")]
_TRACE = re.compile(r"trace '([^']*)'")
SHOWN = 3


def _reason(msg: str) -> str:
    return next((name for phrase, name in _REASONS if phrase in msg), "other")


def skipped_summary(problems: list[str], shown: int = SHOWN) -> str:
    """`N label rows skipped: <count> <reason>, ...; first: <id>, <id>, <id> (-v lists each)`."""
    reasons = Counter(_reason(p) for p in problems)
    ids: dict[str, None] = {}  # first-seen order; a dict, not a list scan (1,000,000 rows took minutes)
    for p in problems:
        m = _TRACE.search(p)  # the row's trace id; a row without one by its file:line
        ids[m.group(1) if m else p.split(": ", 1)[0]] = None
    head = list(islice(ids, shown))
    first = ", ".join(head) + (f", … ({len(ids) - shown} more)" if len(ids) > shown else "")
    why = ", ".join(f"{n} {r}" for r, n in reasons.most_common())
    return f"{len(problems)} label row(s) skipped: {why}; first: {first} (-v lists each row)"


def confidence_words(entry: dict) -> str | None:
    """How far a fitted system's confidence can be trusted to rank its verdicts, from its held-out verdicts: the
    AUROC against a right step, or that the evidence did not rank them at all (its calibration kept none), in
    which case every log gets the same confidence and sorting by it orders nothing."""
    cal, auroc = entry.get("calibration"), (entry.get("heldout") or {}).get("auroc")
    if not cal:
        return None
    if (rate := flat_rate(cal)) is not None:
        return (f"confidence: its evidence did not rank this system's held-out verdicts, so every log gets "
                f"{rate:.0%} (the held-out hit rate; never below 1/steps): sorting by it puts no verdict first")
    if auroc is None:
        return "confidence: not measured held out (every held-out verdict was right, or every one wrong)"
    h = entry["heldout"]
    ci = h.get("auroc_interval")
    weak = "" if auroc >= 0.6 else ": weak, read more than the most confident verdicts"
    if ci and ci[0] <= 0.5 <= auroc:  # the labels cannot tell it from no ranking at all
        weak = ": not shown to rank (its interval holds 0.50); label more logs before sorting by it"
    return (f"confidence: ranks held-out verdicts{_counts(h)} with AUROC {auroc:.2f}{_interval(ci)} against a right "
            f"step (0.50: no ranking){_lift(h.get('top_quarter_lift'))}{weak}{_against_zero_training(h)}")


def _interval(ci) -> str:
    return "" if not ci else f" (95% interval {ci[0]:.2f}-{ci[1]:.2f})"


def _counts(h: dict) -> str:
    return "" if h.get("verdicts") is None else f" ({h['verdicts']}, {h['right']} right)"


def _lift(x) -> str:
    return "" if x is None else f", top quarter {x:.2f}x the hit rate"


def _against_zero_training(h: dict) -> str:
    """Issue 48: the other confidence's figures on the same held-out verdicts (the zero-training one's beside the
    fitted, the fitted one's where the zero-training one is kept), and which one is kept (issue 59: the one that
    ranked them better, fit/verdict_confidence.keep)."""
    if "confidence_kept" not in h:
        return ""
    fitted = h["confidence_kept"] == "fitted"
    other, name = ("zero_training", "zero-training") if fitted else ("fitted", "fitted")
    a = h.get(f"{other}_auroc")
    kept = ("fitted (the step's evidence, the ranker's probability of it and its log-odds over the next step), "
            "which ranked these verdicts at least as well"
            if fitted else "the zero-training confidence's order, at this system's hit rate: it ranked these "
            "verdicts better than the fitted one (never the worse of the two)")
    diff = h.get("fitted_minus_zero_training_interval")
    told = "" if not diff else f"; fitted minus zero-training: {diff[0]:+.2f} to {diff[1]:+.2f} (95%)"
    return (f"; the {name} confidence on the same verdicts: AUROC {'—' if a is None else f'{a:.2f}'}"
            f"{_interval(h.get(f'{other}_auroc_interval'))}{_lift(h.get(f'{other}_top_quarter_lift'))}"
            f"{told}; kept: {kept}")


def stepset_words(entry: dict, kept: bool = True) -> str | None:
    """Issue 59: how often the system's step sets held the labelled step on its own held-out logs (leave-one-out
    over the fit's held-out verdicts, fit/stepset_fit.py) and how much of a log they are, beside what reading from
    step 0 needs for the same coverage; and that before a fit (or where `kept` is False, the system being left out
    of the file) a run states the dev systems' estimate."""
    h = (entry.get("stepset") or {}).get("heldout")
    if not h:
        return None
    def one(level: float) -> str:
        cov, share, base = (h.get(f"{k}_{level}") for k in ("coverage", "share", "step0_share"))
        if cov is None:
            return ""
        return (f"at {level:.0%} coverage the set held the labelled step in {cov:.0%} of them, {share:.0%} of a log on "
                f"average (reading from step 0: {base:.0%})")
    parts = [x for x in (one(lv) for lv in (0.8, 0.5, 0.9)) if x]
    lead = "the blamed step" if entry["stepset"].get("lead") == "top" else "the verdict's ranked steps"
    tail = entry["stepset"].get("tail")
    order = (f" (after {lead}, the steps of the agents these labels blame most)" if tail == "prior" else
             f" (after {lead}, in the order of a small model of the step rows fitted on these labels)"
             if tail == "learned" else "")
    then = ("A run now calibrates this system's sets on these labels; before the fit its coverage was the dev "
            "systems' estimate, which a new system may not meet") if kept else (
        "Too few labels to write: a run keeps stating the dev systems' estimate, which a new system may not meet")
    return f"steps to read (read_steps){order}, held out on {h.get('n', 0)} labelled logs: " + "; ".join(parts) + ". " + then
