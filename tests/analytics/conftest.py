import random

import pytest


@pytest.fixture
def rng() -> random.Random:
    seed = random.randrange(2**32)
    print(f"seed={seed}")  # shown on failure, so a failing draw can be replayed
    return random.Random(seed)
