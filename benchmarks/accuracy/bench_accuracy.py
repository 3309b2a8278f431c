"""Accuracy on the labelled dev data, judged the way a new system would judge it: leave one system out.

    python benchmarks/accuracy/accuracy_extract.py --work /tmp/masprism-accuracy      # prefills, once (resumable)
    python benchmarks/accuracy/bench_accuracy.py --work /tmp/masprism-accuracy [--train-weights]

The four dev systems (Who&When Algorithm-Generated, Who&When Hand-Crafted, TRAIL GAIA, TRAIL SWE-Bench) are
the units of generalisation. Every learned piece is refitted without the system it is scored on:
- head weights (method/heads.py): fitted label-free on the counterfactual effects of the other systems' logs;
- rankers (method/ranker.py): fitted on the other three systems' labels (leave-one-system-out, "LOSO"),
  beside 5-fold cross-validation within a system (x8 seeds), which is optimistic for a new system;
- the portable ranker's agent rule (author of the blamed step vs summed step probabilities), chosen by LOSO;
- the product's fit (`masprism-batch fit`: fit/system.py, called here, never re-implemented), 5-fold within
  each system, and the zero-training agent rule for systems without a ranker, chosen by LOSO over every
  system with agent labels, TRAIL GAIA's derived from its error spans (issue 23; benchmarks/accuracy/agent_rules.py).
Zero-training methods (the faithful MASPrism, pass 1 alone, trivial baselines) need no protocol.
Writes tidy rows to benchmarks/results/accuracy.csv and the tables to docs/results.md; --train-weights writes the
packaged weights/rankers.json (the format `fit` writes; each entry lists the trace-id hashes it saw) and
fallback.json. The learning curve is benchmarks/accuracy/bench_learning_curve.py. The cases, scorers and the product's fit
protocol are in accuracy_cases.py; head weights and the portable rankers in accuracy_rankers.py.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import logging
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.accuracy import accuracy_platt as platt
from benchmarks.accuracy import agent_rules as agr
from benchmarks.accuracy import fitted_confidence as fconf
from benchmarks.accuracy.accuracy_cases import (
    KFOLD,
    Case,
    _unlabelled,
    add_cache_args,
    available_rules,
    cached_cases,
    faithful_rows,
    fit_cases,
    headline_mean,
    pass1_rows,
    rule_rows,
    score,
    system_fit,
)
from benchmarks.accuracy.accuracy_extract import SYSTEMS, load_systems
from benchmarks.accuracy.accuracy_rankers import (
    PORTABLE,
    agent_orders,
    fit_heads,
    kfold,
    loso,
    rules_loso,
    with_learned,
)
from benchmarks.accuracy.accuracy_report import METRIC, write_markdown
from masprism_batch.fit import fitting as ft
from masprism_batch.method import calibrate
from masprism_batch.method import confidence as cf
from masprism_batch.method import heads as hd
from masprism_batch.method import ranker as rk
from masprism_batch.verdict import confidence as vconf
from masprism_batch.verdict import correction as vcorr
from masprism_batch.verdict import rankfile
from masprism_batch.verdict.rankfile import RankerFile, SystemRanker

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("bench_accuracy")


# ---- output --------------------------------------------------------------------------------------------------
def metric_ok(system: str, metric: str) -> bool:
    return metric in METRIC["trail" if system.startswith("trail") else "who-and-when"] or metric == "n"


def emit(out: list, method: str, protocol: str, flat: dict, spread: dict | None = None) -> None:
    for (system, metric), v in sorted(flat.items()):
        if metric_ok(system, metric) and v is not None:
            out.append({"system": system, "method": method, "protocol": protocol, "metric": metric,
                        "value": round(float(v), 4), "spread": "" if spread is None else round(spread.get((system, metric), 0.0), 4)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cache_args(ap)
    ap.add_argument("--l2", type=float, default=1.0, help="portable ranker L2 (fixed a priori, not tuned on eval cases)")
    ap.add_argument("--train-weights", action="store_true")
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "results" / "accuracy.csv"))
    ap.add_argument("--md", default=str(ROOT / "docs" / "results.md"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cases, cfg = cached_cases(args)
    model_id = next((c.meta["attribution"]["model_id"] for c in cases), args.model)
    log.info("%d cached traces: %s", len(cases), {s: sum(c.system == s for c in cases) for s in SYSTEMS})
    available = {s: len(v) for s, v in load_systems(Path(args.data)).items()}
    out: list[dict] = []
    flat, base = score(cases, faithful_rows(cases))
    emit(out, "masprism (faithful, windows pass 1)", "no training", flat)
    emit(out, "pass 1 alone (windows)", "no training", score(cases, pass1_rows(cases))[0])
    for (system, bname, metric), v in sorted(base.items()):
        if metric_ok(system, metric) and metric != "n":
            out.append({"system": system, "method": f"baseline: {bname}", "protocol": "no training",
                        "metric": metric, "value": round(v, 4), "spread": ""})
    rules_flat, per_rule, picked = rules_loso(cases, model_id)
    for r, flat in per_rule.items():
        emit(out, f"zero-training rule: {r}", "no training (learned heads: fitted without the system)", flat)
    emit(out, "zero-training rule chosen by leave-one-system-out", "leave-one-system-out", rules_flat)
    log.info("zero-training rule picked per held-out system: %s", picked)
    faithful_flat = score(cases, faithful_rows(cases))[0]
    faithful = headline_mean(faithful_flat)
    rules_loso_mean = headline_mean(rules_flat)
    with_learned(cases, fit_heads(cases, model_id))
    rules = available_rules(cases)
    best_all = max(rules, key=lambda r: (headline_mean(score(cases, rule_rows(cases, r))[0]), r == "faithful"))
    fallback = best_all if rules_loso_mean > faithful else "faithful"
    orders = agent_orders(cases, fallback)  # item 7: agent rules by LOSO over every system with agent labels
    agents = agr.agent_loso(cases, orders)
    agr.emit(agents, out)
    agent_picked, agent_rule0 = agents["picked"], agents["shipped"]
    agent_md = agr.markdown_section(agents, agr.agent_loso(cases, orders, agr.FINE), agr.label_census(cases), fallback,
                                    agr.agent_loso([c for c in cases if c.system not in agr.DERIVED], orders))
    log.info("agent rule picked per held-out system: %s; on all: %s", agent_picked, agent_rule0)
    chosen = {}
    for rule in ("aggregate", "author"):  # the portable ranker's agent rule, by LOSO (agent labels: Who&When only)
        flat = loso(cases, PORTABLE, args.l2, rule, model_id)
        chosen[rule] = np.mean([v for (s, m), v in flat.items() if m == "agent"] or [0.0])
        emit(out, f"ranked, portable features, agent = {rule}", "leave-one-system-out", flat)
    agent_rule = max(chosen, key=lambda r: (chosen[r], r == "author"))
    emit(out, "ranked, portable features", "leave-one-system-out", loso(cases, PORTABLE, args.l2, agent_rule, model_id))
    emit(out, "ranked, all features (incl. turn-taking)", "leave-one-system-out",
         loso(cases, rk.FEATURES, args.l2, agent_rule, model_id))
    m, sd = kfold(cases, PORTABLE, args.l2, agent_rule, model_id)
    emit(out, "ranked, portable features", KFOLD, m, sd)
    conf, loso_cals = rule_calibration(cases, fallback, out)
    # the product's fit, 5-fold x FOLD_SEEDS, each fit given the zero-training calibration of the other systems
    fk, fsd = fitted_confidence(cases, fallback, agent_rule0, out, loso_cals)
    emit(out, FITTED, KFOLD, fk, fsd)
    loso_ranker = headline_mean(loso(cases, PORTABLE, args.l2, agent_rule, model_id))
    per_sys = {s: (headline_mean({k: v for k, v in fk.items() if k[0] == s}),
                   headline_mean({k: v for k, v in faithful_flat.items() if k[0] == s}))
               for s in sorted({c.system for c in cases})}
    policy = {"known": FITTED, "loso_ranker": loso_ranker, "faithful": faithful, "agent_rule": agent_rule0,
              "agent_picked": agent_picked, "fallback_rule": fallback, "rules_loso": rules_loso_mean,
              "rules_picked": picked, "per_system_kfold_vs_faithful": per_sys, "ranked_systems": [],
              "available": available, "agent_md": agent_md}
    if args.train_weights:
        train_weights(cases, args, policy, model_id, out, conf)
    log.info("policy: %s", {k: v for k, v in policy.items() if k != "agent_md"})
    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(out[0]))
        w.writeheader()
        w.writerows(out)
    write_markdown(Path(args.md), out, cases, [], policy, chosen, cfg, args)


FITTED = "fitted (masprism-batch fit)"


def rule_calibration(cases: list[Case], rule: str, out: list) -> tuple[dict, dict[str, dict]]:
    """Confidence of the zero-training verdict from its own evidence (method/confidence.py), calibrated by
    leave-one-system-out (fitted on the other systems, applied to the held-out one), reported per system as
    accuracy at 25/50/100% coverage and the AUROC against a right step, beside the raw top-share Platt
    calibration it replaces (issue 32); returns the calibration fitted on every system (what ships) and, per
    system, the one fitted without it (what a fit of that system is given in the k-fold protocol)."""
    fc = fit_cases(cases, rule)
    sys_of = {c.trace.trace_id: c.system for c in cases}
    feats = {c.trace.trace_id: vcorr.evidence(c, c.ranked) for c in fc if c.ranked}
    raw = {c.trace.trace_id: platt.raw_confidence(c) for c in fc if c.ranked}
    n = {c.trace.trace_id: len(c.trace.steps) for c in fc}
    hits = {c.trace.trace_id: ft.hit(c, c.ranked[0]) for c in fc if c.ranked}
    held_out = {}
    for held in sorted({c.system for c in cases}):
        train = [t for t in feats if sys_of[t] != held]
        test = [t for t in feats if sys_of[t] == held]
        ev = calibrate.fit_evidence([cf.vector(feats[t]) for t in train], [hits[t] for t in train], cf.FEATURES)
        held_out[held] = ev
        learned = calibrate.fit_evidence([cf.vector(feats[t]) for t in train], [hits[t] for t in train],
                                         cf.FEATURES, weights="fitted")
        pl = platt.fit_platt([raw[t] for t in train], [hits[t] for t in train])
        for name, conf in ((CONF_EVIDENCE, [vconf.confidence(ev, feats[t], n[t]) for t in test]),
                           (CONF_LEARNED, [vconf.confidence(learned, feats[t], n[t]) for t in test]),
                           (CONF_RAW, [platt.apply(pl, raw[t]) for t in test])):
            emit_confidence(out, held, f"zero-training rule {rule}: {name}", conf, [hits[t] for t in test])
    return calibrate.fit_evidence([cf.vector(feats[t]) for t in feats], list(hits.values()), cf.FEATURES), held_out


CONF_EVIDENCE, CONF_RAW = "confidence from its evidence", "confidence from the top share (before issue 32)"
CONF_LEARNED = "confidence from its evidence, one learned weight per feature (not shipped)"
CONF_PROTOCOL = "confidence calibrated leave-one-system-out"


def emit_confidence(out: list, system: str, method: str, conf, hits, protocol: str = CONF_PROTOCOL) -> None:
    """Rows: step hit rate of the most confident 25/50/100% and the AUROC of confidence against a right step."""
    for frac, (_n, acc) in calibrate.accuracy_at_coverage(conf, hits).items():
        out.append({"system": system, "method": method, "protocol": protocol,
                    "metric": f"step_hit@{int(frac * 100)}%", "value": round(acc, 4) if acc is not None else "",
                    "spread": ""})
    auc = cf.auroc(conf, hits)
    out.append({"system": system, "method": method, "protocol": protocol, "metric": "auroc",
                "value": round(auc, 4) if auc is not None else "", "spread": ""})


def fitted_confidence(cases: list[Case], rule: str, rule_agent: str, out: list, zero_cals: dict) -> tuple[dict, dict]:
    """The product's fit 5-fold within each system x FOLD_SEEDS (accuracy_cases.fitted_kfold's protocol: its scores
    are returned) and its verdicts' confidence beside the zero-training confidence of the same verdicts and the
    zero-training verdict's own (fitted_confidence.py): accuracy at coverage over the seeds' pooled test logs, the
    AUROC within each fit's own test fold averaged over folds (weighted by their pairs: pooling folds would score
    how each fold's intercept differs, not whether one fit's confidence ranks its verdicts), its 95% bootstrap
    interval, and the top-quarter lift of each fold's most confident quarter."""
    scores, folds = fconf.measure(cases, rule, rule_agent, zero_cals)
    method = {"fitted": FITTED, fconf.KINDS[1]: f"{FITTED}: zero-training confidence of the same verdicts",
              fconf.KINDS[2]: f"zero-training rule {rule}: confidence from its evidence, on the same test folds"}
    summary = {(r["system"], r["confidence"]): r for r in fconf.summary(folds)}
    for system, per in sorted(folds.items()):
        for kind, name in method.items():
            conf = [c for cs, _ in per[kind] for c in cs]
            hits = [h for _, hs in per[kind] for h in hs]
            emit_confidence(out, system, name, conf, hits, CONF_KFOLD)
            r = summary[(system, kind)]
            out[-1]["value"] = round(r["auroc"], 4) if r["auroc"] is not None else ""
            for metric in ("ci_low", "ci_high", "top_quarter_lift"):
                out.append({"system": system, "method": name, "protocol": CONF_KFOLD, "metric": f"auroc_{metric}"
                            if metric.startswith("ci") else metric, "value": "" if r[metric] is None or
                            not np.isfinite(r[metric]) else round(r[metric], 4), "spread": ""})
    return scores


