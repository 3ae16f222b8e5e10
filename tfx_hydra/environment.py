"""environment: what a run ran on, recorded so it can be reproduced and compared.

Versions, TensorFlow's CUDA/cuDNN build, GPUs and driver, CPU model, the git state of
the launch directory and the installed packages. Everything here reads; nothing
changes the machine. A missing tool (git, nvidia-smi) is recorded as such, never an error.
"""

from __future__ import annotations

import functools
import platform
import subprocess
from dataclasses import dataclass
from importlib import metadata

from tfx_hydra.hardware import HardwareInfo, nvidia_smi

VERSIONED_PACKAGES = ("tensorflow", "keras", "hydra-core", "omegaconf", "mlflow", "numpy", "tensorflow-hub",
                      "tfx_hydra")


@dataclass
class GitState:
    commit: str | None  # None outside a git work tree
    branch: str | None = None
    dirty: bool = False
    diff: str = ""  # `git diff HEAD` when dirty: the uncommitted change the run used


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
    """The commit, branch and uncommitted change of the git work tree holding `path`."""
    commit = _run(["git", "-C", path, "rev-parse", "HEAD"])
    if not commit:
        return GitState(commit=None)
    branch = _run(["git", "-C", path, "rev-parse", "--abbrev-ref", "HEAD"])
    status = _run(["git", "-C", path, "status", "--porcelain", "--untracked-files=no"])
    diff = _run(["git", "-C", path, "diff", "HEAD"]) if status else ""
    return GitState(commit=commit.strip(), branch=(branch or "").strip() or None, dirty=bool(status), diff=diff or "")


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
