"""Issue 34 item 3: agent-run formats read as their own sources: smolagents memory, mini-swe-agent
trajectories, Claude Code transcripts (sub-agent sidechains as agents). Real files from the tools' repositories
(tests/data/formats/_real, NOTICE there) and fresh random runs in the shapes their code writes."""

from __future__ import annotations

import json
from pathlib import Path

from ingest_synth import SEED, rng, text

from masprism_batch.ingest import read_inputs

REAL = Path(__file__).resolve().parents[1] / "data" / "formats" / "_real"


def _read(path, fmt="auto"):
    errors: list[dict] = []
    return list(read_inputs([str(path)], fmt, errors.append)), errors


def _words(r, n=6):
    return " ".join(text(r, 3, 12).replace("\n", " ") for _ in range(n)).strip() or "x"


def _smol_memory(r, enum_roles: bool) -> tuple[list, dict]:
    """`agent.write_memory_to_messages()` of a ToolCallingAgent, as smolagents' memory.py builds it."""
    role = (lambda x: f"MessageRole.{x.upper().replace('-', '_')}") if enum_roles else (lambda x: x)
    task, sys_ = _words(r), _words(r)
    msgs = [{"role": role("system"), "content": [{"type": "text", "text": sys_}]},
            {"role": role("user"), "content": [{"type": "text", "text": f"New task:\n{task}"}]}]
    exp = {"task": task, "calls": [], "obs": []}
    for k in range(r.randint(1, 4)):
        thought, q, obs = _words(r), _words(r, 2), _words(r)
        calls = [{"id": f"call_{k}", "type": "function", "function": {"name": f"tool_{k % 2}", "arguments": {"q": q}}}]
        msgs += [{"role": role("assistant"), "content": [{"type": "text", "text": thought}]},
                 {"role": role("tool-call"), "content": [{"type": "text", "text": "Calling tools:\n" + str(calls)}]},
                 {"role": role("tool-response"), "content": [{"type": "text",
                                                              "text": f"Call id: call_{k}\nObservation:\n{obs}"}]}]
        exp["calls"].append((thought, f"tool_{k % 2}", q))
        exp["obs"].append((f"tool_{k % 2}", obs))
    return msgs, exp


def test_smolagents_memory_one_step_per_action(tmp_path):
    r = rng("smol")
    for enum_roles, wrap in ((False, False), (True, True)):
        msgs, exp = _smol_memory(r, enum_roles)
        (tmp_path / "mem.json").write_text(json.dumps({"messages": msgs} if wrap else msgs))
        (t,), errors = _read(tmp_path / "mem.json")
        assert errors == [] and t.source == "smolagents" and t.question == exp["task"], f"seed {SEED}"
        assert [s.role for s in t.steps[:2]] == ["system", "user"] and t.steps[1].content.endswith(exp["task"])
        acts, tools = t.steps[2::2], t.steps[3::2]
        assert len(acts) == len(tools) == len(exp["calls"])
        for s, (thought, name, q) in zip(acts, exp["calls"], strict=True):  # thought + its call: one step
            assert s.agent == "agent" and s.content.startswith(thought) and f"Tool call: {name}(" in s.content
            assert json.dumps({"q": q}, ensure_ascii=False) in s.content
        for s, (name, obs) in zip(tools, exp["obs"], strict=True):  # a response speaks as the tool it answers
            assert (s.agent, s.kind) == (name, "tool") and s.content.endswith(obs)


def test_mini_swe_agent_observations_speak_as_the_environment(tmp_path):
    path = REAL / "mini_swe_agent" / "github_issue.traj.json"
    (t,), errors = _read(path)
    msgs = json.loads(path.read_text())
    assert errors == [] and t.source == "mini-swe-agent" and t.question == msgs[1]["content"]
    assert [s.agent for s in t.steps[:4]] == ["system", "user", "mini-swe-agent", "environment"]
    assert sum(s.agent == "user" for s in t.steps) == 1  # command outputs are no longer the user's
    said = [m for m in msgs if m["role"] == "assistant"]
    assert [s.content for s in t.steps if s.agent == "mini-swe-agent"] == [m["content"] for m in said]
    assert "diff --git a/tests/missing_colon.py" in t.steps[-1].content and t.steps[-1].kind == "tool"
    r = rng("mini")
    info = {"exit_status": r.choice(["Submitted", "LimitsExceeded", "FormatError"]), "submission": _words(r),
            "mini_version": "1.9.0", "model_stats": {"instance_cost": 0.01, "api_calls": len(said)}}
    (tmp_path / "x.traj.json").write_text(json.dumps({"info": info, "messages": msgs,
                                                      "trajectory_format": "mini-swe-agent-1"}))
    (u,), errors = _read(tmp_path / "x.traj.json")
    assert errors == [] and [s.content for s in u.steps] == [s.content for s in t.steps]
    assert u.metadata["exit_status"] == info["exit_status"] and u.metadata["submission"] == info["submission"]


def test_claude_code_session_real_transcript():
    (t,), errors = _read(REAL / "claude_code" / "representative_messages.jsonl")
    assert errors == [] and t.source == "claude-code" and t.trace_id == "test_session"
    assert t.question == "Hello Claude! Can you help me understand how Python decorators work?"
    assert [s.agent for s in t.steps] == ["user", "claude-code", "user", "claude-code", "Edit", "claude-code",
                                          "user", "claude-code", "Bash", "claude-code", "user"]
    assert t.steps[3].content.startswith('Tool call: Edit({"file_path": "/tmp/decorator_example.py"')
    assert t.steps[8].content == "Hello, Alice!\nHello, Alice!\nHello, Alice!"
    assert t.metadata["summaries"] and "decorators" in t.metadata["summaries"][0]


