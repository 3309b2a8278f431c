"""Issue 27 (red team, round 3): OUTDIR is a tree the tool owns and its committed parts are checked.

1. a symbolic link inside OUTDIR is refused before anything is touched (the victim's files and the lock
   target stay byte-identical); parts of another run are never adopted (run id + checksum).
4. a swapped or truncated part, or a corrupt manifest entry, is named by every reader and repaired by resume
   (exactly the damaged shards run again).
5. a header of a run that failed before committing anything does not lock the OUTDIR to its configuration.
7. a trace id repeated in one file: every copy counted in `counts.in`, no false "written twice".
(3, the interruption rule, is in test_interrupts.py.)"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path

import pytest
from masprism_batch.pipelines import run_local
from pipeline_fakes import Fakes, assert_exactly_once, make_corpus
from typer.testing import CliRunner

from masprism_batch.cli import app
from masprism_batch.config import BatchConfig, EngineConfig, MethodConfig, PipelineConfig
from masprism_batch.outdir import parts as mio
from masprism_batch.outdir import reads as outdir_reads
from masprism_batch.outdir.manifest import DamagedOutput, OutdirUnsafe
from masprism_batch.trace import Step, Trace


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def _run(inp: Path, out: Path, cfg: PipelineConfig, fakes: Fakes | None = None):
    return run_local([str(inp)], out, cfg, **(fakes or Fakes()).kwargs(), progress=False)


def _shard_parts(out: Path, table: str) -> list[Path]:
    return sorted(p for p in (out / table).glob("shard-*.parquet") if p.name != "shard-ingest.parquet")


def test_symlinks_inside_outdir_are_refused_and_the_victim_is_untouched(tmp_path, small_cfg):
    cfg = small_cfg(per_shard=4, budget=100)
    make_corpus(tmp_path / "in", 12, 1, seed=1)
    victim = tmp_path / "victim"
    _run(tmp_path / "in", victim, cfg)
    precious = tmp_path / "precious.txt"
    precious.write_text("do not truncate me")
    before, lock_before = _snapshot(victim), precious.read_bytes()

    out = tmp_path / "out"
    out.mkdir()
    (out / "attributions").symlink_to(victim / "attributions")
    (out / "_LOCK").symlink_to(precious)
    with pytest.raises(OutdirUnsafe, match="symbolic link"):
        _run(tmp_path / "in", out, cfg)
    res = CliRunner().invoke(app, ["attribute", str(tmp_path / "in"), "-o", str(out), "--model", "tiny-random",
                                   "--no-progress"])
    assert res.exit_code == 1 and "symbolic link" in res.output, res.output
    res = CliRunner().invoke(app, ["stats", str(out)])
    assert res.exit_code == 1 and "symbolic link" in res.output, res.output
    assert _snapshot(victim) == before and precious.read_bytes() == lock_before

    (out / "_LOCK").unlink()  # the lock alone, without any other link, is refused by the lock itself
    (out / "attributions").unlink()
    (out / "_LOCK").symlink_to(precious)
    with pytest.raises(OutdirUnsafe):
        mio.OutdirLock(out).acquire()
    assert precious.read_bytes() == lock_before


def test_parts_of_another_run_are_never_adopted(tmp_path, small_cfg):
    """Two runs of other inputs with the same row counts have the same shard ids: a part copied from one into
    the other is refused (checksum, run id), and the resume writes this run's own traces again."""
    cfg = small_cfg(per_shard=4, budget=100)
    ids_a = make_corpus(tmp_path / "a", 8, 1, seed=2)
    make_corpus(tmp_path / "b", 8, 1, seed=3)
    _run(tmp_path / "a", tmp_path / "A", cfg)
    _run(tmp_path / "b", tmp_path / "B", cfg)
    part = _shard_parts(tmp_path / "A", "attributions")[0]
    shutil.copyfile(tmp_path / "B" / "attributions" / part.name, part)
    with pytest.raises(DamagedOutput, match=part.name):
        outdir_reads.read_dataset(tmp_path / "A" / "attributions")
    res = CliRunner().invoke(app, ["export", str(tmp_path / "A"), "--to", "jsonl", "-o", str(tmp_path / "x.jsonl")])
    assert res.exit_code == 1 and part.name in res.output and "damaged" in res.output, res.output
    s = _run(tmp_path / "a", tmp_path / "A", cfg)
    assert s.shards_run == 1
    assert not assert_exactly_once(tmp_path / "A", ids_a)
    run = json.loads((tmp_path / "A" / "run.json").read_text())
    assert run["counts"]["in"] == run["counts"]["attributed"] == 8


