"""The reference docs stay true to the code: docs/reference/keys/<group>.md lists every key of every config
file of a group with its default and its comment, and docs/configuration.md every group's page, regenerated from
conf/ here (UPDATE_DOCS=1 rewrites them)."""

from __future__ import annotations

import os
import re

import yaml

from tests.helpers import REPO

CONF = REPO / "conf"
DOC = REPO / "docs" / "configuration.md"
KEYS = REPO / "docs" / "reference" / "keys"  # a page per group
TOP_LEVEL = "top-level"
REGENERATE = "UPDATE_DOCS=1 pytest tests/unit/test_docs.py rewrites it"
BEGIN, END = "<!-- every key: generated from conf/ by tests/unit/test_docs.py -->", "<!-- end of every key -->"
KEY_LINE = re.compile(r"^(\s*)([\w\-@]+):(?:\s+(.*))?$")


def split_comment(rest: str) -> tuple[str, str]:
    """'5   # passes over the split' -> ('5', 'passes over the split'); a # inside quotes stays."""
    quote = None
    for index, char in enumerate(rest):
        if char in "'\"":
            quote = None if quote == char else (quote or char)
        elif char == "#" and quote is None and (index == 0 or rest[index - 1] == " "):
            return rest[:index].strip(), rest[index + 1:].strip()
    return rest.strip(), ""


def file_keys(path) -> tuple[str, list[tuple[str, str, str]]]:
    """A config file's header comment and its (dotted key, default, comment) rows."""
    header, rows, stack, in_header, block = [], [], [], True, None  # block: the indent of a `key: |` text
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if block is not None:
            if not stripped or len(line) - len(line.lstrip()) > block:
                continue
            block = None
        if in_header and stripped.startswith("#"):
            if not stripped.startswith("# @package"):
                header.append(stripped.lstrip("#").strip())
            continue
        in_header = False
        match = KEY_LINE.match(line)
        if not match or stripped.startswith(("#", "-")):
            continue
        indent, key, rest = len(match.group(1)), match.group(2), match.group(3) or ""
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if key == "defaults" and indent == 0:
            stack.append((indent, key))
            continue
        if stack and stack[0][1] == "defaults":
            continue
        value, comment = split_comment(rest)
        stack.append((indent, key))
        if value in ("|", ">", "|-", ">-"):
            block = indent
        if value:
            rows.append((".".join(k for _, k in stack), value, comment))
    return " ".join(header), rows


def cell(text: str, code: bool = False) -> str:
    """A table cell: a `|` inside is escaped; a block of text (`|`, `>`) is named, not shown."""
    if code and text in ("|", ">", "|-", ">-"):
        return "(a block of text: see the file)"
    text = text.replace("|", "\\|")
    return f"`{text}`" if code else text


def outside_code(text: str, change) -> str:
    """`change` applied to the text between code spans (`...`), the spans kept as they are."""
    parts = text.split("`")
    return "`".join(change(part) if index % 2 == 0 else part for index, part in enumerate(parts))


def group_of(path) -> str:
    """The page a config file's keys are on: its group's first folder (data/pipeline -> data,
    hydra/launcher -> hydra); config.yaml's on the top level's."""
    relative = path.relative_to(CONF)
    return TOP_LEVEL if path.name == "config.yaml" else relative.parts[0]


def config_files() -> dict[str, list]:
    """Every config file of every group (Hydra's launchers included), by the page that lists it."""
    files = sorted(p for p in CONF.rglob("*.yaml") if p.name != "config.yaml")
    pages: dict[str, list] = {}
    for path in [CONF / "config.yaml", *files]:
        pages.setdefault(group_of(path), []).append(path)
    return pages


