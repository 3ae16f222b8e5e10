"""A user's own project, as README.md's "Your own project" walks through it: `tfx-hydra init` writes it
outside the repository, the user adds a layer of their own, trains with every exporter, evaluates the
export, serves the MLflow model, and reproduces the run by id from another folder with identical
results; the recorded command re-runs as written. The project's code lives in the project only: it is
user code the package has never seen. Then every mistake a user's code can make, said once, clearly."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import cli_env, mlflow_client, mlflow_runs, run_cli, serve_on_a_free_port, stop_server
from tests.helpers.in_process import run_cli_in_process

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_own_project")]

# The layer the user adds: a model builder of their own around a registered custom layer
CUSTOM_LAYER = '''
import keras


@keras.saving.register_keras_serializable(package="acme")
class Doubling(keras.layers.Layer):
    """Doubles its inputs, plus a trained offset: a layer only this project knows."""

    def build(self, input_shape):
        self.offset = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="offset")

    def call(self, inputs):
        return inputs * 2.0 + self.offset


def doubled(name, input_shape, num_classes, units=16, scale=1.0):
    inputs = keras.Input(shape=tuple(input_shape), name="inputs")
    x = keras.layers.Rescaling(scale)(Doubling()(inputs))
    x = keras.layers.Dense(units, activation="relu")(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs, name=name)
'''
DOUBLED_YAML = '''# model=doubled: the project's builder with its own layer
defaults:
  - tiny        # inherits model=tiny's keys (name, input_shape, num_classes, units)
  - _self_
_target_: acme.layers.doubled
name: doubled
'''
TRAIN = ["experiment=acme", "model=doubled", "trainer.epochs=2", "trainer.deterministic=true",
         "export=[savedmodel,keras,tflite,onnx]"]


def init(path: Path) -> subprocess.CompletedProcess:
    """`tfx-hydra init PATH`, as typed (the console script's module; no TensorFlow is imported)."""
    return subprocess.run([sys.executable, "-m", "tfx_hydra", "init", str(path), "--package", "acme"],
                          env=cli_env(), capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """`tfx-hydra init`, then the user's own layer and option, committed in the project's git repo."""
    root = tmp_path_factory.mktemp("acme-project")
    done = init(root)
    assert done.returncode == 0, done.stderr
    assert f"next: cd {root} && tfx-hydra experiment=acme debug=fast" in done.stdout
    (root / "acme" / "layers.py").write_text(CUSTOM_LAYER)
    (root / "conf" / "model" / "doubled.yaml").write_text(DOUBLED_YAML)
    commit = ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "acme"]
    for command in (["init", "-q"], ["add", "-A"], commit):
        subprocess.run(["git", *command], cwd=root, check=True, capture_output=True)
    return root


@pytest.fixture(scope="module")
def trained(project):
    """One tracked run of the project's model, launched from the project (found from there, no flags)."""
    done = run_cli_in_process(TRAIN, cwd=project)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = mlflow_runs(project)
    return run, done


def test_init_writes_a_project_whose_options_join_ours(project):
    assert sorted(p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file() and ".git" not in p.parts
                  ) == [".gitignore", "README.md", "acme/__init__.py", "acme/data.py", "acme/layers.py",
                        "acme/models.py", "conf/data/my_data.yaml", "conf/experiment/acme.yaml",
                        "conf/model/doubled.yaml", "conf/model/tiny.yaml", "pyproject.toml", "tests/test_smoke.py"]
    helped = run_cli_in_process(["--help"], cwd=project / "acme")  # from a folder inside the project
    assert helped.returncode == 0
    model_line = next(line for line in helped.stdout.splitlines() if line.startswith("model:"))
    assert "mlp" in model_line and "tiny" in model_line and "doubled" in model_line, model_line
    assert "my_data" in next(line for line in helped.stdout.splitlines() if line.startswith("data:"))
    again = init(project)  # nothing is overwritten
    assert again.returncode == 1
    assert f"{project / 'README.md'} exists already" in again.stderr


def test_the_projects_own_model_trains_exports_and_records_its_code(project, trained):
    run, done = trained
    assert "model: doubled," in done.stdout and "data: my_data," in done.stdout
    for exported in ("doubled/1/saved_model.pb", "doubled.keras", "doubled.tflite", "doubled.onnx"):
        assert f"export/{exported}" in "\n".join(str(p) for p in project.glob("outputs/*/*/export/**/*")), exported
    tags, params = run.data.tags, run.data.params
    assert tags["project.root"] == str(project) and tags["project.config_dir"] == str(project / "conf")
    # the project's runs are an MLflow experiment of their own, named after it (pyproject.toml's [project] name)
    assert [r.info.run_id for r in mlflow_runs(project, experiment="acme")] == [run.info.run_id]
    assert mlflow_runs(project, experiment="tfx_hydra") == []
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True).stdout.strip()
    assert tags["code.acme"] == f"git {commit[:12]} in {project}"
    assert tags["code.tfx_hydra"]  # ours, described the same way
    assert params["model._target_"] == "acme.layers.doubled" and params["data._target_"] == "acme.data.my_data"
    assert tags["command"] == "python -m tfx_hydra " + " ".join(shlex.quote(o) for o in TRAIN)
    # the user's pipelines were counted and digested in one pass
    assert {d.dataset.name for d in run.inputs.dataset_inputs} == {"my_data-train", "my_data-validation",
                                                                    "my_data-test"}


