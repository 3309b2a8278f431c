"""A fast fake model stage for engine tests (tests only): the engines' bookkeeping is what is under test.

The fake attribution is deterministic in the trace content (so two engines must agree) and can sleep, raise
or kill its process on marked traces; the traces reach it through the real ingest, render and packing. The
corpus is fresh random text of odd sizes on every call.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from masprism_batch.pipelines.model_stage import attribute_traces, load_model, load_tokenizer
from masprism_batch.pipelines.resume import now_utc

from masprism_batch.config import SignalsConfig
from masprism_batch.outdir.reads import read_dataset
from masprism_batch.stage import budget
from masprism_batch.trace import Step, Trace

FAKE_CONTEXT = 8192


def free_for_tokens(arch, tokens: int) -> int:
    """Free bytes of a (fake) bf16 card on which the budget sizing (`stage/budget.device_budget`) fits `tokens`
    tokens a pack for a model of shapes `arch`: a card sized from the drawn shapes, where a fixed size would fit
    the whole cap on small ones."""
    per_token = budget.activation_bytes_per_token(arch, 2)
    return int((budget.fixed_activation_bytes(arch, SignalsConfig().nll_chunk) + per_token * tokens) / budget.HEADROOM)


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
    """One token per word (its length), through the project's real render. `crash`: the process dies on a text
    that holds CRASH_RENDER, as a tokenizer that segfaults or is OOM-killed would."""

    def __init__(self, crash: bool = False):
        self.crash = crash

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        if self.crash and "CRASH_RENDER" in text:
            os._exit(13)
        return [len(w) for w in text.split()]

    def decode(self, ids) -> str:
        return " ".join("x" * int(i) for i in ids)


@dataclass(eq=False)  # hashed by identity: the Ray CPU stage caches a tokenizer per loader
class Fakes:
    """The model stage replaced (the engines' `load_model`, `load_tokenizer`, `attribute` keyword arguments);
    ingest, render, packing, ledger and commit are the project's own. `delay` seconds per trace; `piddir`
    records each model-loading process (pid-*) and each attributing process's calls (calls-*); `crash` lets
    CRASH / CRASH_RENDER kill the process. Subclasses override a method to block or die at a chosen point."""

    delay: float = 0.0
    piddir: str | None = None
    crash: bool = False

    def kwargs(self, ray: bool = False) -> dict:
        """Keyword arguments for `run_local` (or `run_ray`: also the CPU stage's tokenizer)."""
        kw = {"load_model": self.load_model, "attribute": self.attribute}
        return {**kw, "load_tokenizer": self.load_tokenizer} if ray else kw

    def load_model(self, cfg):
        if self.piddir:
            Path(self.piddir, f"pid-{os.getpid()}").write_text("up")
        return SimpleNamespace(model_id="fake-model", tokenizer=FakeTokenizer(self.crash), max_context=FAKE_CONTEXT)

    def load_tokenizer(self, cfg):
        return FakeTokenizer(self.crash), FAKE_CONTEXT

    def attribute(self, traces, model, cfg, rendered):
        assert len(rendered) == len(traces)
        if self.piddir:  # which process attributed how many traces
            with open(Path(self.piddir, f"calls-{os.getpid()}"), "a") as f:
                f.write(f"{len(traces)}\n")
        time.sleep(self.delay * len(traces))
        att, steps, errors = [], [], []
        for t, r in zip(traces, rendered, strict=True):
            if isinstance(r, dict):  # rejected by the render: its error row, as the real stage does
                errors.append(r)
                continue
            full = getattr(r, "full", r)
            assert len(full.step_spans) == len(t.steps), "the shipped render does not belong to this trace"
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
        return SimpleNamespace(attributions=att, step_scores=steps, errors=errors)


class RealModel(Fakes):
    """The project's real model stage; only records each model-loading process for the kill test."""

    def load_model(self, cfg):
        model = load_model(cfg)
        if self.piddir:
            Path(self.piddir, f"pid-{os.getpid()}").write_text("up")
        return model

    def load_tokenizer(self, cfg):
        return load_tokenizer(cfg)

    def attribute(self, traces, model, cfg, rendered):
        return attribute_traces(traces, model, cfg, rendered)


def outcome(outdir: Path) -> tuple[Counter, dict[str, str]]:
    """(how often each trace id occurs across attributions + errors, error reason per record id)."""
    att = read_dataset(outdir / "attributions").column("trace_id").to_pylist()
    err = read_dataset(outdir / "errors").to_pylist()
    keys = [_error_key(e) for e in err if e["record_id"] is not None]  # None: a whole file
    return Counter(att) + Counter(keys), {_error_key(e): e["reason"] for e in err}


def _error_key(e: dict) -> str:
    """A trace's id; for a rejected line ("line N", numbered per file) its file too, so lines of two files differ."""
    rid = e["record_id"]
    return f"{Path(e['input_path']).name}:{rid}" if rid and rid.startswith("line ") and e["input_path"] else rid


def assert_exactly_once(outdir: Path, ids: list[str]) -> dict[str, str]:
    counts, reasons = outcome(outdir)
    repeated = {k: v for k, v in counts.items() if v > 1}
    assert not repeated, f"ids written more than once: {repeated}"
    missing = set(ids) - set(counts)
    assert not missing, f"ids never written: {sorted(missing)[:5]}"
    return reasons


@dataclass(eq=False)
class Halves(Fakes):
    """The fake model stage in the two halves the engines overlap (`model_stage.halves`): `device` sleeps `device_s`
    per pack (the model), `tail` sleeps `tail_s` per pack (the host tail); both append (what, wall time) lines
    to `events` (a file: Ray's actors are other processes), so a test reads when each pack was where."""

    device_s: float = 0.0
    tail_s: float = 0.0
    events: str | None = None

    def kwargs(self, ray: bool = False) -> dict:
        return {**super().kwargs(ray), "attribute": self}

    def load_model(self, cfg):
        cfg.config_hash()  # its first call imports torch (~10 s here): a model load's cost, not a pack's
        return super().load_model(cfg)

    def _note(self, what: str) -> None:
        if self.events:
            import threading

            with open(self.events, "a") as f:
                f.write(f"{what} {time.time():.6f} {threading.get_ident() % 1000}\n")

    def __call__(self, traces, model, cfg, rendered):
        return self.tail(self.device(traces, model, cfg, rendered))

    def device(self, traces, model, cfg, rendered):
        self._note("device")
        time.sleep(self.device_s)
        self._note("device_end")
        return self.attribute(traces, model, cfg, rendered)

    def tail(self, out):
        self._note("tail_start")
        time.sleep(self.tail_s)
        self._note("tail")
        return out


def events(path: str) -> tuple[int, float]:
    """(packs, seconds from the first device start to the last tail end) of a `Halves` events file."""
    rows = [line.split() for line in Path(path).read_text().splitlines()]
    starts = [float(r[1]) for r in rows if r[0] == "device"]
    ends = [float(r[1]) for r in rows if r[0] == "tail"]
    assert len(starts) == len(ends), "a pack started on the device and never finished its tail"
    return len(starts), max(ends) - min(starts)
