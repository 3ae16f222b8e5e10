"""The example outputs of README.md and the docs site's pages come from the code as it is: each block marked
`<!-- example: COMMAND -->` is what COMMAND prints, checked here by running it for real; and the README is the
front door (short, linking the site), the site's navigation names every page there is.

Run ids, fingerprints, timings, metric values and the launch folder differ from run to run and
machine to machine; they are masked on both sides, and so are table borders (their width follows
the paths). Every word the code prints must match. `...` in a block skips lines.
UPDATE_README=1 rewrites the blocks from real runs, launched in README_LAUNCH (created for it), with
the whole output: trim a long one with `...` afterwards."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, cli_env
from tests.helpers.in_process import run_cli_in_process

pytestmark = pytest.mark.slow

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").rglob("*.md"))]  # where an example block may be
README_LAUNCH = Path("/home/you/experiments")  # the folder the README's examples show
EXAMPLE = re.compile(r"(<!-- example: (?P<command>[^\n]+?) -->\n```text\n)(?P<shown>.*?)(```)", re.S)
MASKS = [(re.compile(r"\b[0-9a-f]{32}\b"), "<run id>"), (re.compile(r"\b[0-9a-f]{16}\b"), "<sha>"),
         (re.compile(r"\d{4}-\d{2}-\d{2}/\d{2}-\d{2}-\d{2}-\d{6}"), "<date>/<time>"),
         (re.compile(r"\[\d{4}-\d{2}-\d{2} [\d:,]+\]"), "[<time>]"),
         (re.compile(r"\d[\d,]*(\.\d+)?"), "<n>"), (re.compile(r"[─│┌┐└┘├┤┬┴┼]"), " "), (re.compile(r"\s+"), " ")]


def normalize(text: str, launch: Path) -> list[str]:
    lines = []
    for line in text.replace(str(launch), "<launch>").splitlines():
        for pattern, mask in MASKS:
            line = pattern.sub(mask, line)
        if line.strip():
            lines.append(line.strip())
    return lines


def shows(expected: list[str], actual: list[str]) -> bool:
    """Each run of README lines between `...` appears in the output, contiguous, in order."""
    chunks, chunk = [], []
    for line in expected:
        if line == "...":
            chunks.append(chunk)
            chunk = []
        else:
            chunk.append(line)
    chunks.append(chunk)
    position = 0
    for chunk in (c for c in chunks if c):
        found = next((i for i in range(position, len(actual) - len(chunk) + 1)
                      if actual[i:i + len(chunk)] == chunk), None)
        if found is None:
            return False
        position = found + len(chunk)
    return True


def run(command: str, launch: Path) -> str:
    """What the terminal shows for `command` (stdout, then stderr). The quickstart runs in a fresh process,
    as a new user's shell runs it, every line checked; the others in this process, where TensorFlow
    already started (its thread settings can no longer apply, which a run says at its start: the sweep's
    block skips those lines with `...`, the error's run never gets there)."""
    args = shlex.split(command)
    assert args[:3] == ["python", "-m", "tfx_hydra"], command
    if command == "python -m tfx_hydra":
        env = cli_env()
        env.pop("TF_CPP_MIN_LOG_LEVEL")
        done = subprocess.run([sys.executable, *args[1:]], cwd=launch, env=env, capture_output=True, text=True,
                              timeout=600)
    else:
        multirun = args[3:4] == ["-m"]
        done = run_cli_in_process(args[4:] if multirun else args[3:], cwd=launch, multirun=multirun)
    return done.stdout + done.stderr


def test_every_example_output_in_the_readme_and_the_docs_is_what_the_code_prints(tmp_path):
    found = {page: list(EXAMPLE.finditer(page.read_text())) for page in PAGES}
    assert {page.relative_to(REPO).as_posix(): [m["command"] for m in matches] for page, matches in found.items()
            if matches} == {"README.md": ["python -m tfx_hydra"],
                            "docs/getting-started.md": ["python -m tfx_hydra -m optimizer.learning_rate=0.001,0.01"],
                            "docs/how-to/when-something-is-wrong.md": ["python -m tfx_hydra data=imagenet"]}
    if os.environ.get("UPDATE_README") == "1":
        for page, matches in found.items():
            text = page.read_text()
            for match in reversed(matches):
                shutil.rmtree(README_LAUNCH, ignore_errors=True)
                README_LAUNCH.mkdir(parents=True)
                shown = run(match["command"], README_LAUNCH)
                text = text[:match.start("shown")] + shown.rstrip("\n") + "\n" + text[match.end("shown"):]
            page.write_text(text)
        shutil.rmtree(README_LAUNCH, ignore_errors=True)
        found = {page: list(EXAMPLE.finditer(page.read_text())) for page in PAGES}
    examples = [match for matches in found.values() for match in matches]
    for number, match in enumerate(examples):
        launch = tmp_path / str(number)
        launch.mkdir()
        actual = normalize(run(match["command"], launch), launch)
        expected = normalize(match["shown"], README_LAUNCH)
        assert shows(expected, actual), f"README's output of `{match['command']}` is stale (UPDATE_README=1 " \
            f"rewrites it):\n" + "\n".join(expected) + "\n--- the code prints:\n" + "\n".join(actual)


def test_the_readme_is_the_front_door_and_every_link_leads_somewhere():
    """What tfx_hydra is, install, the Quickstart and its output, the headline command, what it does (each line
    a link to its page), the documentation and the tests: at most ~200 lines. Every page the README links
    exists; the rest of what it used to hold is on the site."""
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == ["## Install", "## Quickstart", "## The headline command", "## What it does",
                        "## Documentation", "## Development"]
    assert "| you typed | you get |" not in text and "## Faults" not in text  # the long references are on the site
    linked = re.findall(r"\]\(((?:docs/)?[\w/.-]+\.md)(?:#[\w-]+)?\)", text)
    assert len(linked) >= 25
    for target in linked:
        assert (REPO / target).is_file(), target


def test_the_sites_navigation_names_every_page_and_only_pages_there_are():
    import yaml

    def pages(nav) -> list[str]:
        return [p for entry in nav for value in entry.values()
                for p in (pages(value) if isinstance(value, list) else [value])]

    config = yaml.safe_load((REPO / "mkdocs.yml").read_text().replace("!!python", "#").replace("!relative ", ""))
    named = pages(config["nav"])
    there = sorted(p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md"))
    assert sorted(named) == there
    assert len(named) == len(set(named))
