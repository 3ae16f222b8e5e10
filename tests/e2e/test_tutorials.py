"""The tutorials' commands, run as their pages give them (tests.helpers.page_commands reads them off the page), on
data and budgets small enough for the suite: what a tutorial says the user types is what these tests type.
(The search on Slurm tutorial runs on the test cluster, in test_slurm.py; the TF Serving tutorial's commands are
test_promote.py's.)"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest
from optuna.trial import TrialState

from tests.helpers import REPO, cli_env, mlflow_client, mlflow_runs, page_commands
from tests.helpers.in_process import run_cli_in_process
from tests.helpers.search import FAST_HEARTBEAT, SPACE, assert_pruned_trials_look_pruned, parent_and_children, study_of
from tests.unit.test_data_sources import write_images

pytestmark = pytest.mark.slow

TUTORIALS = REPO / "docs" / "tutorials"

# A user's callback, outside the package: it writes down every step this process trains and (fault injection: the
# signal is real, sent to the run's own process, but within a chosen step, which a signal from outside cannot be)
# sends SIGTERM as step SIGNAL_IN begins, so the run receives it while that step trains.
STEPS = """
import os, signal
import keras

class Steps(keras.callbacks.Callback):
    def __init__(self, log):
        super().__init__()
        self.log, self.signal_in = log, int(os.environ.get("SIGNAL_IN", 0))

    def on_train_batch_begin(self, batch, logs=None):
        if int(self.model.optimizer.iterations) + 1 == self.signal_in:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_train_batch_end(self, batch, logs=None):
        with open(self.log, "a") as file:
            file.write(f"{int(self.model.optimizer.iterations)}\\n")
"""


def scaled(command: str, *replaced: tuple[str, str]) -> list[str]:
    """A page's command as a list of arguments, each (page's text, this test's) replacement made, the
    command's name dropped; a replacement the page does not hold is an error, so the page cannot move on alone."""
    for old, new in replaced:
        assert old in command, (old, command)
        command = command.replace(old, new)
    words = command.split()
    return words[3:] if words[:3] == ["python", "-m", "tfx_hydra"] else words[1:]


