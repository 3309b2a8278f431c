"""Arrow schemas of every table the pipeline reads or writes, with one schema version.

`docs/schema.md` documents each field; keep the two in step. Long free text is `large_string` so a single
multi-megabyte step never overflows 32-bit offsets when many traces share a batch.
"""

from __future__ import annotations

import re

import pyarrow as pa

SCHEMA_VERSION = "1"
# up to this many steps a log's step attention A is one dense N x N (a 2,048^2 float64 accumulator: 32 MiB) and
# step_scores.attention_pass1 holds whole rows; past it A is kept row-sparse and each row is written as its tail
# from the first non-zero column (method/sparse_attn.full_row restores it). Every labelled dev log is far below.
DENSE_STEPS = 2048
_META = {b"masprism.schema_version": SCHEMA_VERSION.encode()}

STEP_TYPE = pa.struct(
    [
        pa.field("index", pa.int32(), nullable=False),  # 0-based position in the trace's step list
        pa.field("agent", pa.string()),  # acting agent (suffix-stripped for Who&When Hand-Crafted)
        pa.field("role", pa.string()),  # raw role as logged (user/assistant/tool/"Orchestrator (thought)")
        pa.field("kind", pa.string()),  # message | llm | tool | agent | other
        pa.field("content", pa.large_string()),
        pa.field("span_id", pa.string()),  # OpenInference/OTel span id; null for chat logs
        pa.field("parent_span_id", pa.string()),
        pa.field("start_time", pa.timestamp("us", tz="UTC")),
        pa.field("error", pa.large_string()),  # the error the log records for the step (also in content); null if none
    ]
)

LABELS_TYPE = pa.struct(
    [
        pa.field("mistake_step", pa.int32()),  # 0-based index into steps (Who&When)
        pa.field("mistake_agent", pa.string()),
        pa.field("error_locations", pa.list_(pa.string())),  # span ids (TRAIL)
        pa.field("error_impacts", pa.list_(pa.string())),  # parallel to error_locations: HIGH/MEDIUM/LOW
        pa.field("error_categories", pa.list_(pa.string())),  # parallel to error_locations
    ]
)

