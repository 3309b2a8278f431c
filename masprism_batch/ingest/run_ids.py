"""A trace's id names its run, not where its file sits (docs/formats.md, "Trace ids").

A reader keeps the id a log records for its run (an OTel trace id, a session id, a completion `id`, an Inspect
run and sample). Where a log records none, the reader names the trace by its file: `<format>/<file stem>`, with
`#<n>` for a line or run of a file that holds several. A file name is not a run: two folders hold a `logs.txt`,
two models leave `<instance>.traj`, a log is rotated (`chat.jsonl` -> `chat-day1.jsonl`), a crew appends a second
kickoff (run 1 of `crewai/logs` became `crewai/logs#1`). `run_id` replaces such an id, once the trace is
validated, by a digest of the run's content:

- a file that is one run (SWE-agent, OpenHands, ADK, ... and Letta, whose agent name is no run id):
  `<format>/<name>~<digest>`, the name kept for people;
- a line or a run of a file that holds several, and every CrewAI log (appended to run by run):
  `<format>/<digest>`, so a run keeps its id when lines are appended before or after it or its file is renamed.

The digest covers what the run says (source, system, question, status, metadata, every step's speaker, role,
kind, text, ids, time and error), never the file's name or its line numbers: a copy of a run, even in another
shape (a JSON and a JSON-lines form of one result), is the same run (`duplicate_trace_id`, first wins). Who&When (`Algorithm-Generated/0`: `sources.path_ids`), TRAIL (the file's hash
name) and canonical input keep their ids.

Scheme versions (`ID_SCHEME`), recorded in the staging marker (`_staging/_COMPLETE.json`, `id_scheme`): 1 kept
the file-named ids; 2 is this. A nightly rerun into an OUTDIR staged under scheme 1 keeps its old ids and tells
its old runs apart by content: `legacy_parts` lists the parts staged before the change, pipelines/increment.py
takes their runs' digests, and a run read now whose digest is among them is already attributed.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timedelta, timezone

from masprism_batch.ingest.documents import LABELS
from masprism_batch.ingest.sources import base_name
from masprism_batch.trace import Trace

ID_SCHEME = 2  # module-level so a test can write an OUTDIR the way scheme 1 did (tests/cli/test_trace_identity*)
DIGEST_BYTES = 8  # 16 hex characters: 64 bits, no collision expected among billions of runs

# formats whose readers fall back to the file's name when the log records no run id
_FILE_NAMED = frozenset(LABELS[k] for k in (
    "ag2", "openai", "langgraph-messages", "swe-agent", "openhands", "tau-bench", "smolagents", "mini-swe-agent",
    "claude-code", "crewai", "autogen-recorder", "adk", "letta", "map", "smolagents-bus"))
# the first part of those readers' file-named ids (a `--map` mapping's is its `source`)
_PREFIXES = frozenset({"ag2", "autogen", "autogen-recorder", "openai", "swe-agent", "openhands", "tau-bench",
                       "smolagents", "mini-swe-agent", "claude-code", "crewai", "adk", "letta", "smolagents-bus"})
_MAP = LABELS["map"]
_CREWAI, _LETTA = LABELS["crewai"], LABELS["letta"]
_RUN_SUFFIX = re.compile(r"#\d+$")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


_US = timedelta(microseconds=1)


def _micros(t: datetime | None) -> int | None:
    if t is None:
        return None
    return ((t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t) - _EPOCH) // _US


def content_digest(trace: Trace) -> str:
    """16 hex characters over what the run says; the same for a trace as read and as staged (Parquet)."""
    steps = trace.steps
    # the short fields as one repr (unambiguous), the step texts joined and hashed as they are, with their lengths
    # so no two splits of one text hash alike: escaping megabytes of text (JSON, repr) cost ingest a third again
    # its time. Metadata as `Trace.to_row` writes it, which a staged row, loaded and written again, reproduces.
    head = repr((trace.source, trace.system, trace.question, trace.run_status,
                 json.dumps(trace.metadata, ensure_ascii=False, default=str),
                 [(s.agent, s.role, s.kind, s.span_id, s.parent_span_id, _micros(s.start_time), s.error)
                  for s in steps]))
    texts = [s.content for s in steps]
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    h.update(head.encode("utf-8", "surrogatepass"))
    h.update(repr(list(map(len, texts))).encode())
    h.update("".join(texts).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def run_id(trace: Trace, fmt: str | None, input_path: str) -> str:
    """The id ingest keeps for a validated `trace` read as format label `fmt` from `input_path` (module doc)."""
    tid = trace.trace_id
    if ID_SCHEME < 2 or fmt not in _FILE_NAMED:
        return tid
    prefix, sep, rest = tid.partition("/")
    if not sep or not rest or (prefix not in _PREFIXES and fmt != _MAP):
        return tid
    if fmt == _LETTA:  # an agent's name, or the file's: never a run's
        return f"{prefix}/{_RUN_SUFFIX.sub('', rest)}~{content_digest(trace)}"
    stem = base_name(input_path)
    if rest == input_path:  # the smolagents message bus without message ids names the path as given
        rest = stem
    if rest.startswith(stem.removesuffix(".traj")) and not rest.startswith(stem):
        stem = stem.removesuffix(".traj")  # mini-swe-agent names `x.traj.json` by `x`
    if rest != stem and not rest.startswith((stem + "#", stem + "/")):
        return tid  # the log's own id
    if fmt == _CREWAI or rest != stem:  # a run or line of a file that holds several, or may come to
        return f"{prefix}/{content_digest(trace)}"
    return f"{prefix}/{stem}~{content_digest(trace)}"


def legacy_parts(marker: dict) -> list[str]:
    """The staged trace parts (`traces/part-...`) whose ids an older scheme gave, from a staging marker."""
    if int(marker.get("id_scheme") or 1) >= 2:
        return list(marker.get("legacy_parts") or [])
    return sorted(p for p in marker.get("parts") or {} if p.startswith("traces/"))


def marker_fields(marker: dict | None) -> dict:
    """What a staging marker records about ids: the scheme its new parts were staged under and the older parts."""
    fields: dict = {"id_scheme": ID_SCHEME}
    old = legacy_parts(marker) if marker is not None else []
    if ID_SCHEME >= 2 and old:
        fields["legacy_parts"] = old
    return fields

