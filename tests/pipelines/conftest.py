import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pipeline_fakes

from masprism_batch.config import BatchConfig, EngineConfig, PipelineConfig  # noqa: E402


@pytest.fixture
def small_cfg():
    def make(per_shard: int = 8, budget: int = 300) -> PipelineConfig:
        return PipelineConfig(batch=BatchConfig(token_budget=budget), engine=EngineConfig(traces_per_shard=per_shard))

    return make