@pytest.mark.parametrize("damage", ["swap", "truncate-attributions", "truncate-step_scores", "entry"])
def test_damaged_parts_are_named_and_repaired_on_resume(tmp_path, small_cfg, damage, caplog):
    cfg = small_cfg(per_shard=4, budget=100)
    ids = make_corpus(tmp_path / "in", 16, 1, seed=4)
    out = tmp_path / "out"
    _run(tmp_path / "in", out, cfg)
    a = _shard_parts(out, "attributions")
    if damage == "swap":  # another shard's valid part in its place: 2 x the rows of one shard, none of another
        shutil.copyfile(a[1], a[0])
        named = a[0]
    elif damage.startswith("truncate"):
        named = _shard_parts(out, damage.split("-")[1])[2]
        named.write_bytes(named.read_bytes()[: named.stat().st_size // 2])
    else:
        named = out / "_manifest" / f"{a[3].stem}.json"
        named.write_text('{"shard_id": ')
    runner = CliRunner()
    for cmd in (["stats", str(out)], ["report", str(out), "-o", str(tmp_path / "r.html")],
                ["export", str(out), "--to", "jsonl", "-o", str(tmp_path / "e.jsonl")]):
        res = runner.invoke(app, cmd)
        assert res.exit_code == 1, (cmd, res.output)
        assert named.name in res.output and "internal error" not in res.output, (cmd, res.output)
    with caplog.at_level(logging.WARNING):
        s = _run(tmp_path / "in", out, cfg)
    assert named.name in caplog.text
    assert s.shards_run == 1 and s.shards_skipped == 3  # exactly the damaged one of 4 shards
    assert not assert_exactly_once(out, ids)
    run = json.loads((out / "run.json").read_text())
    assert run["counts"]["in"] == run["counts"]["attributed"] == 16
    assert runner.invoke(app, ["stats", str(out)]).exit_code == 0


def test_a_part_replaced_by_a_link_is_refused(tmp_path, small_cfg):
    cfg = small_cfg(per_shard=4, budget=100)
    make_corpus(tmp_path / "in", 8, 1, seed=7)
    out = tmp_path / "out"
    _run(tmp_path / "in", out, cfg)
    part = _shard_parts(out, "step_scores")[0]
    part.rename(tmp_path / "elsewhere.parquet")
    part.symlink_to(tmp_path / "elsewhere.parquet")
    res = CliRunner().invoke(app, ["report", str(out), "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 1 and part.name in res.output and "symbolic link" in res.output, res.output
    with pytest.raises(OutdirUnsafe, match=part.name):
        _run(tmp_path / "in", out, cfg)
    assert (tmp_path / "elsewhere.parquet").is_file()


def test_corrupt_header_names_the_file(tmp_path, small_cfg):
    cfg = small_cfg(per_shard=4, budget=100)
    make_corpus(tmp_path / "in", 4, 1, seed=5)
    _run(tmp_path / "in", tmp_path / "out", cfg)
    header = tmp_path / "out" / "_manifest" / "HEADER.json"
    header.write_text("[1, 2")
    with pytest.raises(DamagedOutput, match="HEADER.json"):
        _run(tmp_path / "in", tmp_path / "out", cfg)
    res = CliRunner().invoke(app, ["stats", str(tmp_path / "out")])
    assert res.exit_code == 1 and "HEADER.json" in res.output, res.output


def test_a_run_that_committed_nothing_does_not_bind_its_configuration(tmp_path):
    """Staging done, then the run failed before any shard (here: its model would not load): a retry with
    another configuration takes the OUTDIR over instead of "holds results of another configuration"."""
    make_corpus(tmp_path / "in", 6, 1, seed=6, bad_lines=1)
    out = tmp_path / "out"

    def cfg(k):
        return PipelineConfig(batch=BatchConfig(token_budget=100), engine=EngineConfig(traces_per_shard=3),
                              method=MethodConfig(counterfactual_k=k))

    class NoModel(Fakes):
        def load_model(self, c):
            raise ValueError("this configuration cannot load its model")

    with pytest.raises(ValueError, match="cannot load"):
        _run(tmp_path / "in", out, cfg(1), NoModel())
    assert (out / "_manifest" / "HEADER.json").is_file()
    s = _run(tmp_path / "in", out, cfg(0))
    assert s.attributed == 6 and s.rejected == 1
    assert json.loads((out / "_manifest" / "HEADER.json").read_text())["config_hash"] == cfg(0).config_hash()
    with pytest.raises(ValueError, match="another configuration"):  # now it holds results: bound
        _run(tmp_path / "in", out, cfg(1))


def test_repeated_trace_id_in_one_file_is_counted_per_copy(tmp_path, small_cfg, caplog):
    rows = [Trace(trace_id=tid, source="s", steps=[Step(index=0, agent="a", content=f"x {i}")]).to_row()
            for i, tid in enumerate(["a", "a", "a", "b", "c"])]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level(logging.ERROR):
        s = _run(tmp_path / "in.jsonl", tmp_path / "out", small_cfg())
    assert "written twice" not in caplog.text
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["counts"]["in"] == 5 and s.attributed == 3 and s.rejected == 2


def test_an_outdir_of_the_previous_version_still_reads_and_resumes(tmp_path, small_cfg):
    """Entries without part records or run id, a header without run id (written before issue 27): presence is
    checked as before; the resume binds the header to a run id and skips every committed shard."""
    cfg = small_cfg(per_shard=4, budget=100)
    ids = make_corpus(tmp_path / "in", 8, 1, seed=8)
    out = tmp_path / "out"
    _run(tmp_path / "in", out, cfg)
    for p in (out / "_manifest").glob("*.json"):
        d = json.loads(p.read_text())
        for k in ("parts", "run_id"):
            d.pop(k, None)
        p.write_text(json.dumps(d))
    assert len(outdir_reads.read_dataset(out / "attributions")) == 8
    s = _run(tmp_path / "in", out, cfg)
    assert s.shards_run == 0 and s.attributed == 8
    assert json.loads((out / "_manifest" / "HEADER.json").read_text())["run_id"]
    assert not assert_exactly_once(out, ids)


def test_a_link_planted_during_the_run_is_not_followed(tmp_path, small_cfg):
    """The start-up check cannot see a link made later: the commit checks its folders again."""
    cfg = small_cfg(per_shard=4, budget=100)
    make_corpus(tmp_path / "in", 8, 1, seed=9)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    out = tmp_path / "out"

    class Plants(Fakes):
        def attribute(self, traces, model, c, rendered):
            d = out / "step_scores"
            if not d.is_symlink():
                shutil.rmtree(d, ignore_errors=True)
                d.symlink_to(victim)
            return super().attribute(traces, model, c, rendered)

    with pytest.raises(OutdirUnsafe, match="step_scores"):
        _run(tmp_path / "in", out, cfg, Plants())
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
