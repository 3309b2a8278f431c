"""A ranker file (`--ranker`, `fit -o`) checked completely before any of it is applied.

A file is a user's input: it is read bounded (size, nesting depth), parsed, and every field a verdict reads is
checked against its real domain: numbers finite and of the right type, vectors as long as the features they
weigh, standard deviations positive, prior counts at indices >= 0 (a negative index would blame step -5, or an
agent by Python's negative indexing), rules and orders this version knows. The first problem is one
`RankerFileError` naming the file and the field (`systems['x'].weights[3]: NaN is not a finite number`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from masprism_batch.config_checks import NotRegularFile, read_regular
from masprism_batch.method import weights_dir
from masprism_batch.verdict import case, rules
from masprism_batch.verdict.checked_json import MAX_BYTES, MAX_DEPTH, MAX_FEATURES, loads_strict
from masprism_batch.verdict.checked_json import RankerFileError as RankerFileError
from masprism_batch.verdict.checked_json import depth as _depth
from masprism_batch.verdict.checked_json import error as _error
from masprism_batch.verdict.checked_json import num as _num
from masprism_batch.verdict.checked_json import str_list as _str_list
from masprism_batch.verdict.checked_json import vector as _vector
from masprism_batch.verdict.correction import READ_OFFSETS

FORMAT = "masprism-batch ranker"
VERSION = 3  # the one version `fit` writes and a run reads; another is refused (refit with `masprism-batch fit`)

MAX_SYSTEMS = 10_000
MAX_PRIOR_KEYS = 100_000


def read_bounded(path: Path) -> bytes:
    """The file's bytes: a regular file (never a FIFO that would block), at most MAX_BYTES."""
    try:
        data, size = read_regular(path, MAX_BYTES)
    except NotRegularFile:
        raise _error(path, "", "not a regular file") from None
    except OSError as exc:
        raise _error(path, "", f"not a readable ranker file ({exc.strerror or exc})") from None
    if size > MAX_BYTES:
        raise _error(path, "", f"{size:,} bytes: larger than any ranker file ({MAX_BYTES:,} at most)")
    return data


def read_checked(path: Path) -> tuple[dict, str]:
    """Read, parse and check a ranker file, once: (the parsed object, every field checked by `check`; the SHA-256
    of the bytes read, which a run binds to its OUTDIR)."""
    data = read_bounded(Path(path))
    return parse_checked(data, path), hashlib.sha256(data).hexdigest()


def parse_checked(data: bytes, path) -> dict:
    """Parse and check the bytes of the ranker file at `path`."""
    d = loads_strict(data, path, "ranker file")
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise _error(path, "", "not a masprism-batch ranker file (write one with `masprism-batch fit`)")
    check(d, path)
    return d


def _agent_rule(path, where: str, rule) -> None:
    base = rule.split("|", 1)[1] if isinstance(rule, str) and rule.startswith("prior|") else rule
    ok = isinstance(base, str) and (base in ("author", "aggregate") or base in rules.AGENT_RULES
                                    or rules.known_agent_rule(base))
    if not ok:
        raise _error(path, where, f"unknown agent rule {json.dumps(rule)[:60]}")


def _priors(path, where: str, p) -> None:
    if not isinstance(p, dict):
        raise _error(path, where, "must be an object with pos, relpos, agent, n")
    for key, top in (("pos", None), ("relpos", case.RELPOS_BINS)):
        counts = p.get(key)
        if not isinstance(counts, dict) or len(counts) > MAX_PRIOR_KEYS:
            raise _error(path, f"{where}.{key}", f"missing or not an object of at most {MAX_PRIOR_KEYS:,} counts")
        for k, v in counts.items():
            if not (isinstance(k, str) and k.isascii() and k.isdigit() and len(k) <= 9) or \
                    (top is not None and int(k) >= top):
                bound = f"in [0, {top})" if top is not None else ">= 0"
                raise _error(path, f"{where}.{key}", f"index {k!r} is not an integer {bound}")
            _num(path, f"{where}.{key}[{k!r}]", v, lo=0)
    agents = p.get("agent")
    if not isinstance(agents, dict) or len(agents) > MAX_PRIOR_KEYS:
        raise _error(path, f"{where}.agent", f"missing or not an object of at most {MAX_PRIOR_KEYS:,} counts (one "
                                             f"per blamed agent)")
    for k, v in agents.items():
        _num(path, f"{where}.agent[{k[:40]!r}]", v, lo=0)
    _num(path, f"{where}.n", p.get("n"), lo=0, integer=True)