def test_the_export_evaluates_and_the_mlflow_model_serves_elsewhere(project, trained, tmp_path):
    run, _ = trained
    source = next(project.glob("outputs/*/*/export/doubled/1"))
    evaluated = run_cli_in_process(["experiment=acme", "mode=evaluate", f"export.source={source}", "tracking=none"],
                                   cwd=project)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert f"{run.data.metrics['test_accuracy']:.4f}" in evaluated.stdout  # the export scores as the model did

    logged = mlflow_client(project).get_logged_model(run.data.tags["mlflow.logged_model_id"])
    model_dir = Path(logged.artifact_location)  # a local store: the logged model's own folder
    assert (model_dir / "code" / "acme" / "layers.py").is_file()  # the project's code travels with the model
    env = {k: v for k, v in cli_env().items() if k != "TFX_HYDRA_PROJECT"}
    env["PYTHONPATH"] = env["PYTHONPATH"].replace(str(project), "")  # served from elsewhere, without the project
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{project / 'mlflow.db'}"
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    server, port = serve_on_a_free_port(
        lambda port: [str(Path(sys.executable).parent / "mlflow"), "models", "serve", "-m",
                      f"runs:/{run.info.run_id}/model", "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)],
        tmp_path, env, tmp_path / "serve.log", "mlflow models serve", timeout=180)
    try:
        inputs = np.random.default_rng(0).normal(size=(3, 8)).astype("float32")
        request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations",
                                         data=json.dumps({"inputs": inputs.tolist()}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            answered = json.loads(response.read())["predictions"]
        served = np.asarray(answered["probabilities"])
        assert answered["class"] == [str(i) for i in answered["class_index"]]  # my_data's classes are numbered
    finally:
        stop_server(server)
    import keras  # the project's layer is registered in this process: the run above imported acme.layers

    model = keras.saving.load_model(next(project.glob("outputs/*/*/export/doubled.keras")))
    np.testing.assert_allclose(served, model.predict(inputs, verbose=0), rtol=1e-5, atol=1e-6)


def test_reproduce_from_another_folder_is_bit_identical_and_the_command_reruns(project, trained, tmp_path):
    run, _ = trained
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-m", "tfx_hydra.reproduce", run.info.run_id,
                           "--tracking-uri", f"sqlite:///{project / 'mlflow.db'}"],
                          cwd=elsewhere, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "results are bit-identical" in done.stdout, done.stdout[-3000:]
    assert "code acme:" not in done.stdout  # the project's code has not changed
    for chatter in ("cuda_", "oneDNN", "absl::InitializeLog", "Config search path"):  # our lines only
        assert chatter not in done.stdout + done.stderr, chatter
    assert not list(elsewhere.iterdir())  # the re-run wrote into the project, where the run was launched

    original = next(r for r in mlflow_runs(project) if r.info.run_id == run.info.run_id)
    args = shlex.split(original.data.tags["command"])
    assert args[:3] == ["python", "-m", "tfx_hydra"], args
    rerun = run_cli_in_process(args[3:], cwd=project)  # the recorded command, as written
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    newest = mlflow_runs(project)[0]
    assert newest.data.tags["model.weights_sha256"] == original.data.tags["model.weights_sha256"]


def test_changed_project_code_is_listed_as_drift(project, trained, tmp_path):
    run, _ = trained
    layers = project / "acme" / "layers.py"
    layers.write_text(layers.read_text() + "\n# an uncommitted change\n")
    try:
        done = run_in_reproduce([run.info.run_id, "--tracking-uri", f"sqlite:///{project / 'mlflow.db'}",
                                 "--dry-run"], cwd=tmp_path)
    finally:
        subprocess.run(["git", "checkout", "--", "acme/layers.py"], cwd=project, check=True)
    assert done.returncode == 0, done.stderr
    commit = run.data.tags["code.acme"].split()[1]
    assert f"code acme: git {commit} in {project} then, git {commit} (uncommitted changes) in {project} now" \
        in done.stdout, done.stdout


def run_in_reproduce(args: list[str], cwd: Path):
    from tests.helpers.in_process import run_in_process
    from tfx_hydra.reproduce import main

    return run_in_process(main, ["tfx-hydra-reproduce", *args], cwd)


def test_a_moved_project_is_named_and_another_folder_can_be_given(project, trained, tmp_path):
    run, _ = trained
    store = ["--tracking-uri", f"sqlite:///{project / 'mlflow.db'}", "--dry-run"]
    missing = tmp_path / "not-here"
    done = run_in_reproduce([run.info.run_id, *store, "--project", str(missing)], cwd=tmp_path)
    assert done.returncode == 1
    assert f"took its options and code from the project at {missing}, which is not on this machine" in done.stdout
    assert "Fix: check the project out" in done.stdout


# --- the user's code, wrong in every way it can be ------------------------------------------------

MISTAKES = {
    "a misspelt package in a _target_ (found before TensorFlow starts)": (
        "model:\n  _target_: acmee.models.tiny\n",
        ["ConfigError: model._target_=acmee.models.tiny cannot be imported: No module named 'acmee'. Looked in the "
         "project at", "Fix: install the package that holds it"]),
    "a _target_ that cannot be imported": (
        "model:\n  _target_: acme.nowhere.builder\n",
        ["ConfigError: model._target_=acme.nowhere.builder cannot be imported", "No module named 'acme.nowhere'",
         "Looked in the project at", "Fix: install the package that holds it"]),
    "a builder that returns no Keras model": (
        "model:\n  _target_: builtins.dict\n  name: x\n",
        ["ConfigError: model._target_=builtins.dict returned a builtins.dict, not a keras.Model.",
         "Fix: return the model: keras.Model(inputs, outputs)"]),
    "a model built for other inputs": (
        "model:\n  input_shape: [4]\n",
        ["DataError: the model 'tiny' takes inputs of shape [4], the data gives [8].",
         "Fix: build the model for the data's shape: input_shape: ${data.input_shape}"]),
    "a source whose pipelines are batched already": (
        "data:\n  _target_: acme.bad.batched\n",
        ["DataError: the train pipeline's inputs have shape [None, 8], the model is built for [8]: it is batched "
         "already.", "Fix: hand over unbatched examples"]),
    "a source whose labels are floats": (
        "data:\n  _target_: acme.bad.float_labels\n",
        ["DataError: the train pipeline's labels are float32 of shape []: expected one integer class index",
         "Fix: map the labels to integers"]),
    "a callback that raises in __init__": (
        "trainer:\n  callbacks:\n    - _target_: acme.bad.Exploding\n      when: now\n",
        ["ConfigError: building 'trainer.callbacks[0]' (acme.bad.Exploding) raised RuntimeError in your code:",
         "acme/bad.py\", line", "in __init__", "raise RuntimeError(f\"cannot start: {when}\")",
         "RuntimeError: cannot start: now", "Fix: fix acme.bad.Exploding"]),
    "a callback that raises while training": (
        "trainer:\n  callbacks:\n    - _target_: acme.bad.ExplodingAtEpochEnd\n",
        ["TrainingError: training raised ValueError in your code:", "acme/bad.py\", line", "in on_epoch_end",
         "ValueError: epoch 0 looked wrong", "Fix: fix your code (the frames above are its own); the run's backup "
         "is kept: the same command resumes from its last finished epoch"]),
    "a metric that raises when Keras traces it": (
        "trainer:\n  metrics:\n    - accuracy\n    - _target_: acme.bad.OneHotOnly\n      name: one_hot\n",
        ["TrainingError: training raised TypeError in your code:", "in update_state",
         "TypeError: this metric takes one-hot labels"]),
    "a metric node without its name": (
        "trainer:\n  metrics:\n    - _target_: keras.metrics.SparseTopKCategoricalAccuracy\n",
        ["ConfigError: trainer.metrics[0] (keras.metrics.SparseTopKCategoricalAccuracy) has no name"]),
}
BAD_CODE = '''
import keras
import numpy as np
import tensorflow as tf

from tfx_hydra.data import from_pipelines


def _pipelines():
    x = np.zeros((64, 8), "float32")
    return [tf.data.Dataset.from_tensor_slices((x, np.zeros(64, "int64"))) for _ in range(3)]


def batched(batch_size, seed, **kwargs):
    return from_pipelines(*[p.batch(8) for p in _pipelines()], input_shape=(8,), num_classes=3,
                          batch_size=batch_size, seed=seed)


def float_labels(batch_size, seed, **kwargs):
    return from_pipelines(*[p.map(lambda x, y: (x, tf.cast(y, tf.float32))) for p in _pipelines()],
                          input_shape=(8,), num_classes=3, batch_size=batch_size, seed=seed)


class Exploding(keras.callbacks.Callback):
    def __init__(self, when):
        super().__init__()
        raise RuntimeError(f"cannot start: {when}")


class ExplodingAtEpochEnd(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        raise ValueError(f"epoch {epoch} looked wrong")  # after ours: the epoch is backed up


class OneHotOnly(keras.metrics.Metric):
    def __init__(self, name="one_hot", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        raise TypeError("this metric takes one-hot labels")

    def result(self):
        return self.total
'''


@pytest.mark.parametrize("case", list(MISTAKES))
def test_a_mistake_in_the_users_code_is_one_clear_error(project, tmp_path, case):
    preset, expected = MISTAKES[case]
    (project / "acme" / "bad.py").write_text(BAD_CODE)
    (project / "conf" / "experiment" / "broken.yaml").write_text(
        "# @package _global_\ndefaults:\n  - acme\n  - _self_\n" + preset)
    done = run_cli_in_process(["experiment=broken", "trainer.epochs=1"], cwd=project)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said[-3000:]
    for text in expected:
        assert text in said, f"{text!r} not in:\n{said[-3000:]}"
    assert "Traceback (most recent call last)" not in said  # the user's frames only, under one line of ours
    assert said.count("RuntimeError: cannot start") <= 1
    if "while training" in case or "traces" in case:  # the user's frames only: not Keras', Hydra's or ours
        shown = said[said.index("in your code:"):]
        assert "keras/src" not in shown and "/hydra/" not in shown and "tfx_hydra/" not in shown, shown
    if "while training" in case:  # ended FAILED, the backup of its epoch kept for the resume
        (failed,) = [r for r in mlflow_runs(project) if r.data.params.get("trainer.callbacks.0._target_") ==
                     "acme.bad.ExplodingAtEpochEnd"]
        assert failed.info.status == "FAILED" and Path(failed.data.tags["resume.backup_dir"]).is_dir()
    statuses = {r.data.tags.get("mlflow.runName", ""): r.info.status for r in mlflow_runs(project)
                if r.data.params.get("trainer.epochs") == "1"}
    assert "RUNNING" not in statuses.values() and "FINISHED" not in statuses.values(), statuses


WIDE = '''import keras


def wide(name, input_shape, num_classes, units=64, scale=1.0):
    inputs = keras.Input(shape=tuple(input_shape), name="inputs")
    hidden = keras.layers.Dense(units, activation="relu")(keras.layers.Flatten()(inputs))
    outputs = keras.layers.Dense(num_classes, activation="softmax", dtype="float32")(hidden)
    return keras.Model(inputs, outputs, name=name)
'''
WIDE_YAML = '''defaults:
  - tiny
  - _self_
_target_: acme.wide.wide
name: wide
'''


def test_code_not_yet_committed_is_recorded_as_a_change_a_reproduce_restores(project, tmp_path):
    """A new model file and its option, written and run before any commit: the run is recorded dirty with both
    files in its diff (git's own state is clean of the run's store and outputs: init's .gitignore), and once
    the user commits them, reproduce's advice -- checkout the recorded commit, apply the recorded diff --
    brings back exactly the code that ran."""
    import shutil

    copy = tmp_path / "acme-copy"  # the module's project stays as the other tests left it
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns("outputs", "mlruns", "mlflow.db*"))
    subprocess.run(["git", "clean", "-fdq"], cwd=copy, check=True)  # what other tests left there: the commit only
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=copy, check=True)
    (copy / "acme" / "wide.py").write_text(WIDE)
    (copy / "conf" / "model" / "wide.yaml").write_text(WIDE_YAML)
    # a fresh interpreter: this test process imported the module's project's `acme`, and the copy has its own
    done = run_cli(["experiment=acme", "model=wide", "trainer.epochs=1", "export=none", "export.mlflow_model=false"],
                   cwd=copy)
    assert done.returncode == 0, done.stderr[-3000:]
    status = subprocess.run(["git", "status", "--porcelain"], cwd=copy, capture_output=True, text=True).stdout
    assert sorted(status.splitlines()) == ["?? acme/wide.py", "?? conf/model/wide.yaml"]  # not mlflow.db, outputs/
    (run,) = mlflow_runs(copy)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=copy, capture_output=True, text=True).stdout.strip()
    assert run.data.tags["code.acme"] == f"git {commit[:12]} (uncommitted changes) in {copy}"
    assert run.data.tags["git.dirty"] == "True"
    client = mlflow_client(copy)
    diff = Path(client.download_artifacts(run.info.run_id, "environment/code/acme.diff", str(tmp_path))).read_text()
    assert "+def wide(name, input_shape, num_classes, units=64, scale=1.0):" in diff
    assert "+_target_: acme.wide.wide" in diff

    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "add", "-A"], cwd=copy, check=True)
    subprocess.run([*git, "commit", "-qm", "wide"], cwd=copy, check=True)
    said = run_in_reproduce([run.info.run_id, "--tracking-uri", f"sqlite:///{copy / 'mlflow.db'}", "--dry-run"],
                            cwd=tmp_path)
    assert said.returncode == 0, said.stderr[-3000:]
    advice = (f"to run the same code: cd {copy} && git checkout {commit[:12]} && MLFLOW_TRACKING_URI=sqlite:///"
              f"{copy / 'mlflow.db'} mlflow artifacts download -r {run.info.run_id} -a environment/git.diff -d . && "
              "git apply environment/git.diff")  # from the folder reproduce ran in: it goes to the run's own
    assert advice in said.stdout, said.stdout
    restored = tmp_path / "restored"  # the advice, followed in a fresh clone
    subprocess.run(["git", "clone", "-q", str(copy), str(restored)], check=True)
    subprocess.run(["git", "checkout", "-q", commit[:12]], cwd=restored, check=True)
    recorded = client.download_artifacts(run.info.run_id, "environment/git.diff", str(tmp_path / "download"))
    subprocess.run(["git", "apply", recorded], cwd=restored, check=True)
    assert (restored / "acme" / "wide.py").read_text() == WIDE
    assert (restored / "conf" / "model" / "wide.yaml").read_text() == WIDE_YAML


