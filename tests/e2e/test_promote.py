"""`tfx-hydra promote`: a sweep's best trial goes live under a TF Serving version label (models.config, parsed
with TF Serving's own proto) and the MLflow alias of the same name; a canary beside it; a rollback; the runs
it refuses. The exports page's promote example is this test's transcript (UPDATE_README=1 rewrites it)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.test_readme import normalize, shows
from tests.helpers import REPO, mlflow_client, mlflow_runs, page_commands
from tests.helpers.in_process import run_cli_in_process, run_in_process
from tests.unit.test_export import parsed_models_config

pytestmark = pytest.mark.slow

TUTORIAL = REPO / "docs" / "tutorials" / "tf-serving.md"  # whose commands this test runs, in its order
COMMANDS = page_commands(TUTORIAL)
SWEEP = [*next(c for c in COMMANDS if c.startswith("python -m tfx_hydra -m ")).split()[4:],
         "trainer.epochs=2", "trainer.tensorboard=false"]  # + what keeps the test short
PROMOTIONS = ["tfx-hydra promote <best run id> --label stable", "tfx-hydra promote <other run id> --label canary",
              "tfx-hydra promote <other run id> --label stable"]  # live, a canary beside it, a rollback
PAGE = REPO / "docs" / "how-to" / "exports.md"  # where the promote example is shown
EXAMPLE = re.compile(r"(<!-- transcript: tests/e2e/test_promote.py -->\n```text\n)(?P<shown>.*?)(```)", re.S)


def promote(launch, *args: str):
    from tfx_hydra.__main__ import main

    return run_in_process(main, ["tfx-hydra", "promote", *args], cwd=launch)


def test_a_sweeps_best_run_goes_live_as_stable_a_canary_beside_it_and_a_rollback_is_the_same_command(tmp_path):
    assert [c for c in COMMANDS if c.startswith("tfx-hydra promote")] == PROMOTIONS
    serving = tmp_path / "srv" / "models"
    sweep = [arg.replace("/srv/models", str(serving)) for arg in SWEEP]
    done = run_cli_in_process(sweep, cwd=tmp_path, multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = mlflow_runs(tmp_path)
    (parent,) = [r for r in runs if "sweep.dir" in r.data.tags]
    best = next(r for r in runs if r.info.run_id == parent.data.tags["sweep.best_run_id"])
    (other,) = [r for r in runs if r not in (parent, best)]
    version = {r.info.run_id: int(os.path.basename(r.data.tags["export.savedmodel.path"])) for r in (best, other)}
    name = os.path.basename(os.path.dirname(best.data.tags["export.savedmodel.path"]))
    assert parsed_models_config(serving)[name][3] == {"stable": 1}  # as exported: the first version, and said
    assert f"export: {name} version 1 is `stable` (a model's first version: tfx-hydra promote moves it)" in done.stdout
    refused = promote(tmp_path, parent.info.run_id, "--label", "stable")  # the sweep's parent: it names the best
    assert refused.returncode == 1 and (f"ExportError: run {parent.info.run_id} is a sweep's parent run: it trained "
                                        f"and exported nothing itself; its best job is run {best.info.run_id}"
                                        ) in refused.stderr, refused.stderr
    assert f"Fix: tfx-hydra promote {best.info.run_id} --label <label>" in refused.stderr
    transcript = [f"$ python -m tfx_hydra -m {' '.join(SWEEP)}", "...", f"$ tfx-hydra promote {best.info.run_id} "
                  "--label stable"]

    live = promote(tmp_path, best.info.run_id, "--label", "stable")
    assert live.returncode == 0, live.stderr
    transcript += [live.stdout, f"$ tfx-hydra promote {other.info.run_id} --label canary"]
    canary = promote(tmp_path, other.info.run_id, "--label", "canary")
    assert canary.returncode == 0, canary.stderr
    transcript.append(canary.stdout)
    base, platform, served, labels = parsed_models_config(serving)[name]
    assert (base, platform) == (str(serving / name), "tensorflow")
    assert labels == {"stable": version[best.info.run_id], "canary": version[other.info.run_id]}
    assert served == sorted(set(labels.values()) | {2})
    client = mlflow_client(tmp_path)
    for run, alias in ((best, "stable"), (other, "canary")):  # the registry says what the server serves
        (registered,) = client.search_model_versions(f"run_id = '{run.info.run_id}'")
        assert client.get_model_version_by_alias("digits", alias).version == registered.version
    assert f"now serves {name} version {version[other.info.run_id]} as `canary`" in canary.stdout

    back = promote(tmp_path, other.info.run_id, "--label", "stable")  # a rollback is the same command
    assert back.returncode == 0, back.stderr
    assert parsed_models_config(serving)[name][3]["stable"] == version[other.info.run_id]
    assert f"(was version {version[best.info.run_id]})" in back.stdout
    # `canary` pointed there already: both labels now serve one model, which is said, not left to be found out
    assert (f"`canary` also point(s) at version {version[other.info.run_id]}: those labels now serve the same "
            "model") in back.stdout + back.stderr
    assert "it answers with the classes 0, 1, 2, 3, 4, 5, 6, 7, 8, 9" in live.stdout
    shown = re.search(r"--label stable\n```\n\n```text\n(.*?)```", TUTORIAL.read_text(), re.S)[1]
    expected = (shown.replace("/srv/models", str(serving)).replace("version 2", "version <best>")
                .replace("version 1", f"version {version[other.info.run_id]}")
                .replace("version <best>", f"version {version[best.info.run_id]}"))
    assert expected.strip() == live.stdout.strip(), (expected, live.stdout)  # the tutorial shows what it prints
    request_the_tutorial_builds(tmp_path, serving, name)

    example = EXAMPLE.search(PAGE.read_text())
    assert example is not None and (os.environ.get("UPDATE_README") == "1" or "tfx-hydra promote" in example["shown"])
    shown = "\n".join(line.replace(str(tmp_path), "/home/you/experiments") for line in "\n".join(transcript)
                      .replace(str(serving), "/srv/models").splitlines())
    if os.environ.get("UPDATE_README") == "1":
        text = PAGE.read_text()
        PAGE.write_text(text[:example.start("shown")] + shown.rstrip("\n") + "\n" + text[example.end("shown"):])
    else:
        launch = Path("/home/you/experiments")
        assert shows(normalize(example["shown"], launch), normalize(shown, launch)), \
            "the exports page's promote example is stale (UPDATE_README=1 rewrites it):\n" + shown


def request_the_tutorial_builds(launch: Path, serving: Path, name: str) -> None:
    """The tutorial's Python builds request.json from a SavedModel's signature; the SavedModel answers it as TF
    Serving would (tfx_hydra.export.requests.answer_rest; the server itself: test_tf_serving.py)."""
    from tfx_hydra.export.requests import answer_rest

    (code,) = re.findall(r"```python\n(.*?)```", TUTORIAL.read_text(), re.S)
    saved_model = serving / name / "1"
    here = os.getcwd()
    os.chdir(launch)  # where the user runs it: request.json lands there
    try:
        exec(code.replace("/srv/models/mlp/1", str(saved_model)), {})
    finally:
        os.chdir(here)
    body = json.loads((launch / "request.json").read_text())
    assert np.shape(body["instances"]) == (3, 8, 8)  # three raw digits, in the row format
    answers = answer_rest(str(saved_model), body)["predictions"]
    assert len(answers) == 3 and all(answer["class"] in list("0123456789") and len(answer["probabilities"]) == 10
                                     for answer in answers), answers


def test_promote_refuses_what_cannot_go_live_with_one_clear_error(tmp_path):
    serving = tmp_path / "serving"
    done = run_cli_in_process(["trainer.epochs=1", "data.limit=200", f"export.savedmodel.export_dir={serving}",
                               "trainer.tensorboard=false"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    refused = {
        "no such run": promote(tmp_path, "0" * 32, "--label", "stable"),
        "another model": promote(tmp_path, run.info.run_id, "--label", "stable", "--model", "resnet"),
        "a bad label": promote(tmp_path, run.info.run_id, "--label", "not a label"),
    }
    assert "TrackingError: run 00000000000000000000000000000000 is in no MLflow store this machine knows: not in " \
        f"{tmp_path / 'mlflow.db'}" in refused["no such run"].stderr
    assert re.search(r"ExportError: run \w+ exported model '\w+' \(.*\), not 'resnet'\.\n  Fix: promote a run of "
                     r"'resnet', or --model \w+", refused["another model"].stderr)
    assert "--label='not a label' is not a version label TF Serving takes" in refused["a bad label"].stderr
    shutil.rmtree(run.data.tags["export.savedmodel.path"])
    refused["gone"] = promote(tmp_path, run.info.run_id, "--label", "stable")
    assert f"ExportError: run {run.info.run_id}'s SavedModel is no longer at" in refused["gone"].stderr
    assert all(done.returncode != 0 and "Traceback" not in done.stderr for done in refused.values())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    nowhere = promote(elsewhere, "0" * 32, "--label", "stable")  # a run no store this machine knows holds
    assert nowhere.returncode == 1 and "is in no MLflow store this machine knows" in nowhere.stderr
    found = promote(elsewhere, run.info.run_id, "--label", "stable")  # from another folder: its store is known
    assert f"run {run.info.run_id}: in the MLflow store at sqlite:///{tmp_path / 'mlflow.db'}" in found.stderr + \
        found.stdout
    assert f"ExportError: run {run.info.run_id}'s SavedModel is no longer at" in found.stderr
    assert list(elsewhere.iterdir()) == []  # looking created nothing there
