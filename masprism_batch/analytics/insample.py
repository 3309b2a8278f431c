"""Which traces the packaged ranker weights were fitted on, so accuracy can say whether it is in-sample.

The `ranked` method scores candidates with weights shipped in `masprism_batch/method/weights/`. Accuracy
measured on traces those weights were fitted on is optimistic (README "Accuracy": in-sample vs held-out).
Each ranker weights JSON (`rankers.json` written by `masprism-batch fit`: per system; older `ranker.json` /
`ranker-<family>.json`) may carry `fitted_on`: a list
of hex prefixes of sha256(trace_id as UTF-8) (any prefix length; ids are not shipped, only hashes), as
`benchmarks/accuracy/bench_accuracy.py --train-weights` writes it. A separate `fitted_on*.json` / `fitted_on*.txt` in the same folder
(a JSON list, or one prefix per line) is read too. Without any list the answer is "unknown".
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from pathlib import Path

from masprism_batch.method import weights_dir

log = logging.getLogger(__name__)
RANKED = "ranked"


def _prefixes(v) -> list[str]:
    if isinstance(v, dict):  # {"chat": [...], "spans": [...]} or {"trace_id_sha256": [...]}
        return [p for x in v.values() for p in _prefixes(x)]
    if isinstance(v, list):
        return [x.strip().lower() for x in v if isinstance(x, str) and x.strip()]
    return []


@functools.lru_cache(maxsize=4)
def fitted_prefixes(folder: str | None = None) -> frozenset[str] | None:
    """Hex prefixes of the fitted trace ids, or None when the weights ship no list (unknown)."""
    d = Path(folder) if folder else weights_dir()
    found: list[str] = []
    listed = False
    if not d.is_dir():
        return None
    for p in sorted(d.iterdir()):
        try:
            if p.suffix == ".json" and (p.name == "ranker.json" or p.name.startswith("ranker")):
                doc = json.loads(p.read_text(encoding="utf-8"))
                if isinstance(doc, dict) and "fitted_on" in doc:
                    listed = True
                    found += _prefixes(doc["fitted_on"])
                # a ranker file from `masprism-batch fit` (rankers.json): one fitted_on list per system
                for entry in (doc.get("systems") or {}).values() if isinstance(doc, dict) else ():
                    if isinstance(entry, dict) and "fitted_on" in entry:
                        listed = True
                        found += _prefixes(entry["fitted_on"])
            elif p.name.startswith("fitted_on") and p.suffix in (".json", ".txt"):
                text = p.read_text(encoding="utf-8")
                listed = True
                found += _prefixes(json.loads(text)) if p.suffix == ".json" else _prefixes(text.split())
        except (OSError, ValueError) as exc:
            log.warning("cannot read the fitted-trace list in %s: %s", p, exc)
    return frozenset(found) if listed else None


class InSample:
    """`in_sample(trace_id)`: True/False, or None when no list ships with the weights."""

    def __init__(self, folder: str | None = None):
        self.prefixes = fitted_prefixes(folder)
        self.lengths = sorted({len(p) for p in self.prefixes}) if self.prefixes else []

    @property
    def known(self) -> bool:
        return self.prefixes is not None

    def __call__(self, trace_id: str) -> bool | None:
        if self.prefixes is None:
            return None
        h = hashlib.sha256(trace_id.encode("utf-8")).hexdigest()
        return any(h[:n] in self.prefixes for n in self.lengths)


def note(n_scored: int, n_in_sample: int | None, method_ranked: bool) -> str:
    """One sentence for the report / terminal about what an accuracy figure means."""
    if not method_ranked:
        return "faithful MASPrism method: no learned weights, nothing in-sample"
    if n_in_sample is None:
        return ("unknown whether in-sample: the packaged ranker weights ship no list of fitted traces; they were "
                "fitted on the Who&When and TRAIL dev data, so on those traces the figure is optimistic "
                "(held-out figures: README, Accuracy)")
    if n_in_sample == 0:
        return "held out: none of these traces was used to fit the packaged ranker weights"
    if n_in_sample >= n_scored:
        return (f"in-sample: all {n_scored} traces were used to fit the packaged ranker weights, so this figure is "
                "optimistic (held-out figures: README, Accuracy)")
    return (f"partly in-sample: {n_in_sample} of {n_scored} traces were used to fit the packaged ranker weights "
            "(optimistic; held-out figures: README, Accuracy)")
