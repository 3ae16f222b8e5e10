"""Which code a run ran: the packages its `_target_`s name besides the libraries, each described by its
git commit (and uncommitted change) or installed version; and the command tag that re-runs it with
Hydra's own overrides."""

from __future__ import annotations

import subprocess
from importlib import metadata

from omegaconf import OmegaConf

from tfx_hydra.code_state import code_states, code_tags, target_packages
from tfx_hydra.reproduce.source import rerun_hydra_overrides
from tfx_hydra.settings.compose import single_run_hydra_overrides


def git(folder, *args):
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=folder, check=True,
                   capture_output=True)


def test_the_packages_a_config_names_are_ours_first_then_the_users():
    cfg = OmegaConf.create({
        "model": {"_target_": "acme.models.tiny", "layers": [{"_target_": "zeta.layers.Scale"}]},
        "data": {"_target_": "tfx_hydra.data.digits"}, "optimizer": {"_target_": "keras.optimizers.Adam"},
        "trainer": {"callbacks": [{"_target_": "acme.callbacks.Log"}]},
        "hydra": {"callbacks": {"x": {"_target_": "hydra_side.Callback"}}}})
    assert target_packages(cfg) == ["tfx_hydra", "acme", "zeta"]


def test_a_package_in_git_is_its_commit_and_its_uncommitted_change(tmp_path, monkeypatch):
    (tmp_path / "codepkg_under_test").mkdir()
    (tmp_path / "codepkg_under_test" / "__init__.py").write_text("VALUE = 1\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "one")
    monkeypatch.syspath_prepend(str(tmp_path))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    (state,) = code_states(["codepkg_under_test"])
    assert (state.commit, state.dirty, state.folder) == (commit, False, str(tmp_path))
    assert code_tags([state]) == {"code.codepkg_under_test": f"git {commit[:12]} in {tmp_path}"}
    (tmp_path / "codepkg_under_test" / "__init__.py").write_text("VALUE = 2\n")
    (state,) = code_states(["codepkg_under_test"])
    assert state.dirty and "+VALUE = 2" in state.diff
    assert state.described == f"git {commit[:12]} (uncommitted changes) in {tmp_path}"


def test_an_installed_package_is_its_version_and_a_loose_folder_says_it_has_none(tmp_path, monkeypatch):
    (rich,) = code_states(["rich"])
    assert rich.described.startswith(f"rich {metadata.version('rich')} (installed in ")
    (tmp_path / "loose").mkdir()
    (tmp_path / "loose" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    (loose,) = code_states(["loose"])
    assert loose.described == f"files in {tmp_path} (not in git, not installed: no version to record)"
    assert code_states(["no_such_package_anywhere"]) == []  # the build step says it cannot import it


def test_the_installed_distributions_are_read_once_per_process(monkeypatch):
    """~0.14 s each time: an installed tfx_hydra's search paid it every trial. A spy that counts the reads
    and hands back the real answer (not a fake: the versions below are the installed ones)."""
    from tfx_hydra import code_state

    reads, real = [], metadata.packages_distributions

    def counted():
        reads.append(1)
        return real()

    code_state._distributions_by_package.cache_clear()
    monkeypatch.setattr(code_state.metadata, "packages_distributions", counted)
    try:
        first, again = code_states(["rich", "omegaconf"]), code_states(["rich", "omegaconf"])
    finally:
        code_state._distributions_by_package.cache_clear()  # the next test reads the real one afresh
    assert [s.version for s in first] == [s.version for s in again] == [metadata.version("rich"),
                                                                       metadata.version("omegaconf")]
    assert len(reads) == 1


def test_a_single_runs_command_keeps_hydras_overrides_but_a_sweeps_own():
    given = ["hydra.searchpath=[file:///p/conf]", "hydra.run.dir=out/x", "hydra.mode=MULTIRUN",
             "hydra/launcher=parallel", "hydra.launcher.n_jobs=2", "hydra.sweep.dir=multirun/x",
             "hydra/sweeper=hparams_search", "hydra.sweeper.n_trials=3", "hydra.job.chdir=false"]
    assert single_run_hydra_overrides(given) == ["hydra.searchpath=[file:///p/conf]", "hydra.run.dir=out/x",
                                                 "hydra.job.chdir=false"]
    recorded = {"hydra": {"overrides": {"hydra": given, "task": ["model=tiny"]}}}
    assert rerun_hydra_overrides(recorded) == ["hydra.searchpath=[file:///p/conf]", "hydra.job.chdir=false"]
    assert rerun_hydra_overrides({}) == []
