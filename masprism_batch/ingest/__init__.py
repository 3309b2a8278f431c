"""Ingest: raw trace files (Who&When, TRAIL/OpenInference, OTLP GenAI, AG2/AutoGen, OpenAI messages and
Responses items, LangSmith/LangGraph run trees, Langfuse traces, canonical JSONL/Parquet; one module each,
chosen by `detect.py`) -> canonical `Trace` objects (`trace_stream.read_inputs`) -> the Parquet datasets
OUTDIR/traces and OUTDIR/errors (`write_outdir.ingest`).
"""

from masprism_batch.ingest.common import WARNING_REASONS
from masprism_batch.ingest.documents import FORMATS
from masprism_batch.ingest.trace_stream import FileCallback, SeenIds, read_inputs
from masprism_batch.ingest.write_outdir import (
                                                INGEST_MARKER,
                                                TRACE_PART_BYTES,
                                                IngestSummary,
                                                ingest,
                                                ingest_state,
                                                prepare_outdir,
)

__all__ = ["FORMATS", "INGEST_MARKER", "TRACE_PART_BYTES", "FileCallback", "IngestSummary", "SeenIds",
           "WARNING_REASONS", "ingest", "ingest_state", "prepare_outdir", "read_inputs"]
