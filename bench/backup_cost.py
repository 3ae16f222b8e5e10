"""What a backup costs, per model family, and what share of the time `trainer.backup_every=auto` spends on it.

    python bench/backup_cost.py            # mlp, cnn, resnet_small and a ResNet-50 (25.6M weights), 3 writes each
    python bench/backup_cost.py --quick    # mlp and cnn only, 2 writes: checks the script
    python bench/backup_cost.py --json out.json

Each model is compiled with Adam and trained one step (its optimizer state then exists, as in a run), then
tfx_hydra's EpochBackup writes a mid-epoch backup into a temporary folder as a run does (the previous backup
copied aside, the weights and optimizer state, the metadata with the epoch's metric totals and seeds): the
median write time of the writes after the first. Also timed: one training step at batch 32. Printed: the
backup's size, its write time, the interval `auto` picks (10 min, or 50x the write time if longer), the share
of the time that costs, and the same for a backup every 500 steps, for comparison.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from harness import write_json

AUTO_SECONDS, AUTO_SHARE = 600, 50


def families(quick: bool) -> list[tuple[str, tuple[int, ...], int]]:
    """(model, input shape, classes): tfx_hydra's own builders, then a ResNet-50 as a large real model."""
    models = [("mlp", (28, 28), 10), ("cnn", (64, 64, 3), 10)]
    return models if quick else [*models, ("resnet_small", (32, 32, 3), 10), ("resnet50", (224, 224, 3), 1000)]


def build(name: str, shape: tuple[int, ...], classes: int):
    import keras

    from tfx_hydra import models

    if name == "resnet50":
        return keras.applications.ResNet50(weights=None, input_shape=shape, classes=classes)
    return getattr(models, name)(name, list(shape), classes)


def measure(name: str, shape: tuple[int, ...], classes: int, writes: int) -> dict:
    import os

    import keras
    import numpy as np

    from tfx_hydra.trainer.callbacks import EpochBackup

    keras.utils.set_random_seed(0)
    model = build(name, shape, classes)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    x = np.random.default_rng(0).random((32, *shape), dtype=np.float32)
    y = np.arange(32) % classes
    model.train_on_batch(x, y)  # the optimizer's state built, as after a run's first step
    started = time.perf_counter()
    for _ in range(3):
        model.train_on_batch(x, y)
    step = (time.perf_counter() - started) / 3
    with tempfile.TemporaryDirectory() as folder:
        backup = EpochBackup(folder, last_epoch=1, every=(None, 500))
        backup.set_model(model)
        backup._current_epoch = 0
        seconds = []
        for done in range(1, writes + 1):
            started = time.perf_counter()
            backup._back_up_at(done)
            seconds.append(time.perf_counter() - started)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if not f.endswith(".bkp"))
    write = statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]
    interval = max(AUTO_SECONDS, AUTO_SHARE * write)
    return {"model": name, "weights": int(model.count_params()), "backup_mib": size / 2**20, "write_s": write,
            "step_s": step, "auto_interval_s": interval, "auto_share": write / (interval + write),
            "every_500_steps_share": write / (500 * step + write)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="mlp and cnn only, 2 writes")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)
    rows = [measure(*family, writes=2 if args.quick else 3) for family in families(args.quick)]
    print(f"{'model':14}{'weights':>12}{'backup':>11}{'write':>9}{'step@32':>10}{'auto every':>12}{'auto cost':>11}"
          f"{'every 500':>11}")
    for row in rows:
        print(f"{row['model']:14}{row['weights']:>12,}{row['backup_mib']:>8.1f} MiB{row['write_s']:>8.2f}s"
              f"{row['step_s'] * 1000:>8.1f}ms{row['auto_interval_s'] / 60:>9.1f} min{row['auto_share']:>10.2%}"
              f"{row['every_500_steps_share']:>11.2%}")
    write_json(args.json, {"backups": rows})


if __name__ == "__main__":
    main()
