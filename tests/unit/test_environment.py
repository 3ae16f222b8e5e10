"""The environment record: real values from this machine and a real git work tree."""

from __future__ import annotations

import platform
import subprocess

import tensorflow as tf

import tfx_hydra
from tfx_hydra.environment import collect_environment, git_state, installed_packages
from tfx_hydra.hardware import GpuDetails, HardwareInfo


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def test_git_commit_dirty_flag_and_diff(tmp_path):
    git(tmp_path, "init", "-q")
    git(tmp_path, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x")
    (tmp_path / "train.py").write_text("lr = 0.1\n")
    git(tmp_path, "add", "train.py")
    git(tmp_path, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "add")
    clean = git_state(str(tmp_path))
    assert clean.commit == git(tmp_path, "rev-parse", "HEAD").strip()
    assert clean.dirty is False and clean.diff == ""
    (tmp_path / "train.py").write_text("lr = 0.2\n")
    dirty = git_state(str(tmp_path))
    assert dirty.dirty is True and "+lr = 0.2" in dirty.diff


def test_untracked_files_make_the_tree_dirty_and_their_text_is_in_a_diff_that_restores_them(tmp_path):
    """A new file git does not track yet (a model file, a layer) is part of what ran: the tree is dirty and the
    diff creates the file, so `git checkout <commit> && git apply <diff>` restores the tree; .gitignore'd files,
    tfx_hydra's own outputs (the store while open, with SQLite's side files) and files over 1 MiB (named instead)
    stay out."""
    repo, copy = tmp_path / "repo", tmp_path / "restored"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("data/\n")
    git(repo, "add", ".gitignore")
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "x")
    commit = git(repo, "rev-parse", "HEAD").strip()
    for ignored in ("data/table.csv", "mlflow.db", "mlflow.db-wal", "outputs/2026-12-04/12-00-00/tfx_hydra.log",
                    "mlruns/1/meta.yaml"):
        (repo / ignored).parent.mkdir(parents=True, exist_ok=True)
        (repo / ignored).write_text("not code\n")
    assert git_state(str(repo)).dirty is False  # ignored, or a run's own outputs: not the code's state
    (repo / "acme" / "models").mkdir(parents=True)
    (repo / "acme" / "models" / "wide.py").write_text("def wide(units=512):\n    return units\n")
    (repo / "weights.bin").write_bytes(b"\0" * (2 << 20))
    state = git_state(str(repo / "acme"))  # from a folder inside the tree: the whole tree's state
    assert state.dirty is True and state.left_out == ("weights.bin",)
    assert "+def wide(units=512):" in state.diff and "weights.bin" not in state.diff

    git(tmp_path, "clone", "-q", str(repo), str(copy))
    git(copy, "checkout", "-q", commit)
    (copy / "run.diff").write_text(state.diff)
    git(copy, "apply", "run.diff")
    assert (copy / "acme" / "models" / "wide.py").read_text() == "def wide(units=512):\n    return units\n"


def test_outside_a_work_tree_there_is_no_commit(tmp_path):
    assert git_state(str(tmp_path)).commit is None


def test_versions_and_build_info_are_the_real_ones():
    tags = collect_environment(HardwareInfo(profile="cpu"))
    assert tags["env.tensorflow"] == tf.__version__
    assert tags["env.tfx_hydra"] == tfx_hydra.__version__  # the code that runs: one source with --version
    assert tags["env.python"] == platform.python_version()
    assert tags["env.cuda_build"] == str(tf.sysconfig.get_build_info().get("cuda_version", "none"))
    assert tags["env.gpus"] == "none" and tags["env.gpu_driver"] == "none"


def test_gpu_names_and_capabilities_are_recorded():
    info = HardwareInfo(profile="a100", gpus=[GpuDetails(0, "NVIDIA A100-SXM4-80GB", (8, 0))])
    tags = collect_environment(info)
    assert tags["env.gpus"] == "NVIDIA A100-SXM4-80GB" and tags["env.gpu_compute_capability"] == "8.0"


def test_package_list_pins_what_is_installed():
    packages = installed_packages().splitlines()
    assert f"tensorflow=={tf.__version__}" in packages
    names = [line.split("==")[0] for line in packages]
    assert names == sorted(names) and len(names) == len(set(names))
