"""A non-editable install ships the config tree and the project template: the wheel runs from any
directory, and a project its `init` writes passes its own smoke test against it."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from tests.helpers import REPO, cli_env

pytestmark = pytest.mark.slow


def test_the_wheel_carries_every_config_and_runs_outside_the_repo(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(REPO), "-w", str(wheels)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("tfx_hydra-*.whl")
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("tfx_hydra/conf/")}
    in_repo = {f"tfx_hydra/conf/{p.relative_to(REPO / 'conf')}" for p in (REPO / "conf").rglob("*.yaml")}
    assert in_repo and in_repo <= shipped

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = cli_env()
    env["PYTHONPATH"] = str(target)  # the installed copy, not the repo
    done = subprocess.run(
        [sys.executable, "-c", "import runpy, tfx_hydra; print('FROM', tfx_hydra.__file__); "
         "runpy.run_module('tfx_hydra', run_name='__main__')",
         "trainer.epochs=1", "data.limit=200", "tracking=none"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"FROM {target}" in done.stdout
    assert "tfx_hydra: run complete" in done.stdout
    exported = list((elsewhere / "outputs").glob("*/*/export/mlp/1/saved_model.pb"))
    assert len(exported) == 1, os.listdir(elsewhere)

    # a project made by the installed copy's `init`: its smoke test passes against the installed copy
    project = elsewhere / "acme"
    made = subprocess.run([sys.executable, "-c", "import runpy, sys; sys.argv[0] = 'tfx-hydra'; "
                           "runpy.run_module('tfx_hydra', run_name='__main__')", "init", str(project)],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr[-3000:]
    assert (project / "acme" / "models.py").is_file() and (project / "conf" / "experiment" / "acme.yaml").is_file()
    smoke = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                            "-o", "addopts=", "tests"], cwd=project, env=env, capture_output=True, text=True,
                           timeout=600)
    assert smoke.returncode == 0, smoke.stdout[-3000:]
    assert "1 passed" in smoke.stdout
