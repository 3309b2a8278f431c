"""Issue 37: a labels file is a user's input: a row that does not parse, or holds no label value, is skipped and
reported with its line number, never a crash, and never swallows the rows after it."""

from __future__ import annotations

import json
import random

import pytest

from masprism_batch.fit.labels import LabelsFileError, from_file
from masprism_batch.trace import Step, Trace


def _traces(rng: random.Random, n: int) -> dict[str, Trace]:
    out = {}
    for i in range(n):
        tid = f"t{i}-{rng.randrange(16**6):06x}"
        out[tid] = Trace(tid, "jsonl", [Step(j, rng.choice(["Planner", "Coder"]), f"s{j} {rng.random()}")
                                        for j in range(rng.randint(3, 8))])
    return out


HOSTILE_JSON = {
    "infinite step": '{{"trace_id": "{tid}", "step": Infinity}}',
    "NaN step": '{{"trace_id": "{tid}", "step": NaN}}',
    "boolean step": '{{"trace_id": "{tid}", "step": true}}',
    "dict agent": '{{"trace_id": "{tid}", "step": 0, "agent": {{"name": "Coder"}}}}',
    "list trace id": '{{"trace_id": ["{tid}"], "step": 0}}',
    "5,000-deep value": '{{"trace_id": "{tid}", "step": 0, "note": ' + "[" * 5000 + "]" * 5000 + "}}",
    "not JSON": '{{"trace_id": "{tid}", "step": ',
}


@pytest.mark.parametrize("how", sorted(HOSTILE_JSON))
def test_a_hostile_json_line_is_skipped_with_its_line_the_others_kept(tmp_path, how, rng):
    traces = _traces(rng, 6)
    ids = list(traces)
    bad_at = rng.randrange(1, 5)  # a good row before it (so the file is JSON lines) and after it
    lines = [json.dumps({"trace_id": t, "step": rng.randrange(len(traces[t].steps))}) for t in ids[:5]]
    lines.insert(bad_at, HOSTILE_JSON[how].format(tid=ids[5]))
    f = tmp_path / "labels.jsonl"
    f.write_text("\n".join(lines) + "\n")
    gold, problems = from_file(f, traces)
    assert sorted(gold) == sorted(ids[:5])
    assert len(problems) == 1 and problems[0].startswith(f"labels.jsonl:{bad_at + 1}:"), problems


def test_non_utf8_bytes_skip_their_line_only(tmp_path, rng):
    traces = _traces(rng, 4)
    ids = list(traces)
    rows = [json.dumps({"trace_id": t, "step": 0}).encode() for t in ids[:3]]
    rows.insert(1, b'{"trace_id": "\xff\xfe", "step": 0}')
    f = tmp_path / "labels.jsonl"
    f.write_bytes(b"\n".join(rows) + b"\n")
    gold, problems = from_file(f, traces)
    assert sorted(gold) == sorted(ids[:3]) and len(problems) == 1 and "labels.jsonl:2:" in problems[0]


def test_csv_oversized_field_and_unterminated_quote_skip_their_lines_only(tmp_path, rng):
    traces = _traces(rng, 6)
    ids = list(traces)
    big = "x" * (128 * 1024 + rng.randrange(1, 5000))
    lines = ["trace_id,step,agent", f"{ids[0]},0,Coder", f"{ids[1]},1,{big}", f'{ids[2]},0,"Coder',
             f"{ids[3]},1,Planner", f"{ids[4]},true,Planner", f"{ids[5]},2,"]
    f = tmp_path / "labels.csv"
    f.write_text("\n".join(lines) + "\n")
    gold, problems = from_file(f, traces)
    assert sorted(gold) == sorted([ids[0], ids[3], ids[5]])  # the rows after the open quote are not swallowed
    assert [p.split(": ", 1)[0] for p in problems] == ["labels.csv:3", "labels.csv:4", "labels.csv:6"], problems


