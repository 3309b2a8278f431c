"""The one seed fixture (tests/conftest.py): different per test and per run, fixed by MASPRISM_TEST_SEED, every
random source seeded with it, and a failing test's report names the value that replays it."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

pytest_plugins = ["pytester"]
CONFTEST = Path(__file__).with_name("conftest.py")


def test_sources_are_seeded_with_the_reported_seed(seed, rng, np_rng, request):
    assert ("seed", seed) in request.node.user_properties
    assert rng.random() == random.Random(seed).random()
    assert np_rng.random() == np.random.default_rng(seed).random()
    assert random.random() == random.Random(seed).random()  # the global generators too
    assert np.random.rand() == np.random.RandomState(seed).rand()
    assert torch.equal(torch.rand(3), torch.rand(3, generator=torch.Generator().manual_seed(seed)))


def test_a_failure_names_its_seed_and_the_env_replays_it(pytester, monkeypatch, seed):
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_x="""
        import random

        def test_fails(rng):
            print("drew", rng.random())
            assert False
    """)
    monkeypatch.setenv("MASPRISM_TEST_SEED", str(seed))
    runs = [pytester.runpytest_inprocess("-p", "no:cacheprovider").stdout.str() for _ in range(2)]
    assert all(f"MASPRISM_TEST_SEED={seed} reproduces" in out for out in runs)
    drew = [line for out in runs for line in out.splitlines() if line.startswith("drew ")]
    assert len(drew) == 2 and drew[0] == drew[1]  # the same draws again
