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

    def index(self, name: str) -> int:
        return self.names.index(name)

    def resolve(self, label: str | None) -> str | None:
        """A label as written by an annotator -> the kind's name, or None when no kind matches."""
        if label is None:
            return None
        k = _key(label)
        by_key = {_key(n): n for n in self.names}
        return by_key.get(k) or self.aliases.get(k)

    def digest(self) -> str:
        """Identifies the taxonomy's words (a cache key for the per-model baseline NLL; shipped weights match it)."""
        text = "\n".join(f"{k.name}\t{k.family}\t{k.description}" for k in self.kinds)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


TRAIL = Taxonomy("trail", TRAIL_KINDS, TRAIL_ALIASES)


def load_taxonomy(path: str | Path | None) -> Taxonomy:
    """None -> TRAIL. A TOML file: `name = "..."` (optional) and one `[[kind]]` table per kind with `name`,
    `family`, `description` (and optional `aliases = [...]`, other spellings labels use)."""
    if path is None:
        return TRAIL
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"taxonomy {p}: cannot read it as TOML: {exc}") from None
    rows = doc.get("kind")
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"taxonomy {p}: needs one [[kind]] table per kind (name, family, description)")
    kinds, aliases = [], {}
    for i, r in enumerate(rows):
        missing = [f for f in ("name", "family", "description") if not isinstance(r.get(f), str) or not r[f].strip()]
        if missing:
            raise ValueError(f"taxonomy {p}: kind #{i + 1} lacks {', '.join(missing)} (a non-empty string each)")
        unknown = set(r) - {"name", "family", "description", "aliases"}
        if unknown:
            raise ValueError(f"taxonomy {p}: kind {r['name']!r} has unknown fields {sorted(unknown)}")
        kinds.append(Kind(r["name"].strip(), r["family"].strip(), " ".join(r["description"].split())))
        for a in r.get("aliases", []):
            aliases[_key(str(a))] = r["name"].strip()
    return Taxonomy(str(doc.get("name", p.stem)), tuple(kinds), aliases)
