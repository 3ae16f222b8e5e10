"""An 8-job grid sweep with Hydra's basic launcher (jobs one after another, in-process) vs
`hydra/launcher=parallel` (joblib, 2 worker processes): whole-sweep wall time and the ratio.

    python bench/sweep_parallel.py                # 8 jobs, CNN on synthetic 28x28 data, 3 epochs each
                                                  # (target ratio <= 0.65 on 2 cores)
    python bench/sweep_parallel.py --workers 4    # more workers (a machine with more cores)
    python bench/sweep_parallel.py --quick        # 2 jobs, 1 epoch: checks the script, the ratio means little
    python bench/sweep_parallel.py --json out.json

Both sweeps run the same grid (model=cnn; dense_units x learning_rate x batch_size), each
into its own fresh launch directory (own MLflow store), basic first, then parallel. Both are
checked: every job must be a FINISHED child run under one parent.
The cpu hardware profile gives each job one intra-op thread, so 2 workers use the 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# A small CNN on 6,000 synthetic 28x28 examples: ~10 s of training per job here, so the sweep
# measures jobs running side by side rather than process start-up alone.
MODEL = ["model=cnn", "data=synthetic", "data.input_shape=[28,28]", "data.num_examples=6000"]
GRID = ["model.dense_units=64,128", "optimizer.learning_rate=0.01,0.001", "trainer.batch_size=32,64"]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2 jobs, 1 epoch")
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("job_overrides", nargs="*", help="extra overrides for every job of both sweeps, "
                        "e.g. trainer.steps_per_execution=1")
    args = parser.parse_args(argv)
    args.grid = GRID[:1] if args.quick else GRID
    if args.quick:
        args.epochs = 1
    return args


def run_sweep(launcher_args: list[str], grid: list[str], epochs: int, extra: list[str]) -> dict:
    """One sweep in a fresh launch dir; its wall time and the state of its MLflow runs."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT="true")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory(prefix="tfx_hydra-bench-sweep-") as launch:
        command = [sys.executable, "-m", "tfx_hydra", "-m", *launcher_args, *MODEL, *grid, f"trainer.epochs={epochs}",
                   "export=none", "export.mlflow_model=false", "trainer.verbose=false", *extra]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=launch, env=env, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"sweep failed ({' '.join(launcher_args) or 'basic'}):\n{done.stderr[-3000:]}")
        return {"wall_seconds": seconds, **check_runs(Path(launch))}


def check_runs(launch: Path) -> dict:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{launch / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id])
    parents = [r for r in runs if "sweep.dir" in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and all(r.info.status == "FINISHED" for r in runs), "a run did not finish"
    return {"jobs": len(children), "best_val_accuracy": parents[0].data.metrics.get("best_val_accuracy")}


def main(argv=None) -> None:
    args = parse_args(argv)
    jobs = 2 ** len(args.grid)
    print(f"{jobs}-job grid, CNN on synthetic 28x28 data, {args.epochs} epoch(s) each; basic launcher vs parallel "
          f"({args.workers} workers)")
    basic = run_sweep([], args.grid, args.epochs, args.job_overrides)
    print(f"basic launcher:     {basic['wall_seconds']:6.1f} s  ({basic['jobs']} child runs)")
    parallel = run_sweep(["hydra/launcher=parallel", f"hydra.launcher.n_jobs={args.workers}"], args.grid,
                         args.epochs, args.job_overrides)
    print(f"parallel launcher:  {parallel['wall_seconds']:6.1f} s  ({parallel['jobs']} child runs)")
    ratio = parallel["wall_seconds"] / basic["wall_seconds"]
    print(f"wall time ratio parallel/basic: {ratio:.2f} (target <= 0.65 with 2 workers on 2 cores)")
    if args.json:
        Path(args.json).write_text(json.dumps({"jobs": jobs, "epochs": args.epochs, "workers": args.workers,
                                               "job_overrides": args.job_overrides,
                                               "basic": basic, "parallel": parallel, "ratio": ratio}, indent=2))


if __name__ == "__main__":
    main()