DECLARING = '''import json
import keras
import tensorflow as tf


def declaring(name, input_shape, num_classes, units=16, scale=1.0):
    """Writes the intra-op threads TensorFlow has when the model is built (after the hardware step)."""
    with open({seen!r}, "w") as seen:
        json.dump(tf.config.threading.get_intra_op_parallelism_threads(), seen)
    inputs = keras.Input(shape=tuple(input_shape), name="inputs")
    hidden = keras.layers.Dense(units, activation="relu")(keras.layers.Flatten()(inputs))
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax", dtype="float32")(hidden))


declaring.intra_op_threads = 2  # what hardware.intra_op_threads=auto is to give this model's ops


def every_core(**keys):
    return declaring(**keys)


every_core.intra_op_threads = 0  # every core: the sweep's second job, after TensorFlow has started with 2
'''


def test_a_model_function_declares_the_threads_auto_gives_its_ops(project, tmp_path):
    """The cpu profile's intra_op_threads=auto would give the project's small inputs one thread per op; a model
    function of the user's that declares its count gets it (TensorFlow fixes its threads at its first op, so in a
    process of its own: the sweep's first job), and the run's tag says which and why. The sweep's second job runs
    in the same process (basic launcher): its model declares every core, TensorFlow keeps the first job's 2, and
    its tag and a warning say so rather than the count it did not get."""
    seen = tmp_path / "threads.json"
    (tmp_path / "declaring_models.py").write_text(DECLARING.format(seen=str(seen)))
    done = run_cli(["-m", "experiment=acme", "model._target_=declaring_models.declaring,declaring_models.every_core",
                    "trainer.epochs=1", "export=none", "export.mlflow_model=false",
                    f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"],
                   cwd=project, env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{cli_env().get('PYTHONPATH', '')}"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(seen.read_text()) == 2  # what the second job's model saw: the first job's count, kept
    said = {r.data.params["model._target_"].rsplit(".", 1)[-1]: r.data.tags["hardware.intra_op_threads"]
            for r in mlflow_runs(tmp_path, experiment="acme") if "mlflow.parentRunId" in r.data.tags}
    assert said == {"declaring": "2: the model function declares it (intra_op_threads)",
                    "every_core": "2: the model function declares it (intra_op_threads); not applied: TensorFlow "
                                  "had already started"}, said
    assert ("hardware.intra_op_threads=0 (every core) not applied: TensorFlow was already initialised in this "
            "process (it keeps 2)") in done.stdout + done.stderr


def test_a_project_file_naming_a_missing_folder_is_said(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.tfx_hydra]\nconfig_dir = "configs"\n')
    done = run_cli_in_process(["--cfg", "job"], cwd=tmp_path)
    assert done.returncode == 1
    assert (f'ConfigError: config_dir = "configs" in {tmp_path / "pyproject.toml"} [tool.tfx_hydra]: '
            f"{tmp_path / 'configs'} does not exist.") in done.stderr
    assert "Traceback" not in done.stderr


def test_the_tutorial_is_the_one_this_test_walks():
    from tests.helpers import REPO

    section = (REPO / "docs" / "tutorials" / "own-project.md").read_text()
    for line in ("tfx-hydra init acme-project --package acme", "tfx-hydra experiment=acme debug=fast",
                 textwrap.dedent(DOUBLED_YAML).splitlines()[4]):
        assert line in section, line


def test_a_run_given_hydra_searchpath_records_it_and_reproduces_from_anywhere(project, tmp_path, monkeypatch):
    """The way before a project file: options from a folder named on the command line. The command tag and
    the re-run keep `hydra.searchpath`, so the run composes again without the user typing it."""
    launch, elsewhere = tmp_path / "launch", tmp_path / "elsewhere"
    launch.mkdir()
    elsewhere.mkdir()
    searchpath = f"hydra.searchpath=[file://{project / 'conf'}]"
    monkeypatch.syspath_prepend(str(project))  # the code, as PYTHONPATH would give it: no project file involved
    done = run_cli_in_process([searchpath, "experiment=acme", "trainer.epochs=1", "export=none"], cwd=launch)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(launch)
    assert run.data.tags["command"] == f"python -m tfx_hydra {shlex.quote(searchpath)} experiment=acme " \
                                       "trainer.epochs=1 export=none"
    assert "project.root" not in run.data.tags  # no project file was involved
    dry = run_in_reproduce([run.info.run_id, "--tracking-uri", f"sqlite:///{launch / 'mlflow.db'}", "--dry-run"],
                           cwd=elsewhere)
    assert dry.returncode == 0, dry.stderr
    assert "this environment and config match what it recorded" in dry.stdout, dry.stdout  # composed the same today
    assert f"would run: python -m tfx_hydra {shlex.quote(searchpath)} experiment=acme" in dry.stdout, dry.stdout
