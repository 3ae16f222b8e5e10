"""environment: what a run ran on, recorded so it can be reproduced and compared.

Versions, TensorFlow's CUDA/cuDNN build, GPUs and driver, CPU model, the git state of
the launch directory and the installed packages. Everything here reads; nothing
changes the machine. A missing tool (git, nvidia-smi) is recorded as such, never an error.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from dataclasses import dataclass
from importlib import metadata

from tfx_hydra.hardware import HardwareInfo, nvidia_smi
from tfx_hydra.threads import described_threads

VERSIONED_PACKAGES = ("tensorflow", "keras", "hydra-core", "omegaconf", "mlflow", "numpy", "tensorflow-hub",
                      "tfx_hydra")


@dataclass
class GitState:
    commit: str | None  # None outside a git work tree
    branch: str | None = None
    dirty: bool = False  # uncommitted changes, or files git does not track (outside .gitignore)
    diff: str = ""  # when dirty: the change the run used, new files included (`git apply` restores it)
    left_out: tuple[str, ...] = ()  # untracked files too large for the diff (their paths)


UNTRACKED_LIMIT = 1 << 20  # bytes: an untracked file larger than this (data, a checkpoint) is named, not recorded
UNTRACKED_BUDGET = 8 << 20  # bytes of untracked files a diff holds in all: the rest are named, not recorded
# what tfx_hydra and its tools write into a launch folder (the store with SQLite's -wal/-shm/-journal files while
# it is open): never the user's code, whatever .gitignore says
OWN_OUTPUTS = ("mlflow.db*", "mlruns", "outputs", "multirun", "optuna.db*", "test-artifacts")


def collect_environment(hardware: HardwareInfo) -> dict[str, str]:
    """Tags describing the software and hardware of this process."""
    import tensorflow as tf

    build = tf.sysconfig.get_build_info()
    tags = software_environment()
    tags["env.cuda_build"] = str(build.get("cuda_version", "none"))
    tags["env.cudnn_build"] = str(build.get("cudnn_version", "none"))
    tags["env.gpus"] = ", ".join(g.name for g in hardware.gpus) or "none"
    tags["env.gpu_compute_capability"] = ", ".join(
        ".".join(map(str, g.compute_capability)) for g in hardware.gpus if g.compute_capability) or "none"
    tags["hardware.intra_op_threads"] = described_threads(*hardware.intra_op_threads)  # what auto chose, and why
    return tags


def software_environment() -> dict[str, str]:
    """The part of the record read without importing TensorFlow (what `reproduce` compares
    before it runs): Python, platform, CPU, package versions, GPU names and driver."""
    tags = {"env.python": platform.python_version(), "env.platform": platform.platform(),
            "env.cpu": cpu_model()}
    for package in VERSIONED_PACKAGES:
        tags[f"env.{package}"] = _version(package)
    tags["env.gpus"] = ", ".join(name.strip() for name in nvidia_smi("name")) or "none"
    tags["env.gpu_driver"] = gpu_driver() or "none"
    return tags


def _version(package: str) -> str:
    if package == "tfx_hydra":  # the code that runs, whatever an install's metadata says (one source)
        from tfx_hydra import __version__

        return __version__
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_driver() -> str | None:
    """The NVIDIA driver version, from nvidia-smi (absent on CPU-only machines)."""
    rows = nvidia_smi("driver_version")
    return rows[0].strip() if rows else None


def git_state(path: str) -> GitState:
    """The commit, branch and uncommitted change of the git work tree holding `path`. Files git does not track
    (and .gitignore does not name) are part of the change: a new model file the run imported makes the tree
    dirty, and its whole text is in the diff, so `git checkout <commit> && git apply <diff>` restores what ran.
    tfx_hydra's own outputs (the store, outputs/) are never counted; an untracked file over 1 MiB is named in
    `left_out` instead of copied."""
    commit = _run(["git", "-C", path, "rev-parse", "HEAD"])
    top = git_toplevel(path)
    if not commit or not top:
        return GitState(commit=None)
    branch = _run(["git", "-C", path, "rev-parse", "--abbrev-ref", "HEAD"])
    excluded = [f":(exclude,glob)**/{name}" for name in OWN_OUTPUTS] + \
        [f":(exclude,glob)**/{name}/**" for name in OWN_OUTPUTS]
    status = _run(["git", "-C", top, "status", "--porcelain", "-z", "--untracked-files=all", "--", ".", *excluded])
    entries = [entry for entry in (status or "").split("\0") if entry]
    untracked = [entry[3:] for entry in entries if entry.startswith("?? ")]
    if not entries:
        return GitState(commit=commit.strip(), branch=(branch or "").strip() or None)
    large, room = [], UNTRACKED_BUDGET
    for name in untracked:
        size = os.path.getsize(os.path.join(top, name))
        if size > min(UNTRACKED_LIMIT, room):
            large.append(name)
        else:
            room -= size
    large = tuple(large)
    diff = _run(["git", "-C", top, "diff", "--binary", "HEAD"]) or ""
    diff += "".join(_new_file_patch(top, f) for f in untracked if f not in large)
    return GitState(commit=commit.strip(), branch=(branch or "").strip() or None, dirty=True, diff=diff, left_out=large)


def _new_file_patch(top: str, relative: str) -> str:
    """A file git does not track, as a patch that creates it (`git diff --no-index`: nothing is written into
    the repository; it exits 1 when the files differ, as a new file always does)."""
    try:
        done = subprocess.run(["git", "-C", top, "diff", "--no-index", "--binary", "--", os.devnull, relative],
                              capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode in (0, 1) else ""


def git_toplevel(path: str) -> str | None:
    """The root of the git work tree holding `path` (None outside git)."""
    top = _run(["git", "-C", path, "rev-parse", "--show-toplevel"])
    return top.strip() if top else None


@functools.lru_cache(maxsize=1)
def installed_packages() -> str:
    """`name==version` for every installed distribution, sorted: a pip-installable record.
    Read once per process, each distribution's METADATA parsed once (~0.1 s; name and version
    asked apart parse it three times): sweep jobs in one process or worker share it."""
    seen = {}
    for distribution in metadata.distributions():
        fields = distribution.metadata
        if fields["Name"]:
            seen[fields["Name"].lower()] = fields["Version"]
    return "".join(f"{name}=={version}\n" for name, version in sorted(seen.items()))


def _run(command: list[str]) -> str | None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None
