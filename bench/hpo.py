"""Hyperparameter search, measured side by side in one run (`hparams_search=optuna`).

    python bench/hpo.py                 # 24 trials x up to 10 epochs, 3 seeds for the KerasTuner match (~25 min here)
    python bench/hpo.py --quick         # 2 trials x 2 epochs, 1 seed: checks the script, the ratios mean little
    python bench/hpo.py --skip-kerastuner --json hpo.json
    pip install keras-tuner             # for the KerasTuner part only (not a tfx_hydra dependency)

1. Pruning pays: the same seeded TPE search (the MLP on the digits; learning rate 1e-5..1 on a log
   scale, so some trials are hopeless; units; dropout) with the median pruner vs none. Reported:
   total epochs trained (target <= 0.6x) and the best val_accuracy (target: within 0.5 points).
2. Against the Keras peer: KerasTuner's Hyperband on the same model, space and data (the same
   tf.data pipelines, built by tfx_hydra's digits option), its max_epochs our trainer.epochs; our
   pruned TPE search gets the epochs Hyperband trained as its budget (as many trials as part 1's
   pruned search trained that many epochs in). Best val_accuracy, median of the seeds (target: ours
   >= KerasTuner's), wall time beside. KerasTuner scores a trial by its best epoch: the comparison
   uses the same (the best val_accuracy any trial reported); our search's own objective, the last
   epoch's, is printed beside it.
3. Spreading pays: the same search (pruner none, so both runs train the same epochs) as one command
   vs two cooperating commands on one study, on this machine's cores: wall ratio; each trial once.
4. What batches cost, and workers save: the same pruned search with hydra/launcher=parallel, as batches
   of 2 (`hparams_search.n_jobs=2`) and as 2 workers (`hparams_search.workers=2`): the seconds workers
   waited with nothing to run (`sweep.idle_worker_seconds`, target <= 5 % with workers) and the wall.
5. A trial's fixed cost: a 10-trial search (pruner none, 2 epochs) in one process, every trial's plots
   and exports (`hparams_search.trial_artifacts=all`, what every trial made before) vs the leading
   trials' only (the default): seconds per trial beyond its steady epochs (the first epoch's tracing
   counts as fixed cost), from the child runs' start and end and their `epoch_seconds`; beside them,
   the floor: the same model built, compiled and fitted by Keras alone, 10 times in one process, as a
   user writes it and with its state built before the first trace (as tfx_hydra's trainer does: under
   the default strategy Keras otherwise traces the train step twice).
   The floor again with TensorFlow's graph optimizer (grappler) off: its share of a new model's first call.
   Both again with one step per tf.function call (`trainer.steps_per_execution=1`) instead of `auto`
   (the cpu profile's 64, or 1 for a trial too short to fill one call): Keras' multi-step loop (a while
   loop of conds) costs every new model a longer trace, and saves each step a Python call; a whole
   trial's seconds are printed beside its fixed cost.
6. Memory over many trials: a 50-trial search (1 epoch) in one worker process: its resident memory
   (psutil) once 5 trials and once 50 have finished (target: within 10 %).
7. Ray against joblib (`--parts launchers`, needs `pip install "tfx_hydra[ray]"`): the same 12-trial search
   (pruner none: every trial trains the same epochs) with 2 workers under hydra/launcher=parallel and under
   hydra/launcher=ray (a local Ray of 2 CPUs, started and stopped by the sweep). Per launcher: a trial's fixed
   cost -- each worker's span from its first trial's start to its last trial's end, less its trials' steady
   epochs, per trial (so the time between one trial and the next counts) -- the workers' idle share
   (`sweep.idle_worker_seconds` over 2 x the wall) and the start-up (the command's start to the first trial's).
   Targets: Ray's fixed cost at most 1.2x joblib's, idle at most 5 %.

Every search runs `python -m tfx_hydra -m ...` in a fresh launch dir (its own optuna.db and
mlflow.db) and is read back from its Optuna study.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The preset's space (units, dropout, batch size) with the learning rate widened to 1e-5..1
SPACE = ["optimizer.learning_rate=tag(log, interval(0.00001, 1.0))"]
COMMON = ["export=none", "export.mlflow_model=false", "trainer.verbose=false", "trainer.backup=false",
          "trainer.tensorboard=false"]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the KerasTuner match (median reported)")
    parser.add_argument("--spread-trials", type=int, default=12)
    parser.add_argument("--quick", action="store_true", help="2 trials x 2 epochs, 1 seed")
    parser.add_argument("--skip-kerastuner", action="store_true")
    parser.add_argument("--epochs-per-trial", type=float, default=5.1,
                        help="the pruned search's epochs per trial, for --parts kerastuner alone (part 1 measures it)")
    parser.add_argument("--memory-trials", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2, help="the KerasTuner match's second search: N workers")
    parser.add_argument("--launcher-trials", type=int, default=12, help="part 7's trials")
    parser.add_argument("--parts", default="pruning,kerastuner,spreading,batches,fixed,memory,launchers",
                        help="which measurements, comma-separated")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.epochs, args.seeds, args.spread_trials, args.memory_trials = 2, 2, 1, 2, 6
        args.launcher_trials = 4
    args.parts = set(args.parts.split(","))
    if args.skip_kerastuner:
        args.parts.discard("kerastuner")
    return args


def environment() -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT="true")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def search_command(trials: int, epochs: int, seed: int, pruner: str, extra: list[str] = ()) -> list[str]:
    return [sys.executable, "-m", "tfx_hydra", "-m", "hparams_search=optuna", f"hparams_search.n_trials={trials}",
            f"hparams_search.pruner={pruner}", f"trainer.epochs={epochs}", f"seed={seed}", *SPACE, *COMMON, *extra]


def run_search(trials: int, epochs: int, seed: int, pruner: str, commands: int = 1, extra: list[str] = ()) -> dict:
    """`commands` cooperating commands on one study in a fresh launch dir: wall time and the study's figures."""
    import optuna

    with tempfile.TemporaryDirectory(prefix="tfx_hydra-bench-hpo-") as launch:
        started = time.perf_counter()
        running = [subprocess.Popen(search_command(trials, epochs, seed, pruner, extra), cwd=launch, env=environment(),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                   for _ in range(commands)]
        errors = [p.communicate()[1] for p in running]
        seconds = time.perf_counter() - started
        if any(p.returncode for p in running):
            sys.exit("a search failed:\n" + "\n".join(e[-3000:] for e in errors))
        study = optuna.load_study(study_name="mlp-digits", storage=f"sqlite:///{launch}/optuna.db")
        from mlflow.tracking import MlflowClient

        client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
        runs = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id], max_results=1000)
        trial_runs = [r.data.tags.get("optuna.trial") for r in runs if "mlflow.parentRunId" in r.data.tags]
        done = [t for t in study.trials if t.state.name in ("COMPLETE", "PRUNED")]
        epochs_trained = sum(len(t.intermediate_values) for t in done)
        return {"wall_seconds": seconds, "trials": len(study.trials), "finished": len(done),
                "pruned": sum(t.state.name == "PRUNED" for t in done), "epochs_trained": epochs_trained,
                "best_val_accuracy": study.best_value,  # a trial's last epoch: the search's objective
                # the best any trial reached at any epoch: how KerasTuner scores its trials
                "best_epoch_val_accuracy": max((v for t in done for v in t.intermediate_values.values()), default=None),
                "child_runs": len(trial_runs), "each_trial_once": len(trial_runs) == len(set(trial_runs)) == len(done)}