def test_categories_per_labelled_step_from_a_file_and_from_trail_annotations(tmp_path, rng):
    from masprism_batch.fit.labels import from_trace
    from masprism_batch.trace import Labels

    traces = _traces(rng, 3)
    a, b, _ = traces
    f = tmp_path / "l.csv"
    f.write_text(f"trace_id,step,category\n{a},1,Crash\n{a},1, Bad plan \n{a},1,Crash\n{a},2,\n{b},0,Crash\n")
    gold, problems = from_file(f, traces)
    # several categories of one step each kept once (trimmed); a step without one is labelled all the same
    assert gold[a].steps == [1, 2] and gold[a].kinds == {1: ["Crash", "Bad plan"]} and not problems
    assert gold[b].kinds == {0: ["Crash"]}
    j = tmp_path / "l.jsonl"
    j.write_text(json.dumps({"trace_id": a, "step": 0, "category": {"name": "Crash"}}) + "\n")
    gold, problems = from_file(j, traces)
    assert gold[a].steps == [0] and gold[a].kinds == {} and "category is not a string" in problems[0]
    t = Trace("x", "otel", [Step(i, "A", f"s{i}", span_id=f"s{i}") for i in range(4)],
              labels=Labels(error_locations=["s2", "s9", "s2"], error_categories=["Formatting Errors", "Goal Deviation",
                                                                               "Tool-related"]))
    g = from_trace(t)
    assert g.steps == [2] and g.kinds == {2: ["Formatting Errors", "Tool-related"]}  # s9 is no step: no kind


@pytest.mark.parametrize("step", ["²", "³4", "--5", "-+1"])
def test_a_step_that_looks_like_digits_but_is_no_integer_skips_its_line_only(tmp_path, rng, step):
    """str.isdigit() is true of superscripts ("²") and "--5".lstrip("-") is digits, yet int() refuses both: such a
    step (CSV text or a JSON string) was a ValueError out of `fit`, not a skipped row."""
    traces = _traces(rng, 4)
    ids = list(traces)
    f = tmp_path / "labels.csv"
    f.write_text(f"trace_id,step\n{ids[0]},0\n{ids[1]},{step}\n{ids[2]},1\n", encoding="utf-8")
    gold, problems = from_file(f, traces)
    assert sorted(gold) == sorted([ids[0], ids[2]])
    assert len(problems) == 1 and problems[0].startswith("labels.csv:3: step") and "not an integer" in problems[0]
    j = tmp_path / "labels.jsonl"
    j.write_text("\n".join(json.dumps({"trace_id": t, "step": s}) for t, s in
                           [(ids[0], 0), (ids[3], step), (ids[2], "1")]) + "\n", encoding="utf-8")
    gold, problems = from_file(j, traces)
    assert sorted(gold) == sorted([ids[0], ids[2]]) and gold[ids[2]].steps == [1]
    assert len(problems) == 1 and problems[0].startswith("labels.jsonl:2: step"), problems


def test_a_column_or_key_named_twice_is_said_not_resolved_silently(tmp_path, rng):
    """A CSV header naming `step` twice (a column pasted in beside the old one) took the later column's value for
    every row, and a JSON line with `step` twice its last: a label moved without a word."""
    traces = _traces(rng, 3)
    ids = list(traces)
    f = tmp_path / "labels.csv"
    f.write_text(f"trace_id,step,agent,step\n{ids[0]},0,Coder,1\n", encoding="utf-8")
    with pytest.raises(LabelsFileError, match="labels.csv.*'step' twice"):
        from_file(f, traces)
    j = tmp_path / "labels.jsonl"
    j.write_text(f'{{"trace_id": "{ids[0]}", "step": 0}}\n{{"trace_id": "{ids[1]}", "step": 0, "step": 1}}\n'
                 f'{{"trace_id": "{ids[2]}", "step": 1}}\n', encoding="utf-8")
    gold, problems = from_file(j, traces)
    assert sorted(gold) == sorted([ids[0], ids[2]])
    assert len(problems) == 1 and problems[0].startswith("labels.jsonl:2:") and "'step' twice" in problems[0]