def file_tables(path) -> list[str]:
    """One config file: its title, its header comment and a table of its keys."""
    relative = path.relative_to(CONF).with_suffix("")
    group, option = str(relative.parent), relative.name
    title = "config.yaml (top level)" if path.name == "config.yaml" else f"{group}={option}"
    header, rows = file_keys(path)
    prefix = "" if path.name == "config.yaml" or group.startswith(("hydra", "experiment", "hparams_search")) \
        else group.split("/")[0] + "."
    out = [f"## `{title}`", ""]
    if header:  # `[key=value] [key=value]` is a command's optional part, not a Markdown link reference
        out += [outside_code(header, lambda text: text.replace("[", "\\[").replace("]", "\\]")), ""]
    if rows:
        out += ["| key | default | what it does |", "|---|---|---|"]
        out += [f"| `{prefix}{key}` | {cell(value, code=True)} | {cell(comment)} |" for key, value, comment in rows]
        out.append("")
    return out


def group_page(group: str, paths: list) -> str:
    """A group's page of the reference: every key of every option of it, generated whole."""
    name = "the top level" if group == TOP_LEVEL else f"`{group}`"
    options = "config.yaml: the keys outside any group" if group == TOP_LEVEL else \
        f"each option of `{group}` (`conf/{group}/`)"
    out = [f"# Every key of {name}", "", f"<!-- generated from conf/ by tests/unit/test_docs.py: {REGENERATE} -->",
           "", f"The keys of {options}, their defaults and what they do, as the files' own comments say. "
           "[Configuration](../../configuration.md) has every group.", ""]
    for path in paths:
        out += file_tables(path)
    return "\n".join(out).rstrip("\n") + "\n"


def index() -> str:
    """configuration.md's list of the group pages, each with its options."""
    out = [BEGIN, ""]
    for group, paths in config_files().items():
        options = ", ".join(f"`{path.relative_to(CONF).parent}={path.stem}`" for path in paths
                            if path.name != "config.yaml")
        name = "the top level (`config.yaml`)" if group == TOP_LEVEL else f"`{group}`"
        out.append(f"- [{name}](reference/keys/{group}.md)" + (f": {options}" if options else ""))
    out += ["", END]
    return "\n".join(out)


def test_the_configuration_reference_lists_every_key_as_conf_has_it():
    """docs/configuration.md lists a page per group; each page, docs/reference/keys/<group>.md, is generated
    from conf/ whole, and no page is left of a group conf/ no longer has."""
    pages = {group: group_page(group, paths) for group, paths in config_files().items()}
    text = DOC.read_text()
    if os.environ.get("UPDATE_DOCS") == "1":
        head, tail = text.split(BEGIN)[0], text.split(END)[1]
        DOC.write_text(head + index() + tail)
        KEYS.mkdir(exist_ok=True)
        for stale in set(KEYS.glob("*.md")) - {KEYS / f"{group}.md" for group in pages}:
            stale.unlink()
        for group, page in pages.items():
            (KEYS / f"{group}.md").write_text(page)
        text = DOC.read_text()
    assert index() in text, f"docs/configuration.md is stale: {REGENERATE}"
    assert {p.stem for p in KEYS.glob("*.md")} == set(pages), f"a group's page is missing or stale: {REGENERATE}"
    for group, page in pages.items():
        assert (KEYS / f"{group}.md").read_text() == page, f"docs/reference/keys/{group}.md is stale: {REGENERATE}"
    trainer = (KEYS / "trainer.md").read_text()
    assert "| `trainer.epochs` | `5` | passes over the training split (>= 1) |" in trainer  # the parse works
    assert "| `data.cache_budget` | `auto` |" in (KEYS / "data.md").read_text()


def test_the_readme_links_every_reference_doc_and_each_exists():
    readme = (REPO / "README.md").read_text()
    for doc in ("docs/configuration.md", "docs/troubleshooting.md", "docs/faults.md", "ARCHITECTURE.md",
                "bench/README.md"):
        assert f"]({doc})" in readme, doc
        assert (REPO / doc).is_file(), doc


