"""Fast fake stage functions for engine tests (tests only): the engines' bookkeeping is what is under test.

The fake attribution is deterministic in the trace content (so two engines must agree) and can sleep, raise
or kill its process on marked traces. The corpus is fresh random text of odd sizes on every call.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from masprism_batch.pipelines.stages import Stages, now_utc

from masprism_batch.io import read_dataset
from masprism_batch.render import Rendered
from masprism_batch.schema import error_row
from masprism_batch.trace import Step, Trace

FAKE_CONTEXT = 8192
WORDS = "alpha beta gamma delta error search tool answer plan check timeout file result agent".split()


def make_corpus(root: Path, n: int, n_files: int, bad_lines: int = 0, marks: dict[int, str] | None = None,
                seed: int | None = None) -> list[str]:
    """JSONL files of canonical trace rows; returns the trace ids. `marks` puts RAISE/CRASH in a question."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    files = [open(root / f"traces-{i:02d}.jsonl", "w", encoding="utf-8") for i in range(n_files)]
    ids = []
    for i in range(n):
        tid = f"t{i:05d}-{rng.randrange(16**6):06x}"
        steps = [Step(index=j, agent=rng.choice(["planner", "coder", "web"]),
                      content=" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40))))
                 for j in range(rng.randint(1, 9))]
        t = Trace(trace_id=tid, source="fake", steps=steps, question=(marks or {}).get(i, "q"))
        files[i % n_files].write(json.dumps(t.to_row()) + "\n")
        ids.append(tid)
    for k in range(bad_lines):
        files[k % n_files].write("{not json\n")
    for f in files:
        f.close()
    return ids


class FakeTokenizer:
    def encode(self, text: str) -> list[int]:
        return [len(w) for w in text.split()]


class FakeStages(Stages):
    def __init__(self, delay: float = 0.0, piddir: str | None = None, crash: bool = False):
        self.delay, self.piddir, self.crash = delay, piddir, crash

    def read_inputs(self, paths, fmt, on_error, limits=None):
        files = sorted(f for p in paths for f in ([Path(p)] if Path(p).is_file() else Path(p).rglob("*.jsonl")))
        for f in files:
            for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    on_error(error_row(input_path=str(f), record_id=f"{f.name}:{n}", stage="ingest", reason="invalid_json",
                                       message=str(e)))
                    continue
                yield Trace.from_row(row)

    def load_model(self, cfg):
        if self.piddir:
            Path(self.piddir, f"pid-{os.getpid()}").write_text("up")
        return SimpleNamespace(model_id="fake-model", tokenizer=FakeTokenizer(), max_context=FAKE_CONTEXT)

    def load_tokenizer(self, cfg):
        return FakeTokenizer(), FAKE_CONTEXT

    def render_pass1(self, traces, tokenizer, rcfg):
        """A real `Rendered` per trace (so it crosses IPC as the real one does), of fake token ids."""
        out = []
        for t in traces:
            if t.question == "CRASH_RENDER" and self.crash:
                os._exit(13)  # the tokenizer process dies (segfault, OOM kill)
            ids, spans = [], []
            for s in t.steps:
                piece = tokenizer.encode(f"[Step {s.index}] {s.agent}: {s.content}")
                spans.append((len(ids), len(ids) + len(piece)))
                ids += piece
            out.append(Rendered(input_ids=ids[: rcfg.max_context], step_spans=spans,
                                step_truncated=[False] * len(spans), text=""))
        return out

    def pack(self, lengths, token_budget):
        groups, cur, used = [], [], 0
        for i, n in enumerate(lengths):
            if cur and used + n > token_budget:
                groups.append(cur)
                cur, used = [], 0
            cur.append(i)
            used += n
        return groups + ([cur] if cur else [])

    def attribute_traces(self, traces, model, cfg, rendered):
        assert len(rendered) == len(traces) and all(len(r.step_spans) == len(t.steps)
                                                    for r, t in zip(rendered, traces, strict=True))
        if self.piddir:  # which process attributed how many traces
            with open(Path(self.piddir, f"calls-{os.getpid()}"), "a") as f:
                f.write(f"{len(traces)}\n")
        time.sleep(self.delay * len(traces))
        att, steps = [], []
        for t in traces:
            if t.question == "RAISE":
                raise ValueError(f"poisoned trace {t.trace_id}")
            if t.question == "CRASH" and self.crash:
                os._exit(13)  # what a segfault or an OOM kill looks like to Ray
            score = [sum(len(w) % 7 for w in s.content.split()) / (1 + len(s.content)) for s in t.steps]
            best = max(range(len(score)), key=score.__getitem__)
            tok = sum(len(s.content.split()) for s in t.steps)
            att.append({"trace_id": t.trace_id, "source": t.source, "n_steps": len(t.steps), "pred_step": best,
                        "pred_agent": t.steps[best].agent, "candidates": [], "symptoms": [], "method": "fake",
                        "model_id": model.model_id, "config_hash": cfg.config_hash(), "tokens_pass1": tok,
                        "tokens_pass2": tok // 2, "seconds_pass1": 0.0, "seconds_pass2": 0.0,
                        "attributed_at": now_utc()})
            steps += [{"trace_id": t.trace_id, "step": s.index, "agent": s.agent, "nll_pass1": score[s.index],
                       "attention_pass1": score[: s.index + 1]} for s in t.steps]
        return SimpleNamespace(attributions=att, step_scores=steps, errors=[])


class RealStages(Stages):
    """The project's real stage functions; only records each model-loading process for the kill test."""

    def __init__(self, piddir: str | None = None):
        self.piddir = piddir

    def load_model(self, cfg):
        model = super().load_model(cfg)
        if self.piddir:
            Path(self.piddir, f"pid-{os.getpid()}").write_text("up")
        return model


def outcome(outdir: Path) -> tuple[Counter, dict[str, str]]:
    """(how often each trace id occurs across attributions + errors, error reason per record id)."""
    att = read_dataset(outdir / "attributions").column("trace_id").to_pylist()
    err = read_dataset(outdir / "errors").to_pylist()
    counts = Counter(att) + Counter(e["record_id"] for e in err if e["record_id"] is not None)  # None: a file
    return counts, {e["record_id"]: e["reason"] for e in err}


def assert_exactly_once(outdir: Path, ids: list[str]) -> dict[str, str]:
    counts, reasons = outcome(outdir)
    repeated = {k: v for k, v in counts.items() if v > 1}
    assert not repeated, f"ids written more than once: {repeated}"
    missing = set(ids) - set(counts)
    assert not missing, f"ids never written: {sorted(missing)[:5]}"
    return reasons
