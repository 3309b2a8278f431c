"""Issue 45 item 2: the host and the device overlap in both engines.

A fake model stage in two halves (`pipeline_fakes.Halves`): its device half sleeps x per pack, its host tail
sleeps y per pack. For a run of 64 logs (one shard, many packs) the span from the first pack on the device to
the last tail is about n * max(x, y), not n * (x + y) as when each pack's tail runs before the next pack
starts (the local engine without prefetch, today's order). Margins are generous: the CPU is shared. The local
engine is judged against its own serial run in the same test (the overlap must save at least half of
n * min(x, y)): both carry the same per-pack host work, which an absolute bound counted against the overlap
(span < 0.8 n (x + y) left 0.02 s a pack for (0.1, 0.3) and failed once in 7 runs here). The outputs are those of
the serial order and of the stage called whole.
"""

from __future__ import annotations

import pytest
from masprism_batch.pipelines import run_local
from pipeline_fakes import Fakes, Halves, assert_exactly_once, events, make_corpus

from masprism_batch.outdir.reads import read_dataset
from masprism_batch.outdir.shards import OUTPUT_TABLES

N_LOGS = 64


def _rows(out):
    return {t: [{k: v for k, v in r.items() if not k.endswith("_at") and k != "time"}
                for r in read_dataset(out / t).to_pylist()] for t in OUTPUT_TABLES}


def _check_overlap(n: int, span: float, x: float, y: float, serial: float | None = None) -> None:
    """`serial`: the span of the same packs run device then tail (the saving is then judged against it)."""
    assert n >= 8, f"only {n} packs: the test needs many"
    assert span >= 0.95 * n * max(x, y), f"{span:.2f} s for {n} packs: faster than the sleeps allow"
    if serial is not None:
        assert serial - span >= 0.5 * n * min(x, y), (
            f"{span:.2f} s for {n} packs of {x} + {y} s against {serial:.2f} s serial: device and tail did not overlap")
    else:
        assert span < 0.8 * n * (x + y), f"{span:.2f} s for {n} packs of {x} + {y} s: device and tail did not overlap"


@pytest.mark.parametrize(("x", "y"), [(0.2, 0.2), (0.1, 0.3)])
def test_local_engine_overlaps_device_and_host_tail(tmp_path, small_cfg, x, y):
    ids = make_corpus(tmp_path / "in", N_LOGS, 2)
    cfg = small_cfg(per_shard=256, budget=400)  # one shard; ~3 traces per pack
    runs = {}
    for name, prefetch in (("serial", 0), ("overlap", 1)):
        fakes = Halves(device_s=x, tail_s=y, events=str(tmp_path / f"events-{name}"))
        run_local([str(tmp_path / "in")], tmp_path / name, cfg, **fakes.kwargs(), progress=False, prefetch=prefetch)
        runs[name] = events(fakes.events)
    n, span = runs["overlap"]
    n0, span0 = runs["serial"]
    assert n0 == n and span0 >= 0.95 * n * (x + y), "the serial order is device then tail, pack after pack"
    _check_overlap(n, span, x, y, serial=span0)
    whole = tmp_path / "whole"  # the stage as one call (a plain attribute function)
    run_local([str(tmp_path / "in")], whole, cfg, **Fakes().kwargs(), progress=False)
    assert_exactly_once(tmp_path / "overlap", ids)
    assert _rows(tmp_path / "overlap") == _rows(tmp_path / "serial") == _rows(whole)


@pytest.mark.ray
def test_ray_engine_overlaps_device_and_host_tail(tmp_path, small_cfg):
    ray = pytest.importorskip("ray", reason="the Ray engine tests need ray[data] (dev extra)")
    import pipeline_fakes
    from masprism_batch.pipelines import run_ray
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(pipeline_fakes)  # Ray workers do not have tests/ on sys.path
    x, y = 0.25, 0.25
    ids = make_corpus(tmp_path / "in", N_LOGS, 2)
    cfg = small_cfg(per_shard=256, budget=400)
    fakes = Halves(device_s=x, tail_s=y, events=str(tmp_path / "events"))
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    try:
        run_ray([str(tmp_path / "in")], tmp_path / "ray", cfg, workers=1, progress=False, **fakes.kwargs(ray=True))
    finally:
        ray.shutdown()
    n, span = events(fakes.events)
    _check_overlap(n, span, x, y)
    run_local([str(tmp_path / "in")], tmp_path / "local", cfg, **Fakes().kwargs(), progress=False)
    assert_exactly_once(tmp_path / "ray", ids)
    key = {"attributions": "trace_id", "step_scores": "trace_id", "traces": "trace_id", "errors": "record_id"}
    for t, rows in _rows(tmp_path / "ray").items():
        srt = lambda rs, k=key[t]: sorted(rs, key=lambda r: (str(r[k]), r.get("step", 0)))  # noqa: E731
        assert srt(rows) == srt(_rows(tmp_path / "local")[t]), t