def test_the_readme_describes_the_search_presets_space_as_its_file_has_it():
    """Each key of conf/hparams_search/optuna.yaml's space, with its distribution written as the file
    writes it, is on the search page; and the page names no key the space lacks."""
    import yaml

    space = yaml.safe_load((CONF / "hparams_search" / "optuna.yaml").read_text())["hydra"]["sweeper"]["params"]
    page = " ".join((REPO / "docs" / "how-to" / "search.md").read_text().split())  # its lines joined, as it reads
    section = page[page.index("- **The space** is"):page.index("- **Samplers**")]
    for key, distribution in space.items():
        assert f"`{key}` `{distribution}`" in section, (key, distribution)
    described = set(re.findall(r"`((?:model|optimizer|trainer)\.\w+)` `(?:choice|interval|tag|range)\(", section))
    assert described == set(space), described ^ set(space)


def test_help_and_readme_quote_the_same_measured_time_for_the_quickstart():
    """The figure comes from bench/README.md's measurement (startup.py's section); the two places a new
    user reads it must agree, and say on what."""
    help_text = (CONF / "hydra" / "help" / "tfx_hydra.yaml").read_text()
    readme = (REPO / "README.md").read_text()
    measured = re.search(r'the "(~\d+ s on a [\w-]+ CPU)" that `--help` and the README quote',
                         " ".join((REPO / "bench" / "README.md").read_text().split())).group(1)
    assert measured in help_text and measured in readme, measured


def test_help_names_each_groups_page_on_the_site_and_each_page_exists():
    """`--help` sends a user from a group to its page: every group of conf/ is named, every page named is there."""
    template = yaml.safe_load((CONF / "hydra" / "help" / "tfx_hydra.yaml").read_text())["template"]
    block = template[template.index("Each group's page on the docs site"):template.index("Hydra's groups")]
    named = dict(re.findall(r"([\w, ]+?): ([\w/-]+\.md)", block))
    groups = {group.strip() for names in named for group in names.split(",")}
    assert groups >= {p.name for p in CONF.iterdir() if p.is_dir() and p.name not in ("hydra", "__pycache__")}
    for page in named.values():
        assert (REPO / "docs" / page).is_file(), page


COMMANDS = [  # (what a user types, how the test runs it): each command's page section is its own --help
    ("python -m tfx_hydra --help", ["-m", "tfx_hydra", "--help"]),
    ("tfx-hydra init --help", ["-m", "tfx_hydra", "init", "--help"]),
    ("tfx-hydra promote --help", ["-m", "tfx_hydra", "promote", "--help"]),
    ("python -m tfx_hydra.reproduce --help", ["-m", "tfx_hydra.reproduce", "--help"]),
    ("python -m tfx_hydra.sync --help", ["-m", "tfx_hydra.sync", "--help"]),
    ("python -m tfx_hydra.data.to_tfrecord --help", ["-m", "tfx_hydra.data.to_tfrecord", "--help"]),
]
COMMANDS_PAGE = REPO / "docs" / "reference" / "commands.md"


def commands_page() -> str:
    """docs/reference/commands.md as the commands print their help today (80 columns, as a terminal's default)."""
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": "80", "TF_CPP_MIN_LOG_LEVEL": "3"}
    sections = []
    for typed, args in COMMANDS:
        done = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        sections.append(f"## `{typed.removesuffix(' --help')}`\n\n```text\n{done.stdout.rstrip()}\n```\n")
    return ("# Commands\n\nEvery command and flag, as each command's own `--help` prints it (generated: "
            "`UPDATE_DOCS=1 pytest tests/unit/test_docs.py` writes this page again).\n\n" + "\n".join(sections))


def test_the_commands_page_is_each_commands_own_help():
    generated = commands_page()
    if os.environ.get("UPDATE_DOCS") == "1":
        COMMANDS_PAGE.write_text(generated)
    assert COMMANDS_PAGE.read_text() == generated, "docs/reference/commands.md is stale: UPDATE_DOCS=1 pytest " \
        "tests/unit/test_docs.py"
    assert "--label LABEL" in generated and "--shards" in generated and "--dry-run" in generated
