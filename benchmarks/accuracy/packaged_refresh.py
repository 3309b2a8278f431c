"""The packaged rankers' issue-59 parts (`bench_stepset.py --write-packaged`): each packaged system refitted on the
logs it was fitted on by the product's fit, and, where the refit gives the packaged verdicts, its step-set
calibration and its confidence taken into weights/rankers.json, so `--ranker packaged` reads sets and a confidence
made by today's `fit` while naming the same steps and agents."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from benchmarks.accuracy.accuracy_cases import fit_cases, system_fit
from masprism_batch.verdict.rankfile import SystemRanker

log = logging.getLogger("bench_stepset")


def write_packaged(cases, fb, path: Path) -> dict[str, str]:
    """The packaged rankers' step-set calibrations and confidence: each system refitted on the same logs by the
    product's fit (its entry must equal the packaged one: the same logs, verdict, order, agent rule and weights),
    whose held-out folds calibrate its sets (fit/stepset_fit.py; stored as `packaged`) and its confidence
    (`calibration` and the `heldout` figures, fit/verdict_confidence.py) as `fit` would: the verdicts stay the
    packaged ones. A system whose refit differs keeps no set calibration (its logs get the dev one) and its old
    confidence, and is named. Returns {system: what was done}."""
    d = json.loads(path.read_text(encoding="utf-8"))
    done = {}
    for system, e in d["systems"].items():
        sub = [c for c in cases if c.system == system]
        seen = sorted(hashlib.sha256(c.trace.trace_id.encode()).hexdigest()[:16] for c in fit_cases(sub, fb.rule))
        if seen != e.get("fitted_on"):
            done[system] = f"not calibrated: the cache holds {len(seen)} of its {len(e.get('fitted_on', []))} logs"
            continue
        got = system_fit(sub, system, e.get("rule", fb.rule), e.get("rule_agent", fb.agent_rule), fb.calibration).entry
        # the same entry up to the solver's tolerance (weights within 1e-5; the rebuilt cache moves them ~1e-7) and
        # the same verdict on every one of its logs
        same = all(got.get(k) == e.get(k) for k in ("verdict", "offset", "agent_rule", "features")) and np.allclose(
            got.get("weights") or [0.0], e.get("weights") or [0.0], rtol=0.0, atol=1e-5) and all(
            SystemRanker(got, "").apply(c.trace, c.rows, c.ranked)[0][:1]
            == SystemRanker(e, "").apply(c.trace, c.rows, c.ranked)[0][:1] for c in fit_cases(sub, fb.rule))
        if not same or not got.get("stepset"):
            done[system] = "not calibrated: the product's fit no longer refits the packaged entry"
            continue
        e["stepset"] = {**got["stepset"], "source": "packaged"}
        # the verdicts are the refit's: so is the confidence, with the fit's current rules (issue 59: the better of
        # the fitted and the zero-training confidence on its own folds, spread as far as it ranked there)
        e["calibration"], e["heldout"] = got["calibration"], got["heldout"]
        done[system] = (f"calibrated on {got['stepset']['heldout']['n']} logs; confidence "
                        f"{got['heldout'].get('confidence_kept')} ({got['calibration'].get('kind')})")
    path.write_text(json.dumps(d, indent=1) + "\n", encoding="utf-8")
    for system, what in done.items():
        log.info("packaged %s: %s", system, what)
    return done
