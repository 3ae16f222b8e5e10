"""The seed article's plain Keras script (A) vs `python -m tfx_hydra experiment=seed_mnist_mlp` (B).

    python bench/seed_vs_framework.py                  # 5 pairs, MNIST-sized data (60,000 x 28 x 28), 5 epochs
    python bench/seed_vs_framework.py --quick          # 1 pair, 6,000 examples, 2 epochs: a couple of minutes
    python bench/seed_vs_framework.py --mnist PATH     # the real mnist.npz instead of the synthetic stand-in
    python bench/seed_vs_framework.py --json out.json  # also write every figure as JSON

Both sides train the same model (Flatten -> Dense 128 relu -> Dropout 0.2 -> Dense 10 softmax)
with adam, batch 32, the same epochs, on the same arrays, validating on the test split: the same
number and kind of weight updates. Pairs alternate their order (AB, BA, ...) so drift hits both.
Per pair and as medians it prints training examples/s (fit wall time, validation included),
whole-process wall time (imports, tracking and export included for B), final validation
accuracy, and the ratios B/A.

The default data is a learnable MNIST stand-in (the machine this runs on may have no internet):
scikit-learn's 8x8 digits, upsampled 3x into a 28x28 frame at a random offset, with noise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import bench_parser, child_env, make_mnist_like, write_json

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    parser = bench_parser(__doc__, train=60000, epochs=5, quick="1 pair, 6,000 examples, 2 epochs")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--test", type=int, default=10000, help="test examples (synthetic data)")
    parser.add_argument("--mnist", help="a real mnist.npz (x_train, y_train, x_test, y_test)")
    parser.add_argument("framework_args", nargs="*",
                        help="extra overrides for side B, e.g. trainer.steps_per_execution=1")
    args = parser.parse_args(argv)
    if args.quick:
        args.pairs, args.train, args.test, args.epochs = 1, 6000, 1000, 2
    return args


def run_plain(data: Path, epochs: int, workdir: Path) -> dict:
    result = workdir / "plain.json"
    started = time.perf_counter()
    subprocess.run([sys.executable, str(REPO / "bench" / "seed_script.py"), "--data", str(data), "--epochs",
                    str(epochs), "--json", str(result)], cwd=workdir, check=True, capture_output=True, env=child_env())
    wall = time.perf_counter() - started
    measured = json.loads(result.read_text())
    return {"wall_seconds": wall, "val_accuracy": measured["val_accuracy"],
            "examples_per_sec": measured["num_train"] * epochs / measured["fit_seconds"]}


def run_framework(data: Path, epochs: int, workdir: Path, extra: list[str], env: dict | None = None) -> dict:
    """Side B; `env`: variables added to the run's environment (bench/observability.py forces a terminal)."""
    from mlflow.tracking import MlflowClient

    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tfx_hydra", "experiment=seed_mnist_mlp", f"data.path={data}",
                    f"trainer.epochs={epochs}", *extra], cwd=workdir, check=True, capture_output=True,
                   env=child_env() | (env or {}))
    wall = time.perf_counter() - started
    client = MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tfx_hydra")
    (run,) = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"], max_results=1)
    return {"wall_seconds": wall, "val_accuracy": run.data.metrics["val_accuracy"],
            "examples_per_sec": run.data.metrics["train_examples_per_sec"]}



def ratios(plain: dict, framework: dict) -> dict:
    return {"examples_per_sec": framework["examples_per_sec"] / plain["examples_per_sec"],
            "wall_seconds": framework["wall_seconds"] / plain["wall_seconds"],
            "val_accuracy_points": 100 * (framework["val_accuracy"] - plain["val_accuracy"])}


def cfg_job_vs_import_tensorflow(workdir: Path, repeats: int = 3) -> dict:
    """Wall of `python -m tfx_hydra --cfg job` over the wall of `python -c "import tensorflow"` (medians)."""
    def wall(command: list[str]) -> float:
        started = time.perf_counter()
        subprocess.run(command, cwd=workdir, check=True, capture_output=True, env=child_env())
        return time.perf_counter() - started
    cfg = statistics.median(wall([sys.executable, "-m", "tfx_hydra", "--cfg", "job"]) for _ in range(repeats))
    tf = statistics.median(wall([sys.executable, "-c", "import tensorflow"]) for _ in range(repeats))
    return {"cfg_job_seconds": cfg, "import_tensorflow_seconds": tf, "ratio": cfg / tf}


def main(argv=None) -> dict:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="seed-vs-framework-") as tmp:
        tmp = Path(tmp)
        data = Path(args.mnist) if args.mnist else make_mnist_like(tmp / "mnist.npz", args.train, args.test)
        print(f"data: {data} ({'real' if args.mnist else 'synthetic'}); {args.epochs} epochs, batch 32, "
              f"{args.pairs} pair(s); B overrides: {' '.join(args.framework_args) or 'none'}")
        pairs = []
        for index in range(args.pairs):
            sides = {}
            for side in ("AB" if index % 2 == 0 else "BA"):
                workdir = tmp / f"pair{index}-{side}"
                workdir.mkdir()
                sides[side] = (run_plain(data, args.epochs, workdir) if side == "A"
                               else run_framework(data, args.epochs, workdir, args.framework_args))
            pair = {"plain": sides["A"], "framework": sides["B"], "ratio": ratios(sides["A"], sides["B"])}
            pairs.append(pair)
            print(f"pair {index + 1}: A {sides['A']['examples_per_sec']:8,.0f} ex/s "
                  f"{sides['A']['wall_seconds']:6.1f} s "
                  f"val_acc {sides['A']['val_accuracy']:.4f} | B {sides['B']['examples_per_sec']:8,.0f} ex/s "
                  f"{sides['B']['wall_seconds']:6.1f} s val_acc {sides['B']['val_accuracy']:.4f} | "
                  f"B/A ex/s {pair['ratio']['examples_per_sec']:.2f}x wall {pair['ratio']['wall_seconds']:.2f}x "
                  f"acc {pair['ratio']['val_accuracy_points']:+.2f} pt", flush=True)
        medians = {key: statistics.median(p["ratio"][key] for p in pairs) for key in pairs[0]["ratio"]}
        startup = cfg_job_vs_import_tensorflow(tmp, repeats=1 if args.quick else 3)
    print(f"median B/A: training examples/s {medians['examples_per_sec']:.2f}x (target >= 2.5), "
          f"whole-process wall {medians['wall_seconds']:.2f}x (target <= 0.9), "
          f"val accuracy {medians['val_accuracy_points']:+.2f} points (target within 0.5)")
    print(f"--cfg job {startup['cfg_job_seconds']:.2f} s vs "
          f"import tensorflow {startup['import_tensorflow_seconds']:.2f} s: "
          f"{startup['ratio']:.2f}x (target <= 0.25)")
    report = {"epochs": args.epochs, "pairs": pairs, "median_ratio": medians, "startup": startup,
              "framework_args": args.framework_args, "data": "real" if args.mnist else "synthetic"}
    write_json(args.json, report)
    return report


if __name__ == "__main__":
    main()