CONF_KFOLD = KFOLD + " (confidence: the fit's internal folds; AUROC within each test fold)"


def train_weights(cases, args, policy, model_id, out, calibration) -> None:
    """Ship what the protocols chose, in the file format `masprism-batch fit` writes: one entry per dev system
    fitted on all its labelled logs by the product's fit (it falls back to the rule where its internal held-out
    estimate did not beat it), and fallback.json: the zero-training step and agent rules for any other system
    and the calibration of their confidence. Head weights are refitted only when the cache holds their signals."""
    wdir = ROOT / "masprism_batch" / "method" / "weights"
    hw = fit_heads(cases, model_id)
    if hw is not None:
        hd.packaged_path(model_id).write_text(hw.to_json() + "\n")
    for old in list(wdir.glob("ranker-*.json")) + list(wdir.glob("ranker.json")):
        old.unlink()
    date = dt.date.today().isoformat()
    entries, rows = {}, {}
    for system in sorted({c.system for c in cases}):
        sub = [c for c in cases if c.system == system]
        f = system_fit(sub, system, policy["fallback_rule"], policy["agent_rule"], calibration)
        entries[system] = f.entry
        if f.verdict != "rule":
            policy["ranked_systems"].append(f"{system} ({f.verdict}; held out it names its most common step for "
                                            f"{100 * f.estimates['modal_share']:.0f}% of the logs)")
        policy.setdefault("notes", []).extend(f"{system}: {n}" for n in f.entry.get("notes") or [])
        sr = SystemRanker(f.entry, model_id)
        for c in fit_cases(sub, policy["fallback_rule"]) + _unlabelled(sub, policy["fallback_rule"]):
            order, _, agent, _ = sr.apply(c.trace, c.rows, c.ranked)
            rows[c.trace.trace_id] = {"trace_id": c.trace.trace_id, "pred_step": order[0], "pred_agent": agent,
                                      "candidates": [{"step": i, "span_id": c.trace.steps[i].span_id} for i in order[:5]]}
    RankerFile(model_id, entries, {"date": date, "fitted_by": "benchmarks/accuracy/bench_accuracy.py --train-weights "
                                   "(fit/system.py, as `masprism-batch fit`)"}).write(wdir / rankfile.PACKAGED)
    shipped = score(cases, rows)[0]  # what `eval` prints on the dev data with these weights
    for system in sorted({c.system for c in cases}):
        emit(out, "shipped default (packaged rankers.json)",
             "in-sample: fitted on these cases (optimistic)" if entries[system]["verdict"] != "rule" else
             f"in-sample calibration; step: zero-training rule {policy['fallback_rule']} (fit fell back to it)",
             {k: v for k, v in shipped.items() if k[0] == system})
    (wdir / "fallback.json").write_text(json.dumps(
        {"rule": policy["fallback_rule"], "agent_rule": policy["agent_rule"], "calibration": calibration,
         "chosen_by": "bench_accuracy.py: leave-one-system-out over the dev systems",
         "loso_headline_mean": round(policy["rules_loso"], 4), "faithful_headline_mean": round(policy["faithful"], 4),
         "agent_rule_picked_per_held_out_system": policy["agent_picked"], "date": date}, indent=1) + "\n")
    log.info("wrote %s (ranked systems: %s)", wdir, policy["ranked_systems"])


if __name__ == "__main__":
    main()
