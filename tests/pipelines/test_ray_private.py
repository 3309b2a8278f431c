"""Issue 17: the local Ray cluster that `run --engine ray` starts (no --address) is private and stopped.

During the run no process of the driver's tree listens on a non-loopback address; Ray's token authentication
is on (Ray >= 2.52); after the driver ends none of the Ray processes it started is left."""

import importlib.util
import ipaddress
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pipeline_fakes import make_corpus

pytest.importorskip("ray", reason="the Ray engine tests need ray[data] (dev extra)")
psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.ray

DRIVER = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {tests!r})
    import ray.cloudpickle, pipeline_fakes
    from masprism_batch.config import BatchConfig, EngineConfig, PipelineConfig
    from masprism_batch.pipelines import run_ray
    ray.cloudpickle.register_pickle_by_value(pipeline_fakes)
    cfg = PipelineConfig(batch=BatchConfig(token_budget=100), engine=EngineConfig(traces_per_shard=4))
    s = run_ray([{inp!r}], {out!r}, cfg, workers=1, num_cpus=2, **pipeline_fakes.Fakes(delay=0.3).kwargs(ray=True),
                progress=False)
    print("AUTH", os.environ.get("RAY_AUTH_MODE"), json.dumps(s.facts.ray_private_cluster))
""")


# A Ray cluster started earlier in this pytest process (tests/pipelines/test_engine_ray.py) sets RAY_AUTH_MODE
# in os.environ; the driver under test must start as a user's shell would.
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}


def _loopback(ip: str) -> bool:
    ip = ip.split("%")[0]
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def test_private_cluster_binds_loopback_and_is_stopped(tmp_path):
    make_corpus(tmp_path / "in", 16, 2)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(tests=str(Path(__file__).parent), inp=str(tmp_path / "in"),
                                    out=str(tmp_path / "out")))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=CLEAN_ENV)
    driver = psutil.Process(proc.pid)
    seen: dict[int, str] = {}
    listening: list[tuple[str, str]] = []
    while proc.poll() is None:
        try:
            tree = [driver, *driver.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for p in tree:
            try:
                # the latest name: a child caught between fork and exec is still "python" (seen so in CI:
                # the GCS recorded as python, the raylet by name)
                seen[p.pid] = p.name()
                for c in p.net_connections(kind="inet"):
                    if c.status == psutil.CONN_LISTEN:
                        listening.append((p.name(), c.laddr.ip))
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        time.sleep(0.2)
    out, _ = proc.communicate(timeout=600)  # a whole Ray run: minutes on a loaded 2-core machine
    assert proc.returncode == 0, out
    assert any("gcs" in n for n in seen.values()), f"no Ray cluster seen: {seen}"
    assert listening, "no listening socket seen during the run"
    exposed = [(n, ip) for n, ip in listening if not _loopback(ip)]
    assert not exposed, f"Ray processes listening beyond loopback: {exposed}"
    assert "AUTH None" in out and '"bind": "127.0.0.1"' in out  # the driver's environment was restored
    if importlib.util.find_spec("ray._private.authentication") is not None:  # Ray >= 2.52
        assert '"token_auth": true' in out
    deadline = time.time() + 30
    alive = []
    while time.time() < deadline:
        alive = [f"{pid} {name}" for pid, name in seen.items()
                 if pid != proc.pid and psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
        if not alive:
            break
        time.sleep(0.5)
    assert not alive, f"Ray processes left after the run: {alive}"


def test_killed_driver_leaves_no_ray_process(tmp_path):
    """kill -9 of the driver: its watchdog stops the private cluster's processes within seconds (without it,
    Ray's agents lingered about a minute)."""
    make_corpus(tmp_path / "in", 40, 2)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(tests=str(Path(__file__).parent), inp=str(tmp_path / "in"),
                                    out=str(tmp_path / "out")))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=CLEAN_ENV)
    driver = psutil.Process(proc.pid)
    seen: dict[int, float] = {}
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        try:
            for p in driver.children(recursive=True):
                seen.setdefault(p.pid, p.create_time())
        except psutil.Error:
            pass
        if list((tmp_path / "out" / "_manifest").glob("shard-[0-9a-f]*.json")):
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the driver ended before it could be killed"
    for p in driver.children(recursive=True):
        seen.setdefault(p.pid, p.create_time())
    proc.kill()
    proc.wait()

    def alive():
        out = []
        for pid, created in seen.items():
            try:
                p = psutil.Process(pid)
                if abs(p.create_time() - created) < 0.5 and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(f"{pid} {p.name()}")
            except psutil.Error:
                pass
        return out

    t0 = time.time()
    while alive() and time.time() - t0 < 20:
        time.sleep(0.5)
    assert len(seen) >= 3 and not alive(), f"left after 20 s: {alive()}"
