"""The log's own evidence per step: errors where the step's effect lands, statuses, repeats, tool switches."""

from masprism_batch.category.log_signals import NAMES, step_features, tool_name
from masprism_batch.trace import Step


def _steps(texts, kinds=None, agents=None):
    return [Step(index=i, agent=(agents or ["A"] * len(texts))[i], kind=(kinds or ["llm"] * len(texts))[i], content=c)
            for i, c in enumerate(texts)]


def _f(steps, i):
    return dict(zip(NAMES, step_features(steps, i), strict=True))


def test_error_of_the_next_step_and_statuses():
    s = _steps(["Thought: fetch it\n```py\nget(url)\n```", "Error: HTTP 429 Too Many Requests", "ok"],
               ["llm", "tool", "llm"])
    f = _f(s, 0)
    assert f["error_here"] == 0 and f["error_next"] == 1 and f["http_429"] == 1 and f["http_404"] == 0
    assert f["missing_format"] == 0 and f["is_llm"] == 1 and f["position"] == 0
    g = _f(s, 2)
    assert g["error_next"] == 0 and g["position"] == 1 and g["missing_format"] == 1  # no code, no tool, no answer


def test_repeats_and_tool_switch():
    s = _steps(["Tool: web_search\nInput: cats", "result", "Tool: web_search\nInput:   cats", "result",
                "Tool: visit_page\nInput: x"], ["tool", "tool", "tool", "tool", "tool"], ["A", "B", "A", "B", "A"])
    assert tool_name(s[0].content) == "web_search"
    assert _f(s, 2)["repeat"] == 1 and _f(s, 0)["repeat"] == 0  # whitespace does not make a new action
    assert _f(s, 4)["tool_change"] == 1 and _f(s, 2)["tool_change"] == 0


def test_huge_step_is_scanned_at_both_ends():
    s = _steps(["x " * 1_000_000 + "Traceback (most recent call last)"])
    assert _f(s, 0)["error_here"] == 1