def test_many_distinct_agents_or_categories_on_one_trace_read_in_linear_time(tmp_path, rng):
    """Each row's agent and category were checked against a list of those read so far: 40,000 rows naming
    distinct ones on one trace took 14 s here, a 1 GiB labels file of them days. The time per row must not grow
    with the rows read (16x the rows: well under 16 x 16 the time; the old code took about 200x)."""
    import time

    traces = _traces(rng, 1)
    tid = next(iter(traces))

    def timed(n: int) -> float:
        f = tmp_path / f"l{n}.jsonl"
        f.write_text("".join(json.dumps({"trace_id": tid, "step": 1, "agent": f"a-{k}", "category": f"c-{k}"}) + "\n"
                             for k in range(n)))
        t0 = time.perf_counter()
        gold, _ = from_file(f, traces)
        took = time.perf_counter() - t0
        assert len(gold[tid].agents) == n and gold[tid].kinds[1] == [f"c-{k}" for k in range(n)]
        assert gold[tid].agents == [f"a-{k}" for k in range(n)] and gold[tid].steps == [1]
        return took

    small, big = min(timed(2_000) for _ in range(2)), timed(32_000)
    assert big < 40 * small + 0.5, (small, big)


CSV_ROWS = "trace_id,step,agent\r\n{rows}"


@pytest.mark.parametrize("how,said", [
    ("utf-16", "UTF-16"),  # a spreadsheet's "Unicode text": was "new-line character seen in unquoted field"
    ("utf-32", "UTF-32"),
    ("semicolons", "';'"),  # a spreadsheet set to a European locale: was "no trace_id column"
    ("tabs", "tab"),
    ("capitals", "Trace_ID"),  # the header quoted, and the names it needs
])
def test_a_spreadsheets_other_csv_dialects_are_named_with_what_to_do(tmp_path, rng, how, said):
    traces = _traces(rng, 3)
    rows = "".join(f"{t},1,Coder\r\n" for t in traces)
    text = CSV_ROWS.format(rows=rows)
    f = tmp_path / "labels.csv"
    if how in ("utf-16", "utf-32"):
        f.write_bytes(text.encode(how))
    else:
        sep = {"semicolons": ";", "tabs": "\t", "capitals": ","}[how]
        f.write_text((text.replace("trace_id", "Trace_ID") if how == "capitals" else text).replace(",", sep),
                     encoding="utf-8")
    with pytest.raises(LabelsFileError) as err:
        from_file(f, traces)
    assert said in str(err.value) and "labels.csv" in str(err.value), str(err.value)


def test_a_file_with_carriage_returns_alone_reads_its_lines(tmp_path, rng):
    """Excel for Mac's 'CSV (Macintosh)' ends lines with CR alone: the file was one line, refused as a header
    that does not parse."""
    traces = _traces(rng, 3)
    f = tmp_path / "labels.csv"
    f.write_bytes(("trace_id,step\r" + "".join(f"{t},1\r" for t in traces)).encode())
    gold, problems = from_file(f, traces)
    assert sorted(gold) == sorted(traces) and not problems
    assert all(g.steps == [1] for g in gold.values())


def test_a_whole_step_written_as_a_float_is_that_step(tmp_path):
    """pandas writes an integer column holding a blank as floats ("3.0"): every such row was skipped as 'not an
    integer'. A whole float is its step; 3.5, "3.", "3.00x" and "nan" are still none."""
    from masprism_batch.fit.labels import _step

    assert [_step(x) for x in ("3.0", " 12.0 ", "-1.0", 4.0, 0.0)] == [3, 12, -1, 4, 0]
    assert [_step(x) for x in ("3.5", "3.", "3.00x", "nan", 3.5, float("nan"), float("inf"), "1e3", True)] == [None] * 9
