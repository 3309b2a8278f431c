"""The Ray cluster of one `run --engine ray`: join `--address`, or start a private local cluster and stop it.

A cluster started here is private: every Ray process binds 127.0.0.1 only, with Ray's token authentication
where the installed Ray has it, and it is shut down when the run ends, also on SIGTERM/SIGHUP; a watchdog
process stops what is left if the driver is killed with SIGKILL (tests/pipelines/test_ray_private.py).
Kept apart from the engine (`ray_engine.py`) because none of it depends on what the run computes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


@contextlib.contextmanager
def ray_cluster(address: str | None, num_cpus: int | None) -> Iterator[dict[str, Any] | None]:
    """Ray initialised for the block. Yields what `run.json` records of a private cluster started here
    (bind address, token auth), or None when `address` was joined or Ray was already initialised."""
    import ray

    before = _child_pids()
    started = _init_ray(address, num_cpus)
    if started is None:
        yield None
        return
    reaper = _start_reaper(_child_pids() - before)
    try:
        yield {"bind": LOOPBACK, "token_auth": os.environ.get("RAY_AUTH_MODE", "").lower() == "token"}
    finally:
        ray.shutdown()
        _restore_env(started)
        _stop_reaper(reaper)


def private_cluster_env() -> dict[str, str]:
    """Environment of a private local cluster: Ray's token authentication with a fresh random token held only
    in this process's environment (inherited by the Ray processes it starts; nothing is written to
    ~/.ray), where the installed Ray supports it (2.52+). An explicit RAY_AUTH_MODE of the user is kept."""
    import secrets

    try:
        import ray._private.authentication.authentication_token_setup  # noqa: F401 - present since Ray 2.52
    except ImportError:
        return {}
    if "RAY_AUTH_MODE" in os.environ:
        return {}
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


def _init_ray(address: str | None, num_cpus: int | None) -> dict[str, str | None] | None:
    """Join `address` or start a private local cluster bound to 127.0.0.1. Returns None when Ray was already
    initialised or `address` was joined (nothing to stop), else the environment variables this call set
    (with their previous values, restored by `_stop_ray`)."""
    import ray

    if ray.is_initialized():
        return None
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True, "configure_logging": False}
    if address:
        ray.init(address=address, **kwargs)
        return None
    from ray._private import ray_constants

    # Loopback only: Ray maps a node address of 127.0.0.1 to the host's external IP unless its single-machine
    # mode is on (the default on macOS/Windows, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0): then the node address
    # is 127.0.0.1 and GCS, raylet, object manager, agents and workers bind to it (tests/pipelines).
    env = {**private_cluster_env(), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    _refresh_ray_config("RAY_AUTH_MODE" in env)
    cluster_mode = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False  # read at import time; this process imported Ray already
    try:
        ray.init(num_cpus=num_cpus or os.cpu_count(), _node_ip_address=LOOPBACK, **kwargs)
    except BaseException:
        ray_constants.ENABLE_RAY_CLUSTER = cluster_mode
        _restore_env(saved)
        raise
    saved["__cluster_mode__"] = cluster_mode
    return saved


def _refresh_ray_config(changed: bool) -> None:
    """Ray caches its config (auth mode) per process: re-read it after the environment changed."""
    if not changed:
        return
    with contextlib.suppress(Exception):
        from ray._private.authentication.authentication_token_setup import Config

        Config.initialize("")
    with contextlib.suppress(Exception):
        from ray._private.authentication.authentication_token_setup import AuthenticationTokenLoader

        loader = AuthenticationTokenLoader.instance()
        for name in ("reset_cache", "ResetCache", "reset"):
            if hasattr(loader, name):
                getattr(loader, name)()
                break


def _restore_env(saved: dict[str, Any]) -> None:
    if "__cluster_mode__" in saved:
        from ray._private import ray_constants

        saved = dict(saved)
        ray_constants.ENABLE_RAY_CLUSTER = saved.pop("__cluster_mode__")
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    _refresh_ray_config("RAY_AUTH_MODE" in saved)


_REAPER = r"""
import json, os, select, sys, psutil
known = {}  # pid -> Process: the recorded roots and every descendant seen so far (children can be reparented
            # when their parent dies first, so the tree is remembered while the driver lives)
for pid, created in json.loads(sys.argv[1]):
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - created) < 0.5:  # the very process recorded, not a reused pid
            known[pid] = p
    except psutil.Error:
        pass
def refresh():
    for p in list(known.values()):
        try:
            for c in p.children(recursive=True):
                known.setdefault(c.pid, c)
        except psutil.Error:
            pass
while True:  # EOF on stdin: the driver closed the pipe (normal end) or died (kill -9)
    refresh()
    if select.select([0], [], [], 1.0)[0] and not os.read(0, 4096):
        break
refresh()
procs = [p for p in known.values() if p.is_running()]
for p in procs:
    try:
        p.terminate()
    except psutil.Error:
        pass
_, alive = psutil.wait_procs(procs, timeout=5)
for p in alive:
    try:
        p.kill()
    except psutil.Error:
        pass
"""


def _child_pids() -> set[tuple[int, float]]:
    try:
        import psutil

        return {(c.pid, c.create_time()) for c in psutil.Process().children()}
    except Exception:  # noqa: BLE001 - no psutil: no reaper
        return set()


def _start_reaper(roots: set[tuple[int, float]]):
    """A watchdog for the private cluster's processes (the driver's children that `ray.init` started, and their
    descendants): it waits for EOF on a pipe from the driver, then stops them. A driver killed with SIGKILL
    closes the pipe too, so its Ray processes go at once instead of lingering until they notice."""
    import json
    import subprocess

    if not roots:
        return None
    try:
        return subprocess.Popen([sys.executable, "-c", _REAPER, json.dumps(sorted(roots))], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        log.warning("no watchdog for the local Ray cluster (%s)", e)
        return None


def _stop_reaper(reaper) -> None:
    if reaper is None:
        return
    with contextlib.suppress(OSError):
        reaper.stdin.close()  # after ray.shutdown(): it stops whatever is left, then exits
    with contextlib.suppress(Exception):
        reaper.wait(timeout=15)
