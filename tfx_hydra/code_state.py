"""code_state: which code a run ran -- tfx_hydra's and the user's -- so a re-run can say what changed.

Every `_target_` in a run's config names code: ours, Keras', or the user's (`myproj.models.tiny`).
For each top-level package named there, and for tfx_hydra itself, a run records where it came
from: the git commit of the work tree holding it (with the uncommitted diff, as an artifact), or
the installed distribution's version when it is not in a git work tree. Reproduce compares the
same description today and lists each change as drift.

Found without importing the packages (importlib's specs of the top-level names only): records
run before TensorFlow is imported, and a user's package imports it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from importlib import metadata

from omegaconf import DictConfig, OmegaConf

from tfx_hydra.settings.compose import targets
from tfx_hydra.settings.project import is_users, package_location

TAG_PREFIX = "code."


@dataclass(frozen=True)
class CodeState:
    """Where one top-level package's code came from."""

    package: str
    folder: str                 # the folder holding the package
    commit: str | None = None   # its git work tree's commit, None outside git
    dirty: bool = False
    diff: str = ""              # the uncommitted change, new files included (environment.git_state)
    version: str | None = None  # the installed distribution's version, outside git
    left_out: tuple[str, ...] = ()  # untracked files too large for the diff

    @property
    def described(self) -> str:
        """'git 1a2b3c4d5e6f (uncommitted changes) in /home/me/myproj', or 'myproj 0.3.1 (installed)'."""
        if self.commit:
            return f"git {self.commit[:12]}{' (uncommitted changes)' if self.dirty else ''} in {self.folder}"
        if self.version:
            return f"{self.package} {self.version} (installed in {self.folder})"
        return f"files in {self.folder} (not in git, not installed: no version to record)"


def target_packages(cfg: DictConfig) -> list[str]:
    """tfx_hydra, then the user's top-level packages the config's `_target_`s name (libraries are
    recorded through the package list instead)."""
    users = {target.split(".", 1)[0] for _, target in targets(OmegaConf.to_container(cfg, resolve=False))
             if is_users(target)}
    return ["tfx_hydra", *sorted(users)]


def code_states(packages: list[str]) -> list[CodeState]:
    """Each package's origin; a name that cannot be found is left to the build step to report."""
    from tfx_hydra.environment import git_state

    states = []
    for package in packages:
        folder = _package_folder(package)
        if folder is None:
            continue
        installed = {"site-packages", "dist-packages"} & set(os.path.normpath(folder).split(os.sep))
        git = git_state(folder) if not installed else None  # an environment may live in a git tree (pyenv's)
        if git is not None and git.commit:
            states.append(CodeState(package, _work_tree(folder), git.commit, git.dirty, git.diff,
                                    left_out=git.left_out))
        else:
            states.append(CodeState(package, folder, version=_version(package)))
    return states


def code_tags(states: list[CodeState]) -> dict[str, str]:
    """`code.<package>`: what each state describes (reproduce compares these)."""
    return {f"{TAG_PREFIX}{state.package}": state.described for state in states}


def _package_folder(package: str) -> str | None:
    """The folder holding the package (its parent): where its git work tree or installation is."""
    location = package_location(package)
    return os.path.dirname(location) if location else None


def _work_tree(folder: str) -> str:
    from tfx_hydra.environment import git_toplevel

    return git_toplevel(folder) or folder


def _version(package: str) -> str | None:
    for distribution in _distributions_by_package().get(package, []):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def _distributions_by_package() -> dict[str, list[str]]:
    """Which installed distributions hold each top-level package. Read once per process: it opens every
    distribution's file list (~0.14 s here), which a search's in-process trials would each pay again
    for an installed tfx_hydra (a wheel), while what a process has installed does not change under it."""
    return metadata.packages_distributions()
