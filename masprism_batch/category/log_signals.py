"""What the log itself records about a step, as numbers: the evidence a category reads beside the model's.

Each feature is a fact a reader of the log would check first: did this step (or the step right after it, where a
tool's answer or the framework's complaint lands) record an error, an exception, an HTTP status, a timeout; did
the framework fail to parse the step's output; is the step an identical repeat of an earlier action; did the
agent switch tools. No feature reads a label. Text is read up to `MAX_CHARS` from each end of a step, so one
huge tool output costs a bounded scan.
"""

from __future__ import annotations

import math
import re

MAX_CHARS = 4000  # per end of a step's content

_P = {
    "error": re.compile(r"\b(error|exception|traceback|failed|failure)\b", re.I),
    "http_429": re.compile(r"\b429\b|rate.?limit|too many requests", re.I),
    "http_auth": re.compile(r"\b40[13]\b|unauthori[sz]ed|forbidden|authentication|api.?key", re.I),
    "http_404": re.compile(r"\b404\b|not found|does not exist|no such", re.I),
    "http_5xx": re.compile(r"\b50[0-4]\b|internal server error|service unavailable|bad gateway", re.I),
    "timeout": re.compile(r"time[d ]?out|timeout|deadline exceeded", re.I),
    "exhausted": re.compile(r"out of memory|memoryerror|quota|context length|maximum context|too long|exhaust", re.I),
    "env": re.compile(r"modulenotfounderror|importerror|no module named|permission denied|command not found|"
                      r"not installed", re.I),
    "parse": re.compile(r"pars(e|ing) error|could not parse|invalid (format|syntax|json)|regex pattern|"
                        r"syntaxerror|jsondecodeerror|code snippet|unterminated|expected .{0,20}format", re.I),
    "plan": re.compile(r"\bplan\b|\bfacts\b|step \d|next steps?\b|sub-?task", re.I),
    "final": re.compile(r"final.?answer", re.I),
}
_FENCE = re.compile(r"```|<code>|\bTool:\s|\btool_call|\"name\"\s*:", re.I)
_TOOL = re.compile(r"(?:^|\n)\s*(?:Tool|Calling tools?|Action)\s*:\s*\[?\s*['\"{]?\s*(?:name['\"]?\s*:\s*['\"]?)?"
                   r"([A-Za-z_][\w.-]{0,60})", re.I)
_WS = re.compile(r"\s+")

NAMES = ("error_here", "error_next", "http_429", "http_auth", "http_404", "http_5xx", "timeout", "exhausted",
         "env_missing", "parse_error", "missing_format", "repeat", "repeat_count", "tool_change", "is_tool",
         "is_llm", "final_answer", "plan_words", "mentions_agent", "position", "log_length")


def _text(s: str | None) -> str:
    s = s or ""
    return s if len(s) <= 2 * MAX_CHARS else s[:MAX_CHARS] + "\n" + s[-MAX_CHARS:]


def tool_name(content: str | None) -> str | None:
    m = _TOOL.search(_text(content))
    return m.group(1).lower() if m else None


def _norm(s: str | None) -> str:
    return _WS.sub(" ", _text(s)).strip().lower()


def step_features(steps, i: int) -> list[float]:
    """The NAMES features of step i of a trace's steps (objects with content, kind, agent)."""
    st, n = steps[i], len(steps)
    here = _text(st.content)
    nxt = _text(steps[i + 1].content) if i + 1 < n else ""
    both = here + "\n" + nxt

    def hit(p: str, text: str = both) -> float:
        return 1.0 if _P[p].search(text) else 0.0

    me = _norm(st.content)
    earlier = [j for j in range(i) if steps[j].agent == st.agent and steps[j].kind == st.kind]
    repeats = sum(1 for j in earlier if me and _norm(steps[j].content) == me)
    tool = tool_name(st.content)
    prev_tool = next((tool_name(steps[j].content) for j in reversed(earlier) if tool_name(steps[j].content)), None)
    agents = {s.agent for s in steps if s.agent and s.agent != st.agent}
    low = here.lower()
    is_llm = st.kind in ("llm", "message")
    return [
        hit("error", here), hit("error", nxt), hit("http_429"), hit("http_auth"), hit("http_404"), hit("http_5xx"),
        hit("timeout"), hit("exhausted"), hit("env"), hit("parse"),
        1.0 if is_llm and here and not _FENCE.search(here) and not _P["final"].search(here) else 0.0,
        1.0 if repeats else 0.0, math.log1p(repeats),
        1.0 if tool and prev_tool and tool != prev_tool else 0.0,
        1.0 if st.kind == "tool" else 0.0, 1.0 if is_llm else 0.0,
        hit("final", here), hit("plan", here),
        1.0 if any(a.lower() in low for a in agents) else 0.0,
        i / max(1, n - 1), math.log1p(len(st.content or "")) / 10.0,
    ]
