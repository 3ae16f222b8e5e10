"""The debug= presets end to end on the digits: each does what its file says and reports it.

fast, limit, profile and eager run as one multirun (one process: the suite's time); overfit
and numerics run alone (numerics switches TensorFlow's checks on for the whole process).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import mlflow_client, mlflow_runs, tensorboard_runs
from tests.helpers.in_process import run_cli_in_process

# one worker runs the whole module: its module-scoped fixture is built once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_debug")]


@pytest.fixture(scope="module")
def four_presets(tmp_path_factory):
    launch = tmp_path_factory.mktemp("debug")
    done = run_cli_in_process(["debug=fast,limit,profile,eager"], cwd=launch, multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    logs = {}
    (sweep,) = (launch / "multirun").glob("*/*")  # multirun/<date>/<time>, Hydra's default
    for job in sorted(sweep.iterdir()):
        if (job / "tfx_hydra.log").is_file():
            overrides = (job / ".hydra" / "overrides.yaml").read_text()
            logs[re.search(r"debug=(\w+)", overrides).group(1)] = (job / "tfx_hydra.log").read_text()
    return launch, logs


def epochs_and_examples(log: str) -> tuple[int, tuple[int, int, int]]:
    counts = re.search(r"data: digits, ([\d,]+) train / ([\d,]+) validation / ([\d,]+) test", log)
    return len(re.findall(r"\bepoch \d+/\d+ ", log)), tuple(int(c.replace(",", "")) for c in counts.groups())


def test_fast_runs_two_batches_of_each_split_once_and_keeps_nothing(four_presets):
    launch, logs = four_presets
    epochs, examples = epochs_and_examples(logs["fast"])
    assert epochs == 1 and examples == (64, 64, 64)  # 2 batches of 32 per split
    assert "not tracked" in logs["fast"] and "export:" not in logs["fast"]


def test_limit_reads_a_tenth_of_each_split(four_presets):
    _, logs = four_presets
    epochs, examples = epochs_and_examples(logs["limit"])
    # digits: 1,293 / 144 / 360 examples = 41 / 5 / 12 batches of 32; a tenth: 4 / 1 (at least one) / 1
    assert epochs == 5 and examples == (128, 32, 32)
    assert "export: savedmodel written" in logs["limit"]  # otherwise a real run


def test_profile_writes_a_trace_and_says_how_to_open_it(four_presets):
    _, logs = four_presets
    said = re.search(r"profile: batches \[3, 5\] traced in (\S+)\. Open it: pip install tensorboard-plugin-profile, "
                     r"then tensorboard --logdir (\S+) ", logs["profile"])
    assert said, logs["profile"][-2000:]
    (trace,) = Path(said.group(1)).glob("*.xplane.pb")
    assert Path(said.group(2)).name == "tensorboard"
    # each profiled batch is a step to TensorFlow's profiler: a root trace (_r=1) with its step number
    # (without one its Profile tab says "No step marker observed" and shows no input-pipeline share)
    assert step_markers(trace) == [3, 4, 5]


def test_numerics_on_a_real_infinity_says_one_thing_on_the_terminal(tmp_path, capfd):
    """A learning rate of 1e30 overflows the weights: TensorFlow's C++ side also writes the whole
    check_numerics report (~80 lines) to descriptor 2 as the step aborts; it goes to the job log."""
    done = run_cli_in_process(["debug=numerics", "optimizer=sgd", "optimizer.learning_rate=1e30"], cwd=tmp_path)
    written = capfd.readouterr()  # descriptor 2 itself, where the C++ side writes
    assert done.returncode == 1
    shown = done.stdout + done.stderr + written.out + written.err
    assert "Local rendezvous" not in shown and "Detected Infinity or NaN" not in shown, shown[-3000:]
    (said,) = [line for line in shown.splitlines() if line.startswith("TrainingError: ")]
    assert re.fullmatch(r"TrainingError: trainer\.check_numerics: op '\w+' in layer '\w+' produced the first NaN or "
                        r"infinity \(output \d+\), made at \S+\.py:\d+ \(\w+\)\.", said), said
    (log,) = (tmp_path / "outputs" / "debug").glob("*/*/tfx_hydra.log")
    assert "Detected Infinity or NaN" in log.read_text()  # the whole report, kept where a reader can look


def step_markers(path: Path) -> list[int]:
    """The step numbers of the trace's step markers: host events with a `step_num` and `_r` = 1."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    steps = []
    for plane in space.planes:
        names = {key: metadata.name for key, metadata in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                stats = {names.get(stat.metadata_id): stat.int64_value or stat.uint64_value for stat in event.stats}
                if stats.get("_r") == 1 and "step_num" in stats:
                    steps.append(stats["step_num"])
    return sorted(steps)


def test_one_tensorboard_command_shows_a_sweeps_jobs_apart(four_presets):
    launch, _ = four_presets
    runs = tensorboard_runs(launch)  # the README's command; limit (job 1) and profile (job 2) log to TensorBoard
    jobs = {re.search(r"multirun/[^/]+/[^/]+/(\d+)/tensorboard/", r).group(1) for r in runs if "/train" in r}
    assert jobs == {"1", "2"}, runs
    assert not [r for r in runs if "mlruns" in r]  # MLflow's copies are not shown twice


def test_eager_runs_eagerly_and_says_it_is_slow(four_presets):
    launch, logs = four_presets
    assert "trainer.run_eagerly=true: every step runs op by op in Python" in logs["eager"]
    assert epochs_and_examples(logs["eager"]) == (1, (64, 64, 64))
    tracked = {r.data.tags.get("mlflow.runName") for r in mlflow_runs(launch) if "mlflow.parentRunId" in r.data.tags}
    assert len(tracked) == 2  # limit and profile; fast and eager track nothing


def test_overfit_says_whether_the_training_loss_neared_zero(tmp_path):
    done = run_cli_in_process(["debug=overfit"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    said = re.search(r"overfit check: training loss ([\d.]+) -> ([\d.]+) in 100 epochs on 128 examples: the model can "
                     r"fit them", done.stdout)
    assert said and float(said.group(2)) < 0.05 * float(said.group(1)), done.stdout[-2000:]
    (run,) = mlflow_runs(tmp_path)
    assert run.data.tags["debug.overfit"] == "passed" and run.data.metrics["loss"] < 0.05
    # a model that cannot fit them: tests/unit/test_debug.py (the verdict's other branch, no CLI needed)


def test_numerics_names_the_op_that_made_the_first_nan(tmp_path):
    """A model whose layer really produces a NaN (tests/helpers/planted.py: tf.where picks a NaN constant
    after 3 batches): the same on every CPU, as the op itself makes it."""
    done = run_cli_in_process(["debug=numerics", "model._target_=tests.helpers.planted.mlp_with_nan_after",
                    "+model.nan_after_batches=3", "trainer.epochs=2"], cwd=tmp_path)
    assert done.returncode == 1
    said = re.search(r"TrainingError: trainer\.check_numerics: op '(\w+)' in layer 'nan_after\w*' produced the first "
                     r"NaN or infinity \(output 0\), made at \S+planted\.py:\d+ \(call\)\.", done.stdout + done.stderr)
    assert said, (done.stdout + done.stderr)[-3000:]
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED" and "check_numerics" in run.data.tags["error"]
    assert mlflow_client(tmp_path).get_metric_history(run.info.run_id, "epoch/loss") == []  # it stopped in epoch 1
