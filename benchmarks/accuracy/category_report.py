"""The categories block of docs/results.md from bench_category.py's rows: one table per scored split, the held-out
reading in words, and the verdict's kind end to end."""

from __future__ import annotations

BEGIN, END = "<!-- categories: begin -->", "<!-- categories: end -->"
SPLITS = ("GAIA", "SWE_Bench")
K_FIT = 20
SHIPS = f"fitted-{K_FIT}, as `fit` ships it"
CEILINGS = ("ceiling: in-split layer", "ceiling: in-split, + pooled pass-2 state")


def reading(rows: list[dict]) -> list[str]:
    """The tables in words: the family target against the best held-out method, and what 20 labels buy."""
    scope = rows[0]["scope"]
    got = {(r["scored_on"], r["method"], r["metric"]): r["value"] for r in rows if r["scope"] == scope}
    fam, f1 = "family_balanced_accuracy", "leaf_macro_f1"
    out = []
    for s in SPLITS:
        held = {m: got[(s, m, fam)] for m in ("zero-training", "cross-split", "log-only") if (s, m, fam) in got}
        if not held:
            continue
        best = max(held, key=held.get)
        fit, zero = f"fitted-{K_FIT}", "zero-training@draws"
        out.append(f"- trail/{s}: the best held-out family balanced accuracy is {best}'s {held[best]:.3f} "
                   f"({'meets' if held[best] >= 0.55 else 'below'} the 0.55 target; a constant scores 0.333). "
                   f"{K_FIT} labelled errors of this split, fitted as `fit` fits them: family {got[(s, fit, fam)]:.3f} "
                   f"vs zero-training's {got[(s, zero, fam)]:.3f} on the same held-out errors, leaf macro-F1 "
                   f"{got[(s, fit, f1)]:.3f} vs {got[(s, zero, f1)]:.3f}.")
        if (s, SHIPS, fam) in got:
            out[-1] += (f" What `fit` ships from those 20 (its keep rule: the fitted kinds only where they beat "
                        f"zero-training on the 20's own folds): family {got[(s, SHIPS, fam)]:.3f}, leaf macro-F1 "
                        f"{got[(s, SHIPS, f1)]:.3f}.")
        ceil = {m: got[(s, m, fam)] for m in CEILINGS if (s, m, fam) in got}
        if ceil:
            top = max(ceil, key=ceil.get)
            out[-1] += (f" Ceiling of these signals (fitted on this split's own labels, 5 folds by trace, not a "
                        f"protocol): family {ceil[top]:.3f} ({top})"
                        f"{'; the 0.55 target is beyond what they carry' if ceil[top] < 0.55 else ''}.")
    return ["Held-out reading:", ""] + out + [""]


def e2e_markdown(rows: list[dict]) -> list[str]:
    out = ["### The verdict's kind end to end (held out)", "",
           "Each TRAIL dev log's verdict from the signal cache (benchmarks/accuracy/accuracy_extract.py), its "
           "blamed step's kind from the evidence above: the share of logs whose blamed step is a labelled error "
           "(step right) and whose kind (family) is also one labelled there. Verdicts held out as named; kinds "
           "zero-training or calibrated on the other split only.", "",
           "| scored on | verdicts | kinds | logs | step right | step and family right | step and kind right |",
           "|---|---|---|---:|---:|---:|---:|"]
    out += [f"| trail/{r['scored_on']} | {r['verdicts']} | {r['kinds']} | {r['logs']} | {r['step_right']:.3f} | "
            f"{r['step_and_family_right']:.3f} | {r['step_and_kind_right']:.3f} |" for r in rows]
    return out + [""]


def markdown(rows: list[dict], skipped: dict, model: str, e2e: list[dict] | None = None) -> str:
    out = [BEGIN, "## Failure category, located by the label (issue 49)", "",
           f"Each labelled TRAIL dev error's span is given (what, apart from where); its step is read as the stage "
           f"reads a blamed step (`{model}`, the pass-2 prompt with the labelled steps as key steps; "
           "benchmarks/accuracy/category_extract.py, bench_category.py). Errors whose label is not a TRAIL kind "
           f"are not scored ({', '.join(f'{k}: {v}' for k, v in skipped.items())}). How each figure is held out is "
           "in its row. Family balanced accuracy: mean recall over the families in the scored split (any constant: "
           "1/families); target >= 0.55. fitted-20: mean (sd) over 20 draws.", ""]
    for scope, split in [(sc, sp) for sc in dict.fromkeys(r["scope"] for r in rows) for sp in SPLITS]:
        rs = [r for r in rows if r["scored_on"] == split and r["scope"] == scope]
        if not rs:
            continue
        out += [f"### scored on trail/{split} ({rs[0]['n_errors']} errors): {scope}", "",
                "| method | family bal. acc. | leaf macro-F1 | leaf acc. | held out |", "|---|---|---|---|---|"]
        for m in dict.fromkeys(r["method"] for r in rs):
            g = {r["metric"]: r for r in rs if r["method"] == m}

            def cell(k, g=g):  # called within this iteration; bound explicitly all the same
                r = g[k]
                return f"{r['value']:.3f}" + (f" ({r['sd']:.3f})" if r["sd"] is not None else "")

            out.append(f"| {m} | {cell('family_balanced_accuracy')} | {cell('leaf_macro_f1')} | "
                       f"{cell('leaf_accuracy')} | {g['leaf_accuracy']['held_out']} |")
        out.append("")
    out += reading(rows)
    if e2e:
        out += e2e_markdown(e2e)
    out.append(END)
    return "\n".join(out)