def kerastuner_hyperband(epochs: int, seed: int) -> dict:
    """KerasTuner's Hyperband on the MLP tfx_hydra builds, over the same data pipelines and the same
    space (units, dropout, batch size, log-scale learning rate)."""
    import keras
    import keras_tuner

    from tfx_hydra.settings.compose import build, compose

    cfg = compose([f"seed={seed}", "tracking=none", "paths.launch_dir=/tmp", "paths.output_dir=/tmp/kt"])
    data = build(cfg.data, "data", batch_size=1)  # re-batched per trial below
    keras.utils.set_random_seed(seed)
    epochs_run = []

    class Digits(keras_tuner.HyperModel):
        def build(self, hp):
            cfg.model.units = hp.Choice("units", [64, 128, 256, 512])
            cfg.model.dropout = hp.Float("dropout", 0.0, 0.5)
            model = build(cfg.model, "model")
            model.compile(optimizer=keras.optimizers.Adam(hp.Float("learning_rate", 1e-5, 1.0, sampling="log")),
                          loss="sparse_categorical_crossentropy", metrics=["accuracy"])
            return model

        def fit(self, hp, model, x, validation_data=None, **kwargs):
            size = hp.Choice("batch_size", [32, 64, 128])
            history = model.fit(x.unbatch().batch(size), validation_data=validation_data.unbatch().batch(size),
                                **kwargs)
            epochs_run.append(len(history.history["loss"]))
            return history

    with tempfile.TemporaryDirectory(prefix="tfx_hydra-bench-kt-") as folder:
        tuner = keras_tuner.Hyperband(Digits(), objective="val_accuracy", max_epochs=epochs, factor=3, seed=seed,
                                      directory=folder, project_name="digits", overwrite=True)
        started = time.perf_counter()
        tuner.search(data.train, validation_data=data.validation, verbose=0)
        seconds = time.perf_counter() - started
        best = tuner.oracle.get_best_trials(1)[0]
        return {"wall_seconds": seconds, "trials": len(tuner.oracle.trials), "epochs_trained": sum(epochs_run),
                "best_val_accuracy": best.score}


