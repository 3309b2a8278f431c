"""What the engines hand each other: a pack to attribute (`PackTask`) and what came of it (`PackResult`).

The CPU stage (`pack_work.shard_packs`) makes the tasks, the model stage (`pack_work.start_pack`/`finish_pack`) turns each into a
result, and the driver's `Committer` commits results per shard. Input data travels inside as Arrow IPC bytes
(schema-checked, no pickle of input data); the rest are scalars. The local engine hands the objects over as
they are; Ray Data moves rows, so under Ray they cross as `to_row()` dicts and come back through `from_row`,
which also turns the row's Arrow scalars back into the declared Python types.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa

from masprism_batch import schema
from masprism_batch.outdir.shards import OUTPUT_TABLES

_TYPES = {"int": int, "float": float, "str": str, "bytes": bytes}


class _Row:
    """Dict round trip of a flat dataclass of scalars (Ray Data rows)."""

    def to_row(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_row(cls, row) -> Any:
        kw = {}
        for f in fields(cls):
            if f.name in row:
                kw[f.name] = _TYPES[f.type](row[f.name])
        return cls(**kw)


@dataclass
class PackTask(_Row):
    """One pack of one shard for the model stage, with the traces' pass-1 renders."""

    shard_id: str
    label: str  # the input as the user named it (errors' input_path)
    pack_index: int
    pack_key: str  # the pack's name in the crash ledger (`pack_work.pack_key`)
    # packs of the shard: the committer commits the shard when it holds them all; 0 = not known yet (packs are
    # handed on as they are cut: only the shard's last pack carries the count)
    n_packs: int
    n_traces: int
    n_records: int  # what the progress display counts: the traces, and on pack 0 the shard's read rejections
    tokens_pass1_est: int
    traces: bytes  # Arrow IPC, schema.TRACES
    rendered: bytes  # Arrow IPC, pass1.RENDERED, one per trace
    errors: bytes  # Arrow IPC, schema.ERRORS: the shard's read rejections (pack 0 only)
    seconds_read: float
    seconds_render: float
    # the model stage's wait for this pack (local engine: its CPU stage not done yet; Ray streams: 0)
    seconds_input_wait: float = 0.0


@dataclass
class PackResult(_Row):
    """One pack's output rows (Arrow IPC) with its shard bookkeeping and stage timings."""

    shard_id: str
    label: str
    pack_index: int
    n_packs: int
    n_traces: int
    n_records: int
    tokens: int  # pass-1 + pass-2 tokens of the attributed traces
    traces: bytes
    attributions: bytes
    step_scores: bytes
    errors: bytes
    seconds_read: float
    seconds_render: float
    seconds_input_wait: float
    seconds_model: float
    seconds_render_pass2: float
    seconds_render_pass2_wait: float
    seconds_counterfactual: float = 0.0
    tokens_counterfactual: int = 0

    def tables(self) -> dict[str, pa.Table]:
        return {name: from_ipc(getattr(self, name)).cast(schema.TABLES[name]) for name in OUTPUT_TABLES}


# Arrow IPC carries traces and results between stages: schema-checked, no pickle of input data.
def to_ipc(rows: list[dict], table_schema: pa.Schema) -> bytes:
    table = pa.Table.from_pylist(rows, schema=table_schema)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def from_ipc(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
