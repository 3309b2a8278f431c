import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pipeline_fakes

from masprism_batch.config import BatchConfig, EngineConfig, PipelineConfig  # noqa: E402


@pytest.fixture
def small_cfg():
    def make(per_shard: int = 8, budget: int = 300, commit_seconds: float | None = None) -> PipelineConfig:
        # the budget bounds the packs too (engine.pack_tokens: else 2,048 on a CPU), as the tests size them
        engine = {"traces_per_shard": per_shard, "pack_tokens": budget} | (
            {} if commit_seconds is None else {"commit_seconds": commit_seconds})
        return PipelineConfig(batch=BatchConfig(token_budget=budget), engine=EngineConfig(**engine))

    return make
