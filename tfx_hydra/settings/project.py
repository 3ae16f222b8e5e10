"""project: a user's own project, found from where they work, as Hydra users find a config folder.

A project declares itself once, in the `pyproject.toml` every Python project has:

    [tool.tfx_hydra]
    config_dir = "conf"          # its options: conf/model/tiny.yaml -> model=tiny
    python_path = ["."]          # folders its `_target_`s import from (default: the project's root)

`find_project` looks for that table in the working directory and its parents (as git finds its
repository), or in the folder `$TFX_HYDRA_PROJECT` names (reproduce sets it to the folder a run
recorded, so it works from anywhere). The Hydra plugin `hydra_plugins/tfx_hydra_project` appends the
config folder to tfx_hydra's config search path, after ours: the project's options join our groups
(`model=tiny`), inherit ours (`defaults: [mlp]`) and are listed by `--help`; ours keep their names.

Only the standard library and errors.py are imported here: Hydra imports the plugin for `--help` too.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tfx_hydra.errors import ConfigError

PROJECT_FILE = "pyproject.toml"
TABLE = "tool.tfx_hydra"
ENV_VAR = "TFX_HYDRA_PROJECT"  # a project folder named explicitly: reproduce, a job started elsewhere
# Top-level packages whose code is not the user's: ours, the libraries a config names, a script's __main__
NOT_USERS = frozenset({"tfx_hydra", "keras", "tensorflow", "tf_keras", "tensorflow_hub", "builtins", "functools",
                       "hydra", "omegaconf", "__main__",
                       "keras_hub", "tensorflow_text"})  # libraries an MLflow model's requirements pin instead


@dataclass(frozen=True)
class Project:
    """A user's project: its root folder, its config folder, the folders its code imports from."""

    root: str
    config_dir: str
    python_path: tuple[str, ...]
    name: str = ""  # its pyproject.toml's [project] name, else its folder's: the MLflow experiment its runs go to

    @property
    def search_path(self) -> str:
        """The config folder as Hydra's search path spells it."""
        return f"file://{self.config_dir}"


def find_project(start: str | None = None) -> Project | None:
    """The project `$TFX_HYDRA_PROJECT` names, else the nearest folder from `start` (the working
    directory) upwards whose pyproject.toml has a [tool.tfx_hydra] table; None outside a project."""
    named = os.environ.get(ENV_VAR)
    if named:
        project_file = os.path.join(os.path.abspath(named), PROJECT_FILE)
        settings = _read_table(project_file)
        if settings is None:
            raise ConfigError(f"{ENV_VAR}={named} is not a tfx_hydra project: {project_file} has no "
                              f"[{TABLE}] table.",
                              fix=f"point {ENV_VAR} at the folder holding the project's pyproject.toml, or unset it")
        return _project(os.path.dirname(project_file), settings)
    folder = Path(start or os.getcwd()).resolve()
    for candidate in (folder, *folder.parents):
        settings = _read_table(str(candidate / PROJECT_FILE))
        if settings is not None:
            return _project(str(candidate), settings)
    return None


def activate(project: Project | None) -> None:
    """Put the project's code folders first on sys.path, so the `_target_`s its configs name import,
    in this process and (through PYTHONPATH) in every process it starts: sweep workers, the re-run."""
    if project is None:
        return
    for folder in reversed(project.python_path):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    missing = [p for p in project.python_path if p not in inherited]
    if missing:
        os.environ["PYTHONPATH"] = os.pathsep.join([*missing, *inherited])


def default_experiment() -> str:
    """The MLflow experiment a run goes to when tracking.experiment is unset: its project's name (runs of two
    projects do not share one list), else `tfx_hydra`."""
    try:
        project = find_project()
    except ConfigError:  # a broken project is said where it is used; its runs' experiment is not the place
        project = None
    return project.name if project is not None and project.name else "tfx_hydra"


def is_users(name: str) -> bool:
    """A dotted name (a `_target_`, a class's module) in the user's code, not ours or a library's."""
    return bool(name) and name.split(".", 1)[0] not in NOT_USERS


def package_location(package: str) -> str | None:
    """The folder of a top-level package (a single module's file), found without importing it; None if
    Python cannot find it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return os.path.abspath(list(spec.submodule_search_locations)[0])
    return os.path.abspath(spec.origin) if spec.origin else None


def _project(root: str, settings: dict) -> Project:
    """The table's settings checked: the folders it names exist."""
    where = os.path.join(root, PROJECT_FILE)
    config_dir = settings.get("config_dir", "conf")
    if not isinstance(config_dir, str):
        raise ConfigError(f"config_dir={config_dir!r} in {where} [{TABLE}] is not a folder name.",
                          fix='config_dir = "conf"')
    config_path = os.path.normpath(os.path.join(root, config_dir))
    if not os.path.isdir(config_path):
        raise ConfigError(f"config_dir = \"{config_dir}\" in {where} [{TABLE}]: {config_path} does not exist.",
                          fix=f"create {config_path} (with conf/model/*.yaml, ...), or set config_dir to the "
                          "folder that holds the project's options")
    python_path = settings.get("python_path", ["."])
    if isinstance(python_path, str) or not all(isinstance(p, str) for p in python_path):
        raise ConfigError(f"python_path={python_path!r} in {where} [{TABLE}] is not a list of folders.",
                          fix='python_path = ["."]   (or ["src"] for a src layout)')
    folders = tuple(os.path.normpath(os.path.join(root, p)) for p in python_path)
    for folder in folders:
        if not os.path.isdir(folder):
            raise ConfigError(f"python_path in {where} [{TABLE}] names {folder}, which does not exist.",
                              fix="list the folders the project's packages are in (relative to the project)")
    return Project(root=root, config_dir=config_path, python_path=folders,
                   name=str(settings.get("__project_name__") or os.path.basename(os.path.normpath(root))))


def _read_table(path: str) -> dict | None:
    """The [tool.tfx_hydra] table of a pyproject.toml; None when the file or the table is absent."""
    if not os.path.isfile(path):
        return None
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10 (tomllib arrived in 3.11)
        import tomli as tomllib
    try:
        with open(path, "rb") as file:
            text = file.read()
    except OSError:
        return None
    try:
        data = tomllib.loads(text.decode("utf-8", errors="replace"))
    except tomllib.TOMLDecodeError as err:
        if b"tfx_hydra" not in text:
            return None  # someone else's broken pyproject.toml is not ours to judge
        raise ConfigError(f"{path} cannot be read: {err}.", fix="fix the TOML syntax of the file") from None
    table = data.get("tool", {}).get("tfx_hydra")
    if not isinstance(table, dict):
        return None
    name = data.get("project", {}).get("name") if isinstance(data.get("project"), dict) else None
    return {**table, "__project_name__": name} if name else table