def _line(r, sid, uuid, ts, typ, content, side=False, agent_id=None, msg_id=None, sec=0):
    d = {"parentUuid": None, "isSidechain": side, "userType": "external", "cwd": "/w", "sessionId": sid,
         "version": "2.0.46", "uuid": uuid, "timestamp": f"2025-11-19T22:{ts:02d}:{sec:02d}.000Z", "type": typ,
         "message": {"role": typ, "content": content}}
    if typ == "assistant":
        d["message"].update({"id": msg_id or f"msg_{uuid}", "type": "message", "model": "m", "usage": {"x": 1}})
    if agent_id:
        d["agentId"] = agent_id
    return d


def test_claude_code_sidechains_speak_as_their_subagent(tmp_path):
    r = rng("cc")
    sid, prompt, sub_prompt, found, answer = "s-1", _words(r), _words(r), _words(r), _words(r)
    lines = [
        _line(r, sid, "u1", 1, "user", prompt),
        _line(r, sid, "a1", 2, "assistant", [{"type": "thinking", "thinking": "Delegate.", "signature": "x"}],
              msg_id="m1"),
        _line(r, sid, "a2", 2, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "Task", "input": {
            "subagent_type": "researcher", "description": "d", "prompt": sub_prompt}}], msg_id="m1", sec=1),
        _line(r, sid, "s1", 3, "user", sub_prompt, side=True, agent_id="ag7"),
        _line(r, sid, "s2", 4, "assistant", [{"type": "tool_use", "id": "toolu_2", "name": "Grep", "input": {
            "pattern": "x"}}], side=True, agent_id="ag7"),
        _line(r, sid, "s3", 5, "user", [{"type": "tool_result", "tool_use_id": "toolu_2", "content": ""}], side=True,
              agent_id="ag7"),
        _line(r, sid, "s4", 6, "assistant", [{"type": "text", "text": found}], side=True, agent_id="ag7"),
        _line(r, sid, "u2", 7, "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "text", "text": found}]}], agent_id="ag7"),
        _line(r, sid, "a3", 8, "assistant", [{"type": "text", "text": answer}]),
    ]
    order = list(range(len(lines)))
    r.shuffle(order)  # the file may hold sidechain lines after the main ones: time orders them
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps(lines[i]) for i in order) + "\n")
    (t,), errors = _read(tmp_path / "s.jsonl")
    assert errors == [] and t.question == prompt, f"seed {SEED}"
    assert [s.agent for s in t.steps] == ["user", "claude-code", "claude-code", "researcher", "researcher",
                                          "Task", "claude-code"]
    assert t.steps[1].content.startswith("Reasoning: Delegate.\nTool call: Task(")  # one message: one step
    assert t.steps[3].content == 'Tool call: Grep({"pattern": "x"})\nTool result Grep: (empty)'
    assert t.steps[2].content == sub_prompt and t.steps[-1].content == answer
    assert not any('"usage"' in s.content for s in t.steps)


def _ao_span(sid, parent, name, t, attrs):
    return {"freeplan_truncated": False, "span_id": sid, "parent_span_id": parent, "span_name": name,
            "span_kind": "Client", "span_type": "agent", "service_name": "agentops", "status_code": "OK",
            "start_time": f"2025-08-04T15:12:{t:02d}.000000+00:00", "attributes": {}, "span_attributes": attrs,
            "resource_attributes": {"service": {"name": "agentops"}}, "metrics": {"total_tokens": 9}}


def test_agentops_crew_export(tmp_path):
    """The AgentOps API's trace export of a CrewAI crew (nested span attributes), as seen in a real export."""
    r = rng("agentops")
    task, sys_, out, q, res = _words(r), _words(r), _words(r), _words(r, 2), _words(r)
    llm = {"agentops": {"entity": {"name": "LLM"}, "span": {"kind": "llm"}}, "gen_ai": {
        "prompt": [{"role": "system", "content": sys_}, {"role": "user", "content": f"\nCurrent Task: {task}"}],
        "completion": [{"role": "assistant", "content": out}], "usage": {"prompt_tokens": "3"}}}
    spans = [
        _ao_span("01", "", "crewai.workflow", 1, {"agentops": {"entity": {"name": "Crew"}, "span": {"kind": "workflow"}}}),
        _ao_span("02", "01", f"{task}.task", 2, {"agentops": {"entity": {"input": task, "name": "Task"},
                                                              "span": {"kind": "workflow.step"}}}),
        _ao_span("03", "02", "Researcher.agent", 3, {"agent": {"role": "Researcher"}, "agentops": {
            "entity": {"name": "Agent"}, "span": {"kind": "agent"}}}),
        _ao_span("04", "03", "search.tool", 4, {"agentops": {"entity": {"input": q, "output": res}, "span": {
            "kind": "tool"}}, "tool": {"name": "search"}}),
        _ao_span("05", "03", "m.llm", 5, llm),
    ]
    doc = {"trace": {"trace_id": f"{r.getrandbits(128):032x}", "root_span_name": "crewai.workflow"}, "spans": spans}
    (tmp_path / "ao.json").write_text(json.dumps(doc))
    (t,), errors = _read(tmp_path / "ao.json")
    assert errors == [] and t.source == "agentops" and t.question == task, f"seed {SEED}"
    # the task is inside the model's prompt (`Current Task: ...`): that message is its step, not a second copy
    assert [(s.agent, s.role) for s in t.steps] == [("Researcher", "tool"), ("Researcher", "system"),
                                                    ("user", "user"), ("Researcher", "assistant")]
    assert "Tool: search" in t.steps[0].content and t.steps[1].content == sys_ and task in t.steps[2].content
    assert t.steps[3].content == out
    assert not any("total_tokens" in s.content for s in t.steps)
