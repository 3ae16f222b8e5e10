"""What the divergence guard's weight check costs on the seed workload, side by side in one fit.

    python bench/nonfinite_guard.py               # 60,000 MNIST-sized examples, 2 fits of 9 epochs
    python bench/nonfinite_guard.py --quick       # 6,000 examples, 1 fit of 5 epochs: checks the script
    python bench/nonfinite_guard.py --json out.json

The seed's MLP (Flatten -> Dense 128 -> Dropout -> Dense 10) trained with the cpu profile's settings
(batch 32, steps_per_execution 64, 1 intra-op / 2 inter-op threads) and tfx_hydra's NonFiniteGuard,
whose weight check (one is-finite reduction over every weight, eager) runs at the end of every other
epoch only: B epochs (2, 4, ...) end with it, A epochs (3, 5, ...) without; both have the per-batch
loss check. Interleaving epochs of one fit keeps fit-to-fit noise (±30 % on 2 cores) out of the ratio.
Epoch 1 traces and is left out. Also timed on their own: one weight check (median of 200 calls),
and the in-memory data check (`data.check_finite`) on 60,000 x 784 float32 inputs and on the same
as uint8 (nothing to check). Target: B/A epoch time <= 1.01 (under 1 % of an epoch).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import bench_parser, make_mnist_like, write_json


def parse_args(argv=None) -> argparse.Namespace:
    parser = bench_parser(__doc__, train=60000, epochs=9, quick="6,000 examples, 1 fit of 5 epochs")
    parser.add_argument("--fits", type=int, default=2)
    args = parser.parse_args(argv)
    if args.quick:
        args.train, args.epochs, args.fits = 6000, 5, 1
    return args


def epoch_seconds(x, y, epochs: int) -> dict[str, list[float]]:
    """One fit of the seed MLP: the durations of the epochs that end with the weight check (B)
    and of those that do not (A), epoch 1 left out."""
    import keras
    import tensorflow as tf

    from tfx_hydra.models import mlp
    from tfx_hydra.trainer.callbacks import NonFiniteGuard

    class EveryOtherEpoch(NonFiniteGuard):
        def on_epoch_end(self, epoch, logs=None):
            if epoch % 2 == 1:  # epochs 2, 4, ... (1-based)
                super().on_epoch_end(epoch, logs)

    keras.utils.set_random_seed(0)
    model = mlp("mlp", [28, 28], 10)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                  steps_per_execution=64)
    data = tf.data.Dataset.from_tensor_slices((x, y)).cache().shuffle(2048, seed=0).batch(32).prefetch(-1)
    marks: list[float] = []
    clock = keras.callbacks.LambdaCallback(on_epoch_begin=lambda e, logs: marks.append(time.perf_counter()),
                                           on_epoch_end=lambda e, logs: marks.append(time.perf_counter()))
    model.fit(data, epochs=epochs, callbacks=[EveryOtherEpoch(64), clock], verbose=0)  # the guard first, as in a run
    durations = [marks[i + 1] - marks[i] for i in range(0, len(marks), 2)]
    return {"A": durations[2::2], "B": durations[1::2]}


def weight_check_seconds() -> float:
    """One weight check of the seed MLP, alone: median of 200 calls."""
    from tfx_hydra.models import mlp
    from tfx_hydra.trainer.callbacks import weights_all_finite

    model = mlp("mlp", [28, 28], 10)
    times = []
    for _ in range(200):
        started = time.perf_counter()
        weights_all_finite(model)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def data_check_seconds(dtype: str) -> float:
    """`data.check_finite` on 60,000 x 784 in-memory inputs: median of 5."""
    from tfx_hydra.data.finite import require_finite_arrays

    inputs = (np.random.default_rng(0).random((60000, 784)) * 255).astype(dtype)
    times = []
    for _ in range(5):
        started = time.perf_counter()
        require_finite_arrays({"x_train": inputs}, "bench")
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv=None) -> int:
    args = parse_args(argv)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)  # the cpu profile's threads
    tf.config.threading.set_inter_op_parallelism_threads(2)
    with tempfile.TemporaryDirectory() as folder:
        with np.load(make_mnist_like(Path(folder) / "mnist.npz", args.train, 100)) as arrays:
            x, y = arrays["x_train"].astype("float32") / 255.0, arrays["y_train"].astype("int64")
    sides: dict[str, list[float]] = {"A": [], "B": []}
    for fit in range(args.fits):
        for side, durations in epoch_seconds(x, y, args.epochs).items():
            sides[side] += durations
        print(f"fit {fit + 1}: epochs without the check (A) {', '.join(f'{d:.3f}' for d in sides['A'])} s; "
              f"with it (B) {', '.join(f'{d:.3f}' for d in sides['B'])} s")
    a, b = statistics.median(sides["A"]), statistics.median(sides["B"])
    check = weight_check_seconds()
    report = {"epoch_seconds": {"A_without_weight_check": sides["A"], "B_with_weight_check": sides["B"]},
              "ratio_B_over_A": b / a,
              "weight_check_seconds": check, "weight_check_share_of_epoch": check / a,
              "data_check_seconds_60000x784": {"float32": data_check_seconds("float32"),
                                               "uint8": data_check_seconds("uint8")}}
    print(f"median epoch: A (no weight check) {a:.3f} s, B (weight check) {b:.3f} s: B/A {b / a:.3f}x "
          "(target <= 1.01)")
    print(f"one weight check: {check * 1e3:.3f} ms = {check / a:.4%} of an epoch")
    data = report["data_check_seconds_60000x784"]
    print(f"in-memory data check, 60,000 x 784: float32 {data['float32'] * 1e3:.1f} ms, "
          f"uint8 {data['uint8'] * 1e3:.3f} ms")
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
