"""regression_vs_ridge: is experiment=tabular_regression's number sane? Its test RMSE on scikit-learn's
diabetes data (442 patients, 10 features, a disease-progression score; it ships with scikit-learn, so
this runs offline) next to scikit-learn's Ridge and a predict-the-mean baseline on the very same split.

    python bench/regression_vs_ridge.py                 # seeds 0, 1, 2 (~1 min each here)
    python bench/regression_vs_ridge.py --seeds 0 --json ridge.json

Each seed: the CSV is written once, `python -m tfx_hydra experiment=tabular_regression` trains on it
(the seed picks the split, as it does for every run), and Ridge (its alpha chosen on the same validation
split, features standardized with the training split's figures, as the recipe does) is fitted on the
same training rows and scored on the same test rows. The split is tfx_hydra's own (data.splits), read
from the same file, so both sides see identical rows.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from harness import write_json

RECIPE = {"test_split": 0.2, "validation_split": 0.15}  # conf/experiment/tabular_regression.yaml's split


def write_diabetes(path: Path) -> Path:
    from sklearn.datasets import load_diabetes

    frame = load_diabetes(as_frame=True).frame  # ten features, then `target`
    frame.to_csv(path, index=False)
    return path


def tfx_hydra_rmse(table: Path, seed: int, folder: Path) -> dict[str, float]:
    """The recipe's run on `table`; its test metrics, read from its MLflow run."""
    from mlflow.tracking import MlflowClient

    command = [sys.executable, "-m", "tfx_hydra", "experiment=tabular_regression", f"data.path={table}",
               "data.label_column=target", "data.input_shape=[10]", f"seed={seed}", "export=none",
               "export.mlflow_model=false", "trainer.tensorboard=false", "trainer.backup=false"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id])
    epochs = len(client.get_metric_history(run.info.run_id, "epoch/val_loss"))  # early stopping ends it
    return {k: run.data.metrics[k] for k in ("test_rmse", "test_mae", "test_r2")} | {"epochs_trained": epochs}


def ridge_rmse(table: Path, seed: int) -> dict[str, float]:
    """Ridge on the recipe's split of the same file: alpha chosen on validation, scored on test."""
    from sklearn.linear_model import Ridge
    from sklearn.metrics import mean_squared_error

    from tfx_hydra.data.splits import split_three_ways
    from tfx_hydra.data.table import read_columns, read_header, stacked

    header = read_header("table", str(table))
    columns = read_columns("table", str(table), numeric=header)
    x, y = stacked(columns, header[:-1]), stacked(columns, ["target"])
    splits = split_three_ways(x, y, RECIPE["test_split"], RECIPE["validation_split"], seed)
    train, validation, test = splits["train"], splits["validation"], splits["test"]
    mean, std = train.x.mean(axis=0), train.x.std(axis=0)

    def scaled(split):
        return (split.x - mean) / std

    def rmse(model, split):
        return float(np.sqrt(mean_squared_error(split.y.ravel(), model.predict(scaled(split)).ravel())))

    alphas = [float(a) for a in np.logspace(-3, 3, 25)]  # 0.001 .. 1000, four a decade
    best = min(alphas, key=lambda a: rmse(Ridge(alpha=a).fit(scaled(train), train.y.ravel()), validation))
    ridge = Ridge(alpha=best).fit(scaled(train), train.y.ravel())
    baseline = float(np.sqrt(np.mean((test.y.ravel() - train.y.mean()) ** 2)))
    return {"ridge_rmse": rmse(ridge, test), "ridge_alpha": best, "mean_baseline_rmse": baseline,
            "train": len(train.y), "validation": len(validation.y), "test": len(test.y)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    results = []
    print(f"{'seed':>4}  {'split (train/val/test)':>22}  {'tfx_hydra RMSE':>14}  {'Ridge RMSE':>10}  "
          f"{'mean RMSE':>9}  {'tfx_hydra R²':>12}  {'epochs':>6}")
    for seed in args.seeds:
        with tempfile.TemporaryDirectory(prefix="regression-vs-ridge-") as scratch:
            table = write_diabetes(Path(scratch) / "diabetes.csv")
            ours, theirs = tfx_hydra_rmse(table, seed, Path(scratch)), ridge_rmse(table, seed)
        results.append({"seed": seed, **ours, **theirs})
        split = f"{theirs['train']}/{theirs['validation']}/{theirs['test']}"
        print(f"{seed:>4}  {split:>22}  {ours['test_rmse']:>14.2f}  {theirs['ridge_rmse']:>10.2f}  "
              f"{theirs['mean_baseline_rmse']:>9.2f}  {ours['test_r2']:>12.3f}  {ours['epochs_trained']:>6.0f}")
    ratio = np.median([r["test_rmse"] / r["ridge_rmse"] for r in results])
    print(f"median tfx_hydra / Ridge test RMSE: {ratio:.3f}")
    write_json(args.json, {"runs": results, "median_ratio": float(ratio)})


if __name__ == "__main__":
    main()