def budgeted_search(budget: int, epochs_per_trial: float, epochs: int, seed: int, workers: int = 0) -> dict:
    """Our pruned TPE search on `budget` epochs: as many trials as part 1's pruned search needed
    epochs for on average (the figure reports the epochs it really trained)."""
    trials = max(2, int(budget / epochs_per_trial))
    spread = ["hydra/launcher=parallel", f"hydra.launcher.n_jobs={workers}", f"hparams_search.workers={workers}"]
    pruner = "successive_halving" if workers else "median"  # asynchronous by design: no trial waits for a rung
    return run_search(trials, epochs, seed, pruner, extra=spread if workers else []) | {"budget": budget,
                                                                                       "workers": workers}


def idle_of(trials: int, epochs: int, how: list[str]) -> dict:
    """A pruned search with hydra/launcher=parallel and 2 processes, `how` (batches or workers): the time
    workers spent with nothing to run, from the parent run, and the wall."""
    from mlflow.tracking import MlflowClient

    with tempfile.TemporaryDirectory(prefix="tfx_hydra-bench-idle-") as launch:
        command = search_command(trials, epochs, 0, "median", ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2",
                                                               *how])
        started = time.perf_counter()
        done = subprocess.run(command, cwd=launch, env=environment(), capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - started
        if done.returncode:
            sys.exit("the search failed:\n" + done.stderr[-3000:])
        client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
        runs = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id])
        parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
        idle = parent.data.metrics["sweep.idle_worker_seconds"]
        return {"wall_seconds": seconds, "idle_worker_seconds": idle, "idle_share": idle / (2 * seconds)}


def fixed_cost(artifacts: str, trials: int = 10, epochs: int = 2, extra: tuple[str, ...] = ()) -> dict:
    """Seconds per trial beyond its steady epochs, in one process (basic launcher, pruner none), and
    a whole trial's seconds (its fixed cost plus its steady epochs)."""
    import statistics

    from mlflow.tracking import MlflowClient

    with tempfile.TemporaryDirectory(prefix="tfx_hydra-bench-fixed-") as launch:
        command = search_command(trials, epochs, 0, "none", [f"hparams_search.trial_artifacts={artifacts}", *extra])
        command = [c for c in command if c != "trainer.verbose=false"]  # each epoch's line, as a user's run has it
        done = subprocess.run(command, cwd=launch, env=environment(), capture_output=True, text=True, check=False)
        if done.returncode:
            sys.exit("the search failed:\n" + done.stderr[-3000:])
        client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
        runs = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id])
        children = sorted((r for r in runs if "mlflow.parentRunId" in r.data.tags), key=lambda r: r.info.start_time)
        epochs_of = [sorted(client.get_metric_history(r.info.run_id, "epoch_seconds"), key=lambda m: m.step)
                     for r in children]
        steady = statistics.median(m.value for history in epochs_of for m in history[1:])
        later = children[1:]  # the first trial also pays the process's imports and the store's opening
        span = (later[-1].info.end_time - children[0].info.end_time) / 1000  # trial 2's start .. the last's end
        trained = sum(len(history) for history in epochs_of[1:])
        return {"artifacts": artifacts, "overrides": list(extra), "trials": len(children),
                "steady_epoch_seconds": steady,
                "first_epoch_seconds": statistics.median(history[0].value for history in epochs_of),
                "fixed_seconds_per_trial": (span - steady * trained) / len(later),
                "seconds_per_trial": span / len(later)}


