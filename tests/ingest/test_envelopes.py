"""`envelopes.output_text`: the answer and tool calls out of every envelope tracers store, never usage or ids."""

from __future__ import annotations

import json

import pytest

from masprism_batch.ingest.envelopes import output_text, value_text

CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
CASES = {
    "chat-completions": ({"id": "chatcmpl-1", "object": "chat.completion", "usage": {"total_tokens": 5},
                          "choices": [{"message": {"role": "assistant", "content": "A", "tool_calls": [CALL]}}]},
                         'A\nTool call: lookup({"q": "x"})'),
    "responses": ({"object": "response", "id": "resp_1", "usage": {}, "billing": {"payer": "x"}, "output": [
        {"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "gAAA"},
        {"type": "function_call", "name": "lookup", "arguments": '{"q": "x"}', "call_id": "c"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A"}]}]},
        'Tool call: lookup({"q": "x"})\nA'),
    "adk-llm-response": ({"content": {"role": "model", "parts": [{"text": "A"}, {"function_call": {
        "name": "lookup", "args": {"q": "x"}}}]}, "usage_metadata": {"prompt_token_count": 3}},
        'A\nTool call: lookup({"q": "x"})'),
    "gemini-candidates": ({"candidates": [{"content": {"parts": [{"text": "A"}]}}], "usage_metadata": {}}, "A"),
    "genai-parts": ([{"role": "assistant", "parts": [{"type": "text", "content": "A"}, {
        "type": "tool_call", "name": "lookup", "arguments": {"q": "x"}}]}], 'A\nTool call: lookup({"q": "x"})'),
    "langchain-additional-kwargs": ({"role": "assistant", "content": "", "additional_kwargs": {"tool_calls": [CALL]}},
                                    'Tool call: lookup({"q": "x"})'),
    "langchain-serialised": ({"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "AIMessage"],
                              "kwargs": {"content": "A", "tool_calls": [{"name": "lookup", "args": {"q": "x"}}]}},
                             'A\nTool call: lookup({"q": "x"})'),
    "llm-result": ({"generations": [[{"text": "A", "message": {"type": "ai", "content": "A"}}]],
                    "llm_output": {"token_usage": {}}}, "A"),
    "llamaindex": ({"message": {"role": "assistant", "content": "A"}, "raw": {"id": "chatcmpl-1", "usage": {}}}, "A"),
    "message-list": ([{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}], "A"),
    "json-text": (json.dumps({"choices": [{"message": {"role": "assistant", "content": "A"}}]}), "A"),
    "unknown-object": ({"verdict": "ok", "usage": {"tokens": 3}, "id": "x1", "model": "m"}, '{"verdict": "ok"}'),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_output_text_reads_the_answer_not_the_envelope(case):
    value, want = CASES[case]
    assert output_text(value) == want


def test_tool_values():
    assert value_text('{"a": 1}') == '{"a": 1}'
    assert value_text({"type": "tool", "content": "result text", "tool_call_id": "c", "response_metadata": {}}) == \
        "result text"
    assert value_text({"content": [{"type": "text", "text": "mcp says hi"}], "isError": False}) == "mcp says hi"
    assert value_text("plain") == "plain"