def _calibration(path, where: str, cal, kinds=("evidence", "fitted", "ranked")) -> None:
    if cal is None:
        return
    if not isinstance(cal, dict) or cal.get("kind") not in kinds:
        raise _error(path, where, "must be an object of kind " + " or ".join(f'"{k}"' for k in kinds)
                     + " (calibrate.fit_evidence / fit_monotone, verdict_confidence.rank_calibration)")
    from masprism_batch.method.confidence import FEATURES as EVIDENCE
    from masprism_batch.verdict.confidence import KNOWN as VERDICT

    fitted = cal["kind"] in ("fitted", "ranked")
    feats = _str_list(path, f"{where}.features", cal.get("features"), list(VERDICT if fitted else EVIDENCE))
    _vector(path, f"{where}.mean", cal.get("mean"), len(feats))
    _vector(path, f"{where}.std", cal.get("std"), len(feats), positive=True)
    _vector(path, f"{where}.w", cal.get("w"), len(feats))
    _num(path, f"{where}.b", cal.get("b"))
    if fitted:  # monotone: no weight may turn its feature against the confidence
        for i, w in enumerate(cal["w"]):
            if w < 0:
                raise _error(path, f"{where}.w[{i}]", f"{w} must be >= 0 (the confidence rises with each feature)")
        _calibration(path, f"{where}.zero_training", cal.get("zero_training"), ("evidence",))
    if cal["kind"] == "ranked":
        _ranked(path, where, cal)


MAX_KNOTS = 10_000  # held-out scores a "ranked" calibration may hold (`fit` stores at most 200)


def _ranked(path, where: str, cal: dict) -> None:
    """A "ranked" calibration's placement of a score among the held-out ones: knots strictly increasing (run time
    interpolates between them and divides by their range), their percentiles u strictly increasing within
    [0, 1] (a higher score never less confident), a scale a >= 0, and weights that are not all 0."""
    if not any(cal["w"]):
        raise _error(path, f"{where}.w", "all 0: the score would not order any verdict")
    knots, u = cal.get("knots"), cal.get("u")
    if not isinstance(knots, list) or not 2 <= len(knots) <= MAX_KNOTS:
        raise _error(path, f"{where}.knots", f"must be a list of 2 to {MAX_KNOTS:,} numbers")
    _vector(path, f"{where}.knots", knots, len(knots))
    _vector(path, f"{where}.u", u, len(knots))
    for name, v in (("knots", knots), ("u", u)):
        for i in range(1, len(v)):
            if not v[i] > v[i - 1]:
                raise _error(path, f"{where}.{name}[{i}]", f"{v[i]} must be > the one before ({v[i - 1]})")
    if u[0] < 0 or u[-1] > 1:
        raise _error(path, f"{where}.u", "percentiles must lie within [0, 1]")
    _num(path, f"{where}.a", cal.get("a"), lo=0)


def check_entry(path, name: str, e) -> None:

    where = f"systems[{name[:80]!r}]"
    if not isinstance(e, dict):
        raise _error(path, where, "must be an object")
    if e.get("system", name) != name:  # absent: the key names it (rankfile.RankerFile)
        raise _error(path, f"{where}.system", f"{json.dumps(e['system'])[:60]} is not the name the entry is filed "
                                              f"under: logs are matched by that name and their verdicts would name "
                                              f"the other; make the two the same")
    verdict = e.get("verdict", "rule")
    if verdict not in ("ranker", "prior", "rule"):
        raise _error(path, f"{where}.verdict", f"unknown verdict {json.dumps(verdict)[:60]}")
    if e.get("rule", "faithful") not in rules.RULES:
        raise _error(path, f"{where}.rule", f"unknown zero-training rule {json.dumps(e.get('rule'))[:60]}")
    for key in ("agent_rule", "rule_agent"):
        if key in e or key == "agent_rule":
            _agent_rule(path, f"{where}.{key}", e.get(key, "author"))
    if (verdict == "ranker" or "offset" in e) and e.get("offset") not in READ_OFFSETS:
        raise _error(path, f"{where}.offset", f"corrects an order this version does not know: "
                                             f"{json.dumps(e.get('offset'))[:60]} (one of {', '.join(READ_OFFSETS)})")
    # offset_scale is a learned, unpenalised weight: a fit may turn the rule's order down or around (< 0)
    if "offset_scale" in e:
        _num(path, f"{where}.offset_scale", e["offset_scale"])
    if "l2" in e:
        _num(path, f"{where}.l2", e["l2"], lo=0)
    if "k" in e:
        _num(path, f"{where}.k", e["k"], lo=0, integer=True)
    if e.get("priors") is not None or verdict == "prior":
        _priors(path, f"{where}.priors", e.get("priors"))
    if verdict == "ranker":
        feats = _str_list(path, f"{where}.features", e.get("features") or case.BASE_FEATURES + case.PRIOR_FEATURES,
                          case.BASE_FEATURES + case.PRIOR_FEATURES)
        _vector(path, f"{where}.weights", e.get("weights"), len(feats))
        _vector(path, f"{where}.mean", e.get("mean"), len(feats))
        _vector(path, f"{where}.std", e.get("std"), len(feats), positive=True)
    _calibration(path, f"{where}.calibration", e.get("calibration"))
    if e.get("category") is not None:
        _kinds(path, f"{where}.category", e["category"])
    if e.get("stepset") is not None:  # optional (issue 59): files written before it stay readable
        from masprism_batch.verdict.stepset import check as check_stepset

        problem = check_stepset(e["stepset"])
        if problem:
            raise _error(path, f"{where}.stepset", problem)


