"""Issue 37 item 6: inputs bounded where they enter. An agent name is repeated in every pass-1 step header, so a
1 MiB name cost ~1.1M pass-1 tokens (180 s for a 3-step trace) before it was capped like step content."""

from __future__ import annotations

import json
import random

from ingest_synth import SEED, rng, text

from masprism_batch import pass1
from masprism_batch.config import IngestConfig, RenderConfig
from masprism_batch.ingest import read_inputs
from masprism_batch.ingest.common import apply_caps, cap_name
from masprism_batch.model.tiny import tiny_tokenizer


def test_cap_name_is_bounded_utf8_and_idempotent():
    r = random.Random()
    for _ in range(200):
        cap = r.randint(16, 300)
        name = "".join(r.choice("aé漢🙂") for _ in range(r.randint(0, 400)))
        cut = cap_name(name, cap)
        assert len(cut.encode()) <= cap
        assert cut == name if len(name.encode()) <= cap else (cut.endswith("…") and name.startswith(cut[:-1]))
        assert cap_name(cut, cap) == cut


def test_mebibyte_agent_name_is_bounded_in_pass1_tokens(tmp_path):
    r = rng("agent-cap")
    huge = "".join(r.choice("abcdefgh") for _ in range(1 << 20))  # 1 MiB agent name
    steps = [{"agent": huge if i != 1 else "coder", "content": text(r, 5, 60)} for i in range(3)]
    rec = {"trace_id": "big-agent", "source": "app", "steps": steps,
           "labels": {"mistake_step": 0, "mistake_agent": huge}}
    (tmp_path / "in.jsonl").write_text(json.dumps(rec) + "\n", encoding="utf-8")
    errors: list[dict] = []
    [t] = list(read_inputs([str(tmp_path / "in.jsonl")], "auto", errors.append))
    cap = IngestConfig().max_agent_bytes
    assert [e["reason"] for e in errors] == ["step_truncated"] and "agent name" in errors[0]["message"]
    assert len(t.steps[0].agent.encode()) <= cap and huge.startswith(t.steps[0].agent[:-1])
    assert t.steps[1].agent == "coder" and t.labels.mistake_agent == t.steps[0].agent  # the label still matches
    assert apply_caps(t) is t  # idempotent: staging and the in-place Parquet reader apply it again
    rendered = pass1.render_one(t, tiny_tokenizer(), RenderConfig(max_context=8192))
    tokens = len(rendered.input_ids)
    content = sum(len(s.content.encode()) for s in t.steps)
    assert tokens < 3 * cap + content + 2048, f"{tokens} pass-1 tokens for a 3-step trace (seed {SEED})"
