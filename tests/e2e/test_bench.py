"""Benchmarks run in their quick modes: they work and print their ratios (no speed is asserted)."""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys

import pytest

from tests.helpers import REPO, cli_env
from tests.helpers.in_process import run_in_process

pytestmark = pytest.mark.slow


def bench_script(name: str):
    """bench/NAME.py as a module, imported as `python bench/NAME.py` runs it: bench/ first on the import
    path, where its harness is."""
    if str(REPO / "bench") not in sys.path:
        sys.path.insert(0, str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(tmp_path, name: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`python bench/NAME.py ARGS --json OUT` as a user runs it, from `tmp_path`: what it printed, and its JSON."""
    out = tmp_path / f"{name}.json"
    done = subprocess.run([sys.executable, str(REPO / "bench" / f"{name}.py"), *args, "--json", str(out)],
                          cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads(out.read_text())


def test_gpu_precision_benchmark_runs_tiny_on_cpu(tmp_path):
    """float32 and mixed_bfloat16 without XLA, in one process: the script's grid, timing and ratios, a
    mixed policy set as a run sets it. A CPU compiles XLA slowly (20 s more for this tiny model) and
    emulates float16, so the full 3 x 2 grid would take minutes here (on a GPU it is the default)."""
    policies, xla = ["float32", "mixed_bfloat16"], ["off"]
    out = tmp_path / "grid.json"
    # in this process: the script sets no thread count, and the precision it leaves set is put back
    script = bench_script("gpu_precision")

    def grid() -> None:  # the script's main returns its report, not an exit status
        script.main()

    done = run_in_process(grid, ["gpu_precision.py", "--tiny", "--policies", *policies, "--xla", *xla, "--json",
                                 str(out)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ratio to fp32 without XLA:" in done.stdout
    results = json.loads(out.read_text())["results"]
    assert {(r["policy"], r["xla"]) for r in results} == {(p, x) for p in policies for x in xla}
    baseline = next(r for r in results if (r["policy"], r["xla"]) == ("float32", "off"))
    assert baseline["ratio"] == 1.0
    assert all(r["examples_per_sec"] > 0 for r in results)
    for r in results:
        assert r["ratio"] == pytest.approx(r["examples_per_sec"] / baseline["examples_per_sec"], rel=1e-3)


def test_seed_vs_framework_runs_quick_and_prints_the_ratios(tmp_path):
    done, report = run_script(tmp_path, "seed_vs_framework", "--quick")
    assert "median B/A: training examples/s" in done.stdout and "whole-process wall" in done.stdout
    assert "--cfg job" in done.stdout and "vs import tensorflow" in done.stdout
    (pair,) = report["pairs"]
    for side in ("plain", "framework"):
        assert pair[side]["examples_per_sec"] > 0 and pair[side]["wall_seconds"] > 0
        assert 0.5 < pair[side]["val_accuracy"] <= 1.0  # the synthetic digits are learnable
    assert pair["ratio"]["examples_per_sec"] == pytest.approx(
        pair["framework"]["examples_per_sec"] / pair["plain"]["examples_per_sec"])
    assert report["median_ratio"] == pair["ratio"]
    assert 0 < report["startup"]["ratio"] < 1



def test_conv_kernels_benchmark_times_each_convolution_and_a_step_of_them_only(tmp_path):
    """bench/conv_kernels.py --quick: the reference CNN's three convolutions, each forward and with both gradients,
    and the step of them only: its FLOPs are the analytic count (the first layer's input gradient left out)."""
    done, report = run_script(tmp_path, "conv_kernels", "--quick")
    layers = report["layers"]
    assert list(layers) == ["64x64x3 -> 32", "32x32x32 -> 64", "16x16x64 -> 128"]
    assert [layer["forward_flops"] for layer in layers.values()] == [
        2 * 8 * 64 * 64 * 3 * 32 * 9, 2 * 8 * 32 * 32 * 32 * 64 * 9, 2 * 8 * 16 * 16 * 64 * 128 * 9]
    for layer in layers.values():
        assert layer["forward_gflops"] == pytest.approx(layer["forward_flops"] / layer["forward_seconds"] / 1e9)
        assert layer["training_gflops"] == pytest.approx(3 * layer["forward_flops"] / layer["training_seconds"] / 1e9)
        assert layer["training_seconds"] > 0 and layer["forward_seconds"] > 0  # timings: no order asserted
    only = report["convolutions_only"]
    assert only["training_flops_per_example"] == 2 * 64 * 64 * 3 * 32 * 9 * 2 + 3 * 2 * 9 * (
        32 * 32 * 32 * 64 + 16 * 16 * 64 * 128)
    assert 0 < only["mfu"] < 2 and report["peak_source"].startswith("measured: a 2048x2048 float32 matmul")
    assert f"{only['examples_per_sec']:,.0f} examples/s, mfu {only['mfu']:.0%}" in done.stdout


def test_mfu_benchmark_runs_quick_and_prints_both_sides_mfu_of_one_count_and_one_peak(tmp_path):
    """bench/mfu.py --quick: model=cnn through tfx_hydra and a plain Keras script; each side's MFU is its examples/s x
    the one FLOP count / the one peak (the framework's as its run logged it); then one lever's run against it."""
    done, report = run_script(tmp_path, "mfu", "--quick")
    assert "plain mfu" in done.stdout and "tfx mfu" in done.stdout and "peak:" in done.stdout
    (row,) = report["models"].values()
    per_example, peak = row["training_flops_per_example"], report["peak"]
    assert per_example > 1e6 and report["peak_source"].startswith("measured: a 2048x2048 float32 matmul")
    for side in ("plain", "framework"):
        assert 0 < row[side]["mfu"] < 1
    assert row["plain"]["mfu"] == pytest.approx(row["plain"]["examples_per_sec"] * per_example / peak)
    assert row["framework"]["mfu"] == pytest.approx(row["framework"]["examples_per_sec"] * per_example / peak)
    assert row["framework"]["mfu_logged"] == pytest.approx(row["framework"]["mfu"], rel=1e-3)  # what its run logged
    assert row["ratio"]["mfu"] == pytest.approx(row["framework"]["mfu"] / row["plain"]["mfu"])
    # the step alone on one batch held in memory, its epochs timed as the plain script's
    alone = row["step_alone"]
    assert len(alone["epochs_examples_per_sec"]) == 2 and 0 < alone["mfu"] < 1
    assert alone["mfu"] == pytest.approx(alone["examples_per_sec"] * per_example / peak)
    assert "alone mfu" in done.stdout and f"{alone['mfu']:.1%}" in done.stdout
    # the cpu profile's auto gives the conv net every core (its builder declares it); the lever row takes one
    assert row["framework"]["intra_op_threads"] == "0 (every core): the model function declares it (intra_op_threads)"
    (lever,) = report["levers"]["cnn"].values()
    assert lever["intra_op_threads"] == "1: set by hardware.intra_op_threads"
    assert lever["vs_default"] == pytest.approx(lever["examples_per_sec"] / row["framework"]["examples_per_sec"])
    assert "hardware.intra_op_threads=1" in done.stdout and "vs default" in done.stdout


def test_input_bound_benchmark_runs_quick_with_the_cache_lever_and_the_service_side_by_side(tmp_path):
    """bench/input_bound.py --quick: one image folder, four runs of the CLI (decoded every epoch, the cache lever,
    tf.data service with 1 and 2 local workers), each row its run's MLflow figures and its ratio to the first."""
    done, report = run_script(tmp_path, "input_bound", "--quick")
    cases = report["cases"]
    assert list(cases) == ["decoded every epoch (data.cache=false)", "the cache lever (data.cache=auto)",
                           "tf.data service, 1 local worker", "tf.data service, 2 local workers"]
    base = cases["decoded every epoch (data.cache=false)"]["examples_per_sec"]
    for name, row in cases.items():
        assert len(row["epochs_examples_per_sec"]) == report["epochs"] and row["examples_per_sec"] > 0
        assert row["ratio"] == pytest.approx(row["examples_per_sec"] / base)
        assert name in done.stdout


def test_input_pipeline_benchmark_runs_small_and_prints_the_ratios(tmp_path):
    out = tmp_path / "input.json"
    temp = tmp_path / "system-temp"
    temp.mkdir()
    done = subprocess.run([sys.executable, str(REPO / "bench" / "input_pipeline.py"), "--train", "1500", "--epochs",
                           "2", "--repeats", "1", "--shards", "2", "--json", str(out)],
                          cwd=tmp_path, env=cli_env() | {"TMPDIR": str(temp)}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [p.name for p in temp.iterdir() if p.name.startswith("tfx_hydra")] == []  # its data is gone
    assert "ratio TFRecord streamed / in-memory:" in done.stdout and "(target >= 0.95)" in done.stdout
    report = json.loads(out.read_text())
    rates = report["examples_per_sec"]
    assert set(rates) == {"A in-memory", "B tfrecord streamed", "B' tfrecord cached"} and min(rates.values()) > 0
    assert report["ratio_streamed"] == pytest.approx(rates["B tfrecord streamed"] / rates["A in-memory"])


def test_nonfinite_guard_benchmark_runs_quick_and_prints_the_weight_checks_cost(tmp_path):
    done, report = run_script(tmp_path, "nonfinite_guard", "--quick")
    assert "B/A" in done.stdout and "(target <= 1.01)" in done.stdout and "one weight check:" in done.stdout
    sides = report["epoch_seconds"]
    assert len(sides["A_without_weight_check"]) == 2 and len(sides["B_with_weight_check"]) == 2  # epochs 3, 5 / 2, 4
    assert report["ratio_B_over_A"] == pytest.approx(
        statistics.median(sides["B_with_weight_check"]) / statistics.median(sides["A_without_weight_check"]))
    assert 0 < report["weight_check_seconds"] < min(sides["B_with_weight_check"])
    assert report["data_check_seconds_60000x784"]["uint8"] < report["data_check_seconds_60000x784"]["float32"]


def test_startup_benchmark_runs_a_pair_and_prints_what_the_freeze_saves(tmp_path):
    out = tmp_path / "startup.json"
    done = subprocess.run([sys.executable, str(REPO / "bench" / "startup.py"), "--quick", "--epochs", "1",
                           "--json", str(out)], cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "median A/B process CPU" in done.stdout and "in full collections, s" in done.stdout
    report = json.loads(out.read_text())
    (shipped,), (default,) = report["frozen"], report["default"]
    assert shipped["frozen_objects"] > 100_000 and default["frozen_objects"] == 0  # the switch did switch
    assert shipped["full_collections"] > 0 and default["full_collections"] > 0
    assert report["cpu_ratio"] == pytest.approx(shipped["cpu_seconds"] / default["cpu_seconds"])


def test_the_regression_recipe_on_diabetes_is_as_good_as_ridge_on_the_same_split(tmp_path):
    """Not a speed: the recipe's test RMSE on scikit-learn's diabetes data (offline) next to Ridge's on the
    very same rows, so a broken target standardisation or split would show as a number far off."""
    out = tmp_path / "ridge.json"
    done = subprocess.run([sys.executable, str(REPO / "bench" / "regression_vs_ridge.py"), "--seeds", "0", "--json",
                           str(out)], cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = json.loads(out.read_text())["runs"]
    assert (run["train"], run["validation"], run["test"]) == (300, 53, 89)  # the recipe's split of 442 rows
    assert run["test_rmse"] < 1.15 * run["ridge_rmse"] and run["test_rmse"] < 0.9 * run["mean_baseline_rmse"]
    assert 0.2 < run["test_r2"] < 1 and 1 < run["epochs_trained"] < 200  # early stopping ended it
    assert "median tfx_hydra / Ridge test RMSE" in done.stdout


def test_serving_benchmark_runs_quick_and_prints_each_formats_latency(tmp_path):
    """One run's four exports loaded side by side in this process (the run itself trains in its own), each
    timed at batch 1 and 32; --quick leaves the MLflow server out."""
    out = tmp_path / "serving.json"
    script = bench_script("serving")

    def measure() -> None:  # the script's main returns its report, not an exit status
        script.main()

    done = run_in_process(measure, ["serving.py", "--quick", "--json", str(out)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"SavedModel (TensorFlow)", "TFLite (LiteRT)", "ONNX (ONNX Runtime)",
                                      ".keras (Keras, eager call)"}
    for figures in report["results"].values():
        assert 0 < figures["batch1_p50_ms"] <= figures["batch1_p99_ms"] and figures["batch32_examples_per_sec"] > 0
    assert f"fastest at batch 1: {report['fastest_batch1']}" in done.stdout


def test_backup_cost_benchmark_runs_quick_and_prints_what_auto_spends(tmp_path):
    done, report = run_script(tmp_path, "backup_cost", "--quick")
    assert "auto every" in done.stdout and "auto cost" in done.stdout
    rows = {row["model"]: row for row in report["backups"]}
    assert set(rows) == {"mlp", "cnn"}
    for row in rows.values():
        assert row["backup_mib"] > row["weights"] * 4 * 2 / 2**20  # the weights and Adam's two moments, at least
        assert row["auto_interval_s"] == max(600, 50 * row["write_s"])
        assert row["auto_share"] < 0.02  # by construction: under 2 % of the time


def test_cpu_precision_benchmark_runs_quick_and_says_what_auto_picks(tmp_path):
    done, report = run_script(tmp_path, "cpu_precision", "--quick")
    assert "CPU AMX-BF16: " in done.stdout and "precision=auto picks" in done.stdout
    rows = {row["model"]: row for row in report["families"]}
    assert set(rows) == {"mlp", "cnn"}
    assert rows["mlp"]["auto_picks"] == "float32"  # 784 values: too small to gain, with or without AMX
    assert rows["cnn"]["auto_picks"] == ("mixed_bfloat16" if report["amx_bf16"] else "float32")
    assert all(row["fp32_ex_s"] > 0 and row["bf16_ex_s"] > 0 for row in rows.values())


def test_scale_benchmark_runs_quick_on_a_users_own_pipeline(tmp_path):
    """bench/scale.py's pipeline part (its cheapest: the others run the same measuring code on files it writes,
    each taking minutes even when tiny): tfx_hydra on the user's own source at 1x and 10x, beside tf.data."""
    done, report = run_script(tmp_path, "scale", "--quick", "--parts", "pipeline")
    figures = report["pipeline"]
    assert [figures[scale]["examples"] for scale in ("1x", "10x")] == [1_000, 10_000]
    for row in figures.values():
        assert row["seconds"] > row["tf_data_seconds"] * 0.5 and row["peak_mib"] > 300  # two real processes
    assert figures["1x"]["tfx_hydra_ex_per_s"] > 0 and figures["1x"]["keras_ex_per_s"] > 0  # both trained an epoch
    assert "pipeline:" in done.stdout


def test_keras_hub_benchmark_runs_a_pair_quick(tmp_path):
    """bench/keras_hub.py --quick: the hand-written keras-hub script and the tfx_hydra run on one generated preset
    and one folder of reviews, each timed and measured in its own process."""
    done, report = run_script(tmp_path, "keras_hub", "--quick")
    (pair,) = report["pairs"]
    for side in ("A", "B"):
        assert pair[side]["examples_per_sec"] > 0 and pair[side]["peak_rss_mib"] > 100, side
    ratio = pair["B"]["examples_per_sec"] / pair["A"]["examples_per_sec"]
    assert report["examples_per_sec_ratio"] == pytest.approx(ratio)
    assert "medians: training examples/s B/A" in done.stdout
