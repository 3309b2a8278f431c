"""The model stage as the engines call it: three functions tests and benchmarks replace.

The engines take them as keyword arguments (`load_model`, `load_tokenizer`, `attribute`) whose defaults are
the functions below (`attribute`: a `ModelStage` per run); under Ray they travel to the workers with the tasks
(a monkeypatch would not reach those processes). Each imports its heavy module when called, so a Ray CPU task
that only renders loads no weights.
"""

from __future__ import annotations

from masprism_batch.config import PipelineConfig
from masprism_batch.trace import Trace


def load_model(cfg: PipelineConfig):
    """The model stage's model (weights, tokenizer, context): the default of the engines' `load_model`."""
    from masprism_batch import model

    return model.load_model(cfg.model, cfg.signals)


def load_tokenizer(cfg: PipelineConfig):
    """(tokenizer, model context): all the CPU stage needs to render and pack; no weights, so a Ray render task
    stays small. The default of the Ray engine's `load_tokenizer` (the local engine uses its model's)."""
    from masprism_batch import model

    return model.load_tokenizer(cfg.model), model.model_context(cfg.model)


def attribute_traces(traces: list[Trace], model, cfg: PipelineConfig, rendered: list):
    """The model stage on one pack (`masprism_batch.stage.attribute.attribute_traces`), reading the verdict
    policy for this pack alone: for callers that attribute one pack."""
    from masprism_batch.stage import attribute as attribution

    return attribution.attribute_traces(traces, model, cfg, rendered=rendered)


class ModelStage:
    """The engines' default `attribute(traces, model, cfg, rendered)`: the model stage with the run's verdict
    policy (ranker file, fallback rule, calibration: `verdict/policy.py`), built on the first pack from `ranker`
    (the run's ranker setting, read once when the run started) and kept for the run. One per run (under Ray: one
    copy per model actor, `ranker` shipped with it); a pack with another method config or model builds it again.

    It also comes in its two halves, which the engines overlap across packs (`packs.PackRunner`):
    `device(traces, model, cfg, rendered)` holds the model (every prefill) and returns a handle, `tail(handle)`
    is host work only (method, verdicts, rows) and gives what the whole call gives. A replacement `attribute`
    without them runs whole on the device side."""

    def __init__(self, ranker=None):
        self._ranker = ranker
        self._policy = None
        self._policy_for: tuple[str, str] | None = None

    def __call__(self, traces: list[Trace], model, cfg: PipelineConfig, rendered: list):
        return self.tail(self.device(traces, model, cfg, rendered))

    def device(self, traces: list[Trace], model, cfg: PipelineConfig, rendered: list):
        from masprism_batch.stage import attribute as attribution

        return attribution.on_device(traces, model, cfg, rendered=rendered, policy=self._policy_of(cfg, model))

    def tail(self, handle):
        from masprism_batch.stage import attribute as attribution

        return attribution.host_tail(handle)

    def _policy_of(self, cfg: PipelineConfig, model):
        from masprism_batch.verdict.policy import VerdictPolicy

        key = (cfg.method.model_dump_json(), model.model_id)
        if self._policy_for != key:
            policy = VerdictPolicy.load(cfg.method, model.model_id, self._ranker)
            self._policy, self._policy_for = policy, key
        return self._policy


def halves(attribute):
    """(device, tail) of an engine's `attribute`: its own halves where it has them (`ModelStage`), else the whole
    call on the device side and a tail that hands its output on."""
    device, tail = getattr(attribute, "device", None), getattr(attribute, "tail", None)
    if callable(device) and callable(tail):
        return device, tail
    return attribute, _as_is


def _as_is(out):
    return out
