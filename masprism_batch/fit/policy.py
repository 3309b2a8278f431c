"""A run's verdict policy: which verdict each log gets, read once per run (per worker process under Ray).

A log of a system the named ranker file (`--ranker`, `rankfile.load`) was fitted on gets that system's entry;
every other log the zero-training rule, agent rule and confidence calibration of `fallback.json`
(`rules.read_fallback`). The model stage hands the one policy to what-to-compute (`method/reads.py`, before
any prefill) and to the verdict (`stage/verdict.py`), so both read the same files, read once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from masprism_batch.fit import rankfile
from masprism_batch.fit.rankfile import RankerFile, RankerFileError, SystemRanker
from masprism_batch.method import rules
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VerdictPolicy:
    """ranked: the ranked method (a fitted ranker, else the zero-training rule); False: the paper's order,
    whose confidence still reads the packaged calibration. rankers: the run's ranker file, if one applies.
    system: the run's `--system`, given to every log. refused: why the named ranker file cannot be applied
    (missing, not a ranker file, another model's): every verdict that would read it raises it, so each log
    says why in its error row; the CLI refuses such a file before a run starts."""

    ranked: bool = True
    rankers: RankerFile | None = None
    fallback: rules.Fallback = field(default_factory=rules.Fallback)
    system: str | None = None
    refused: Exception | None = None

    @classmethod
    def load(cls, method, model_id: str | None = None) -> VerdictPolicy:
        """The policy of a run with method config `method` (`cfg.method`) on model `model_id`."""
        if method.name != "ranked":  # no ranker file is read; the confidence keeps the packaged calibration
            return cls(ranked=False, fallback=rules.read_fallback(None))
        rankers, refused = None, None
        try:
            rankers = rankfile.load(method.ranker_weights, model_id)
        except (RankerFileError, OSError) as exc:
            log.debug("ranker file %s not applied: %s", method.ranker_weights, exc)
            refused = exc
        return cls(True, rankers, rules.read_fallback(method.ranker_weights), method.system, refused)

    def ranker(self, trace: Trace) -> SystemRanker | None:
        """The fitted entry of `trace`'s system (`rankfile.system_key`), or None: the zero-training rule."""
        if self.refused is not None:
            raise self.refused.with_traceback(None)
        return self.rankers.for_trace(trace, self.system) if self.rankers is not None else None