TRACES = pa.schema(
    [
        pa.field("trace_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),  # e.g. who-and-when/Hand-Crafted, trail/GAIA, otel, jsonl
        pa.field("system", pa.string()),  # e.g. CaptainAgent, Magentic-One, smolagents
        pa.field("question", pa.large_string()),
        pa.field("steps", pa.list_(pa.field("item", STEP_TYPE, nullable=False))),
        pa.field("labels", LABELS_TYPE),  # null when the trace has no (valid) labels
        pa.field("metadata", pa.large_string()),  # JSON object as text
        pa.field("run_status", pa.string()),  # failed | succeeded | unknown, as the log records it (ingest/status.py)
    ],
    metadata=_META,
)

ERRORS = pa.schema(
    [
        pa.field("input_path", pa.string()),  # path as given on the command line (never used to build paths)
        pa.field("record_id", pa.string()),  # trace id / line number / span id when known
        pa.field("stage", pa.string(), nullable=False),  # ingest | render | prefill | attribute | write
        pa.field("reason", pa.string(), nullable=False),  # short stable code, e.g. invalid_json, duplicate_trace_id
        pa.field("message", pa.large_string()),  # human-readable detail
        pa.field("time", pa.timestamp("us", tz="UTC")),
    ],
    metadata=_META,
)

CANDIDATE_TYPE = pa.struct(
    [
        pa.field("step", pa.int32(), nullable=False),
        pa.field("agent", pa.string()),
        pa.field("span_id", pa.string()),
        pa.field("score", pa.float64()),
        pa.field("symptoms", pa.list_(pa.int32())),  # symptom steps that point to this candidate
    ]
)

AGENT_SCORE_TYPE = pa.struct([pa.field("agent", pa.string()), pa.field("score", pa.float64())])

ATTRIBUTIONS = pa.schema(
    [
        pa.field("trace_id", pa.string(), nullable=False),
        pa.field("source", pa.string()),
        pa.field("system", pa.string()),
        pa.field("n_steps", pa.int32()),
        pa.field("pred_step", pa.int32()),
        pa.field("pred_agent", pa.string()),
        pa.field("pred_span_id", pa.string()),
        pa.field("candidates", pa.list_(pa.field("item", CANDIDATE_TYPE, nullable=False))),  # ranked, best first
        pa.field("symptoms", pa.list_(pa.int32())),  # pass-2 symptom set M'
        pa.field("method", pa.string()),
        pa.field("model_id", pa.string()),
        pa.field("config_hash", pa.string()),
        pa.field("tokens_pass1", pa.int64()),
        pa.field("tokens_pass2", pa.int64()),
        pa.field("seconds_pass1", pa.float64()),
        pa.field("seconds_pass2", pa.float64()),
        pa.field("trace_start", pa.timestamp("us", tz="UTC")),  # earliest step start_time, if logged
        pa.field("attributed_at", pa.timestamp("us", tz="UTC")),
        # The verdict, spelled out (pred_step / pred_agent above are what every output names):
        pa.field("pred_step_agent", pa.string()),  # author of pred_step
        pa.field("pred_agent_rule", pa.string()),  # how pred_agent was chosen: "author" | "aggregate" | "prior" | ...
        pa.field("agent_ranking", pa.list_(pa.field("item", AGENT_SCORE_TYPE, nullable=False))),  # best first
        pa.field("verdict_by", pa.string()),  # what decided pred_step: "ranker:<system>" | "prior:<system>" | "rule:<name>"
        pa.field("confidence", pa.float64()),  # calibrated P(pred_step is right) (docs/method.md); null: none
        # why pred_agent is who it is, beside pred_step_agent: "<pred_agent_rule>: <evidence>"; null in
        # older outputs and where nothing is blamed
        pa.field("agent_by", pa.string()),
        # what went wrong at pred_step (masprism_batch/category/, docs/categories.md): a kind of the run's
        # taxonomy, its family, P(kind); category_by: "<model+log|log>:<taxonomy>:<weights>"; all null when
        # categories are off or nothing is blamed
        pa.field("category", pa.string()),
        pa.field("category_family", pa.string()),
        pa.field("category_confidence", pa.float64()),
        pa.field("category_by", pa.string()),
        # pooled last-layer values of pred_step in the pass-2 read (unit length): what the label-free groups
        # cluster; null without pass 2
        pa.field("blamed_vector", pa.list_(pa.float32())),
        pa.field("blamed_terms", pa.list_(pa.string())),  # the blamed step's most frequent words (groups' names)
        # the steps to read, best first (read_steps[0] = pred_step): held out they hold the labelled step at the
        # run's coverage (set_coverage, `--coverage`), calibrated by set_by ("fit:<system>", "packaged:<system>",
        # "dev:zero-training"; verdict/stepset.py); set_share = set_size / n_steps; localised false where the
        # set is more than stepset.MAX_SHARE of the log. All null in older outputs and where nothing is blamed
        pa.field("read_steps", pa.list_(pa.int32())),
        pa.field("set_size", pa.int32()),
        pa.field("set_share", pa.float64()),
        pa.field("set_coverage", pa.float64()),
        pa.field("set_by", pa.string()),
        pa.field("localised", pa.bool_()),
    ],
    metadata=_META,
)

STEP_SCORES = pa.schema(
    [
        pa.field("trace_id", pa.string(), nullable=False),
        pa.field("step", pa.int32(), nullable=False),
        pa.field("agent", pa.string()),
        pa.field("span_id", pa.string()),
        pa.field("kind", pa.string()),
        pa.field("tokens_pass1", pa.int32()),
        pa.field("nll_pass1", pa.float32()),  # N_i: mean token NLL of the step in pass 1
        pa.field("nll_pass2", pa.float32()),  # N'_i (null when pass 2 did not run)
        pa.field("h_score", pa.float32()),  # H_k: attention inflow from pass-1 symptoms
        pa.field("score", pa.float32()),  # MASPrism's Score(k) for candidates, null otherwise
        pa.field("rank", pa.int32()),  # = masprism_rank (kept for readers of older outputs)
        pa.field("is_symptom", pa.bool_()),
        pa.field("is_candidate", pa.bool_()),
        pa.field("has_failure_word", pa.bool_()),
        pa.field("attention_pass1", pa.list_(pa.float32())),  # row i of A (pass 1), j <= i; a tail past DENSE_STEPS
        # mean rise of the symptoms' NLL when this step's content is removed (counterfactual; null if not run)
        pa.field("cf_effect", pa.float32()),
        pa.field("attn_in_learned", pa.float32()),  # attention inflow from symptoms, learned head weights
        pa.field("masprism_rank", pa.int32()),  # the paper method's internal 1-based rank among its candidates
        pa.field("final_prob", pa.float32()),  # the final method's step probability (ranked); null under masprism
        pa.field("final_rank", pa.int32()),  # 1-based rank in the final method's order (1 = pred_step)
        # the failure kind of this step, for the top_k_candidates final ranks (null elsewhere); rank 1 = the verdict's
        pa.field("category", pa.string()),
        pa.field("category_family", pa.string()),
        pa.field("category_confidence", pa.float32()),
        # the model's evidence for each kind (taxonomy order) where the descriptions were read after this step: what
        # `fit` learns a team's own kinds from (fit/categories.py); null where not read
        pa.field("category_pmi", pa.list_(pa.float32())),
        # MASPrism's candidates (and a fallback's blamed step): the pass-2 symptoms m > k with s(k|m) > 0 that point
        # at this step (= candidates[].symptoms); null for other steps and in outputs written before the column.
        # The one verdict input not otherwise kept: `rescore` reads it (no prefill, pipelines/rescore.py)
        pa.field("pass2_support", pa.list_(pa.int32())),
    ],
    metadata=_META,
)

_SURROGATES = re.compile("[\ud800-\udfff]")


def _surrogate_text(m: re.Match) -> str:
    c = ord(m.group())
    # U+DC80..U+DCFF is how Python carries a byte that is not UTF-8 (a file name, surrogateescape): shown as
    # \xNN so the name stays recognisable; any other lone surrogate (a JSON "\ud800" escape) becomes U+FFFD
    return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else "\ufffd"


def clean_text(s: str | None, replace=_surrogate_text) -> str | None:
    """`s` as valid UTF-8 (Arrow, JSON and terminals refuse lone surrogates): the same object when it already
    is. `replace`: what a lone surrogate becomes (a string, or a function of its match)."""
    if s is None or s.isascii():
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return _SURROGATES.sub(replace, s)


# what a terminal acts on rather than shows: C0 controls but tab and newline (ESC starts screen clears, window
# titles, OSC 52 clipboard writes, OSC 8 links), DEL, C1 controls (CSI as one byte); beyond them, runs of other
# non-ASCII characters, each looked up in `_shown`
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]|[^\x00-\x9f]+")
_HIDDEN = ("Cf", "Zl", "Zp")


