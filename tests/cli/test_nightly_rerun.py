"""Issue 60 item 5: a nightly rerun. The lock, the configuration check and the work-to-do check come before the
model loads (a rerun with nothing new loads none and finishes in <= 2 s; "in use" is refused at once), run.json
and the summary say what this invocation did apart from what the whole OUTDIR holds, and an input with nothing
usable leaves no output skeleton."""

import json
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, app
from masprism_batch.outdir.parts import OutdirLock

runner = CliRunner()


def _logs(tmp_path: Path, rng, name: str = "a.jsonl", n: int = 3) -> Path:
    d = tmp_path / "logs"
    d.mkdir(exist_ok=True)
    lines = []
    for _ in range(n):
        steps = [{"index": k, "agent": rng.choice(["Planner", "Coder"]), "content": f"step {k}: {rng.random():.6f}"}
                 for k in range(rng.randint(2, 4))]
        lines.append(json.dumps({"trace_id": f"{name[0]}-{rng.getrandbits(40):010x}", "source": "jsonl",
                                 "steps": steps, "run_status": "failed"}))
    (d / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return d


def _attribute(logs: Path, out: Path):
    return runner.invoke(app, ["attribute", str(logs), "-o", str(out), "--model", "tiny-random", "--no-progress"])


@pytest.fixture
def loads(monkeypatch):
    """Counts the model loads the CLI makes (the real load, wrapped)."""
    from masprism_batch.pipelines import model_stage

    calls: list[str] = []
    real = model_stage.load_model

    def counted(cfg):
        calls.append(cfg.model.name)
        return real(cfg)

    monkeypatch.setattr(model_stage, "load_model", counted)
    return calls


def test_a_rerun_with_nothing_new_loads_no_model_and_says_so(tmp_path, rng, loads):
    logs, out = _logs(tmp_path, rng), tmp_path / "OUT"
    res = _attribute(logs, out)
    assert res.exit_code == EXIT_OK, res.output
    assert loads == ["tiny-random"]
    first = json.loads((out / "run.json").read_text())
    inv = first["this_invocation"]
    assert inv["model_loaded"] is True and inv["seconds_model_load"] > 0
    assert inv["counts"]["attributed"] == first["counts"]["attributed"] == 3
    t0 = time.perf_counter()
    res = _attribute(logs, out)
    took = time.perf_counter() - t0
    assert res.exit_code == EXIT_OK, res.output
    assert loads == ["tiny-random"], "the rerun with nothing new loaded the model"
    assert took <= 2.0, f"a rerun with nothing new took {took:.2f} s"
    run = json.loads((out / "run.json").read_text())
    inv = run["this_invocation"]
    assert inv["model_loaded"] is False and "seconds_model_load" not in inv
    assert inv["counts"]["attributed"] == 0 and inv["traces"] == 0 and inv["stage_seconds"] == {}
    assert run["counts"]["attributed"] == 3  # the whole OUTDIR, apart
    said = " ".join(res.output.split())
    assert "this run: 0 trace(s) attributed" in said and "no model loaded" in said
    assert f"{out} holds: 3 attributed" in said
    assert "time:" not in said  # no stage seconds of earlier runs beside this one's wall time


def test_a_new_file_loads_the_model_and_the_time_line_is_this_runs(tmp_path, rng, loads):
    logs, out = _logs(tmp_path, rng), tmp_path / "OUT"
    assert _attribute(logs, out).exit_code == EXIT_OK
    _logs(tmp_path, rng, "b.jsonl", 2)
    res = _attribute(logs, out)
    assert res.exit_code == EXIT_OK, res.output
    assert len(loads) == 2
    run = json.loads((out / "run.json").read_text())
    inv = run["this_invocation"]
    assert inv["counts"]["attributed"] == 2 and run["counts"]["attributed"] == 5
    whole, mine = run["stage_seconds_total"]["seconds_pass1"], inv["stage_seconds"]["seconds_pass1"]
    assert 0 < mine < whole
    line = next(ln for ln in res.output.splitlines() if ln.startswith("time:"))
    assert f"pass 1 {mine:,.1f} s" in line and "model load" in line


def test_in_use_is_refused_before_the_model_loads(tmp_path, rng, loads):
    logs, out = _logs(tmp_path, rng), tmp_path / "OUT"
    held, release = threading.Event(), threading.Event()

    def hold():  # another run holding OUTDIR (a thread: its flock is its own open file)
        with OutdirLock(out, "attribute"):
            held.set()
            release.wait(30)

    th = threading.Thread(target=hold)
    th.start()
    try:
        assert held.wait(10)
        t0 = time.perf_counter()
        res = _attribute(logs, out)
        took = time.perf_counter() - t0
    finally:
        release.set()
        th.join()
    assert res.exit_code == 1 and "in use" in res.output, res.output
    assert loads == [] and took <= 2.0, (loads, took)


def test_nothing_usable_leaves_no_output_skeleton(tmp_path):
    logs, out = tmp_path / "logs", tmp_path / "OUT"
    logs.mkdir()
    (logs / "broken.json").write_text("{not json", encoding="utf-8")
    (logs / "empty.jsonl").write_text('{"trace_id": "x", "steps": []}\n', encoding="utf-8")
    res = _attribute(logs, out)
    assert res.exit_code == 1 and "no usable traces" in res.output, res.output
    assert not out.exists(), sorted(p.name for p in out.iterdir())
    # an OUTDIR that held something before is never removed
    keep = tmp_path / "KEEP"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    res = _attribute(logs, keep)
    assert res.exit_code == 1 and (keep / "notes.txt").read_text() == "mine"


def test_a_rerun_with_nothing_new_never_imports_torch(tmp_path, rng):
    """The seconds a nightly rerun with nothing new costs are the CLI's start: no model load, and not even torch's
    import (pipelines/__init__ and local.py import the model stage lazily; devices.auto_device_type reads a CPU-only
    torch build's version file). Skipped where torch is a CUDA build (`auto` must then ask torch)."""
    import subprocess
    import sys

    from masprism_batch.devices import _cpu_only_torch

    if not _cpu_only_torch():
        pytest.skip("torch here is a CUDA/ROCm build: `--device auto` asks torch, which imports it")
    logs, out = _logs(tmp_path, rng), tmp_path / "OUT"
    assert _attribute(logs, out).exit_code == EXIT_OK
    code = ("import sys\nfrom masprism_batch.cli import main\n"
            f"sys.argv = ['masprism-batch', 'attribute', {str(logs)!r}, '-o', {str(out)!r}, '--model', 'tiny-random',"
            " '--no-progress']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    rc = e.code\n"
            "print('RC', rc, 'TORCH', 'torch' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "RC 0 TORCH False" in proc.stdout, (proc.stdout[-2000:], proc.stderr[-2000:])
