"""Training throughput from TFRecord files vs from in-memory tensors: same data, same model, one process.

    python bench/input_pipeline.py               # 60,000 MNIST-sized examples, 3 repeats of 4 epochs
    python bench/input_pipeline.py --quick       # 12,000 examples, 1 repeat of 3 epochs: about a minute
    python bench/input_pipeline.py --json out.json

A: data=mnist from a local .npz: in-memory tensors (from_tensor_slices -> cache -> shuffle -> batch -> prefetch).
B: the same examples written by `python -m tfx_hydra.data.to_tfrecord` (8 shards) and read by data=tfrecord
   with data.cache=false, so every epoch streams from disk: interleave across files, parallel parse.
   B' (reported too): data=tfrecord with the default data.cache=true.
Both train the seed's MLP (the model whose steps are cheapest, so the input pipeline has the least
time to hide in) with the cpu profile's settings (batch 32, steps_per_execution 64, 1 intra-op /
2 inter-op threads). Throughput = training examples / fit time of epochs 2..N (epoch 1 traces and
fills caches). Runs alternate their order (A B, B A, ...) so drift hits both. Target: B/A >= 0.95,
i.e. the input pipeline is never the bottleneck.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from harness import bench_parser, make_mnist_like, write_json


def parse_args(argv=None) -> argparse.Namespace:
    parser = bench_parser(__doc__, train=60000, epochs=4, quick="12,000 examples, 1 repeat of 3 epochs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shards", type=int, default=8)
    args = parser.parse_args(argv)
    if args.quick:
        args.train, args.epochs, args.repeats = 12000, 3, 1
    return args


def examples_per_second(datasets, epochs: int) -> float:
    """Fit the seed MLP; training examples per second over epochs 2..N."""
    import keras

    from tfx_hydra.models import mlp

    keras.utils.set_random_seed(0)
    model = mlp("mlp", [28, 28], 10)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                  steps_per_execution=64)
    ends: list[float] = []
    clock = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: ends.append(time.perf_counter()))
    model.fit(datasets.train, epochs=epochs, callbacks=[clock], verbose=0)
    return datasets.num_train * (epochs - 1) / (ends[-1] - ends[0])


def measure(folder: Path, args: argparse.Namespace) -> dict[str, list[float]]:
    """Write the data into `folder`, then the examples/s of each side, repeats alternating."""
    from tfx_hydra.data import keras_dataset, tfrecord
    from tfx_hydra.data.to_tfrecord import convert

    npz = make_mnist_like(folder / "mnist.npz", args.train + args.train // 9, 2000)  # 10 % goes to validation
    started = time.perf_counter()
    convert(str(folder / "tfr"), args.shards, ["data=mnist", f"data.path={npz}"])
    print(f"wrote the TFRecords in {time.perf_counter() - started:.1f} s", flush=True)
    common = {"input_shape": [28, 28], "num_classes": 10, "batch_size": 32, "seed": 0}
    files = {split: str(folder / "tfr" / f"{split}-*.tfrecord") for split in ("train", "validation", "test")}

    def in_memory():
        return keras_dataset("mnist", str(npz), **common)

    def streamed(cache: bool):
        return tfrecord(files["train"], files["test"], validation_files=files["validation"], raw_scale=1 / 255,
                        cache=cache, **common)

    sides = {"A in-memory": in_memory, "B tfrecord streamed": lambda: streamed(False),
             "B' tfrecord cached": lambda: streamed(True)}
    results: dict[str, list[float]] = {name: [] for name in sides}
    for repeat in range(args.repeats):
        order = list(sides) if repeat % 2 == 0 else list(reversed(sides))
        for name in order:
            rate = examples_per_second(sides[name](), args.epochs)
            results[name].append(rate)
            print(f"repeat {repeat + 1}: {name:22s} {rate:10,.0f} ex/s", flush=True)
    return results


def main(argv=None) -> dict:
    args = parse_args(argv)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)  # the cpu profile's settings
    tf.config.threading.set_inter_op_parallelism_threads(2)
    with tempfile.TemporaryDirectory(prefix="tfx_hydra-bench-input-") as scratch:  # ~60 MB: gone on every exit
        results = measure(Path(scratch), args)
    medians = {name: statistics.median(rates) for name, rates in results.items()}
    summary = {
        "examples": args.train, "epochs": args.epochs, "repeats": args.repeats, "shards": args.shards,
        "examples_per_sec": medians,
        "ratio_streamed": medians["B tfrecord streamed"] / medians["A in-memory"],
        "ratio_cached": medians["B' tfrecord cached"] / medians["A in-memory"],
    }
    print("\nmedian examples/s: " + ", ".join(f"{k} {v:,.0f}" for k, v in medians.items()))
    print(f"ratio TFRecord streamed / in-memory: {summary['ratio_streamed']:.3f}  (target >= 0.95)")
    print(f"ratio TFRecord cached   / in-memory: {summary['ratio_cached']:.3f}")
    write_json(args.json, summary)
    return summary


if __name__ == "__main__":
    main()
