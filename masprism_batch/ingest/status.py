"""A run's status as its log records it (`Trace.run_status`): "failed", "succeeded" or "unknown".

Attribution asks which step caused a failure, so by default every run is attributed except one *graded* as
passed (`--all-runs` attributes all). "succeeded" means a grade of the answer said so: tau-bench's reward, a
canonical row's `run_status`, or the team's outcomes (outcomes.py: `--outcomes FILE`, `--outcome-name` for a score
recorded in the log). An execution status of OK (OTel, OpenInference, Langfuse levels, LangSmith "success") only
says no exception was raised: most failed agent runs end that way, so it is "unknown" and attributed (issue 60).
Each reader calls one function here with what it already holds, so the rule per format lives in one place:

| format | failed | succeeded |
|---|---|---|
| OTLP, OTel SDK dumps, Jaeger, OpenInference / TRAIL | a span with status ERROR (or an `error` tag) | never (OK is no grade) |
| Langfuse | an observation with level ERROR | never (its `scores`: `--outcome-name`) |
| LangSmith | a run with an `error` or status "error" | never (its `feedback_stats`: `--outcome-name`) |
| tau-bench | reward < 1 | reward 1 |
| AG2 AgentEval response log | `is_correct` false | `is_correct` true (a graded answer) |
| SWE-agent, mini-swe-agent | `exit_status` an error / limit (anything but a submission) | never (a submission is not graded) |
| OpenHands | an error observation or agent state "error" | never (finishing is not being right) |
| Who&When | always (the data set holds failed runs only) | never |
| canonical JSONL / Parquet | the `run_status` field: "failed" or a word for it ("error", "FAILED", ...) | "succeeded" or a word for it ("success", "passed", "SUCCEEDED", ...; "ok" is no grade) |

Everything else (OpenAI chat, AG2 chats, traces without a status) is "unknown".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

log = logging.getLogger(__name__)

FAILED, SUCCEEDED, UNKNOWN = "failed", "succeeded", "unknown"
STATUSES = (FAILED, SUCCEEDED, UNKNOWN)
_ERROR_CODES = {"2", "error", "status_code_error"}
_OK_CODES = {"1", "ok", "status_code_ok"}


def span_status(span: dict[str, Any], attrs: dict[str, Any] | None = None) -> str | None:
    """One span's status from OTLP (`status.code` 2 / "STATUS_CODE_ERROR"), OTel SDK dumps
    (`status.status_code` "error"), OpenInference / TRAIL (`status_code` "Error") or Jaeger (`error` tag);
    `attrs`: its attributes already read as a map (else `span["attributes"]` when it is one)."""
    st = span.get("status")
    code = st.get("code", st.get("status_code")) if isinstance(st, dict) else st
    if code is None:
        code = span.get("status_code")
    text = str(code).strip().lower() if code is not None else ""
    if text in _ERROR_CODES:
        return FAILED
    if text in _OK_CODES:
        return SUCCEEDED
    tags = attrs if attrs is not None else span.get("attributes")
    if isinstance(tags, dict) and (tags.get("error") is True or str(tags.get("otel.status_code", "")).lower() == "error"):
        return FAILED
    return None


def combine_statuses(statuses: Iterable[str | None]) -> str:
    """A run of spans: failed if any failed, else unknown (spans OK say no exception was raised, not that the
    answer was right)."""
    return FAILED if FAILED in set(statuses) else UNKNOWN


def of_langfuse(head: dict[str, Any], observations: Iterable[dict[str, Any]]) -> str:
    obs = [o for o in observations if isinstance(o, dict)]
    return FAILED if any(str(o.get("level", "")).upper() == "ERROR" for o in obs) else UNKNOWN


def of_langsmith(runs: Iterable[dict[str, Any]], root: dict[str, Any]) -> str:
    runs = [r for r in runs if isinstance(r, dict)]
    return FAILED if any(r.get("error") or str(r.get("status", "")).lower() == "error" for r in runs) else UNKNOWN


def recorded_scores(head: dict[str, Any]) -> dict[str, Any]:
    """Scores a log records about its run, {name: value}, for `--outcome-name` (outcomes.py): Langfuse trace
    `scores` ([{name, value, stringValue}]) and LangSmith root run `feedback_stats` ({key: {avg, n}})."""
    out: dict[str, Any] = {}
    for sc in head.get("scores") if isinstance(head.get("scores"), list) else ():
        if isinstance(sc, dict) and isinstance(sc.get("name"), str):
            v = sc.get("value") if sc.get("value") is not None else sc.get("stringValue")
            if isinstance(v, (int, float, str, bool)):
                out[sc["name"]] = v
    stats = head.get("feedback_stats")
    for key, st in stats.items() if isinstance(stats, dict) else ():
        v = st.get("avg") if isinstance(st, dict) else st
        if isinstance(v, (int, float, bool)):
            out[str(key)] = v
    return out


def of_reward(reward: Any) -> str:
    """tau-bench: the task's reward (1 = solved)."""
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        return UNKNOWN
    return SUCCEEDED if reward >= 1 else FAILED


