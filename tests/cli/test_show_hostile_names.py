"""Red-team round on the terminal: rich turns `:name:` into an emoji when it prints markup, and `schema.terminal`
escaped markup but not that. A trace id `t:thumbs_up:1` was listed by `show` as `t👍1` (the id a reader copies
into `show OUT TRACE_ID`, which then finds nothing) and an agent `:white_check_mark: verified` read as a check
mark. Every name now prints as its text."""

from __future__ import annotations

from analytics_synth import write_outdir
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, app
from masprism_batch.schema import terminal

runner = CliRunner(env={"COLUMNS": "400"})
TID, AGENT = "t:thumbs_up:1", ":white_check_mark: verified:smile:"


def test_terminal_keeps_emoji_codes_as_text():
    from rich.console import Console

    console = Console(width=200, color_system=None)
    with console.capture() as cap:
        console.print(terminal(f"{TID} {AGENT} 12:30:00 C:\\x:y [b]:smile:[/b]"))
    assert cap.get() == f"{TID} {AGENT} 12:30:00 C:\\x:y [b]:smile:[/b]\n"
    assert terminal("plain text: one colon") == "plain text: one colon"  # nothing to break: unchanged


def test_show_and_stats_print_ids_and_agents_as_they_are(tmp_path):
    steps = [{"agent": AGENT if k == 1 else "B", "content": f"step {k} :fire: here"} for k in range(3)]
    spec = {"trace_id": TID, "source": "src:cat:", "system": "sys", "labels": None, "steps": steps,
            "ranked": [1, 0], "scores": [0.9, 0.1], "symptoms": [2], "nll": [1.0] * 3, "day_offset": 0,
            "confidence": 0.8}
    out = write_outdir(tmp_path / "o", [spec])
    for args in (["show", str(out)], ["show", str(out), TID], ["stats", str(out)]):
        res = runner.invoke(app, args)
        assert res.exit_code == EXIT_OK, (args, res.output)
        assert not any(e in res.output for e in "👍✅😄🔥🐱"), (args, res.output)
        flat = "".join(res.output.split())  # table cells may fold a long name
        assert "".join(AGENT.split()) in flat, (args, res.output)
        if args[0] == "show":
            assert TID in flat
    assert "step 1 :fire: here" in runner.invoke(app, ["show", str(out), TID]).output


def test_show_finds_a_trace_by_its_id_as_the_listing_shows_it_and_never_another(tmp_path):
    """`show OUT TRACE_ID` takes the id "as the listing shows it", but the listing shows a zero width or bidi
    control escaped (`x\\u200by`) and `show` looked the copied text up as is: not found. Worse, another log could
    name its trace with that text typed out, and `show` then opened that log's verdict for the id the reader
    copied. An id that is the shown form of one trace opens it; one that several ids show as is refused, each
    named distinctly."""
    def spec(tid, agent):
        steps = [{"agent": agent, "content": f"step {k}"} for k in range(3)]
        return {"trace_id": tid, "source": "src", "system": "sys", "labels": None, "steps": steps, "ranked": [1, 0],
                "scores": [0.9, 0.1], "symptoms": [2], "nll": [1.0] * 3, "day_offset": 0, "confidence": 0.8}

    out = write_outdir(tmp_path / "o", [spec("x\u200by", "Alone"), spec("t\u202eA", "Victim"),
                                         spec("t\\u202eA", "Mallory")])
    listing = runner.invoke(app, ["show", str(out)]).output
    assert "x\\u200by" in listing and listing.count("t\\u202eA") == 2  # the listing shows both alike
    res = runner.invoke(app, ["show", str(out), "x\\u200by"])  # copied from the listing
    assert res.exit_code == EXIT_OK and "Alone" in res.output, res.output
    res = runner.invoke(app, ["show", str(out), "t\\u202eA"])
    assert res.exit_code != EXIT_OK and "Mallory" not in res.output, res.output
    flat = " ".join(res.output.split())
    assert "2 traces show as" in flat and "'t\\\\u202eA'" in flat and "'t\\u202eA'" in flat, flat
    res = runner.invoke(app, ["show", str(out), "t\u202eA"])  # the id itself, typed with its character
    assert res.exit_code == EXIT_OK and "Victim" in res.output and "Mallory" not in res.output, res.output
