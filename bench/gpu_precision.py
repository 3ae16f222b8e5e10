"""fp32 vs mixed_float16 vs mixed_bfloat16, each with and without XLA, on a ResNet-50-sized model.

    python bench/gpu_precision.py                 # ResNet50, 224x224, batch 64: run this on the GPU box
    python bench/gpu_precision.py --tiny          # seconds on a laptop CPU: checks the script, not the GPU

Trains `--model` from keras.applications (weights=None) on synthetic images, times
`--steps` training steps after `--warmup` steps (tracing, XLA compilation), and prints
examples/s per configuration plus its ratio to fp32 without XLA. On a CPU expect no gain
(float16/bfloat16 need tensor cores); on an A100/H100 mixed precision is where the
1.5-3x comes from, and XLA adds to it. `--json PATH` writes the figures for tracking.
The precision policies are tfx_hydra's own (precision.POLICIES), set the way a run sets them.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported (by tfx_hydra.precision's users)

from harness import write_json  # noqa: E402

from tfx_hydra.precision import FLOAT32, OUTPUT_DTYPE, POLICIES, set_precision  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="ResNet50", help="a keras.applications class name")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=50, help="timed training steps per configuration")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first (tracing, XLA compile)")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    parser.add_argument("--xla", nargs="+", default=["off", "on"], choices=["off", "on"])
    parser.add_argument("--tiny", action="store_true",
                        help="MobileNetV3Small at 32x32, batch 4, 3 steps: checks the script on a CPU in about a "
                        "minute (float16 convolutions are emulated on a CPU: a larger model takes minutes there)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.tiny:
        args.model, args.image_size, args.batch_size, args.classes, args.steps, args.warmup = (
            "MobileNetV3Small", 32, 4, 10, 3, 1)
    return args


def examples_per_second(args, policy: str, xla: bool) -> float:
    """Build, compile and train the model under `policy`; time the steady-state steps."""
    import keras
    import tensorflow as tf

    keras.backend.clear_session()
    set_precision(policy)
    keras.utils.set_random_seed(0)
    builder = getattr(keras.applications, args.model)
    backbone = builder(weights=None, include_top=False, pooling="avg",
                       input_shape=(args.image_size, args.image_size, 3))
    outputs = keras.layers.Dense(args.classes, activation="softmax", dtype=OUTPUT_DTYPE)(backbone.output)
    model = keras.Model(backbone.input, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy", jit_compile=xla)
    images = tf.random.uniform((args.batch_size, args.image_size, args.image_size, 3))
    labels = tf.random.uniform((args.batch_size,), maxval=args.classes, dtype=tf.int64)
    data = tf.data.Dataset.from_tensors((images, labels)).repeat()
    model.fit(data, steps_per_epoch=args.warmup, epochs=1, verbose=0)
    started = time.perf_counter()
    model.fit(data, steps_per_epoch=args.steps, epochs=1, verbose=0)
    return args.steps * args.batch_size / (time.perf_counter() - started)


def main(argv=None) -> dict:
    args = parse_args(argv)
    import tensorflow as tf

    device = ", ".join(d.name for d in tf.config.list_physical_devices("GPU")) or "CPU only"
    print(f"{args.model} {args.image_size}x{args.image_size}, batch {args.batch_size}, {args.steps} timed steps "
          f"on {device}")
    results = []
    for policy, xla in itertools.product(args.policies, args.xla):
        rate = examples_per_second(args, policy, xla == "on")
        results.append({"policy": policy, "xla": xla, "examples_per_sec": rate})
        print(f"  {policy:<15} xla {xla:<3}  {rate:10.1f} ex/s", flush=True)
    set_precision(FLOAT32)
    baseline = next((r["examples_per_sec"] for r in results if r["policy"] == FLOAT32 and r["xla"] == "off"),
                    results[0]["examples_per_sec"])
    print("ratio to fp32 without XLA:")
    for result in results:
        result["ratio"] = result["examples_per_sec"] / baseline
        print(f"  {result['policy']:<15} xla {result['xla']:<3}  {result['ratio']:6.2f}x")
    report = {"model": args.model, "image_size": args.image_size, "batch_size": args.batch_size,
              "device": device, "results": results}
    write_json(args.json, report)
    return report


if __name__ == "__main__":
    main()