def of_exit_status(exit_status: Any) -> str:
    """SWE-agent / mini-swe-agent `info.exit_status`: a submission is ungraded (unknown), anything else (exit_cost,
    exit_context, exit_format, exit_error, LimitsExceeded, FormatError, ...) ended the run early: failed."""
    if not isinstance(exit_status, str) or not exit_status.strip():
        return UNKNOWN
    return UNKNOWN if exit_status.strip().lower() == "submitted" else FAILED


def of_openhands(events: Iterable[Any]) -> str:
    for e in events:
        if not isinstance(e, dict):
            continue
        extras = e.get("extras") if isinstance(e.get("extras"), dict) else {}
        if e.get("observation") == "error" or extras.get("agent_state") == "error":
            return FAILED
    return UNKNOWN


# the words logs and hand-written exports use for a run's end, folded to the three statuses (case, spaces, dashes
# ignored): "SUCCEEDED", "success", "ok" are one class, never extra classes beside "succeeded"
_WORDS = {
    SUCCEEDED: ("succeeded", "success", "successful", "succeed", "pass", "passed", "solved", "resolved"),
    FAILED: ("failed", "fail", "failure", "error", "errored", "err", "crashed", "crash", "exception", "timeout",
             "timed_out", "aborted", "status_code_error"),
    # "ok": an execution status (no exception), no grade of the answer
    UNKNOWN: ("unknown", "", "none", "null", "unset", "n/a", "na", "status_code_unset", "ok", "okay",
              "status_code_ok"),
}
VOCABULARY = {w: status for status, words in _WORDS.items() for w in words}
_WARNED: set[str] = set()  # unknown words already warned about (bounded: a hostile file has many)
_MAX_WARNED = 64


def of_field(value: Any) -> str:
    """A canonical row's `run_status` (JSON lines, Parquet): one of the three statuses, or a word of
    `VOCABULARY` ("success", "SUCCEEDED", "ok", "error", ...) folded to it; anything else is "unknown", with one
    warning per word (not per row)."""
    if value in STATUSES or value is None:  # None: the field is not there (older exports)
        return value or UNKNOWN
    if isinstance(value, str):
        key = value.strip().lower().replace("-", "_").replace(" ", "_")
        if key in VOCABULARY:
            return VOCABULARY[key]
    word = repr(value)[:80]
    if word not in _WARNED and len(_WARNED) < _MAX_WARNED:
        _WARNED.add(word)
        log.warning("run_status %s is not a status this tool knows (%s, or %s): read as unknown", word,
                    ", ".join(STATUSES), ", ".join(sorted(w for w in VOCABULARY if w)[:12]) + ", ...")
    return UNKNOWN


def attributable(traces: Iterable, on_skip, input_path: str | None = None) -> Iterator:
    """The traces to attribute by default: all but those graded as passed (run_status "succeeded": the team's
    outcomes or a named recorded score, outcomes.py, applied as each trace is read; else the log's own grade:
    tau-bench's reward, a canonical row's field), streamed. Each run set aside becomes one `succeeded_run` row of
    errors/ (a warning: counted and listed, not a rejection) whose message starts with the signal that graded it
    (outcomes.SIGNALS), so every summary counts them by signal."""
    from masprism_batch.schema import error_row

    for t in traces:
        if t.run_status == SUCCEEDED:
            meta = t.metadata if isinstance(t.metadata, dict) else {}
            signal = meta.get("graded_by") or ("reward" if t.source == "tau-bench" else "run_status")
            why = meta.get("graded_why") or f"the log grades it succeeded ({t.source})"
            on_skip(error_row(input_path=input_path, record_id=t.trace_id, stage="select", reason="succeeded_run",
                              message=f"{signal}: {why}; not attributed (--all-runs attributes it)"))
        else:
            yield t


# --- Recorded errors as step text (issue 47) ---------------------------------------------------------------
# One rendering for every format, so the model reads the same words whatever wrote the log:
#   Error: <status message>                   (OTel/TRAIL span status message, Langfuse statusMessage, LangSmith
#                                              `error`, a tool result marked as an error)
#   Exception: <type>: <message>              (each `exception` event: OTel, OTel SDK dumps, Jaeger logs, TRAIL)
#   Stack head: <line> | <line> | ...          (the first STACK_LINES lines of its stack trace, STACK_CHARS at most)
# A line whose text is already in the step (a TRAIL status message repeating its exception) is not repeated.
STACK_LINES, STACK_CHARS, MESSAGE_CHARS = 4, 400, 2000


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _stack_head(stack: Any) -> str:
    if not isinstance(stack, str) or not stack.strip():
        return ""
    lines = [ln.strip() for ln in stack.splitlines()
             if ln.strip(" ^~\t") and not ln.startswith("Traceback (most recent")]  # no caret underlines
    return _clip(" | ".join(lines[:STACK_LINES]), STACK_CHARS)


