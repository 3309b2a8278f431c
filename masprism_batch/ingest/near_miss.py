"""Near misses for `unknown_format`: which known shape a document almost is, and the first field that is off.

`classify` only says yes or no; when it says no, a user needs to know whether the file is an unsupported tool
or one of ours with one broken field. Each check below recognises a shape by its weaker marks and names the
field that stopped the detection ("looks like an OTel span dump but spans[0].context has no span_id").
"""

from __future__ import annotations

from typing import Any

MAX_HINTS = 3


def _keys(d: Any) -> list[str]:
    return sorted(d)[:6] if isinstance(d, dict) else []


def _first(v: Any) -> Any:
    return v[0] if isinstance(v, list) and v else None


def _dict_hints(doc: dict) -> list[str]:
    out = []
    spans = doc.get("spans")
    if "spans" in doc:
        s0 = _first(spans)
        if not isinstance(spans, list) or not spans:
            out.append("looks like a span dump but 'spans' is not a non-empty list")
        elif not isinstance(s0, dict):
            out.append(f"looks like a span dump but spans[0] is a {type(s0).__name__}")
        elif "context" in s0:
            out.append(f"looks like an OTel SDK span dump but spans[0].context has no span_id (keys: "
                       f"{_keys(s0['context'])})")
        else:
            out.append(f"looks like a span dump but spans[0] has neither context.span_id (OTel SDK) nor span_id "
                       f"(TRAIL/OpenInference); keys: {_keys(s0)}")
    if "observations" in doc or "trace" in doc:
        out.append("looks like a Langfuse download but needs 'observations' (a list) beside 'trace' (an object) "
                   "or 'scores'")
    if "post" in doc or "patch" in doc:
        out.append("looks like a LangSmith batch payload but 'post'/'patch' must be lists of runs and the only "
                   "top-level keys")
    if "choices" in doc:
        c0 = _first(doc["choices"])
        out.append("looks like a Chat Completions response but choices[0].message is " + (
            "missing" if not isinstance(c0, dict) or "message" not in c0 else type(c0["message"]).__name__))
    if "data" in doc:
        d0 = _first(doc["data"])
        out.append(f"looks like a Jaeger or Langfuse list but data[0] is neither a Jaeger trace ('traceID' + "
                   f"'spans') nor a Langfuse trace/observation; keys: {_keys(d0)}")
    if "traj" in doc or "task_id" in doc or "reward" in doc:
        out.append("looks like a τ-bench result but needs 'traj' with 'task_id' or 'reward'")
    if "trajectory" in doc or "info" in doc:
        out.append("looks like a SWE-agent trajectory but needs 'trajectory' or 'history' (with 'message_type')")
    if "batches" in doc or "resourceSpans" in doc:
        out.append("looks like OTLP / Tempo but 'resourceSpans' / 'batches' must be a list")
    return out


def _list_hints(doc: list) -> list[str]:
    d0 = _first(doc)
    if not isinstance(d0, dict):
        return []
    out = []
    if "context" in d0 or "parent_id" in d0:
        out.append(f"looks like an OTel SDK span list but [0].context has no span_id (keys: {_keys(d0.get('context'))})")
    if "source" in d0 or "observation" in d0 or "action" in d0:
        out.append("looks like an OpenHands event list but events need 'source' (a string) and 'action' or "
                   f"'observation'; [0] keys: {_keys(d0)}")
    if "traj" in d0 or "task_id" in d0:
        out.append(f"looks like a τ-bench result list but [0] needs 'traj' and 'task_id' or 'reward'; keys: {_keys(d0)}")
    if "role" in d0 or "type" in d0:
        out.append(f"looks like a message list but [0] is no OpenAI, AG2, AutoGen or LangChain message; keys: "
                   f"{_keys(d0)}")
    return out


def near_misses(doc: Any) -> list[str]:
    """Up to MAX_HINTS sentences, most specific first; [] when the document resembles nothing we read."""
    if isinstance(doc, dict):
        return _dict_hints(doc)[:MAX_HINTS]
    if isinstance(doc, list):
        return _list_hints(doc)[:MAX_HINTS]
    return []