def test_data_larger_than_memory_streams_a_table_resumes_it_at_the_step_and_caches_images_on_disk(tmp_path,
                                                                                                 monkeypatch):
    copy, make_data, train, kill, images, convert, from_records = page_commands(
        TUTORIALS / "data-larger-than-memory.md")
    assert copy == "cp -r examples/tabular_regression ~/houses && cd ~/houses" and kill.startswith("kill -TERM")
    project = tmp_path / "houses"
    shutil.copytree(REPO / "examples" / "tabular_regression", project,
                    ignore=shutil.ignore_patterns("data", "outputs", "mlruns", "__pycache__"))
    made = subprocess.run([sys.executable, *scaled(make_data, ("10000000", "3000"))], cwd=project, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr

    # 2,040 training rows in batches of 32: 64 steps an epoch, a backup every 20; SIGTERM while step 64, epoch 1's
    # last, trains: the backup is at that step, the resumed epoch trains no batch, its training figures the backup's
    # (a mid-epoch stop and resume: tests/e2e/test_preemption.py)
    (project / "steps.py").write_text(STEPS)
    args = [*scaled(train, ("64MiB", "16KiB"), ("batch_size=1024", "batch_size=32"), ("backup_every=500",
                                                                                       "backup_every=20")),
            "trainer.epochs=2", "trainer.steps_per_execution=1", "export=none",  # a step per call: SIGTERM at 64
            f"trainer.callbacks=[{{_target_: steps.Steps, log: {project / 'steps.log'}}}]"]
    stopped = subprocess.run([sys.executable, "-m", "tfx_hydra", *args], cwd=project, capture_output=True, text=True,
                             env=cli_env() | {"SIGNAL_IN": "64",
                                                "PYTHONPATH": f"{project}{os.pathsep}{cli_env()['PYTHONPATH']}"},
                             timeout=300)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    (line,) = [line for line in stopped.stdout.splitlines() if "data: csv, " in line]
    assert "; cache: disk under " in line and "; the table streams from its file: 58.6 KiB as float32 is more than " \
           "16.0 KiB (data.cache_budget=16KiB); figures and classes from its first 3,000 rows" in line, line
    (run,) = mlflow_runs(project)
    assert run.info.status == "KILLED"
    assert f"MLflow run {run.info.run_id} is KILLED, epoch 1 at batch 64 backed up in " in stopped.stderr

    monkeypatch.syspath_prepend(str(project))
    resumed = run_cli_in_process(args, cwd=project)  # the same command
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming MLflow run {run.info.run_id} from its backup (epoch 1 at batch 64)" in resumed.stdout
    steps = [int(step) for step in (project / "steps.log").read_text().split()]
    # 2 epochs of 64 steps, each once; step 64 trained, but the run stopped before this callback heard of it
    assert steps == [*range(1, 64), *range(65, 129)]
    (run,) = mlflow_runs(project)
    assert run.info.status == "FINISHED" and "test_r2" in run.data.metrics
    client = mlflow_client(project)
    # each epoch once, epoch 1's training figures from the backup
    for key in ("epoch/loss", "epoch/mae", "epoch/val_loss"):
        assert [m.step for m in client.get_metric_history(run.info.run_id, key)] == [0, 1], key
    (first,) = [line for line in resumed.stdout.splitlines() if line.startswith("epoch 1/2 ")]
    assert "  loss " in first and "  val_loss " in first, first

    pets = write_images(tmp_path / "pets", {"cats": [(12, 10)] * 30, "dogs": [(10, 12)] * 30})
    scratch = tmp_path / "scratch"
    small = (("[160,160,3]", "[8,8,3]"), ("/data/pets", str(pets)))
    cached = run_cli_in_process([*scaled(images, *small, ("/scratch", str(scratch))), "data.cache_budget=4KiB",
                                 "trainer.epochs=1", "export=none"], cwd=tmp_path)
    assert cached.returncode == 0, cached.stderr[-3000:]
    assert f"; cache: disk under {scratch}, 11.7 KiB decoded does not fit 4.0 KiB of memory" in cached.stdout

    records = tmp_path / "pets-tfr"
    written = subprocess.run([sys.executable, "-m", *scaled(convert, *small, ("/scratch/pets-tfr", str(records)))
                              [1:]], cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert written.returncode == 0, written.stderr[-3000:]
    assert (records / "tfrecord-index.json").is_file() and (records / "data" / "pets-tfr.yaml").is_file()
    trained = run_cli_in_process([*scaled(from_records, ("/scratch/pets-tfr", str(records))), "trainer.epochs=1",
                                  "export=none"], cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "data: pets-tfr, " in trained.stdout and "counted the records" not in trained.stdout  # from the index


def test_a_search_with_workers_prunes_continues_and_registers_its_best_as_the_page_says(tmp_path):
    """Two worker processes (Hydra's joblib launcher) train trials side by side under successive halving; the
    page's second command continues the study to its new total and registers the best trial's model once."""
    first, ui, dashboard, more = page_commands(TUTORIALS / "search-with-workers.md")
    assert (ui, dashboard) == ("mlflow ui", "optuna-dashboard sqlite:///optuna.db")
    # what keeps it short: 3 epochs on 300 digits, a space with a learning rate that cannot learn (so there is
    # something to prune), a heartbeat of a second; no export but the MLflow model the registry needs
    short = ["trainer.epochs=3", "data.limit=300", "export=none", "trainer.backup=false", "trainer.tensorboard=false",
             *SPACE, *FAST_HEARTBEAT]
    done = run_cli_in_process([*scaled(first, ("n_trials=12", "n_trials=4"))[1:], *short], cwd=tmp_path,
                              multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "0 of 4 trials finished; sampler tpe, pruner successive_halving, 2 workers." in done.stdout
    study = study_of(tmp_path)
    assert len(study.trials) == 4 and {t.state for t in study.trials} <= {TrialState.COMPLETE, TrialState.PRUNED}
    assert len({t.user_attrs["tfx_hydra.process"] for t in study.trials}) == 2  # two workers, side by side
    assert not any(t.user_attrs["tfx_hydra.process"].endswith(f":{os.getpid()}") for t in study.trials)

    # this process, the search's parent, trains no trial (the workers do): its global MLflow store is whatever it
    # was, here another store. MLflow's SQL registry resolved a `models:/<id>` source there, and registering the
    # best trial failed with 'Logged model ... not found' (met when an earlier test of this process had set it)
    import mlflow

    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'elsewhere.db'}")
    try:
        again = run_cli_in_process([*scaled(more, ("n_trials=16", "n_trials=5"))[1:], *short], cwd=tmp_path,
                                   multirun=True)
    finally:
        mlflow.set_tracking_uri(before)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "study 'mlp-digits' (resumed)" in again.stdout and "4 of 5 trials finished" in again.stdout
    study = study_of(tmp_path)
    assert len(study.trials) == 5 and {t.state for t in study.trials} <= {TrialState.COMPLETE, TrialState.PRUNED}
    client, parent, children = parent_and_children(tmp_path)  # one parent for both commands
    assert len(children) == 5 and parent.info.status == "FINISHED"
    assert_pruned_trials_look_pruned(study, client, children)
    best = next(c for c in children if c.data.tags["optuna.trial"] == str(study.best_trial.number))
    (registered,) = client.search_model_versions("name = 'digits_best'")  # once, the best trial's
    assert registered.run_id == best.info.run_id


def test_fine_tuning_a_keras_hub_model_fetches_the_preset_trains_and_serves_raw_text_and_pixels(tmp_path):
    """The keras-hub tutorial: its fetch commands run keras-hub's own from_preset/save_to_preset, pointed at tiny
    presets this test saved (the page's preset names are downloads); the training commands as written, with a
    budget; the MLflow model served over HTTP and sent the page's sentences."""
    import json
    import urllib.request

    import numpy as np
    import tensorflow as tf
    from PIL import Image

    from tests.helpers import serve_on_a_free_port, stop_server, write_text_folder
    from tests.helpers.presets import save_tiny_image_preset, save_tiny_text_preset
    from tfx_hydra.export.served import load_saved_model

    _, fetch_text, train_text, serve, ask, fetch_image, train_image = page_commands(TUTORIALS / "keras-hub.md")
    work = tmp_path / "work"
    write_text_folder(work / "reviews")
    for index, kind in enumerate(("cat", "dog")):
        (work / "pets" / kind).mkdir(parents=True)
        for i in range(12):
            pixels = np.random.default_rng(i).integers(0, 80, (64, 64, 3)) + 100 * index
            Image.fromarray(pixels.astype("uint8")).save(work / "pets" / kind / f"{i}.png")
    here = {"bert_tiny_en_uncased": save_tiny_text_preset(tmp_path / "tiny_text"),
            "vit_base_patch16_224_imagenet": save_tiny_image_preset(tmp_path / "tiny_image")}
    for fetch in (fetch_text, fetch_image):  # keras-hub copies the preset into the folder the page names
        name = "bert_tiny_en_uncased" if "bert" in fetch else "vit_base_patch16_224_imagenet"
        command = fetch.replace(f"from_preset('{name}')", f"from_preset('{here[name]}')")
        done = subprocess.run([sys.executable, "-c", command.split('python -c "', 1)[1].rstrip('"')], cwd=work,
                              env=cli_env(), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert (work / name / "config.json").is_file()

    budget = ["trainer.tensorboard=false", "trainer.batch_size=8", "export.savedmodel.warmup_requests=0"]
    done = run_cli_in_process([*scaled(train_text, ("$PWD", str(work))), *budget], cwd=work)
    assert done.returncode == 0, done.stderr[-3000:]
    (text_run,) = mlflow_runs(work)
    assert "fine-tuning: backbone unfrozen" in done.stdout
    assert text_run.data.tags["model.preset"] == str(work / "bert_tiny_en_uncased")

    sentences = json.loads(ask.split(" -d '", 1)[1].rstrip("'"))["inputs"]
    saved = load_saved_model(text_run.data.tags["export.savedmodel.path"]).signatures["serving_default"]
    expected = saved(inputs=tf.constant(sentences))
    words = serve.replace("<run id>", text_run.info.run_id).split()
    env = cli_env() | {"MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}",
                       "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    server, port = serve_on_a_free_port(
        lambda port: [os.path.join(os.path.dirname(sys.executable), "mlflow"), *words[1:words.index("-p")], "-h",
                      "127.0.0.1", "-p", str(port)], work, env, tmp_path / "serve.log", "mlflow models serve",
        timeout=180)
    try:
        body = ask.split(" -d '", 1)[1].rstrip("'").encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request) as response:
            answered = json.loads(response.read())["predictions"]
    finally:
        stop_server(server)
    assert answered["class"] == [c.decode() for c in expected["class"].numpy()]
    np.testing.assert_allclose(answered["probabilities"], expected["probabilities"].numpy(), atol=1e-5)

    done = run_cli_in_process([*scaled(train_image, ("$PWD", str(work))), *budget, "tracking.run_name=image"],
                              cwd=work)
    assert done.returncode == 0, done.stderr[-3000:]
    (image_run,) = [r for r in mlflow_runs(work) if r.info.run_name == "image"]
    assert image_run.data.tags["model.image_size"] == "[16, 16]"  # the preset's converter resizes inside
    assert os.path.isfile(image_run.data.tags["export.tflite.path"])
