"""What a run reports when it ends: `RunSummary` (the CLI's summary lines and exit code), `RunFacts` (what an
engine records of its invocation in run.json), `breakdown` (one line: where the time went), `split_reasons`
(rejections apart from warnings), and the stage/pass totals a commit's manifest entry holds and run.json sums
(`pass_stats`, `entry_totals`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from masprism_batch.ingest.common import WARNING_REASONS

if TYPE_CHECKING:
    import pyarrow as pa
    from masprism_batch.pipelines.contracts import PackResult

# seconds_input_wait: the model stage's wait for its input, the CPU stage of a pack not done yet
STAGE_KEYS = ("seconds_read", "seconds_render", "seconds_input_wait", "seconds_model", "seconds_render_pass2",
              "seconds_render_pass2_wait", "seconds_commit")
# where the model stage's time and tokens go: pass 1, pass 2 (its prefill) and the counterfactual
# suffix re-reads, from the attributions' own per-trace timings and the stage's counterfactual counters
PASS_KEYS = ("seconds_pass1", "seconds_pass2", "seconds_counterfactual")
TOKEN_KEYS = ("tokens_pass1", "tokens_pass2", "tokens_counterfactual")


def pass_stats(attributions: pa.Table, parts: list[PackResult]) -> dict[str, float]:
    """PASS_KEYS and TOKEN_KEYS of one commit; pass 2's seconds exclude the counterfactual re-reads it timed."""
    def col(name: str) -> float:
        return float(sum(x or 0 for x in attributions.column(name).to_pylist())) if attributions.num_rows else 0.0

    cf_s = float(sum(p.seconds_counterfactual for p in parts))
    return {"seconds_pass1": col("seconds_pass1"), "seconds_pass2": max(col("seconds_pass2") - cf_s, 0.0),
            "seconds_counterfactual": cf_s, "tokens_pass1": int(col("tokens_pass1")),
            "tokens_pass2": int(col("tokens_pass2")),
            "tokens_counterfactual": int(sum(p.tokens_counterfactual for p in parts))}


def entry_totals(entries) -> tuple[Counter, Counter, Counter]:
    """(reasons, stage seconds, stage tokens) summed over manifest entries. Older entries held warnings under
    rejected_by_reason: the caller splits the reasons again (`split_reasons`)."""
    reasons, stage, tokens = Counter(), Counter(), Counter()
    for e in entries:
        reasons.update(e["rejected_by_reason"])
        reasons.update(e.get("warnings_by_reason", {}))
        stage.update(e["stage_seconds"])
        tokens.update(e.get("stage_tokens", {}))
    return reasons, stage, tokens


class RunFacts(BaseModel):
    """What an engine records of its invocation beside the Committer's counts: run.json `this_invocation` (and an
    interruption's record) holds the fields that were set, by these names, as they were set (None included)."""

    model_config = ConfigDict(extra="forbid")

    token_budget: int | None = None  # tokens per packed forward (stage/budget.py)
    token_budget_source: str | None = None  # why: set by the user, resumed, the CPU default, sized for a GPU
    inputs: dict[str, Any] | None = None  # what was new since the last run (pipelines/increment.py)
    # local: True when this invocation loaded the model (`seconds_model_load` its time), False when it found no
    # work and loaded none, None when the caller loaded it before (demo, eval: not timed here)
    model_loaded: bool | None = None
    seconds_model_load: float | None = None
    model_id: str | None = None  # local: the loaded model's
    ray_address: str | None = None
    ray_private_cluster: Any = None
    actor_resources: dict[str, float] | None = None
    actor_threads: int | None = None

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


def breakdown(record: dict) -> str:
    """One line: where this invocation's time went (stage seconds summed over the traces it ran, tokens read by
    each pass, its model load and wall time); the whole OUTDIR's are run.json's `stage_seconds_total`."""
    inv = record.get("this_invocation", {})
    sec, tok = inv.get("stage_seconds", {}), inv.get("stage_tokens", {})

    def part(name: str, s: float, t: int | None = None) -> str:
        return f"{name} {s:,.1f} s" + (f" ({t:,} tok, {t / s:,.0f} tok/s)" if t and s > 0 else "")

    load = inv.get("seconds_model_load") or 0.0  # none when no work was found, or the caller loaded it
    return " | ".join([
        part("pass 1", sec.get("seconds_pass1", 0.0), tok.get("tokens_pass1")),
        part("pass 2", sec.get("seconds_pass2", 0.0), tok.get("tokens_pass2")),
        part("counterfactuals", sec.get("seconds_counterfactual", 0.0), tok.get("tokens_counterfactual")),
        part("render", sec.get("seconds_render", 0.0) + sec.get("seconds_render_pass2", 0.0))
        + f" (model waited {sec.get('seconds_input_wait', 0.0) + sec.get('seconds_render_pass2_wait', 0.0):,.1f} s)",
        part("write", sec.get("seconds_commit", 0.0)),
        *([part("model load", load)] if load else []), part("wall", inv.get("wall_seconds", 0.0)),
        *([f"budget {inv['token_budget']:,} tok/pack"] if inv.get("token_budget") else [])])


@dataclass
class RunSummary:
    outdir: str
    engine: str
    workers: int
    traces_in: int
    attributed: int
    rejected: int
    rejected_by_reason: dict[str, int]
    shards_total: int
    shards_run: int
    shards_skipped: int
    wall_seconds: float
    traces_per_second: float
    tokens_per_second: float
    run_json: str
    facts: RunFacts = field(default_factory=RunFacts)
    warnings: int = 0  # rows of errors/ for traces that were kept (repaired/truncated): not rejections
    warnings_by_reason: dict[str, int] = field(default_factory=dict)
    breakdown: str = ""  # one line: seconds and tokens per stage (`breakdown`)
    traces_resumed: int = 0  # traces committed before this invocation (whole shards and pieces)
    succeeded_by_signal: dict[str, int] = field(default_factory=dict)  # runs set aside, by what graded them

    @property
    def counts(self) -> dict:
        """attributed, rejected, set aside as succeeded, warnings (`ingest.status.outcome_counts`): what run.json,
        `stats` and the report state."""
        from masprism_batch.ingest.status import outcome_counts

        return outcome_counts(self.attributed, {**self.rejected_by_reason, **self.warnings_by_reason},
                              self.succeeded_by_signal)

    @property
    def exit_code(self) -> int:
        return 3 if self.rejected else 0  # warnings alone do not make a run "with rejections"


def split_reasons(reasons: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(rejections, warnings) by reason: a warning row's trace was kept (`ingest.WARNING_REASONS`)."""
    rej = {k: v for k, v in sorted(reasons.items()) if k not in WARNING_REASONS}
    return rej, {k: v for k, v in sorted(reasons.items()) if k in WARNING_REASONS}
