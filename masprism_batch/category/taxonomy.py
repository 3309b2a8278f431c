"""Failure kinds a verdict is sorted into: the default TRAIL taxonomy, or a team's own (`--taxonomy FILE`).

A kind has a name, a family and a one-line description. The description is what the model reads (evidence.py:
its NLL after the blamed step), so it is written as the sentence an annotator would say about the step, in
plain words, short (each suffix is a few tokens of prefill per kind).

TRAIL's taxonomy (Deshpande et al., 2025, "TRAIL: Trace Reasoning and Agentic Issue Localization"): 20 leaf
kinds under three families. The descriptions are ours, one line each, paraphrasing the paper's definitions.
Labels in the released annotations spell a few kinds differently ("Context Handling Failure", "Task
Orchestration Error", "Language-Only"): `Taxonomy.resolve` matches case-insensitively and through `aliases`.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

REASONING, EXECUTION, PLANNING = "Reasoning Errors", "System Execution Errors", "Planning and Coordination Errors"


@dataclass(frozen=True)
class Kind:
    name: str
    family: str
    description: str


TRAIL_KINDS = (
    Kind("Language-only", REASONING, "the agent states facts that are made up, not from any tool output"),
    Kind("Tool-related", REASONING, "the agent claims a tool result or tool call that never happened"),
    Kind("Poor Information Retrieval", REASONING, "the search or lookup returned irrelevant or too little information"),
    Kind("Tool Output Misinterpretation", REASONING, "the agent misread what a tool returned"),
    Kind("Incorrect Problem Identification", REASONING, "the agent misunderstood what the task asks"),
    Kind("Tool Selection Errors", REASONING, "the agent used the wrong tool for this step"),
    Kind("Formatting Errors", REASONING, "the output is not in the required format, so it cannot be parsed"),
    Kind("Instruction Non-compliance", REASONING, "the agent ignored an explicit instruction it was given"),
    Kind("Tool Definition Issues", EXECUTION, "the tool is defined or described wrongly"),
    Kind("Environment Setup Errors", EXECUTION, "a package, file or permission is missing in the environment"),
    Kind("Rate Limiting", EXECUTION, "the service refused the call: too many requests (429)"),
    Kind("Authentication Errors", EXECUTION, "the call failed: unauthorized or forbidden (401, 403)"),
    Kind("Service Errors", EXECUTION, "the remote service failed with a server error (500)"),
    Kind("Resource Not Found", EXECUTION, "the page, file or endpoint does not exist (404)"),
    Kind("Resource Exhaustion", EXECUTION, "the run ran out of memory, disk or tokens"),
    Kind("Timeout Issues", EXECUTION, "the call took too long and timed out"),
    Kind("Context Handling Failures", PLANNING, "the agent forgot or lost earlier context of the run"),
    Kind("Resource Abuse", PLANNING, "the agent repeats the same call again and again"),
    Kind("Goal Deviation", PLANNING, "the agent drifts away from the task's goal"),
    Kind("Task Orchestration", PLANNING, "the steps or sub-agents are planned or coordinated badly"),
)
TRAIL_ALIASES = {"context handling failure": "Context Handling Failures",
                 "task orchestration error": "Task Orchestration"}


def _key(s: str) -> str:
    return re.sub(r"\s+", " ", s.strip().lower())


@dataclass(frozen=True)
class Taxonomy:
    name: str
    kinds: tuple[Kind, ...]
    aliases: dict[str, str] = field(default_factory=dict)  # lower-cased label -> kind name

    def __post_init__(self):
        if not self.kinds:
            raise ValueError(f"taxonomy {self.name!r} has no kinds")
        seen = set()
        for k in self.kinds:
            if not k.name.strip() or not k.family.strip() or not k.description.strip():
                raise ValueError(f"taxonomy {self.name!r}: every kind needs a name, a family and a description ({k})")
            if _key(k.name) in seen:
                raise ValueError(f"taxonomy {self.name!r}: kind {k.name!r} is named twice")
            seen.add(_key(k.name))

    @property
    def names(self) -> list[str]:
        return [k.name for k in self.kinds]

    @property
    def families(self) -> list[str]:
        """Families in the order their first kind appears."""
        return list(dict.fromkeys(k.family for k in self.kinds))

    def family_of(self, name: str) -> str:
        return self.kinds[self.index(name)].family

    @cached_property
    def _index(self) -> dict[str, int]:
        # built once: a lookup per label or verdict must not scan every kind (cost linear in the kinds)
        return {k.name: i for i, k in enumerate(self.kinds)}

    @cached_property
    def _by_key(self) -> dict[str, str]:
        return {_key(n): n for n in self.names}

    def index(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise ValueError(f"{name!r} is not a kind of taxonomy {self.name!r}") from None

    def resolve(self, label: str | None) -> str | None:
        """A label as written by an annotator -> the kind's name, or None when no kind matches."""
        if label is None:
            return None
        k = _key(label)
        return self._by_key.get(k) or self.aliases.get(k)

    def digest(self) -> str:
        """Identifies the taxonomy's words (a cache key for the per-model baseline NLL; shipped weights match it)."""
        text = "\n".join(f"{k.name}\t{k.family}\t{k.description}" for k in self.kinds)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