def _kinds(path, where: str, cat) -> None:
    """A system's fitted failure kinds (fit/categories.py): their shapes and values; whether they fit the run's
    taxonomy is checked where a run applies them (its digest, category/classify.from_json)."""
    from masprism_batch.category.classify import FORMAT
    from masprism_batch.category.log_signals import NAMES

    if not isinstance(cat, dict) or cat.get("kept") not in ("fitted", "zero-training"):
        raise _error(path, where, 'must be an object whose "kept" is "fitted" or "zero-training"')
    if cat["kept"] != "fitted":
        return
    w = cat.get("weights")
    if not isinstance(w, dict) or w.get("format") != FORMAT or w.get("features") != list(NAMES):
        raise _error(path, f"{where}.weights", f"must be category weights of format {FORMAT} over this version's "
                                               "log features")
    _num(path, f"{where}.weights.a", w.get("a"))
    b = w.get("b")
    if not isinstance(b, list) or not 0 < len(b) <= MAX_FEATURES * 8:
        raise _error(path, f"{where}.weights.b", "missing or not a list of numbers, one per kind")
    _vector(path, f"{where}.weights.b", b, len(b))
    W = w.get("W")
    if not isinstance(W, list) or len(W) != len(b):
        raise _error(path, f"{where}.weights.W", f"must hold one row per kind ({len(b)})")
    for i, row in enumerate(W):
        _vector(path, f"{where}.weights.W[{i}]", row, len(NAMES))


def check(d: dict, path) -> None:
    """Every field of a parsed ranker file a run reads, or RankerFileError naming the first bad one."""
    if _depth(d) > MAX_DEPTH:
        raise _error(path, "", f"nested deeper than a ranker file ({MAX_DEPTH} levels)")
    v = d.get("version", 0)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise _error(path, "version", f"{json.dumps(v)[:60]} is not a version number")
    if v > VERSION:
        raise _error(path, "", f"ranker file version {v} is newer than this masprism-batch reads ({VERSION}): "
                               f"upgrade masprism-batch")
    if v < VERSION:
        raise _error(path, "", f"ranker file version {v} is older than this masprism-batch reads ({VERSION}): "
                               f"refit it with `masprism-batch fit`")
    if not isinstance(d.get("model_id"), str):
        raise _error(path, "model_id", "missing or not a string")
    systems = d.get("systems", {})
    if not isinstance(systems, dict) or len(systems) > MAX_SYSTEMS:
        raise _error(path, "systems", f"must be an object of at most {MAX_SYSTEMS:,} systems")
    for name, e in systems.items():
        check_entry(path, name, e)


FALLBACK = "fallback.json"  # beside rankers.json in a weights folder: what logs of systems it does not name get


def check_fallback(path: Path) -> None:
    """A folder's fallback.json (`--ranker FOLDER` reads it beside rankers.json, rules.read_fallback), read and
    checked as a ranker file is: an object; `rule` and `agent_rule` text (an unknown name is warned about and
    replaced when read); `calibration` a zero-training one. Else RankerFileError naming the file and field."""
    d = loads_strict(read_bounded(path), path, "fallback file")
    if not isinstance(d, dict):
        raise _error(path, "", "must be an object (rule, agent_rule, calibration)")
    if _depth(d) > MAX_DEPTH:
        raise _error(path, "", f"nested deeper than a fallback file ({MAX_DEPTH} levels)")
    for key in ("rule", "agent_rule"):
        if key in d and not isinstance(d[key], str):
            raise _error(path, key, f"{json.dumps(d[key])[:60]} is not a rule name")
    _calibration(path, "calibration", d.get("calibration"), ("evidence",))


PACKAGED = "rankers.json"  # the packaged per-system rankers, written by benchmarks/accuracy/bench_accuracy.py --train-weights
# `--ranker packaged` (config method.ranker = "packaged"): the packaged rankers of the benchmark systems,
# named explicitly; `eval --dataset` names them itself. Without a name no packaged ranker applies.
PACKAGED_NAME = "packaged"


def is_packaged(setting: str | None) -> bool:
    return setting is not None and str(setting) == PACKAGED_NAME


def target(setting: str) -> Path:
    """The file a `--ranker` setting names: "packaged" the packaged rankers, a folder its rankers.json, else the
    path itself (whether it exists is the caller's question)."""
    path = weights_dir() / PACKAGED if is_packaged(setting) else Path(setting)
    return path / PACKAGED if path.is_dir() else path
