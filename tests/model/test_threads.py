"""CPU threads when none is configured: the cores the load average leaves free (issue 24, item 3)."""

from __future__ import annotations

import os

import pytest

from masprism_batch.model import loader


@pytest.fixture
def cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3}, raising=False)
    return 4


@pytest.mark.parametrize(("load", "want"), [(0.0, 4), (0.4, 4), (1.6, 2), (2.7, 1), (9.0, 1)])
def test_threads_follow_the_free_cores(monkeypatch, cores, load, want):
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    assert loader.free_cpu_threads() == want


def test_the_environment_or_an_unknown_load_leaves_torch_alone(monkeypatch, cores):
    def unknown():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", unknown)
    assert loader.free_cpu_threads() is None
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert loader.free_cpu_threads() is None