TRAIL = Taxonomy("trail", TRAIL_KINDS, TRAIL_ALIASES)


# Caps on a team's taxonomy file (issue 61): every kind's description is read after every top-ranked step of every
# verdict, so the kinds and their words are work per log; TRAIL has 20 kinds of at most 16 words. A file past a
# cap is refused naming it, never read into memory whole.
MAX_KINDS = 256
MAX_NAME_CHARS = 200  # a kind's name, family or alias
MAX_DESCRIPTION_CHARS = 400  # "one short line": about 100 tokens at most
MAX_ALIASES = 50  # per kind
MAX_FILE_BYTES = 1 << 20


def _text(p: Path, where: str, key: str, v, cap: int) -> str:
    """A string field of the file, stripped: anything else (a number, a list, a table) or past `cap` characters is
    a ValueError naming the file, the kind and the key."""
    if not isinstance(v, str) or not v.strip():
        got = "empty" if isinstance(v, str) else _toml_type(v)
        raise ValueError(f"taxonomy {p}: {where}: `{key}` must be a non-empty string, not {got}")
    if len(v) > cap:
        raise ValueError(f"taxonomy {p}: {where}: `{key}` is {len(v):,} characters; at most {cap:,}")
    return v.strip()


def _toml_type(v) -> str:
    """What a TOML value is, with its article: "an integer", "a table"."""
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a table"}.get(type(v), f"a {type(v).__name__}")


def load_taxonomy(path: str | Path | None) -> Taxonomy:
    """None -> TRAIL. A TOML file: `name = "..."` (optional) and one `[[kind]]` table per kind with `name`,
    `family`, `description` (and optional `aliases = [...]`, other spellings labels use). Only a regular file
    is read (a FIFO never blocks, /dev/zero is refused), at most MAX_FILE_BYTES; a field of the wrong type or
    past a cap is a ValueError naming the file, the kind and the key."""
    if path is None:
        return TRAIL
    from masprism_batch.config_checks import NotRegularFile, read_regular

    p = Path(path)
    try:
        raw, size = read_regular(p, MAX_FILE_BYTES)
    except NotRegularFile:
        raise ValueError(f"taxonomy {p}: not a regular file (a FIFO, device or folder is never read)") from None
    except OSError as exc:
        raise ValueError(f"taxonomy {p}: cannot read it: {exc.strerror or exc}") from None
    if size > MAX_FILE_BYTES or len(raw) > MAX_FILE_BYTES:
        raise ValueError(f"taxonomy {p}: {max(size, len(raw)):,} bytes; a taxonomy file is at most "
                         f"{MAX_FILE_BYTES:,} bytes")
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
        raise ValueError(f"taxonomy {p}: cannot read it as TOML: {exc}") from None
    rows = doc.get("kind")
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"taxonomy {p}: needs one [[kind]] table per kind (name, family, description)")
    if len(rows) > MAX_KINDS:
        raise ValueError(f"taxonomy {p}: {len(rows):,} kinds; a taxonomy has at most {MAX_KINDS} (each kind's "
                         "description is read after every blamed step)")
    name = _text(p, "top level", "name", doc["name"], MAX_NAME_CHARS) if "name" in doc else p.stem
    kinds, aliases = [], {}
    for i, r in enumerate(rows):
        where = f"kind #{i + 1}"
        if not isinstance(r, dict):
            raise ValueError(f"taxonomy {p}: {where}: `kind` must be a list of tables ([[kind]] with name, family, "
                             f"description), not a list holding {_toml_type(r)}")
        missing = [f for f in ("name", "family", "description") if f not in r]
        if missing:
            raise ValueError(f"taxonomy {p}: {where} lacks {', '.join(missing)} (a non-empty string each)")
        unknown = set(r) - {"name", "family", "description", "aliases"}
        if unknown:
            raise ValueError(f"taxonomy {p}: {where} has unknown fields {sorted(unknown)}")
        kname = _text(p, where, "name", r["name"], MAX_NAME_CHARS)
        where = f"kind {kname!r}"
        family = _text(p, where, "family", r["family"], MAX_NAME_CHARS)
        desc = " ".join(_text(p, where, "description", r["description"], MAX_DESCRIPTION_CHARS).split())
        kinds.append(Kind(kname, family, desc))
        al = r.get("aliases", [])
        if not isinstance(al, list):
            raise ValueError(f"taxonomy {p}: {where}: `aliases` must be a list of strings, not {_toml_type(al)}")
        if len(al) > MAX_ALIASES:
            raise ValueError(f"taxonomy {p}: {where}: {len(al):,} aliases; at most {MAX_ALIASES}")
        for a in al:
            aliases[_key(_text(p, where, "aliases", a, MAX_NAME_CHARS))] = kname
    return Taxonomy(str(name), tuple(kinds), aliases)
