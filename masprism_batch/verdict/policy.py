"""A run's verdict policy: which verdict each log gets, built once per run (per model actor under Ray).

A log of a system the named ranker file (`--ranker`, read once: `rankfile.RankerSetting`) was fitted on gets that
system's entry; every other log the zero-training rule, agent rule and confidence calibration of `fallback.json`
(`rules.read_fallback`). The model stage hands the one policy to what-to-compute (`method/reads.py`, before
any prefill) and to the verdict (`verdict/decide.py`), so both read the same files, read once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from masprism_batch.trace import Trace
from masprism_batch.verdict import rules
from masprism_batch.verdict.rankfile import RankerFile, RankerFileError, RankerSetting, SystemRanker

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
    def load(cls, method, model_id: str | None = None, setting: RankerSetting | None = None) -> VerdictPolicy:
        """The policy of a run with method config `method` (`cfg.method`) on model `model_id`; `setting`: the
        run's ranker setting as read when it started (`RankerSetting.read(method.ranker)`), else read here."""
        if method.name != "ranked":  # no ranker file applies; the confidence keeps the packaged calibration
            return cls(ranked=False, fallback=rules.read_fallback(None))
        if setting is None or setting.ranker != method.ranker:
            setting = RankerSetting.read(method.ranker)
        rankers, refused = None, None
        try:
            rankers = setting.for_model(model_id)
        except (RankerFileError, OSError) as exc:
            log.debug("ranker file %s not applied: %s", method.ranker, exc)
            refused = exc
        return cls(True, rankers, rules.read_fallback(method.ranker), method.system, refused)

    def ranker(self, trace: Trace) -> SystemRanker | None:
        """The fitted entry of `trace`'s system (`rankfile.system_key`), or None: the zero-training rule."""
        if self.refused is not None:
            raise self.refused.with_traceback(None)
        return self.rankers.for_trace(trace, self.system) if self.rankers is not None else None
