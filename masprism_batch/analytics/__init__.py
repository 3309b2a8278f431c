"""Failure analytics over a run's output directory: stats tables, the offline HTML report, exports.

Inputs are the datasets a run leaves in OUTDIR (attributions/, step_scores/, errors/, traces/, run.json);
outputs are OUTDIR/stats/*.parquet (written through masprism_batch.outdir.parts), one self-contained HTML file, and
export files for Phoenix / OpenTelemetry / JSONL tools. Nothing here loads a model.
"""

from masprism_batch.analytics.export import export
from masprism_batch.analytics.load import AnalyticsInputError
from masprism_batch.analytics.report import build_report
from masprism_batch.analytics.stats import compute_stats, write_stats

__all__ = ["AnalyticsInputError", "build_report", "compute_stats", "export", "write_stats"]