def _shown(m: re.Match) -> str:
    """A control as its escape; in a run of other characters, every one of Unicode category Cf (bidi overrides
    and isolates, zero widths, marks: text shown in another order or not at all), Zl or Zp (line breaks a
    terminal acts on) as its escape, the rest (accents, CJK, emoji) as they are."""
    import unicodedata

    g = m.group()
    if len(g) == 1 and g < "\xa0":
        return repr(g)[1:-1]
    return "".join(repr(c)[1:-1] if unicodedata.category(c) in _HIDDEN else c for c in g)


def printable(s: str | None) -> str | None:
    """`s` safe to write as plain text to a terminal or a log file: every control, format (bidi, zero width) or
    separator character shown as its escape (`\x1b`, `\u202e`), tab and newline kept; valid UTF-8
    (`clean_text`). The same object when nothing is to escape. Text printed through rich: `terminal`."""
    if s is None:
        return s
    if _UNPRINTABLE.search(s):
        t = _UNPRINTABLE.sub(_shown, s)
        s = s if t == s else t
    return clean_text(s)


# a colon that could open a rich emoji code (`:name:`, `:name-emoji:`: rich's pattern, its name non-space)
_EMOJI_OPEN = re.compile(r":(?=\S*:)")


def terminal(value: object, none: str = "-") -> str:
    """The one way a value read from the logs or the outputs (a name, an id, a path, a message quoting them)
    reaches a terminal through rich (every command's lines, tables, titles and `error:` lines): `printable`'s
    escapes (no escape sequence, C1 control or bidi override acts on the terminal), then rich markup escaped
    (`[link=...]` stays text) and emoji codes kept as text (`t:thumbs_up:1` is not shown as `t👍1`: an empty
    markup span after each colon that could open one, so no code is whole in the text rich reads). None is
    `none`."""
    from rich.markup import escape

    if value is None:
        return none
    s = escape(printable(str(value)))
    return _EMOJI_OPEN.sub(":[bold][/bold]", s) if s.count(":") > 1 else s


def error_row(*, stage: str, reason: str, message: str, input_path: str | None = None,
              record_id: str | None = None) -> dict:
    """One row of ERRORS (every stage writes its rejections with this; keyword-only so the fields never swap).
    Every text is made valid UTF-8 here (`clean_text`): a rejected record's lone surrogate or a file name that is
    not UTF-8 must cost that row's exactness, never the Parquet part it is written to."""
    from datetime import datetime, timezone

    return {"input_path": clean_text(input_path), "record_id": clean_text(record_id), "stage": clean_text(stage),
            "reason": clean_text(reason), "message": clean_text(message), "time": datetime.now(timezone.utc)}


TABLES = {"traces": TRACES, "errors": ERRORS, "attributions": ATTRIBUTIONS, "step_scores": STEP_SCORES}
