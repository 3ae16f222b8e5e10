"""`python -m tfx_hydra.reproduce RUN_ID` end to end: a deterministic run on a CSV in a git work
tree, the environment it recorded (real git commit, dirty diff, versions) and the data it read
(digests), then its re-run from the MLflow record, with the differences listed first and
bit-identical results; then the CSV changes, and reproduce says so before running."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata

import pytest

from tests.helpers import QUICK, mlflow_client, mlflow_runs, run_cli
from tests.helpers.in_process import run_in_process
from tests.helpers.terminal import assert_no_native_chatter, run_on_a_terminal
from tfx_hydra import reproduce

pytestmark = pytest.mark.slow


def git(folder, *args) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}).stdout.strip()


def test_a_deterministic_run_is_reproduced_bit_identically_with_the_differences_listed(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "notes.txt").write_text("first\n")
    git(tmp_path, "add", "notes.txt")
    git(tmp_path, "commit", "-qm", "first")
    first_commit = git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "notes.txt").write_text("first\nuncommitted line\n")  # the run uses a dirty tree

    table = tmp_path / "table.csv"
    rows = ["a,b,c,label", *(f"{i % 7},{(i * 3) % 11},{i % 5},{i % 3}" for i in range(300))]
    table.write_text("\n".join(rows) + "\n")
    on_csv = ["data=csv", f"data.path={table}", "data.input_shape=[3]", "data.num_classes=3"]
    # a fresh process, as reproduce's own re-run is: op determinism is set once, at TensorFlow's start
    done = run_cli(["trainer.deterministic=true", *QUICK, *on_csv], cwd=tmp_path)  # exports a SavedModel
    assert done.returncode == 0, done.stderr[-3000:]
    (original,) = mlflow_runs(tmp_path)
    tags = original.data.tags
    assert tags["git.commit"] == first_commit and tags["git.dirty"] == "True"
    assert tags["env.tensorflow"] == metadata.version("tensorflow")
    assert tags["env.python"] == platform.python_version() and tags["env.mlflow"] == metadata.version("mlflow")
    assert tags["env.cuda_build"] and tags["env.gpus"] == "none" and tags["env.cpu"]
    client = mlflow_client(tmp_path)
    diff = open(client.download_artifacts(original.info.run_id, "environment/git.diff", str(tmp_path / "dl")),
                encoding="utf-8").read()
    assert "+uncommitted line" in diff

    git(tmp_path, "commit", "-qam", "second")  # the code moved on since the run
    second_commit = git(tmp_path, "rev-parse", "HEAD")
    # on a terminal, as a user runs it (no TF_CPP_MIN_LOG_LEVEL): TensorFlow's C++ side says nothing there
    status, out = run_on_a_terminal([original.info.run_id], tmp_path, columns=120, module="tfx_hydra.reproduce")
    assert status == 0, out[-3000:]
    assert_no_native_chatter(out)
    # table.csv is still not committed: the tree has uncommitted changes now as well
    assert (f"git commit: {first_commit} with uncommitted changes then, {second_commit} with uncommitted changes now "
            "(to run the same code: "
            f"git checkout {first_commit[:12]} && MLFLOW_TRACKING_URI=sqlite:///{tmp_path / 'mlflow.db'} mlflow "
            f"artifacts download -r {original.info.run_id} -a environment/git.diff -d . && git apply "
            "environment/git.diff)") in out.replace("\n", "")
    assert out.index("difference(s)") < out.index("epoch 1/2")  # listed before the re-run starts
    assert "results are bit-identical" in out and "the data changed" not in out
    assert "weights sha256" in out  # the weights' hash is a result too

    (copy,) = [r for r in mlflow_runs(tmp_path) if r.info.run_id != original.info.run_id]
    assert copy.data.tags["reproduced_from"] == original.info.run_id
    assert copy.data.tags["reproduce.identical_metrics"] == "true"
    assert copy.data.tags["hydra.overrides"].startswith(tags["hydra.overrides"])
    for key in ("loss", "accuracy", "val_loss", "val_accuracy", "test_loss", "test_accuracy"):
        assert copy.data.metrics[key] == original.data.metrics[key], key  # bit-identical, not approximately
    assert copy.data.tags["model.weights_sha256"] == tags["model.weights_sha256"]
    # the export's size is an artifact figure: listed apart when it differs, never a result difference
    assert "export.savedmodel.size_bytes" not in copy.data.tags.get("reproduce.different_metrics", "")
    if copy.data.tags["export.savedmodel.size_bytes"] != original.data.tags["export.savedmodel.size_bytes"]:
        assert "export.savedmodel.size_bytes" in copy.data.tags["reproduce.different_artifacts"]
    recorded = {i.dataset.digest for i in original.inputs.dataset_inputs}
    assert recorded == {i.dataset.digest for i in copy.inputs.dataset_inputs} and len(recorded) == 3

    table.write_text("\n".join([*rows[:11], "6,10,4,1", *rows[12:]]) + "\n")  # example 10's inputs, not its label
    dry = run_in_process(reproduce.main, ["tfx-hydra-reproduce", original.info.run_id, "--dry-run"], cwd=tmp_path)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    changed = [line for line in dry.stdout.splitlines() if "the data changed" in line]
    assert len(changed) == 1 and "split (table-" in changed[0], dry.stdout[-3000:]
    assert dry.stdout.index("the data changed") < dry.stdout.index("would run:")

    # from any folder, as the README `tfx-hydra init` writes promises: the run's store is found by its id alone
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    there = run_in_process(reproduce.main, ["tfx-hydra-reproduce", original.info.run_id, "--dry-run"], cwd=elsewhere)
    assert there.returncode == 0, there.stdout[-3000:] + there.stderr[-3000:]
    assert f"run {original.info.run_id}: in the MLflow store at sqlite:///{tmp_path / 'mlflow.db'}" in there.stdout
    advice = there.stdout.replace("\n", "").split("(to run the same code: ", 1)[1].split(")", 1)[0]
    assert advice.startswith(f"cd {tmp_path} && git checkout {first_commit[:12]} && MLFLOW_TRACKING_URI=")
    download = advice.split(" && ")[2]  # the advice's download, pasted where it was printed: it names its store
    done = subprocess.run(download, shell=True, cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "+uncommitted line" in (elsewhere / "git.diff").read_text()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["git.diff"]  # no store made in a folder that has none