def keras_alone_fixed_cost(trials: int = 10, epochs: int = 2, steps_per_execution: int = 64,
                           built_before_trace: bool = False) -> dict:
    """The floor under part 5: the same MLP, data and cpu-profile settings (steps_per_execution 64, one
    intra-op thread), built, compiled and fitted `trials` times in this process by Keras alone -- no
    Hydra, no MLflow, no study. Seconds per model beyond its steady epochs: Keras' tracing and first
    call of the new model's train and test steps, which every trial of a new architecture pays.
    `built_before_trace`: the optimizer's and metrics' state built first, as tfx_hydra's trainer does
    (keras_compat.build_before_first_trace), so the train step is traced once, not twice."""
    import statistics

    import keras
    import tensorflow as tf

    from tfx_hydra.settings.compose import build, compose
    from tfx_hydra.trainer.keras_compat import build_before_first_trace

    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(2)
    except RuntimeError:  # TensorFlow already started in this process (an earlier part): its threads stay
        pass
    cfg = compose(["seed=0", "tracking=none", "paths.launch_dir=/tmp", "paths.output_dir=/tmp/alone"])
    spans, steady = [], []
    for trial in range(trials):
        keras.backend.clear_session()
        cfg.model.units = (64, 128, 256)[trial % 3]  # a new architecture each time, as a search's trials
        data = build(cfg.data, "data", batch_size=(32, 64, 128)[trial % 3])
        started = time.perf_counter()
        model = build(cfg.model, "model")
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"], steps_per_execution=steps_per_execution)
        if built_before_trace:
            build_before_first_trace(model, data.train)
        marks = []
        clock = keras.callbacks.LambdaCallback(on_epoch_begin=lambda e, logs: marks.append(time.perf_counter()),
                                               on_epoch_end=lambda e, logs: marks.append(time.perf_counter()))
        model.fit(data.train, validation_data=data.validation, epochs=epochs, callbacks=[clock], verbose=0)
        spans.append(time.perf_counter() - started)
        steady += [marks[i + 1] - marks[i] for i in range(2, len(marks), 2)]
    epoch = statistics.median(steady)
    return {"trials": trials, "steps_per_execution": steps_per_execution, "built_before_trace": built_before_trace,
            "steady_epoch_seconds": epoch,
            "fixed_seconds_per_trial": statistics.median(span - epoch * epochs for span in spans[1:]),
            "seconds_per_trial": statistics.median(spans[1:])}


