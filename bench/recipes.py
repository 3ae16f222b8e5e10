"""recipes: does experiment=resnet_cifar10's training recipe (SGD + Nesterov, cosine after a warmup,
decoupled weight decay, label smoothing, the best epoch kept) beat the constant-rate Adam recipe it
replaced? And what do EMA and keep_best cost per epoch?

    python bench/recipes.py                        # both parts, seeds 0 1 2 (~15 min on 2 cores)
    python bench/recipes.py --part accuracy --seeds 0 --epochs 6
    python bench/recipes.py --part cost --json recipes.json

accuracy: CIFAR-10 cannot be downloaded everywhere, so a CIFAR-shaped 10-class set is made offline from
scikit-learn's digits: each 8x8 digit enlarged to 24x24, tinted a random colour, put at a random place
on a 32x32 noisy background, as uint8 RGB in Keras' cifar10.npz layout (x_train, y_train, x_test,
y_test). Both recipes run `experiment=resnet_cifar10 data.path=<it>` for the same epochs and seed; the
old one with the overrides that restore it (Adam at 0.002, constant rate, early stopping on
val_accuracy, no smoothing). Reported: validation and test accuracy, per seed and the mean difference.

cost: the seed MLP on MNIST-sized synthetic data, then resnet_small on CIFAR-shaped synthetic data; 3 runs
each of plain, optimizer.ema.enabled=true and trainer.keep_best.enabled=true, interleaved; the median epoch
seconds (first epoch, which traces, left out) of each, and the ratio to plain.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from harness import write_json

OLD_RECIPE = ["optimizer=adam", "~optimizer.momentum", "~optimizer.nesterov", "optimizer.learning_rate=0.002",
              "lr_schedule=constant", "trainer.label_smoothing=0",
              "trainer.keep_best.enabled=false", "trainer.early_stopping.enabled=true",
              "trainer.early_stopping.monitor=val_accuracy", "trainer.early_stopping.patience=5"]
QUIET = ["export=none", "export.mlflow_model=false", "trainer.tensorboard=false", "trainer.backup=false",
         "trainer.verbose=false"]


def write_digits_cifar(path: Path, seed: int = 0) -> Path:
    """Digits as CIFAR-shaped colour images (see the module's docstring), 80/20 train/test."""
    from sklearn.datasets import load_digits

    rng = np.random.default_rng(seed)
    digits = load_digits()
    images = np.zeros((len(digits.images), 32, 32, 3), dtype=np.float32)
    for index, digit in enumerate(digits.images / 16.0):
        big = np.kron(digit, np.ones((3, 3)))  # 24x24
        top, left = rng.integers(0, 9, size=2)
        colour = rng.uniform(0.4, 1.0, size=3)
        canvas = rng.uniform(0.0, 0.35, size=(32, 32, 3))
        canvas[top:top + 24, left:left + 24] += big[..., None] * colour
        images[index] = canvas
    pixels = np.clip(images * 255, 0, 255).astype(np.uint8)
    labels = digits.target.astype(np.uint8).reshape(-1, 1)
    order = rng.permutation(len(pixels))
    cut = int(0.8 * len(pixels))
    np.savez(path, x_train=pixels[order[:cut]], y_train=labels[order[:cut]], x_test=pixels[order[cut:]],
             y_test=labels[order[cut:]])
    return path


def run(overrides: list[str], folder: Path) -> dict[str, float]:
    """One `python -m tfx_hydra` run in its own folder; its final metrics and epoch times from MLflow."""
    from mlflow.tracking import MlflowClient

    folder.mkdir(parents=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-m", "tfx_hydra", *overrides, *QUIET], cwd=folder, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stdout[-2000:] + done.stderr[-3000:])
    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    (found,) = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id])
    seconds = [m.value for m in sorted(client.get_metric_history(found.info.run_id, "epoch_seconds"),
                                       key=lambda m: m.step)]
    return {**found.data.metrics, "epochs_trained": len(seconds), "epoch_seconds_after_first": seconds[1:]}


def accuracy(seeds: list[int], epochs: int, work: Path) -> dict:
    data = write_digits_cifar(work / "digits_cifar.npz")
    common = ["experiment=resnet_cifar10", f"data.path={data}", f"trainer.epochs={epochs}"]
    rows = []
    for seed in seeds:
        new = run([*common, f"seed={seed}"], work / f"new_{seed}")
        old = run([*common, f"seed={seed}", *OLD_RECIPE], work / f"old_{seed}")
        rows.append({"seed": seed, **{f"{name}_{key}": result[key] for name, result in (("new", new), ("old", old))
                                      for key in ("val_accuracy", "test_accuracy", "epochs_trained")}})
        print(f"seed {seed}: new val {new['val_accuracy']:.4f} test {new['test_accuracy']:.4f} | old val "
              f"{old['val_accuracy']:.4f} test {old['test_accuracy']:.4f} ({old['epochs_trained']} epochs)",
              flush=True)
    for key in ("val_accuracy", "test_accuracy"):
        differences = [row[f"new_{key}"] - row[f"old_{key}"] for row in rows]
        print(f"{key}: new - old = {statistics.mean(differences):+.4f} on average "
              f"({', '.join(f'{d:+.4f}' for d in differences)})")
    return {"epochs": epochs, "rows": rows}


# the seed MLP on MNIST-sized data (a step of ~0.4 ms: fixed per-step costs show most), and a small ResNet
MODELS = {"seed_mlp": ["data.num_examples=60000", "data.input_shape=[28,28]", "trainer.epochs=5"],
          "resnet_small": ["model=resnet_small", "data.num_examples=4096", "data.input_shape=[32,32,3]",
                           "trainer.epochs=4"]}


def cost(repeats: int, work: Path) -> dict:
    variants = {"plain": [], "ema": ["optimizer.ema.enabled=true"], "keep_best": ["trainer.keep_best.enabled=true"]}
    results = {}
    for model, setup in MODELS.items():
        common = ["data=synthetic", "trainer.batch_size=32", *setup]
        seconds: dict[str, list[float]] = {name: [] for name in variants}
        for repeat in range(repeats):
            for name, overrides in variants.items():
                folder = work / f"cost_{model}_{name}_{repeat}"
                seconds[name] += run([*common, *overrides], folder)["epoch_seconds_after_first"]
        medians = {name: statistics.median(values) for name, values in seconds.items()}
        for name, median in medians.items():
            print(f"{model} {name}: median epoch {median:.3f} s, {median / medians['plain']:.3f}x plain", flush=True)
        ratios = {name: median / medians["plain"] for name, median in medians.items()}
        results[model] = {"median_epoch_seconds": medians, "ratio": ratios}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["accuracy", "cost", "both"], default="both")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        if args.part in ("accuracy", "both"):
            results["accuracy"] = accuracy(args.seeds, args.epochs, Path(scratch))
        if args.part in ("cost", "both"):
            results["cost"] = cost(args.repeats, Path(scratch))
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
