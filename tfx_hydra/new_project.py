"""`tfx-hydra init PATH`: a working minimal project of the user's own, ready to edit.

It writes, from tfx_hydra/project_template/: a pyproject.toml whose [tool.tfx_hydra] table makes
tfx_hydra find the project (project.py), a package with a model builder (with a layer of its own)
and a data source (its own tf.data pipelines), their options in conf/ (`model=tiny`,
`data=my_data`, `experiment=<package>`), a README, a smoke test that runs `debug=fast` on them, and a
.gitignore for what runs write (the store, outputs/): a run records the project's code as its git state.
Nothing is overwritten: an existing file is a mistake said before anything is written.
"""

from __future__ import annotations

import argparse
import keyword
import logging
import os
import re
import string
import sys
from pathlib import Path

from tfx_hydra.console import use_terminal
from tfx_hydra.errors import ConfigError

log = logging.getLogger("tfx_hydra.init")
TEMPLATE = Path(__file__).resolve().parent / "project_template"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tfx-hydra init",
                                     description="Write a minimal tfx_hydra project of your own at PATH.")
    parser.add_argument("path", help="the project's folder (created; it may exist if it is empty)")
    parser.add_argument("--package", default=None,
                        help="the Python package's name (default: the folder's name, as an identifier)")
    args = parser.parse_args(argv)
    use_terminal()
    try:
        written = init_project(args.path, args.package)
    except ConfigError as err:
        print(str(err), file=sys.stderr)
        return 1
    root = os.path.abspath(args.path)
    log.info(f"init: wrote {len(written)} files into {root}")
    log.info(f"next: cd {root} && tfx-hydra experiment={package_name(root, args.package)} debug=fast")
    return 0


def init_project(path: str, package: str | None = None) -> list[Path]:
    """Write the template into `path`; the files written."""
    root = Path(path).resolve()
    name = package_name(str(root), package)
    files = {target_of(template.relative_to(TEMPLATE), name): template for template in sorted(TEMPLATE.rglob("*.tmpl"))}
    existing = [str(root / relative) for relative in files if (root / relative).exists()]
    if existing:
        raise ConfigError(f"{existing[0]} exists already: init writes a new project and overwrites nothing.",
                          fix="pick a new or empty folder: tfx-hydra init PATH")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"tfx-hydra init {path}: the folder {err.filename or root} cannot be created "
                          f"({err.strerror}).", fix="tfx-hydra init <a folder you can write>, e.g. "
                          "~/projects/my_project") from None
    if not os.access(root, os.W_OK):
        raise ConfigError(f"tfx-hydra init {path}: the folder {root} is not writable.",
                          fix="tfx-hydra init <a folder you can write>, e.g. ~/projects/my_project")
    written = []
    for relative, template in files.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(string.Template(template.read_text()).safe_substitute(package=name))
        written.append(target)
    return written


def package_name(root: str, given: str | None) -> str:
    """The package's name: `given`, or the folder's name made a Python identifier ('my-proj' -> 'my_proj')."""
    name = given or re.sub(r"\W", "_", os.path.basename(os.path.normpath(root))).lower()
    if not name.isidentifier() or keyword.iskeyword(name) or name in ("tfx_hydra", "keras", "tensorflow"):
        raise ConfigError(f"'{name}' cannot be the project's package name (a Python identifier of its own).",
                          fix="tfx-hydra init PATH --package my_project")
    return name


def target_of(relative: Path, package: str) -> Path:
    """Where a template lands: without .tmpl, `package/` as the package, the experiment by its name,
    `gitignore` as .gitignore (a hidden file would be left out of the wheel's package data)."""
    parts = [package if part == "package" else part for part in relative.with_suffix("").parts]
    if parts == ["gitignore"]:
        parts = [".gitignore"]
    if parts[:2] == ["conf", "experiment"]:
        parts[-1] = f"{package}.yaml"
    return Path(*parts)