def memory_over_trials(trials: int) -> dict:
    """Resident memory of one worker process running `trials` trials of 1 epoch, after 5 and after all."""
    import optuna
    import psutil

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="tfx_hydra-bench-memory-") as launch:
        command = search_command(trials, 1, 0, "none", ["hparams_search.workers=1"])
        search = subprocess.Popen(command, cwd=launch, env=environment(), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        process, marks = psutil.Process(search.pid), {}
        while search.poll() is None and len(marks) < 2:
            time.sleep(0.2)
            try:
                study = optuna.load_study(study_name="mlp-digits", storage=f"sqlite:///{launch}/optuna.db")
                finished = sum(t.state.name == "COMPLETE" for t in study.get_trials(deepcopy=False))
            except Exception:  # noqa: BLE001 - the study is being created
                continue
            for mark in (5, trials):
                if finished >= mark and mark not in marks:
                    marks[mark] = process.memory_info().rss / 2**20
        error = search.communicate()[1]
        if search.returncode:
            sys.exit("the search failed:\n" + error[-3000:])
        return {"trials": trials, "rss_mib_after_5": marks[5], f"rss_mib_after_{trials}": marks[trials],
                "ratio": marks[trials] / marks[5]}


def main(argv=None) -> None:
    args = parse_args(argv)
    results: dict = {"trials": args.trials, "epochs": args.epochs, "cpu": cpu_name()}
    if "pruning" in args.parts:
        args.epochs_per_trial = report_pruning(args, results)

    if "kerastuner" in args.parts:
        print(f"2. against KerasTuner's Hyperband (max_epochs {args.epochs}), {args.seeds} seed(s), same epoch budget")
        matches = []
        for seed in range(args.seeds):
            theirs = kerastuner_hyperband(args.epochs, seed)
            match = {"seed": seed, "kerastuner": theirs}
            for name, workers in (("tfx_hydra", 0), ("tfx_hydra_workers", args.workers)):
                ours = match[name] = budgeted_search(theirs["epochs_trained"], args.epochs_per_trial, args.epochs,
                                                     seed, workers)
                print(f"   seed {seed}: KerasTuner {theirs['best_val_accuracy']:.4f} ({theirs['epochs_trained']} "
                      f"epochs, {theirs['wall_seconds']:.0f} s)  {name} {ours['best_epoch_val_accuracy']:.4f}, last "
                      f"epoch {ours['best_val_accuracy']:.4f} ({ours['epochs_trained']} epochs, {ours['trials']} "
                      f"trials, {ours['wall_seconds']:.0f} s)")
            matches.append(match)
        medians = {name: statistics.median(m[name]["best_epoch_val_accuracy" if name != "kerastuner" else
                                                  "best_val_accuracy"] for m in matches)
                   for name in ("kerastuner", "tfx_hydra", "tfx_hydra_workers")}
        walls = {name: statistics.median(m[name]["wall_seconds"] / m["kerastuner"]["wall_seconds"] for m in matches)
                 for name in ("tfx_hydra", "tfx_hydra_workers")}
        print("   median best val_accuracy (best epoch, as KerasTuner scores): "
              f"tfx_hydra {medians['tfx_hydra']:.4f}, with {args.workers} workers {medians['tfx_hydra_workers']:.4f} "
              f"vs KerasTuner {medians['kerastuner']:.4f} (target: ours >=)")
        print(f"   median wall vs KerasTuner's: {walls['tfx_hydra']:.2f}x in one process, "
              f"{walls['tfx_hydra_workers']:.2f}x with {args.workers} workers (target <= 0.75x)")
        medians["wall_ratios"] = walls
        results["kerastuner"] = {"matches": matches, "medians": medians}

    if "spreading" in args.parts:
        print(f"3. spreading: {args.spread_trials} trials (pruner none), one command vs two on one study")
        one = run_search(args.spread_trials, args.epochs, 0, "none")
        two = run_search(args.spread_trials, args.epochs, 0, "none", commands=2)
        spread = two["wall_seconds"] / one["wall_seconds"]
        print(f"   one command {one['wall_seconds']:.1f} s, two {two['wall_seconds']:.1f} s: ratio {spread:.2f}x; "
              f"trials {two['finished']} of {args.spread_trials}, each run once: {two['each_trial_once']}")
        results["spreading"] = {"one": one, "two": two, "wall_ratio": spread}
    if "batches" in args.parts:
        report_batches(args, results)
    if "fixed" in args.parts:
        report_fixed(results)
    if "memory" in args.parts:
        report_memory(args, results)
    if "launchers" in args.parts:
        report_launchers(args, results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


def report_pruning(args, results: dict) -> float:
    """Part 1; returns the pruned search's epochs per trial (part 2's budget in trials)."""
    print(f"1. pruning: a seeded TPE search, {args.trials} trials x up to {args.epochs} epochs, median pruner vs none")
    plain = run_search(args.trials, args.epochs, 0, "none")
    pruned = run_search(args.trials, args.epochs, 0, "median")
    ratio = pruned["epochs_trained"] / plain["epochs_trained"]
    points = 100 * (pruned["best_val_accuracy"] - plain["best_val_accuracy"])
    for name, r in (("no pruning", plain), ("median pruner", pruned)):
        print(f"   {name:14s} {r['epochs_trained']:4d} epochs  best val_accuracy {r['best_val_accuracy']:.4f}  "
              f"{r['pruned']:2d} pruned  {r['wall_seconds']:6.1f} s")
    print(f"   epochs ratio {ratio:.2f}x (target <= 0.6x); best {points:+.2f} points (target within 0.5)")
    results["pruning"] = {"none": plain, "median": pruned, "epochs_ratio": ratio, "best_points": points}
    return pruned["epochs_trained"] / pruned["finished"]


def report_batches(args, results: dict) -> None:
    print(f"4. batches vs workers: {args.spread_trials} trials, median pruner, hydra/launcher=parallel, 2 processes")
    batched = idle_of(args.spread_trials, args.epochs, ["hparams_search.n_jobs=2"])
    workers = idle_of(args.spread_trials, args.epochs, ["hparams_search.workers=2"])
    for name, r in (("batches of 2", batched), ("2 workers", workers)):
        print(f"   {name:12s} {r['wall_seconds']:6.1f} s; workers idle {r['idle_worker_seconds']:5.1f} s "
              f"({100 * r['idle_share']:.0f}% of the workers' time)")
    print(f"   wall ratio workers/batches {workers['wall_seconds'] / batched['wall_seconds']:.2f}x (idle target <= 5%)")
    results["batches"] = {"batches": batched, "workers": workers}


def report_fixed(results: dict) -> None:
    print("5. a trial's fixed cost: 10 trials x 2 epochs in one process, every trial's plots and exports vs "
          "the leading trials', and one step per tf.function call vs steps_per_execution=auto")
    one_step = ("trainer.steps_per_execution=1",)
    every, leading, single = fixed_cost("all"), fixed_cost("leading"), fixed_cost("leading", extra=one_step)
    for r in (every, leading, single):
        print(f"   trial_artifacts={r['artifacts']:8s} {' '.join(r['overrides']):31s} "
              f"{r['fixed_seconds_per_trial']:.2f} s per trial beyond its epochs, {r['seconds_per_trial']:.2f} s "
              f"whole (steady epoch {r['steady_epoch_seconds']:.3f} s, first epoch {r['first_epoch_seconds']:.2f} s)")
    alone = keras_alone_fixed_cost()
    built = keras_alone_fixed_cost(built_before_trace=True)
    unoptimized = keras_alone_without_graph_optimizer()
    alone_single = keras_alone_fixed_cost(steps_per_execution=1)
    built_single = keras_alone_fixed_cost(steps_per_execution=1, built_before_trace=True)
    for what, r in (("Keras alone (the same model built, compiled and fitted, nothing else)", alone),
                    ("Keras alone, its state built before the first trace (as tfx_hydra's trainer does)", built),
                    ("Keras alone, TensorFlow's graph optimizer off", unoptimized),
                    ("Keras alone, steps_per_execution=1", alone_single),
                    ("Keras alone, steps_per_execution=1, built before the first trace", built_single)):
        print(f"   {what}: {r['fixed_seconds_per_trial']:.2f} s per model beyond its epochs, "
              f"{r['seconds_per_trial']:.2f} s whole (steady epoch {r['steady_epoch_seconds']:.3f} s)")
    results["fixed"] = {"all": every, "leading": leading, "leading_one_step_per_call": single,
                        "keras_alone": alone, "keras_alone_built_before_trace": built,
                        "keras_alone_graph_optimizer_off": unoptimized,
                        "keras_alone_one_step_per_call": alone_single,
                        "keras_alone_one_step_per_call_built_before_trace": built_single}


def keras_alone_without_graph_optimizer() -> dict:
    """The Keras-alone floor again with grappler (TensorFlow's graph optimizer) off: how much of a
    new model's first call is graph optimization. The option is put back afterwards: it is not
    tfx_hydra's default, and a later part must not run under it."""
    import tensorflow as tf

    before = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    try:
        return keras_alone_fixed_cost()
    finally:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": False, **before})


def report_memory(args, results: dict) -> None:
    print(f"6. memory: {args.memory_trials} trials x 1 epoch in one worker process")
    memory = memory_over_trials(args.memory_trials)
    print(f"   resident {memory['rss_mib_after_5']:.0f} MiB after 5 trials, "
          f"{memory[f'rss_mib_after_{args.memory_trials}']:.0f} MiB after {args.memory_trials}: "
          f"{memory['ratio']:.2f}x (target <= 1.10x)")
    results["memory"] = memory


LAUNCHERS = {"joblib": ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2"],
             "ray": ["hydra/launcher=ray", "hydra.launcher.ray.init.num_cpus=2"]}


def report_launchers(args, results: dict) -> None:
    print(f"7. Ray against joblib: {args.launcher_trials} trials x {args.epochs} epochs (pruner none), 2 workers")
    figures = {name: workers_search(args.launcher_trials, args.epochs, how) for name, how in LAUNCHERS.items()}
    for name, r in figures.items():
        print(f"   {name:6s} {r['wall_seconds']:6.1f} s; a trial's fixed cost {r['fixed_seconds_per_trial']:.2f} s "
              f"(steady epoch {r['steady_epoch_seconds']:.3f} s); workers idle {100 * r['idle_share']:.1f}%; "
              f"start-up {r['startup_seconds']:.1f} s")
    ratio = figures["ray"]["fixed_seconds_per_trial"] / figures["joblib"]["fixed_seconds_per_trial"]
    print(f"   fixed cost Ray/joblib {ratio:.2f}x (target <= 1.2x); Ray's workers idle "
          f"{100 * figures['ray']['idle_share']:.1f}% (target <= 5%)")
    results["launchers"] = figures | {"fixed_cost_ratio": ratio}


def workers_search(trials: int, epochs: int, how: list[str]) -> dict:
    """A search of `trials` (pruner none) by 2 workers under the launcher `how`: its wall, start-up, idle share,
    and a trial's fixed cost from each worker's trials (the study's times and the child runs' epoch_seconds)."""
    import optuna
    from mlflow.tracking import MlflowClient

    with tempfile.TemporaryDirectory(prefix="tfx_hydra-bench-launchers-") as launch:
        command = search_command(trials, epochs, 0, "none", [*how, "hparams_search.workers=2"])
        command = [c for c in command if c != "trainer.verbose=false"]  # epoch_seconds are logged either way
        started = time.time()
        done = subprocess.run(command, cwd=launch, env=environment(), capture_output=True, text=True, check=False)
        seconds = time.time() - started
        if done.returncode:
            sys.exit("the search failed:\n" + done.stdout[-2000:] + done.stderr[-3000:])
        study = optuna.load_study(study_name="mlp-digits", storage=f"sqlite:///{launch}/optuna.db")
        client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
        runs = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id], max_results=1000)
        parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
        epochs_of = {r.data.tags["optuna.trial"]: [m.value for m in sorted(
            client.get_metric_history(r.info.run_id, "epoch_seconds"), key=lambda m: m.step)]
            for r in runs if "mlflow.parentRunId" in r.data.tags}
        steady = statistics.median(v for history in epochs_of.values() for v in history[1:])
        by_worker: dict[str, list] = {}
        for trial in study.trials:
            by_worker.setdefault(trial.user_attrs["tfx_hydra.worker"], []).append(trial)
        fixed, counted = 0.0, 0
        for trials_of in by_worker.values():
            span = (max(t.datetime_complete for t in trials_of) - min(t.datetime_start for t in trials_of))
            trained = sum(len(epochs_of[str(t.number)]) for t in trials_of)
            fixed += span.total_seconds() - steady * trained
            counted += len(trials_of)
        first = min(t.datetime_start for t in study.trials).timestamp()
        idle = parent.data.metrics["sweep.idle_worker_seconds"]
        return {"wall_seconds": seconds, "trials": len(study.trials), "steady_epoch_seconds": steady,
                "fixed_seconds_per_trial": fixed / counted, "idle_worker_seconds": idle,
                "idle_share": idle / (2 * seconds), "startup_seconds": first - started}


def cpu_name() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


if __name__ == "__main__":
    main()
