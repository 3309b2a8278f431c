"""Batch engines (local and Ray Data), installed as `masprism_batch.pipelines`.

`run_local` and `run_ray` take the same inputs, OUTDIR and PipelineConfig and write the same outputs:
OUTDIR/{traces,attributions,step_scores,errors}/shard-<id>.parquet, OUTDIR/_manifest/ and OUTDIR/run.json.
See docs/scale-out.md.
"""

from masprism_batch.pipelines.run_summary import RunSummary


def run_local(*args, **kwargs) -> RunSummary:
    """Lazy wrapper: the model stage (torch) is imported only when a run starts, so a command that imports this
    package for its other parts (the CLI's progress display) starts fast."""
    from masprism_batch.pipelines.local import run_local as _run_local

    return _run_local(*args, **kwargs)


def run_ray(*args, **kwargs) -> RunSummary:
    """Lazy wrapper: Ray is imported only when the Ray engine is used."""
    from masprism_batch.pipelines.ray_engine import run_ray as _run_ray

    return _run_ray(*args, **kwargs)


__all__ = ["RunSummary", "run_local", "run_ray"]
