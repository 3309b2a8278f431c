"""The one seed fixture (tests/conftest.py): different per test and per run, fixed by MASPRISM_TEST_SEED, every
random source seeded with it, and a failing test's report names the value that replays it."""

from __future__ import annotations

import hashlib
import os
import random
import re
from pathlib import Path

import numpy as np
import torch

pytest_plugins = ["pytester"]
CONFTEST = Path(__file__).with_name("conftest.py")


def test_sources_are_seeded_with_the_reported_seed(seed, rng, np_rng, request):
    assert ("seed", seed) in request.node.user_properties
    # a function of the session's MASPRISM_TEST_SEED and the test's name only: the variable replays it
    key = f"{os.environ['MASPRISM_TEST_SEED']}:{Path(__file__).name}::{request.node.name}"
    assert seed == int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little") >> 1
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
    out = pytester.runpytest_inprocess("-p", "no:cacheprovider").stdout.str()
    assert f"MASPRISM_TEST_SEED={seed} reproduces" in out
    own = int(re.search(r"this test's seed: (\d+)", out).group(1))  # derived from the session's value
    assert f"drew {random.Random(own).random()}" in out
