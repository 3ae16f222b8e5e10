"""What seeing a run costs: MLflow's system metrics and the in-epoch progress bar on the seed recipe,
and the data digests on 60,000 examples in memory and as TFRecords.

    python bench/observability.py            # 4 rounds of 4 variants, 60,000 MNIST-shaped examples, 3 epochs
    python bench/observability.py --quick    # 1 round, 6,000 examples, 2 epochs
    python bench/observability.py --json out.json

Costs: `python -m tfx_hydra experiment=seed_mnist_mlp` in four variants, side by side in each
round (order rotated): nothing extra (system metrics off, output not a terminal), system metrics
every 10 s (the default), every 1 s, and the progress bar (TTY_COMPATIBLE=1 makes rich draw it
into the captured output, as on a terminal). Each variant's training examples/s over the first's.

Monitor CPU: MLflow's monitor alone (tracking/system.py's context, as a run starts it) on a real
SQLite store for 10 s at 1 sample/s, no training beside it: the process CPU time it used per sample
(read psutil, read the run back, write the batch). Its share of one core at interval T is that over T.

Digests (data/lineage.py): the in-memory digest of the training split's arrays (sha256 of 47 MB of
uint8 pixels, and of the 188 MB float32 copy a run would otherwise hash), and the file digest of
the same examples written as TFRecords by `python -m tfx_hydra.data.to_tfrecord` (names, sizes,
ends of each file), against a full read of those files with tf.data.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import bench_parser, make_mnist_like, write_json
from seed_vs_framework import run_framework

VARIANTS = {
    "baseline": (["tracking.system_metrics.enabled=false"], {}),
    "system_metrics_10s": ([], {}),
    "system_metrics_1s": (["tracking.system_metrics.interval=1"], {}),
    "progress_bar": (["tracking.system_metrics.enabled=false"], {"TTY_COMPATIBLE": "1", "COLUMNS": "120"}),
}


def parse_args(argv=None):
    parser = bench_parser(__doc__, train=60000, epochs=3, quick="1 round, 6,000 examples, 2 epochs")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.train, args.epochs = 1, 6000, 2
    return args


def costs(data: Path, args, tmp: Path) -> dict:
    rates = {name: [] for name in VARIANTS}
    names = list(VARIANTS)
    for index in range(args.rounds):
        order = names[index % len(names):] + names[:index % len(names)]
        for name in order:
            extra, env = VARIANTS[name]
            workdir = tmp / f"round{index}-{name}"
            workdir.mkdir()
            rates[name].append(run_framework(data, args.epochs, workdir, extra, env)["examples_per_sec"])
        print(f"round {index + 1}: " + "  ".join(f"{n} {rates[n][-1]:,.0f} ex/s" for n in names), flush=True)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    ratios = {name: medians[name] / medians["baseline"] for name in names}
    for name in names[1:]:
        print(f"{name}: {ratios[name]:.3f}x the baseline's training examples/s (target >= 0.98)")
    return {"examples_per_sec": rates, "median": medians, "ratio": ratios}


def monitor_cpu(tmp: Path, seconds: float = 10.0) -> dict:
    """CPU seconds the system-metrics monitor takes per sample, measured with nothing else running."""
    from mlflow.tracking import MlflowClient

    from tfx_hydra.tracking.system import system_metrics

    uri = f"sqlite:///{tmp / 'monitor.db'}"
    client = MlflowClient(tracking_uri=uri)
    run_id = client.create_run(client.create_experiment("monitor")).info.run_id
    idle_started = time.process_time()
    time.sleep(seconds)
    idle = time.process_time() - idle_started
    started = time.process_time()
    with system_metrics(run_id, uri, interval=1.0):
        time.sleep(seconds)
    used = time.process_time() - started - idle
    samples = len(client.get_metric_history(run_id, "system/cpu_utilization_percentage"))
    per_sample = used / max(samples, 1)
    print(f"system-metrics monitor: {per_sample * 1000:.1f} ms of CPU per sample ({samples} samples in "
          f"{seconds:.0f} s): {per_sample / 10:.2%} of one core at the default 10 s, {per_sample:.2%} at 1 s",
          flush=True)
    return {"samples": samples, "cpu_seconds_per_sample": per_sample,
            "share_of_a_core_at_10s": per_sample / 10, "share_of_a_core_at_1s": per_sample}


def digests(data: Path, tmp: Path) -> dict:
    import tensorflow as tf

    from tfx_hydra.data.lineage import array_digest, files_digest
    from tfx_hydra.data.to_tfrecord import main as to_tfrecord

    with np.load(data) as arrays:
        x, y = arrays["x_train"], arrays["y_train"]
    results = {"examples": int(len(x))}
    for name, inputs in (("uint8", x), ("float32", x.astype("float32"))):
        started = time.perf_counter()
        array_digest(inputs, y)
        results[f"arrays_{name}_seconds"] = time.perf_counter() - started
        results[f"arrays_{name}_megabytes"] = inputs.nbytes / 1e6
    out = tmp / "tfr"
    assert to_tfrecord([str(out), "--shards", "16", "data=mnist", f"data.path={data}"]) == 0
    files = sorted(str(p) for p in out.glob("train-*.tfrecord"))
    started = time.perf_counter()
    files_digest(files, len(x))
    results["tfrecord_digest_seconds"] = time.perf_counter() - started
    started = time.perf_counter()
    int(tf.data.TFRecordDataset(files).reduce(np.int64(0), lambda count, _: count + 1))
    results["tfrecord_read_seconds"] = time.perf_counter() - started
    results["tfrecord_files"] = len(files)
    results["tfrecord_megabytes"] = sum(Path(f).stat().st_size for f in files) / 1e6
    print(f"digest of {len(x):,} examples in memory: {results['arrays_uint8_seconds'] * 1000:.0f} ms "
          f"({results['arrays_uint8_megabytes']:.0f} MB uint8), {results['arrays_float32_seconds'] * 1000:.0f} ms "
          f"({results['arrays_float32_megabytes']:.0f} MB float32)")
    print(f"digest of the same as {len(files)} TFRecord files ({results['tfrecord_megabytes']:.0f} MB): "
          f"{results['tfrecord_digest_seconds'] * 1000:.1f} ms; reading them all once: "
          f"{results['tfrecord_read_seconds'] * 1000:.0f} ms")
    return results


def main(argv=None) -> dict:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="observability-") as tmp:
        tmp = Path(tmp)
        data = make_mnist_like(tmp / "mnist.npz", args.train, 10000 if not args.quick else 1000)
        print(f"data: {args.train:,} MNIST-shaped examples, {args.epochs} epochs, {args.rounds} round(s)", flush=True)
        report = {"digests": digests(data, tmp), "monitor": monitor_cpu(tmp), "costs": costs(data, args, tmp)}
    write_json(args.json, report)
    return report


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
