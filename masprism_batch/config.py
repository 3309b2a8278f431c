"""The one typed configuration of the whole pipeline.

Every knob of the method lives here. Values marked (paper) are MASPrism's published values; values marked
(ours) are this project's choice where the paper is silent (see docs/method.md). The config hash written to
every output row is the hash of this object's canonical JSON, so two runs are comparable iff hashes match.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from masprism_batch import config_checks as checks
from masprism_batch.config_hash import hashed_form

TINY_CONTEXT = 8192  # byte-level tokens of the built-in tiny-random model


class _Section(BaseModel):
    # NaN/inf pass no range check and give degenerate output: every float of every section must be finite
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_as_number(cls, value, info: ValidationInfo):
        # JSON/TOML `true`/`false` where a number is expected: pydantic's lax mode would read them as 1/0
        annotation = cls.model_fields[info.field_name].annotation
        types = get_args(annotation) or (annotation,)  # int | None -> (int, NoneType)
        if isinstance(value, bool) and bool not in types and ({int, float} & set(types)):
            raise ValueError(f"expected a number, got the boolean {json.dumps(value)}")
        return value


class ModelConfig(_Section):
    name: str = "smollm2-135m"  # smollm2-135m | gemma3-270m | tiny-random | PATH (HF folder or .gguf)
    # auto: bf16 where the hardware multiplies bf16 natively (CUDA; CPUs with AVX512-BF16 or AMX), else fp32;
    # the built-in tiny-random test model stays fp32 on CPU (see auto_dtype)
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    cache_dir: str | None = None  # converted-weights cache; default ~/.cache/masprism-batch
    threads: int | None = Field(None, ge=1)  # torch intra-op threads on CPU (None: torch default); <= the CPUs

    @field_validator("threads")
    @classmethod
    def _threads(cls, v):
        return checks.clamp_threads(v)

    @field_validator("cache_dir")
    @classmethod
    def _cache_dir(cls, v):
        return checks.check_folder(v, "model.cache_dir")


class RenderConfig(_Section):
    # (ours) tokens per pass-1/pass-2 prompt: 2048 keeps CPU runs fast (SmolLM2 was trained at 8k); the built-in
    # tiny-random model reads bytes, ~4x more tokens per text, so it defaults to 8192 (see PipelineConfig).
    max_context: int = Field(2048, ge=128)  # below 128 no prompt (preamble, question, headers) fits
    step_budget_cap: int = Field(512, ge=1)  # (ours, method doc) cap on the equal per-step budget of pass 1
    pass2_prefix_tokens: int = Field(128, ge=0)  # (ours, method doc) prefix kept of non-key steps in pass 2
    header_template: str = "[Step {index}] {agent}:"  # (ours) one header line per step
    truncation_marker: str = "[...]"
    # Prompt texts of the two passes (ours: the paper's wording is not given; docs in masprism_batch/render/prompt.py)
    pass1_preamble: str = (  # (ours) method doc: "the trace is truncated, omissions are expected"
        "Log of a multi-agent run that failed. It is truncated: every step is cut to the same length at [...]; "
        "omissions are expected, not errors.\n"
    )
    pass2_preamble: str = (  # (ours) method doc: "the trace was reconstructed; key steps are complete"
        "Log of a multi-agent run that failed, reconstructed: key steps are complete, the others are cut at "
        "[...].\n"
    )
    question_template: str = "Task: {question}\n"  # (ours) the task text is not a label, so it may be shown
    question_max_tokens: int = Field(256, ge=0)  # (ours) longer task texts are cut with the marker
    anomaly_note: str = (  # (ours) inserted just before the earliest symptom in pass 2
        "[Note] The next step is anomalous: trace the cause backward.\n"
    )
    pass2_key_share: float = Field(0.5, ge=0, le=1)  # (ours) share of content tokens kept for key steps when pass 2 must shrink
    # (ours) pass 1 reads the whole log in windows of max_context (masprism_batch/render/windows.py);
    # "truncate" is the paper's single prompt with one equal step budget.
    pass1: Literal["windows", "truncate"] = "windows"
    window_step_cap: int | None = Field(128, ge=1)  # content tokens kept per step in the windows; None = every token (thorough)
    window_context: int = Field(256, ge=0)  # tokens of recent past re-read (not re-scored) before a window's own tokens
    window_digest_share: float = Field(0.25, ge=0, lt=1)  # at most this share of a window holds the digest of older steps
    window_digest_step_tokens: int = Field(16, ge=0)  # content tokens of each older step in the digest

    # templates parsed and texts bounded at load (config_checks.py), not found out per trace
    @field_validator("header_template", "question_template", "truncation_marker", "pass1_preamble", "pass2_preamble",
                     "anomaly_note")
    @classmethod
    def _texts(cls, v, info: ValidationInfo):
        return checks.check_render_text(info.field_name, v)


class SignalsConfig(_Section):
    backend: Literal["auto", "triton", "cpp", "torch"] = "auto"
    layer_fraction: float = Field(0.2, gt=0, le=1)  # (paper) last 20% of layers: floor(0.8 L) ... L-1
    nll_chunk: int = Field(1024, ge=1)  # tokens per LM-head chunk (memory bound of the NLL path)
    attn_block: int = Field(256, ge=1)  # query/key block of the blockwise reference


class MethodConfig(_Section):
    # masprism: the faithful method. ranked (ours): MASPrism's passes, then a learned linear ranker over every
    # step's prefill features and agent-level aggregation (docs/method.md, docs/results.md).
    name: Literal["masprism", "ranked"] = "ranked"  # (ours) held-out results in docs/results.md
    # (ours) the ranker setting (`--ranker`): a ranker file from `masprism-batch fit` (or a folder holding
    # rankers.json); "packaged": the rankers fitted on the benchmark systems (eval --dataset names them); None: no
    # ranker, the zero-training verdict. Read once per run (verdict/rankfile.RankerSetting). Older config files
    # call it `ranker_weights`: still read, with a warning
    ranker: str | None = None
    # (ours) the system every log of the run belongs to (`--system`), matched against a ranker file's
    # entries; None: each log's recorded system (verdict/rankfile.system_key), never guessed from its shape
    system: str | None = None
    # (ours, ranked only) True: agent = argmax of summed step probabilities; False: the blamed step's author;
    # None: the rule shipped with the ranker weights (chosen by leave-one-system-out, docs/results.md)
    agent_aggregation: bool | None = None
    symptom_ratio: float = Field(0.2, ge=0, le=1)  # (paper) Who&When; TRAIL uses symptom_ratio_spans
    symptom_ratio_spans: float = Field(0.5, ge=0, le=1)  # (paper) for span-tree sources (TRAIL/OTel)
    top_k_candidates: int = Field(5, ge=1)  # (paper) K
    top_attention_targets: int = Field(5, ge=1)  # (paper) a symptom "votes" for k if k is in its top-5 attention targets
    vote_weight: float = Field(0.3, ge=0)  # (paper) Score = Fuse * (1 + 0.3 |V_k|)
    failure_words: tuple[str, ...] = (  # (ours) the paper's list is not given
        "error", "exception", "failed", "failure", "traceback", "timeout", "timed out", "not found",
        "cannot", "can't", "unable", "invalid", "incorrect", "wrong", "mistake", "denied", "refused",
    )
    run_pass2: bool = True
    # (ours) counterfactuals by prefill: the first K pass-1 candidates are removed from the pass-2
    # prompt one at a time and the symptoms re-scored from the cached prefix (method/counterfactual.py)
    counterfactual_k: int = Field(2, ge=0)
    # (ours) per-(layer, head) attention weighted by head weights fitted without labels
    # (method/heads.py); None: the packaged weights of the model if any
    learned_heads: bool = True
    head_weights: str | None = None  # a `fit-heads` file, checked at load (exists, regular, a finite table)
    # (ours) "verdict": counterfactuals and per-head attention only for the traces whose verdict reads
    # them (method/reads.py; other traces' cf_effect / attn_in_learned are null); "all": for every trace, as a
    # run made to fit a ranker needs (CLI --all-features). Verdicts are the same either way.
    features: Literal["verdict", "all"] = "verdict"
    # (ours) a failure kind per verdict (masprism_batch/category/, docs/categories.md): the taxonomy (a TOML
    # file; None: TRAIL's 20 kinds), its weights (None: the packaged ones when they match, else zero-training),
    # and how many of the best-ranked steps have every kind's description read after them (the others of the
    # top_k_candidates get the log's evidence only)
    categories: bool = False  # opt-in: held-out family accuracy is at chance so far (docs/results.md)
    taxonomy: str | None = None
    category_weights: str | None = None
    category_reads: int = Field(1, ge=0)
    # (ours, issue 59) the share of held-out logs whose labelled step the verdict's step set holds (`--coverage`):
    # each attribution's `read_steps` is the head of its reading order calibrated conformally to it
    # (verdict/stepset.py). It changes outputs (the set), so a value other than the default enters the hash
    coverage: float = Field(0.8, gt=0, lt=1)

    @field_validator("head_weights")
    @classmethod
    def _head_weights(cls, v):
        return checks.check_head_weights(v)

    @model_validator(mode="before")
    @classmethod
    def _old_ranker_name(cls, data):
        return checks.renamed(data, "ranker_weights", "ranker", "method")


class BatchConfig(_Section):
    # (ours) max tokens per packed prefill batch. Left unset (no option, not in the config file) it is sized for
    # the device when the model is loaded (buckets.with_token_budget): 8192 on CPU, from free memory on CUDA
    token_budget: int = Field(8192, ge=1)


class EngineConfig(_Section):
    """How a run is executed, never what it computes: excluded from `config_hash()`, so resizing shards or
    giving the CPU stage more of a core leaves outputs comparable (and resumable) under the same hash."""

    traces_per_shard: int = Field(256, ge=1)  # output rows committed together (shard identity on resume)
    cpu_stage_cpus: float = Field(0.25, gt=0)  # Ray CPUs per render/pack task: light, schedulable beside actors
    attempts_per_trace: int = Field(2, ge=1)  # a trace that raises this often alone goes to errors/
    # finished packs of an unfinished shard are committed (as pieces) once this many seconds passed since the
    # last commit, and on an interruption: what a kill -9 can lose; 0 = after every pack
    commit_seconds: float = Field(60.0, ge=0, allow_inf_nan=False)
    # pass-1 tokens of one pack, the unit that finishes and commits (pipelines/packs.py): None = the token budget
    # on a GPU, 2,048 on a CPU (a pack of ~20-30 s there), so an interruption loses about that much
    pack_tokens: int | None = Field(None, ge=1)
    # threads building pass-2 prompts while the next pass-1 prefills run (stage/pass2.py); 0: inline, after them
    pass2_render_threads: int = Field(1, ge=0)

    @field_validator("pass2_render_threads")
    @classmethod
    def _render_threads(cls, v):  # like model.threads: no more threads than CPUs (a warning, then clamped)
        return checks.clamp_threads(v, "engine.pass2_render_threads")


class IngestConfig(_Section):
    """Caps applied when traces enter (ingest, `run`/`attribute` staging, canonical Parquet read in place), so no
    step reaches the tokenizer whole beyond a bounded size (docs/scale-out.md, "Bounded memory per trace").
    Sizes are UTF-8 bytes. Left at their defaults they do not enter the config hash (older hashes stay valid)."""

    max_step_bytes: int = Field(256 * 1024, ge=1024)  # longer step content: head + marker + tail kept, warning
    max_steps: int = Field(4096, ge=1)  # more steps: the trace is rejected (`too_many_steps`)
    max_trace_bytes: int = Field(16 * 1024**2, ge=1024)  # more step text after step caps: rejected (`trace_too_large`)
    max_record_bytes: int = Field(64 * 1024**2, ge=1024)  # one JSON line (decompressed): longer -> file error
    max_file_bytes: int = Field(512 * 1024**2, ge=1024)  # one whole JSON document, decompressed; counted as read
    # an agent name (and a label's mistake_agent) longer than this is cut, with a warning: a name is repeated in
    # every step header, so a 1 MiB name would cost ~1M pass-1 tokens per step
    max_agent_bytes: int = Field(256, ge=16)

    @field_validator("max_steps")
    @classmethod
    def _max_steps(cls, v):  # one trace's memory (linear in its steps) bounded by the machine's
        return checks.check_max_steps(v)
    # attribute runs whose log records success too (`--all-runs`); default: failed and unknown runs only, the
    # succeeded ones listed in errors/ as `succeeded_run` (ingest/status.py)
    all_runs: bool = False
    # the team's graded outcomes (ingest/outcomes.py): `--outcomes FILE` (trace ids with pass/fail or a score),
    # `--outcome-name` (the evaluation in it, or a score the log records), `--pass-threshold` (a score passes at >=)
    outcomes: str | None = None
    outcome_name: str | None = None
    pass_threshold: float = 1.0


class PipelineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelConfig = Field(default_factory=ModelConfig)
    render: RenderConfig = Field(default_factory=RenderConfig)
    signals: SignalsConfig = Field(default_factory=SignalsConfig)
    method: MethodConfig = Field(default_factory=MethodConfig)
    batch: BatchConfig = Field(default_factory=BatchConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)

    @model_validator(mode="before")
    @classmethod
    def _byte_model_context(cls, data):
        if isinstance(data, dict):
            model, render = data.get("model") or {}, data.get("render") or {}
            name = model.get("name") if isinstance(model, dict) else getattr(model, "name", None)
            if name == "tiny-random" and isinstance(render, dict) and render.get("max_context") is None:
                data = {**data, "render": {**render, "max_context": TINY_CONTEXT}}
        return data

    def config_hash(self) -> str:
        """Hash of everything that can change a result (not device/threads/cache paths)."""
        data = hashed_form(self)
        blob = json.dumps(data, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def load_config(path: str | None = None, **overrides) -> PipelineConfig:
    """Config from a JSON or TOML file (sections as in PipelineConfig), then dotted overrides such as
    `model.name="tiny-random"` given as keyword `model__name` (None: left as the file has it). Unknown keys are
    errors, not ignored. The CLI builds its sections typed (`config_with`)."""
    sections: dict[str, dict] = {}
    for key, value in overrides.items():
        if value is not None:
            section, _, name = key.partition("__")
            sections.setdefault(section, {})[name] = value
    return config_with(path, sections)


def config_with(path: str | None, sections: dict[str, dict]) -> PipelineConfig:
    """Config from a JSON or TOML file (or the defaults), each of `sections` ({"model": {"name": ...}}) set over
    it: every key given is set, None included (a setting the file has can be cleared)."""
    data: dict = {}
    if path:
        text = checks.read_config_file(str(path))  # a regular file of bounded size: a FIFO would block
        try:
            if str(path).endswith(".toml"):
                import tomllib

                data = tomllib.loads(text)
            else:
                data = json.loads(text)
        except RecursionError:  # not a ValueError: would be an internal error
            raise ValueError(f"{path}: nested too deeply to be a config file") from None
    if not isinstance(data, dict):  # a JSON list or scalar: say so, never an internal AttributeError later
        raise ValueError(f"{path}: a config file holds a table of sections (model, render, ...), "
                         f"not a {type(data).__name__}")
    if isinstance(data.get("method"), dict):  # a file's former name, read before an option sets the new one
        data["method"] = checks.renamed(data["method"], "ranker_weights", "ranker", "method")
    for section, values in sections.items():
        if not isinstance(data.setdefault(section, {}), dict):
            raise ValueError(f"{path}: config section {section!r} must be a table, not {data[section]!r}")
        data[section].update(values)
    return PipelineConfig.model_validate(data)
