"""What the benchmarks share: MNIST-shaped data a model can learn, the flags every script takes,
and the JSON record of the figures.

A script imports it by name: Python puts the script's own folder (bench/) first on the import
path when it runs `python bench/<script>.py`, and tfx_hydra comes from the installed package.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np


def bench_parser(doc: str, train: int, epochs: int, quick: str) -> argparse.ArgumentParser:
    """--train, --epochs, --quick (described by `quick`) and --json; a script adds its own flags."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=int, default=train, help="training examples")
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--json", help="write the results here too")
    return parser


def child_env() -> dict:
    """The environment a benchmark's child process runs in: this checkout's tfx_hydra first on the import path,
    TensorFlow's C++ start-up lines quiet."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def write_json(path: str | None, results: dict) -> None:
    """The figures as JSON at `path` (when --json was given), for tracking them over time."""
    if path:
        Path(path).write_text(json.dumps(results, indent=2))


def make_mnist_like(path: Path, train: int, test: int, seed: int = 0) -> Path:
    """MNIST-shaped uint8 images a model can learn: digits upsampled into a 28x28 frame, shifted, noisy."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(seed)

    def sample(count: int):
        picks = rng.integers(0, len(digits.images), size=count)
        frames = rng.integers(0, 24, size=(count, 28, 28)).astype("float32")
        offsets = rng.integers(0, 5, size=(count, 2))
        big = np.kron(digits.images[picks], np.ones((3, 3))) * (255.0 / 16.0)
        for i, (dy, dx) in enumerate(offsets):
            frames[i, dy:dy + 24, dx:dx + 24] = np.maximum(frames[i, dy:dy + 24, dx:dx + 24], big[i])
        return frames.clip(0, 255).astype("uint8"), digits.target[picks].astype("uint8")

    (x_train, y_train), (x_test, y_test) = sample(train), sample(test)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def latest_run(workdir: Path):
    """The newest tfx_hydra run in `workdir`'s default store (mlflow.db), and a function giving one of its
    per-epoch metrics as a list in epoch order."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tfx_hydra")
    (run,) = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"], max_results=1)

    def epochs(name: str) -> list[float]:
        return [m.value for m in sorted(client.get_metric_history(run.info.run_id, name), key=lambda m: m.step)]

    return run, epochs
