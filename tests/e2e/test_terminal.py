"""What a person sees: the CLI's terminal output in a subprocess, piped (Slurm, nohup, CI) and on a
real terminal (a pseudo-terminal 60 columns wide), for a default run, a verbose run and a parallel sweep."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import QUICK, mlflow_client, mlflow_runs
from tests.helpers.terminal import NATIVE_CHATTER, assert_no_native_chatter, new_user_env, run_on_a_terminal

pytestmark = pytest.mark.slow


def run_piped(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tfx_hydra", *args], cwd=cwd, env=new_user_env(),
                          capture_output=True, text=True, timeout=300)


def output_dir_of(launch: Path) -> Path:
    (run,) = mlflow_runs(launch)
    return Path(run.data.params["paths.output_dir"])


def assert_summary_keeps_paths_whole(shown: str, output_dir: Path) -> None:
    export = output_dir / "export" / "mlp" / "1"
    (row,) = [line for line in shown.splitlines() if "export (savedmodel)" in line]
    assert str(export) in row, shown[-3000:]  # the whole path on its own row: never folded mid-word
    assert any(re.search(rf"│ outputs\s+│ {re.escape(str(output_dir))}\s+│", line) for line in shown.splitlines())


def assert_model_summary_is_full_width(launch: Path, output_dir: Path) -> None:
    on_disk = (output_dir / "model_summary" / "summary.txt").read_text()
    assert "Param #" in on_disk and "Trainable params" in on_disk
    assert max(len(line) for line in on_disk.splitlines()) == 110  # whatever the terminal (80 in a pipe)
    (run,) = mlflow_runs(launch)
    client = mlflow_client(launch)
    # one naming scheme: the disk's layout is MLflow's (model/ there is the MLflow model)
    in_mlflow = Path(client.download_artifacts(run.info.run_id, "model_summary/summary.txt", str(launch / "dl")))
    assert in_mlflow.read_text() == on_disk
    assert (output_dir / "export" / "mlp" / "1" / "saved_model.pb").is_file()
    assert "saved_model.pb" in {Path(a.path).name for a in client.list_artifacts(run.info.run_id, "export/mlp/1")}


def test_a_piped_default_run_starts_with_its_own_line_and_keeps_tensorflows_in_the_job_log(tmp_path):
    done = run_piped(QUICK, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    shown = done.stdout + done.stderr
    assert_no_native_chatter(shown)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("tfx_hydra run: MLflow run "), shown[:2000]
    # what was chosen, in the options' words, not import paths
    assert lines[1:8] == ["tfx_hydra hardware: the cpu profile (no GPU is visible)",
                          "tfx_hydra precision: float32 (precision=auto: the cpu profile's)",
                          "tfx_hydra strategy: default, 1 replica (strategy=auto: no GPU is visible)",
                          "tfx_hydra batches: 32 examples per step (32 per replica), 1 step per call "
                          "(steps_per_execution=auto: the run's 30 batches would not fill one call of 64)",
                          "tfx_hydra data: digits, 300 train / 144 validation / 360 test examples; inputs (8, 8), "
                          f"10 classes; cache: memory, {lines[5].split('cache: memory, ')[-1]}",
                          "tfx_hydra model: mlp, 9,610 parameters",
                          "tfx_hydra optimizer: adam, learning rate 0.001"], shown[:3000]
    assert re.search(r"cache: memory, 207\.3 KiB of [\d.]+ GiB \(half of [\d.]+ GiB available\)$", lines[5]), lines[5]
    assert "tfx_hydra." not in done.stdout.replace("tfx_hydra.log", "")  # no module path anywhere
    assert done.stderr == ""  # a run that went well writes nothing to stderr
    output_dir = output_dir_of(tmp_path)
    logged = (output_dir / "tfx_hydra.log").read_text()
    assert re.search(r"\]\[tfx_hydra\.native\]\[INFO\] - \S", logged)  # TensorFlow's start-up lines are kept here
    assert "[tfx_hydra.settings.compose][DEBUG]" not in logged  # the import paths are debug lines, off by default
    assert_summary_keeps_paths_whole(done.stdout, output_dir)
    assert_model_summary_is_full_width(tmp_path, output_dir)


def test_on_a_narrow_terminal_the_same_run_is_as_clean_and_no_path_breaks(tmp_path):
    """...and on a machine's first run: matplotlib builds its font cache then, and says so in the log only."""
    status, shown = run_on_a_terminal(QUICK, tmp_path, columns=60, env={"MPLCONFIGDIR": str(tmp_path / "mpl")})
    assert status == 0, shown[-3000:]
    assert_no_native_chatter(shown)
    assert "fontManager" not in shown and "generated new fontManager" in (output_dir_of(tmp_path) /
                                                                          "tfx_hydra.log").read_text()
    assert shown.lstrip().startswith("tfx_hydra run: MLflow run "), shown[:2000]
    output_dir = output_dir_of(tmp_path)
    assert_summary_keeps_paths_whole(shown, output_dir)
    assert_model_summary_is_full_width(tmp_path, output_dir)


