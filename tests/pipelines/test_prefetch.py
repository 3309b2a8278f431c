"""Issue 33 item 2: the CPU stage of the next shard runs while the model computes this one.

A deliberately slow fake render (sleeps per shard) and a deliberately slow fake model (sleeps per trace): with
the prefetch the run takes about max(render, model) per shard, not their sum, and the model's wait for input
(run.json `seconds_input_wait`) is about one shard's render, not all of them. The outputs and their order are
those of the serial run, and the Prefetcher hands results back in order, bounded, exceptions at their item.
"""

from __future__ import annotations

import json
import random
import threading
import time

import pytest
from masprism_batch.pipelines import run_local
from masprism_batch.pipelines.prefetch import Prefetcher
from pipeline_fakes import Fakes, assert_exactly_once, make_corpus

from masprism_batch.outdir.reads import read_dataset
from masprism_batch.outdir.shards import OUTPUT_TABLES
from masprism_batch.render import pass1


def test_prefetcher_overlaps_keeps_order_and_stays_bounded(rng):
    items = [rng.randrange(10**6) for _ in range(8)]
    lock, started, consumed, ahead = threading.Lock(), [0], [0], []

    def fn(x):
        with lock:
            started[0] += 1
            ahead.append(started[0] - consumed[0])
        time.sleep(0.1)
        return x * 3 + 1

    t0 = time.perf_counter()
    got, waits = [], []
    with Prefetcher(fn, items, depth=1) as pf:
        for item, value, waited in pf:
            got.append((item, value))
            waits.append(waited)
            time.sleep(0.1)  # the "model" on this item
            with lock:
                consumed[0] += 1
    wall = time.perf_counter() - t0
    assert got == [(x, x * 3 + 1) for x in items]
    assert max(ahead) <= 2, "more than one item prepared ahead of the one being consumed"
    assert wall < 0.8 * (0.1 + 0.1) * len(items), f"{wall:.2f} s: render and model did not overlap"
    assert sum(waits[1:]) < 0.5 * 0.1 * (len(items) - 1)  # after the first item the consumer barely waits


def test_prefetcher_raises_at_the_failing_item_and_starts_nothing_after_it():
    bad = random.randrange(2, 6)
    seen = []

    def fn(x):
        seen.append(x)
        if x == bad:
            raise KeyboardInterrupt("a BaseException is handed over too")
        return x

    out = []
    with pytest.raises(KeyboardInterrupt), Prefetcher(fn, range(10), depth=2) as pf:
        for x, _, _ in pf:
            out.append(x)
    assert out == list(range(bad)) and seen == list(range(bad + 1))


def test_flat_prefetcher_hands_over_each_element_in_order_bounded_and_raises_in_place(rng):
    """flat=True: fn(item) is an iterable (a shard's packs); each element is one result, `depth` ahead at most."""
    sizes = [rng.randrange(0, 5) for _ in range(9)]  # an item may give nothing (an empty window)
    depth = rng.randrange(1, 4)
    made, consumed, ahead = [0], [0], []

    def fn(i):
        for k in range(sizes[i]):
            made[0] += 1
            ahead.append(made[0] - consumed[0])
            yield (i, k)

    got = []
    with Prefetcher(fn, range(len(sizes)), depth=depth, flat=True) as pf:
        for item, value, _ in pf:
            time.sleep(0.01)  # the consumer is the slower side: the producer runs ahead as far as it may
            got.append((item, value))
            consumed[0] += 1
    assert got == [(i, (i, k)) for i in range(len(sizes)) for k in range(sizes[i])]
    assert max(ahead, default=0) <= depth + 1, f"{max(ahead)} results made ahead with depth {depth}"

    bad = rng.randrange(1, 6)

    def failing(i):
        yield i
        if i == bad:
            raise ValueError("at this element")
        yield -i

    out = []
    with pytest.raises(ValueError, match="at this element"), Prefetcher(failing, range(10), 1, flat=True) as pf:
        for _, v, _ in pf:
            out.append(v)
    assert out == [v for i in range(bad) for v in (i, -i)] + [bad]


def _slow_render(monkeypatch, seconds: float) -> None:
    real = pass1.render_traces

    def render_traces(traces, tokenizer, rcfg):
        time.sleep(seconds)  # one call per shard (the CPU stage renders a shard at once)
        return real(traces, tokenizer, rcfg)

    monkeypatch.setattr(pass1, "render_traces", render_traces)


class Recording(Fakes):
    """The fake model stage, also recording each pack's trace ids in call order."""

    def __init__(self, delay: float):
        super().__init__(delay=delay)
        self.packs: list[list[str]] = []

    def attribute(self, traces, model, cfg, rendered):
        self.packs.append([t.trace_id for t in traces])
        return super().attribute(traces, model, cfg, rendered)