def error_text(message: Any = None, exceptions: Iterable[tuple[Any, Any, Any]] = ()) -> str:
    """The rendering above: a status message, then each (type, message, stacktrace) exception."""
    out: list[str] = []
    said: set[str] = set()  # the lines so far, hashed: a span of 100,000 exception events stays linear
    msg = str(message).strip() if message not in (None, "") and not isinstance(message, (dict, list)) else ""
    for typ, emsg, stack in exceptions:
        typ = str(typ).strip() if typ not in (None, "") else "Error"
        emsg = str(emsg).strip() if emsg not in (None, "") else ""
        line = _clip(f"Exception: {typ}: {emsg}" if emsg else f"Exception: {typ}", MESSAGE_CHARS)
        if line not in said:
            said.add(line)
            out.append(line)
        head = _stack_head(stack)
        if head:
            out.append(f"Stack head: {head}")
    if msg and not any(msg[:200] in line for line in out):  # TRAIL: the status message is "Type: message"
        out.insert(0, _clip(f"Error: {msg}", MESSAGE_CHARS))
    return "\n".join(out)


def _event_attrs(ev: dict[str, Any]) -> dict[str, Any]:
    a = ev.get("attributes", ev.get("Attributes"))
    return a if isinstance(a, dict) else {}


def exception_events(events: Any) -> list[tuple[Any, Any, Any]]:
    """(type, message, stacktrace) of each `exception` event (OTel `name`/`attributes`, TRAIL `Name`/`Attributes`;
    attributes already read as a map)."""
    out = []
    for ev in events if isinstance(events, list) else ():
        if isinstance(ev, dict) and str(ev.get("name", ev.get("Name", ""))).lower() == "exception":
            a = _event_attrs(ev)
            if a.get("exception.type") is not None or a.get("exception.message") is not None:
                out.append((a.get("exception.type"), a.get("exception.message"), a.get("exception.stacktrace")))
    return out


def status_message(span: dict[str, Any]) -> Any:
    """A failed span's status message: OTLP `status.message`, SDK dumps `status.description`, TRAIL
    `status_message`; None when the span did not fail (an OK span's message is no error)."""
    st = span.get("status")
    msg = st.get("message", st.get("description")) if isinstance(st, dict) else None
    return msg if msg not in (None, "") else span.get("status_message") or None


def span_error(span: dict[str, Any], events: Any, failed: bool) -> str:
    """The error text a span records: its status message when it failed, and its exception events."""
    return error_text(status_message(span) if failed else None, exception_events(events))


# The one set of counts every output states (terminal, run.json, stats, report): attributed, rejected, set aside
# as succeeded (the rows `attributable` writes), warnings (a kept trace's repaired or dropped part).
SET_ASIDE = "succeeded_run"  # listed, not attributed, not a rejection


def outcome_counts(attributed: int, reasons: dict[str, int], signals: dict[str, int] | None = None) -> dict:
    """{attributed, rejected, succeeded, warnings, and each by reason} from errors/ rows counted by reason;
    `signals`: the succeeded ones by the signal that graded them (outcomes.count_signals)."""
    from masprism_batch.ingest.common import WARNING_REASONS

    rej = {k: v for k, v in sorted(reasons.items()) if k not in WARNING_REASONS}
    warn = {k: v for k, v in sorted(reasons.items()) if k in WARNING_REASONS and k != SET_ASIDE}
    return {"attributed": attributed, "rejected": sum(rej.values()), "rejected_by_reason": rej,
            "succeeded": reasons.get(SET_ASIDE, 0), "succeeded_by_signal": dict(sorted((signals or {}).items())),
            "warnings": sum(warn.values()), "warnings_by_reason": warn}


def _reasons(by: dict[str, int]) -> str:
    return ", ".join(f"{k} x{v:,}" for k, v in by.items())


def counts_line(c: dict) -> str:
    """`8 attributed, 2 rejected (invalid_json x2), 4 set aside as succeeded, 1 warning (empty_step x1)`
    (`signals_line`: the set-aside ones by signal)."""
    parts = [f"{c['attributed']:,} attributed",
             f"{c['rejected']:,} rejected" + (f" ({_reasons(c['rejected_by_reason'])})" if c["rejected"] else ""),
             f"{c['succeeded']:,} set aside as succeeded",
             f"{c['warnings']:,} warning{'s' * (c['warnings'] != 1)}"
             + (f" ({_reasons(c['warnings_by_reason'])})" if c["warnings"] else "")]
    return ", ".join(parts)


def signals_line(c: dict) -> str | None:
    """`4 run(s) set aside as graded passed: reward x3, outcomes x1` (None: none set aside)."""
    if not c.get("succeeded"):
        return None
    by = c.get("succeeded_by_signal") or {}
    return (f"{c['succeeded']:,} run(s) set aside as graded passed, by signal: {_reasons(by) or 'not recorded'}; "
            f"an execution status of OK is no grade (they are attributed)")
