"""The primitives a user's JSON weights file (a ranker file, a folder's fallback.json: verdict/rankcheck.py, which
reads it bounded) is checked with: a strict parse (UTF-8 with or without a byte order mark; a key written twice in
one object refused, since JSON would keep the last), its nesting depth counted without recursion, and numbers,
vectors and name lists in their real domains. Each problem is one RankerFileError naming the file and the field."""

from __future__ import annotations

import json
import math
from typing import Any

MAX_BYTES = 64 * 1024**2  # a fitted file is a few hundred KB; far more is not a ranker file
MAX_DEPTH = 8  # the deepest a valid file nests: systems -> entry -> priors -> pos -> value
MAX_FEATURES = 256
# Every number a fit writes is small (weights and means of features on log and z scales, counts of labelled logs)
# and a fitted std is never below 1e-9 (fit/fitting.py, method/calibrate.py). Within these bounds a step's score
# stays far inside float64, so its softmax is never inf - inf: a hand-edited 1e308 was NaN probabilities, a NaN
# confidence and step 0 blamed, silently.
MAX_VALUE = 1e12
MIN_STD = 1e-12


class RankerFileError(ValueError):
    """A ranker file that cannot be applied: not one, another version, or fitted with another model."""


def error(path, where: str, what: str):
    return RankerFileError(f"{path}: {where}: {what}" if where else f"{path}: {what}")


class KeyTwice(ValueError):
    """A key written twice in one JSON object (JSON would keep the last): `key`."""

    def __init__(self, key: str):
        super().__init__(f"the key {key[:80]!r} is written twice in one object: keep one")
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """`json.loads`'s object_pairs_hook that refuses a key written twice (KeyTwice): JSON would keep the last, so a
    hand edit that added a second `weights` to a ranker file, or a second `step` to a label line, took one of the
    two without a word. Also read by fit/labels.py."""
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        raise KeyTwice(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return d


def loads_strict(data: bytes, path, what: str) -> Any:
    """The JSON value of a file's bytes (`what`: "ranker file", "fallback file", for the message)."""
    try:  # -sig: a BOM a Windows editor saved
        return json.loads(data.decode("utf-8-sig"), object_pairs_hook=unique_keys)
    except KeyTwice as exc:
        raise error(path, "", str(exc)) from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: nesting past the parser's
        raise error(path, "", f"not a readable {what} ({type(exc).__name__}: {str(exc)[:200]})") from None


def depth(obj: Any) -> int:
    """Nesting depth without recursion (a hostile file must not crash the checker itself)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > MAX_DEPTH:
            return deepest
        if isinstance(o, dict):
            stack += [(v, d + 1) for v in o.values()]
        elif isinstance(o, list):
            stack += [(v, d + 1) for v in o]
    return deepest


def num(path, where: str, v, lo: float | None = None, positive: bool = False, integer: bool = False) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise error(path, where, f"{json.dumps(v)[:60]} is not {'an integer' if integer else 'a number'}")
    if not math.isfinite(v):
        raise error(path, where, f"{v} is not a finite number")
    if abs(v) > MAX_VALUE:
        raise error(path, where, f"{v:g} is past ±{MAX_VALUE:g}, far from any fitted value (a damaged or "
                                 f"hand-edited file: refit it with `masprism-batch fit`)")
    if positive and not v >= MIN_STD:
        raise error(path, where, f"{v:g} must be >= {MIN_STD:g} (a fitted std is never smaller)" if v > 0
                    else f"{v} must be > 0")
    if lo is not None and v < lo:
        raise error(path, where, f"{v} must be >= {lo:g}")


def vector(path, where: str, v, n: int, positive: bool = False) -> None:
    if not isinstance(v, list):
        raise error(path, where, "missing or not a list of numbers")
    if len(v) != n:
        raise error(path, where, f"{len(v)} values for {n} features")
    for i, x in enumerate(v):
        num(path, f"{where}[{i}]", x, positive=positive)


def str_list(path, where: str, v, known: list[str] | None = None) -> list[str]:
    if not isinstance(v, list) or not v or len(v) > MAX_FEATURES or not all(isinstance(x, str) for x in v):
        raise error(path, where, f"must be a non-empty list of at most {MAX_FEATURES} names")
    if len(set(v)) != len(v):
        raise error(path, where, "names a feature twice")
    unknown = [x for x in v if known is not None and x not in known]
    if unknown:
        raise error(path, where, f"features this version does not compute: {unknown[:5]}")
    return v