def test_hydra_verbose_shows_tensorflows_start_up_lines(tmp_path):
    done = run_piped([*QUICK, "trainer.epochs=1", "export=none", "hydra.verbose=tfx_hydra.native"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    before_ours = done.stdout.split("tfx_hydra hardware:")[0]
    assert any(text in before_ours for text in NATIVE_CHATTER), done.stdout[:3000]


def test_a_parallel_sweep_labels_each_line_with_its_job_and_each_job_logs_its_own(tmp_path):
    """On a terminal, as a user runs it: the jobs share it, so none draws a progress bar (a bar cut into another
    job's lines, `epoch 1/6 ━━━… 0/41 -:--:--[job 2] tfx_hydra batches: ...`); each line says whose it is."""
    status, shown = run_on_a_terminal(["-m", "hydra/launcher=parallel", "trainer.epochs=1", "data.limit=200",
                                       "export=none", "optimizer.learning_rate=0.001,0.01"], tmp_path, columns=200)
    assert status == 0, shown[-3000:]
    assert_no_native_chatter(shown)
    assert "━" not in shown and "-:--:--" not in shown, shown[-3000:]  # no bar, none half drawn
    done = subprocess.CompletedProcess([], status, shown, "")
    jobs_lines = [line for line in done.stdout.splitlines() if line.startswith("[job ")]
    for num, rate in ((0, "0.001"), (1, "0.01")):
        own = [line for line in jobs_lines if line.startswith(f"[job {num}] ")]
        assert f"[job {num}] tfx_hydra optimizer: adam, learning rate {rate}" in own
        assert any(line.startswith(f"[job {num}] epoch 1/1 ") for line in own)
    unlabelled = [line for line in done.stdout.splitlines() if line.startswith(("tfx_hydra ", "epoch "))
                  and not line.startswith("tfx_hydra sweep: ")]
    assert unlabelled == []  # every job's line says whose it is
    (sweep_dir,) = [p for p in (tmp_path / "multirun").glob("*/*") if p.is_dir()]
    for num, rate, other in ((0, "0.001", "0.01"), (1, "0.01", "0.001")):
        logged = (sweep_dir / str(num) / "tfx_hydra.log").read_text()
        assert f"optimizer: adam, learning rate {rate}\n" in logged
        assert f"optimizer: adam, learning rate {other}\n" not in logged
    summary = done.stdout[done.stdout.index("tfx_hydra: sweep complete"):]
    assert "jobs              │ 2 finished, 0 failed, 0 killed" in summary
    assert f"sweep dir         │ {sweep_dir}" in summary


def test_the_tfrecord_converter_on_a_terminal_says_what_it_wrote_and_nothing_of_tensorflows(tmp_path):
    status, shown = run_on_a_terminal([str(tmp_path / "tfr"), "data=digits"], tmp_path, columns=120,
                                      module="tfx_hydra.data.to_tfrecord")
    assert status == 0, shown[-3000:]
    assert_no_native_chatter(shown)
    assert shown.splitlines()[0] == (f"wrote {{'train': 1293, 'validation': 144, 'test': 360}} examples to "
                                     f"{tmp_path / 'tfr'}"), shown[:2000]


def test_debug_overfit_on_a_terminal_has_no_cache_warnings_and_an_unbroken_bar(tmp_path):
    """debug=overfit reads 4 batches of a cached split 100 times: tf.data warned each time it threw a
    partly read cache away (102 lines, spliced into the progress bar). The limit now comes before the cache."""
    status, shown = run_on_a_terminal(["debug=overfit"], tmp_path, columns=120)
    assert status == 0, shown[-3000:]
    assert_no_native_chatter(shown)
    assert "did not fully read the dataset being cached" not in shown, shown[-3000:]
    epochs = [line for line in shown.splitlines() if re.search(r"epoch \d+/100  accuracy", line)]
    assert len(epochs) == 100 and all(re.match(r"epoch \d+/100  accuracy", line) for line in epochs), epochs[:5]
    # an epoch of one call (4 batches, 64 steps per call): its bar still shows the speed
    assert re.search(r"━ 4/4 [\d,]+ ex/s", shown), shown[:3000]
    assert "overfit check: training loss" in shown and "the model can fit them" in shown


def test_a_search_on_a_terminal_shows_the_searchs_own_lines_and_a_table_that_fits(tmp_path):
    status, shown = run_on_a_terminal(["-m", "hparams_search=optuna", "hparams_search.n_trials=2", "trainer.epochs=2",
                                       "data.limit=200", "export=none", "export.mlflow_model=false"],
                                      tmp_path, columns=120)
    assert status == 0, shown[-3000:]
    assert_no_native_chatter(shown)
    assert "A new study created" not in shown and "[I " not in shown, shown[:3000]  # Optuna's: in sweep.log
    assert "tfx_hydra search: study 'mlp-digits' (new)" in shown
    table = shown[shown.index("tfx_hydra: sweep complete"):]
    assert max(len(line) for line in table.splitlines()) <= 120, table
    assert re.search(r"\n1\s+FINISHED\s+2\s+\d\.\d{4}\s.*trial 1: lr \S+, units \d+, dropout \S+, batch \d+\n", table)


def test_evaluate_and_sync_on_a_terminal_say_their_own_lines_only(tmp_path):
    trained = run_piped([*QUICK, "trainer.epochs=1"], tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    output_dir = output_dir_of(tmp_path)
    export = output_dir / "export" / "mlp" / "1"
    status, shown = run_on_a_terminal(["mode=evaluate", f"export.source={export}"], tmp_path, columns=120)
    assert status == 0, shown[-3000:]
    assert_no_native_chatter(shown)
    said = [line for line in shown.splitlines() if line.startswith("tfx_hydra evaluate: ")]
    assert said == [f"tfx_hydra evaluate: the SavedModel at {export}",
                    "tfx_hydra evaluate: on the test split of data=digits: 360 examples, inputs (8, 8), 10 classes"]
    status, shown = run_on_a_terminal([str(output_dir)], tmp_path, columns=120, module="tfx_hydra.sync")
    lines = shown.strip().splitlines()
    assert status == 1 and len(lines) == 2, shown  # the message and its fix, nothing else
    assert f"{output_dir} has nothing to sync (no mlflow_offline/ folder)" in lines[0] and "Fix: " in lines[1]


def test_ctrl_c_in_a_search_on_a_terminal_erases_the_bar_before_saying_how_to_resume(tmp_path):
    """The interrupt's line was glued to the live bar, and a stale bar was drawn again under the search's
    summary: the bar is now erased when a fit ends by an exception, before anything else is said."""
    status, shown = run_on_a_terminal(["-m", "hparams_search=optuna", "hparams_search.n_trials=2", "trainer.epochs=3",
                                       "data=synthetic", "data.num_examples=100000", "trainer.steps_per_execution=1",
                                       "export=none", "export.mlflow_model=false"],
                                      tmp_path, columns=120, interrupt_after="ex/s 0:")  # mid-epoch: the bar is up
    assert status == 130, shown[-3000:]
    said = shown.index("tfx_hydra: interrupted")
    assert shown[said - 1] in "\r\n", shown[said - 200:said + 200]  # at the start of a line, not after a bar
    assert "━" not in shown[said:], shown[said:]  # no bar drawn again under what follows
    assert_no_native_chatter(shown)  # nor tf.data's line about a cache read partly, as the process ends


def test_numerics_on_a_healthy_model_on_a_terminal_says_it_checked(tmp_path):
    status, shown = run_on_a_terminal(["debug=numerics", "trainer.epochs=1"], tmp_path, columns=120)
    assert status == 0, shown[-3000:]
    assert_no_native_chatter(shown)
    assert "numerics: checked every op of the training and validation steps, 1 epoch over 1,293 training " \
           "examples: no NaN or infinity." in shown, shown[-3000:]


def test_a_grid_sweep_on_a_terminal_names_its_jobs_by_their_values(tmp_path):
    status, shown = run_on_a_terminal(["-m", "optimizer.learning_rate=0.001,0.01", "trainer.epochs=1", "data.limit=200",
                                       "export=none", "export.mlflow_model=false"], tmp_path, columns=120)
    assert status == 0, shown[-3000:]
    assert_no_native_chatter(shown)
    table = shown[shown.index("tfx_hydra: sweep complete"):]
    rows = [re.search(rf"\n{n}\s+FINISHED\s+\d\.\d{{4}}( \*)?\s+job {n}: lr {lr}\n", table) for n, lr in ((0, "1e-3"),
                                                                                                          (1, "1e-2"))]
    assert all(rows), table
    assert max(len(row.group(0).strip()) for row in rows) <= 120  # the job rows; the sweep dir's row is a path
