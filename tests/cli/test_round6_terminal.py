"""Issue 61 finding 13: nothing raw on a terminal. `show --errors` printed file and zip-member names, `show` trace
ids with a C1 CSI (U+009B) or a bidi override (U+202E), the run's `inputs: ... changed` line a changed file's name,
`stats` "What fails most" the taxonomy's names (ESC[2J passed, rich link markup became a link). Every command now
prints data-derived text through one function, `schema.terminal`; the last test keeps it the only one."""

from __future__ import annotations

import ast
import json
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, EXIT_REJECTED, app
from masprism_batch.schema import printable, terminal

runner = CliRunner(env={"COLUMNS": "400"})  # wide: a hostile name stays in one table cell line
ROOT = Path(__file__).resolve().parents[2]
# what a terminal acts on: a screen clear, a window title, an OSC 52 clipboard write, a one-byte CSI, a bidi
# override, zero-width and line-separator characters, and rich markup that would become a link
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x9b31m\u202eexe.txt\u2066\u200b\u2028[link=https://evil.example]click[/link]"
BIDI = "\u202eexe.txt\u2066\u200b\u2028[link=https://evil.example]click[/link]"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\u2066", "\u200b", "\u2028")


def _clean(out: str) -> None:
    assert not any(c in out for c in RAW), [c for c in RAW if c in out]
    assert "]8;" not in out  # no OSC 8 hyperlink


@pytest.mark.parametrize("ch", ["\x00", "\x1b", "\x7f", "\x85", "\x9b", "\u061c", "\u200e", "\u202a", "\u202e",
                                "\u2066", "\u2069", "\u200b", "\ufeff", "\u00ad", "\u2028", "\u2029", "\U000e0001"])
def test_terminal_shows_every_control_format_and_separator_character_as_its_escape(ch):
    got = terminal(f"a{ch}b")
    assert ch not in got and got == "a" + repr(ch)[1:-1] + "b", repr(got)


def test_terminal_escapes_markup_and_keeps_ordinary_text():
    assert terminal("[link=https://e.x]c[/link] [bold]") == "\\[link=https://e.x]c\\[/link] \\[bold]"
    text = "naïve 漢字 😀 tab\tnewline\n"
    assert terminal(text) == text and printable(text) is text and terminal(None) == "-"
    assert terminal("bad \udcff byte") == "bad \\xff byte"  # a file name that is not UTF-8


def _log(tid: str, n: int = 3) -> str:
    steps = [{"index": k, "agent": f"Agent{k % 2}", "content": f"step {k} text"} for k in range(n)]
    return json.dumps({"trace_id": tid, "source": "jsonl", "steps": steps, "run_status": "failed"}) + "\n"


def _taxonomy(path: Path) -> Path:
    path.write_text("".join(f'[[kind]]\nname = "{json.dumps(HOSTILE)[1:-1]} {i}"\nfamily = "{json.dumps(HOSTILE)[1:-1]}"\n'
                            f'description = "the agent did thing {i} wrong"\n' for i in range(3)), encoding="utf-8")
    return path


def test_every_command_shows_names_from_the_logs_escaped(tmp_path):
    logs, out = tmp_path / "logs", tmp_path / "OUT"
    logs.mkdir()
    named = logs / f"a{HOSTILE.replace('/', '_')}.jsonl"  # a file name with every hostile character
    # a trace id with a control is rejected at ingest (its own row, the file name in it); one with a bidi override,
    # zero-width and separator characters and markup is kept, and shown
    named.write_text(_log(f"t\x9b31m{HOSTILE}") + _log(f"t{BIDI}") + _log("plain-1"))
    with zipfile.ZipFile(logs / "z.zip", "w") as z:  # a zip member's name in errors/
        z.writestr(f"m{HOSTILE.replace('/', '_')}.json", "{not json")
    base = ["run", str(logs), "-o", str(out), "--model", "tiny-random", "--no-progress",
            "--taxonomy", str(_taxonomy(tmp_path / "kinds.toml"))]
    res = runner.invoke(app, base)
    assert res.exit_code == EXIT_REJECTED, res.output
    _clean(res.output)
    # the run's `inputs: ... changed` line names a changed file
    named.write_text(named.read_text() + _log("plain-2"))
    res = runner.invoke(app, base)
    assert res.exit_code == EXIT_REJECTED and "changed since the last run" in res.output, res.output
    _clean(res.output)
    assert "\\x1b[2J" in res.output and "\\u202e" in res.output  # the name is there, visibly escaped
    for args in (["show", str(out)], ["show", str(out), "--errors"], ["stats", str(out)]):
        res = runner.invoke(app, args)
        assert res.exit_code == EXIT_OK, (args, res.output)
        _clean(res.output)
        flat = "".join(res.output.split())  # table cells fold long names over lines
        if args[0] == "show" and len(args) == 2:  # the kept trace id
            assert "t\\u202eexe.txt\\u2066\\u200b\\u2028[link=https://evil.example]click[/link]" in flat, flat
        if args[-1] == "--errors":  # the zip member's and the file's names, the rejected id
            assert "z.zip/m\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\u202e" in flat and "/a\\x1b[2J" in flat, flat
        if args[0] == "stats":  # the taxonomy's kind and family names
            assert "Whatfailsmost" in flat and "\\x1b[2J\\x1b]0;pwned" in flat, flat
            assert "[link=https://evil.example]click[/link]" in flat


def test_the_terminal_function_is_the_only_escaper_of_the_commands():
    """No command module nor the stats tables escapes on its own (rich's `escape` or `printable` alone miss one
    half: markup, or the controls; `svg.visible` misses zero-width and separator characters)."""
    files = sorted((ROOT / "masprism_batch" / "cli").glob("*.py")) + [ROOT / "masprism_batch/analytics/stats_terminal.py"]
    own = []
    for p in files:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in ("rich.markup", "masprism_batch.schema"):
                own += [f"{p.name}: {node.module}.{a.name}" for a in node.names if a.name in ("escape", "printable")]
            if isinstance(node, ast.ImportFrom) and node.module and "svg" in node.module:
                own += [f"{p.name}: {node.module}.{a.name}" for a in node.names if a.name in ("visible", "escape")]
    # the one plain-text path: log lines (logging, not rich) take `printable`, the control half of `terminal`
    assert own == ["application.py: masprism_batch.schema.printable"], own
