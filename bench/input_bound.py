"""What binds, acted on: an image-folder run that waits for its data, the levers its summary names, and what each
does to its examples/s and its wait, side by side in one run of this script on this machine.

    python bench/input_bound.py            # 4,096 JPEG images of 320x320, 3 epochs
    python bench/input_bound.py --quick    # 256 images, 2 epochs (CI runs it)

The model is model=cnn on 32x32x3, the images JPEGs of 320x320 resized as they are read: decoding one costs
about what training on it does, so a run that decodes every epoch waits for its data. Four runs of tfx_hydra's
CLI on the same folder, batch 64:

- `data.cache=false`: every epoch decodes every image in the training process: input-bound;
- `data.cache=auto` (the summary's first lever): decoded once, read from memory from the second epoch on;
- `data.cache=false data.service=local data.service_workers=1` and `=2`: every epoch decoded by tf.data service
  worker processes on this machine (the lever for a machine whose cores are spent).

Each run's figures are its MLflow metrics: the median epoch's `examples_per_sec` (the first, which traces, left
out) and `input_wait` (the share of the steps' time spent waiting for data; not logged for epochs under 2 s).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import bench_parser, child_env, latest_run, write_json

BATCH = 64
SIZE = 320  # the JPEGs' side: decoding them is most of an epoch's work
CASES = {
    "decoded every epoch (data.cache=false)": ["data.cache=false"],
    "the cache lever (data.cache=auto)": ["data.cache=auto"],
    "tf.data service, 1 local worker": ["data.cache=false", "data.service=local", "data.service_workers=1"],
    "tf.data service, 2 local workers": ["data.cache=false", "data.service=local", "data.service_workers=2"],
}


def parse_args(argv=None):
    parser = bench_parser(__doc__, train=4096, epochs=3, quick="256 images, 2 epochs")
    args = parser.parse_args(argv)
    if args.quick:
        args.train, args.epochs = 256, 2
    return args


def write_folder(root: Path, count: int) -> Path:
    """`count` JPEGs of SIZExSIZE in two class folders, a learnable brightness apart."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(count):
        name = ("bright", "dark")[i % 2]
        (root / name).mkdir(parents=True, exist_ok=True)
        pixels = np.clip(rng.normal(170 if name == "bright" else 80, 40, (SIZE, SIZE, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(root / name / f"{i:05d}.jpg", quality=90)
    return root


def run_case(overrides: list[str], folder: Path, epochs: int, workdir: Path) -> dict:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tfx_hydra", "model=cnn", "data=image_folder", f"data.directory={folder}",
                    "data.input_shape=[32,32,3]", "data.num_classes=2", f"trainer.epochs={epochs}",
                    f"trainer.batch_size={BATCH}", "trainer.steps_per_execution=8", "export=none",
                    "export.mlflow_model=false", "trainer.tensorboard=false", *overrides],
                   cwd=workdir, check=True, capture_output=True, env=child_env())
    seconds = time.perf_counter() - started
    run, epochs_of = latest_run(workdir)
    rates, waits = epochs_of("examples_per_sec"), epochs_of("input_wait")
    return {"examples_per_sec": statistics.median(rates[1:]), "epochs_examples_per_sec": rates,
            "input_wait": statistics.median(waits[1:]) if len(waits) > 1 else (waits[0] if waits else None),
            "epochs_input_wait": waits, "input_bound": run.data.tags.get("input_bound"),
            "command_seconds": seconds}


def main(argv=None) -> dict:
    args = parse_args(argv)
    results = {"images": args.train, "epochs": args.epochs, "cases": {}}
    with tempfile.TemporaryDirectory(prefix="bench-input-bound-") as folder:
        workdir = Path(folder)
        images = write_folder(workdir / "images", args.train)
        for name, overrides in CASES.items():
            results["cases"][name] = run_case(overrides, images, args.epochs, workdir)
    base = results["cases"]["decoded every epoch (data.cache=false)"]["examples_per_sec"]
    print(f"{args.train} JPEGs {SIZE}x{SIZE} -> 32x32x3, model=cnn, batch {BATCH}, {args.epochs} epochs (median epoch)")
    print(f"{'case':<42}{'ex/s':>9}{'vs first':>10}{'input_wait':>12}")
    for name, row in results["cases"].items():
        row["ratio"] = row["examples_per_sec"] / base
        wait = "n/a" if row["input_wait"] is None else f"{row['input_wait']:.0%}"
        print(f"{name:<42}{row['examples_per_sec']:>9,.0f}{row['ratio']:>9.2f}x{wait:>12}")
    first = results["cases"]["decoded every epoch (data.cache=false)"]["input_bound"]
    print(f"the first run's summary: input-bound: {first}")
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"({time.perf_counter() - started:.0f} s)")
