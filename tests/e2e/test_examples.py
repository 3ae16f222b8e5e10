"""examples/: each complete project, copied out of the repository as a user would, runs its README's commands end
to end on the tiny data its own writer makes: the project is found from its folder, its preset trains, evaluates
and exports, and MLflow has the run. (examples/search_on_slurm runs on the test Slurm cluster: test_slurm.py.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, cli_env, mlflow_runs, page_commands, save_tiny_hub_model, save_tiny_text_hub_models
from tests.helpers.in_process import run_cli_in_process

pytestmark = pytest.mark.slow

# example: (its data writer's command, the README's train command, what keeps the test short, what must be good)
EXAMPLES = {
    "tabular_regression": ("python -m houses.make_data", "tfx-hydra experiment=houses",
                           ["trainer.epochs=30"], ("test_r2", 0.9)),
    "text_classifier": ("python -m reviews.make_data", "tfx-hydra experiment=reviews",
                        ["trainer.epochs=8"], ("test_accuracy", 0.8)),
    "image_transfer": ("python -m shapes.make_data", "tfx-hydra experiment=shapes",
                       ["data.input_shape=[32,32,3]", "model.resize_to=null", "trainer.epochs=2",
                        "trainer.finetune_epochs=2", "trainer.batch_size=16"],
                       ("test_accuracy", 0.0)),  # a tiny random backbone: the figure is there, its level means nothing
}


TUTORIALS = {"tabular_regression": "tabular-regression.md", "text_classifier": "text-classification.md",
             "image_transfer": "image-transfer.md"}


def copied(example: str, tmp_path: Path) -> Path:
    project = tmp_path / example
    shutil.copytree(REPO / "examples" / example, project, ignore=shutil.ignore_patterns("data", "outputs", "mlruns",
                                                                                      "mlflow.db", "__pycache__"))
    return project


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_each_example_project_runs_its_readme_end_to_end(example, tmp_path):
    write_data, train, shorter, (metric, floor) = EXAMPLES[example]
    project = copied(example, tmp_path)
    readme = (project / "README.md").read_text()
    tutorial = (REPO / "docs" / "tutorials" / TUTORIALS[example]).read_text()
    for text in (readme, tutorial):  # the commands run here are the ones the README and the tutorial give
        assert write_data in text and train in text
    args = write_data.split()[1:] + (["20", "32"] if example == "image_transfer" else [])
    written = subprocess.run([sys.executable, *args], cwd=project, env=cli_env(), capture_output=True, text=True,
                             timeout=120)
    assert written.returncode == 0, written.stderr[-2000:]
    if example == "image_transfer":  # offline: a tiny backbone in TF Hub's form, where the README names a download
        shorter = [*shorter, f"model.handle={save_tiny_hub_model(tmp_path / 'backbone', input_shape=(32, 32, 3))}"]
    done = run_cli_in_process([*train.split()[1:], *shorter], cwd=project)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(project)
    assert run.info.status == "FINISHED" and run.data.metrics[metric] >= floor, run.data.metrics
    assert list((project / "outputs").rglob("saved_model.pb")), "the SavedModel export"
    assert run.data.tags["project.root"] == str(project)  # found from its own folder, no flags
    if example == "text_classifier":
        a_bert_from_tf_hub(project, tmp_path)
    if example == "tabular_regression":
        the_tutorials_rows_by_name(project, run, tutorial)


def a_bert_from_tf_hub(project: Path, tmp_path: Path) -> None:
    """The text tutorial's second model: a BERT and its preprocessing from TF Hub, offline as the page says
    (model.handle= and model.preprocess_handle= folders; here BERT-shaped tiny SavedModels in TF Hub's form)."""
    (bert,) = [c for c in page_commands(REPO / "docs" / "tutorials" / "text-classification.md") if "reviews_bert" in c]
    preprocess, encoder = save_tiny_text_hub_models(tmp_path / "hub")
    done = run_cli_in_process([*bert.split()[1:], f"model.handle={encoder}", f"model.preprocess_handle={preprocess}",
                               "trainer.epochs=1", "trainer.finetune_epochs=1", "trainer.batch_size=16"], cwd=project)
    assert done.returncode == 0, done.stderr[-3000:]
    bert_run = next(r for r in mlflow_runs(project) if r.data.params.get("model.handle") == encoder)
    assert bert_run.info.status == "FINISHED" and "test_accuracy" in bert_run.data.metrics
    assert "fine-tuning: backbone unfrozen" in done.stdout


def the_tutorials_rows_by_name(project: Path, run, tutorial: str) -> None:
    """The tutorial's served model, asked as it shows: the body of its curl (columns in another order than the
    file's) and a DataFrame read from the file itself, price column and all, through MLflow's pyfunc (what
    `mlflow models serve` runs), each answered as the SavedModel's by_name signature answers the same rows."""
    import json

    import mlflow
    import numpy as np
    import pandas
    import tensorflow as tf

    body = json.loads(tutorial.split("-d '", 1)[1].split("'", 1)[0])["dataframe_split"]
    asked = pandas.DataFrame(body["data"], columns=body["columns"])
    table = pandas.read_csv(project / "data" / "houses.csv").head(5)
    mlflow.set_tracking_uri(f"sqlite:///{project / 'mlflow.db'}")  # put back after the test
    served = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model")
    by_name = tf.saved_model.load(run.data.tags["export.savedmodel.path"]).signatures["by_name"]
    for rows in (asked, table):
        expected = by_name(**{c: tf.constant(rows[c].to_numpy("float32")) for c in asked.columns})["predictions"]
        np.testing.assert_allclose(served.predict(rows)["predictions"], expected.numpy(), rtol=1e-5)