def _run(tmp_path, name, cfg, prefetch, fakes):
    out = tmp_path / name
    t0 = time.perf_counter()
    s = run_local([str(tmp_path / "in")], out, cfg, **fakes.kwargs(), progress=False, prefetch=prefetch)
    return out, s, time.perf_counter() - t0


def test_slow_render_and_slow_model_overlap_with_the_same_outputs(tmp_path, small_cfg, monkeypatch):
    shards, per_shard, render_s, model_s = 5, 3, 0.6, 0.6
    ids = make_corpus(tmp_path / "in", shards * per_shard, 2)
    cfg = small_cfg(per_shard=per_shard, budget=100_000)  # one pack per shard
    _slow_render(monkeypatch, render_s)
    serial, prefetched = Recording(model_s / per_shard), Recording(model_s / per_shard)
    out0, s0, wall0 = _run(tmp_path, "serial", cfg, 0, serial)
    out1, s1, wall1 = _run(tmp_path, "prefetch", cfg, 1, prefetched)

    # render and model overlap: the serial wall is their sum (plus the same overheads), the prefetch one is not
    assert wall1 < 0.8 * wall0, f"prefetch {wall1:.2f} s vs serial {wall0:.2f} s"
    waits = [json.loads((o / "run.json").read_text())["stage_seconds_total"]["seconds_input_wait"]
             for o in (out0, out1)]
    assert waits[0] >= 0.9 * shards * render_s  # serial: the model waits for every render
    assert waits[1] < 0.5 * shards * render_s  # prefetch: about the first one only
    assert "model waited" in s1.breakdown and "budget 100,000 tok/pack" in s1.breakdown

    # exactly the same packs, in the same order, and the same outputs in the same order
    assert prefetched.packs == serial.packs and len(serial.packs) == shards
    assert_exactly_once(out1, ids)
    for table in OUTPUT_TABLES:
        rows = [read_dataset(o / table).to_pylist() for o in (out0, out1)]
        strip = [[{k: v for k, v in r.items() if not k.endswith("_at")} for r in rs] for rs in rows]
        assert strip[0] == strip[1], table
    assert (s0.attributed, s0.rejected) == (s1.attributed, s1.rejected)


def test_render_pool_gives_the_renders_and_outputs_of_one_process(tmp_path, small_cfg, rng):
    from masprism_batch.config import ModelConfig, PipelineConfig
    from masprism_batch.model import load_tokenizer
    from masprism_batch.render.pool import RenderPool
    from masprism_batch.trace import Step, Trace

    words = "plan code error search the answer failed tool check".split()
    traces = [Trace(trace_id=f"t{i}", source="x", steps=[
        Step(index=j, agent=rng.choice(["a", "b"]), content=" ".join(rng.choice(words) for _ in range(rng.randint(1, 300))))
        for j in range(rng.randint(0, 12))]) for i in range(rng.randint(9, 14))]  # 0 steps: a rejected render
    tok = load_tokenizer(ModelConfig(name="tiny-random"))
    rcfg = pass1.render_config(PipelineConfig(), 2048)
    def same(r):  # an error row (the rejected render) carries the time it was made
        return {k: v for k, v in r.items() if k != "time"} if isinstance(r, dict) else r

    with RenderPool(tok, 2) as pool:
        got = pool(traces, tok, rcfg)
    assert [same(r) for r in got] == [same(r) for r in pass1.render_traces(traces, tok, rcfg)]

    ids = make_corpus(tmp_path / "in", 30, 2)
    cfg = small_cfg(per_shard=10, budget=60)  # several packs per shard
    serial, pooled = Recording(0.0), Recording(0.0)
    out0, _, _ = _run(tmp_path, "serial", cfg, 0, serial)
    out1 = tmp_path / "pooled"
    model = pooled.load_model(cfg)  # given, as the CLI does: the pool starts while the inputs are staged
    run_local([str(tmp_path / "in")], out1, cfg, **pooled.kwargs(), model=model, progress=False, prefetch=1,
              render_workers=2)
    assert pooled.packs == serial.packs
    assert_exactly_once(out1, ids)
    for table in OUTPUT_TABLES:
        rows = [read_dataset(o / table).to_pylist() for o in (out0, out1)]
        assert [[{k: v for k, v in r.items() if not k.endswith("_at")} for r in rs] for rs in rows][0] == \
            [[{k: v for k, v in r.items() if not k.endswith("_at")} for r in rs] for rs in rows][1], table
