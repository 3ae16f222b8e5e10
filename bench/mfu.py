"""How close to the machine: model FLOPs utilisation (MFU) and examples/s of model=cnn, model=resnet_small, the
issue's reference CNN on 64x64x3 images and a small Transformer text model, through tfx_hydra and through a
hand-written Keras script, side by side on the same data, on this machine, beside the step alone (the model's training
step on one batch held in memory, repeated, nothing around it); and each of the levers the
framework controls (both thread pools, XLA, steps per call, precision), one run each, against tfx_hydra's default.

    python bench/mfu.py                 # the four models, then the levers for the conv nets (~45 min on 2 cores)
    python bench/mfu.py --no-levers     # the four models only
    python bench/mfu.py --quick         # model=cnn, 512 images, 2 epochs, one lever: a minute or two (CI runs it)

Both sides train the same architecture (tfx_hydra's builder, which the plain script calls as it would a model
function of its own) on the same arrays (an .npz both read), batch 64, the same epochs, each epoch validated on the
file's test split (an epoch's examples/s is timed from its start to its end, validation included, on both sides).
A side's MFU is its median epoch's examples/s (the first epoch, which traces and compiles, left out) x the step's
training FLOPs per example (one count for both: trainer/flops.py, XLA's matmuls and convolutions) / this CPU's peak
in float32 (peak.py: a 2048x2048 matmul, measured once and cached). tfx_hydra's side is its CLI's default run of the
model (the cpu profile's threads, cache, steps per call), its epochs' figures read back from MLflow
(`examples_per_sec`, and the `mfu` it logged); the plain side times its own epochs with a Keras callback.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from harness import bench_parser, child_env, latest_run, make_mnist_like, write_json

REPO = Path(__file__).resolve().parents[1]
BATCH = 64

# Each epoch timed by a Keras callback: `examples` (an expression of the script) over the epoch's seconds.
CLOCK = '''
class Clock(keras.callbacks.Callback):
    rates = []
    def on_epoch_begin(self, epoch, logs=None):
        self.began = time.perf_counter()
    def on_epoch_end(self, epoch, logs=None):
        self.rates.append({examples} / (time.perf_counter() - self.began))
'''

# Both plain scripts end the same way: the model fit on (x, y), each epoch timed by a Keras callback.
PLAIN_FIT = CLOCK.format(examples="len(x)") + '''
model.fit(x, y, batch_size={batch}, epochs={epochs}, validation_data=validation, callbacks=[Clock()], verbose=0)
json.dump({{"epochs_examples_per_sec": Clock.rates}}, open(sys.argv[2], "w"))
'''

# The step alone: the same model and optimizer, its training step on one batch held in memory, repeated (no input
# pipeline, no validation, 16 steps per call, TensorFlow's default threads): what a loop with nothing around the
# step reaches. Not an upper bound: the cpu profile's threads and steps per call beat it for some models.
STEP_ALONE_FIT = '''
import tensorflow as tf

model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"], steps_per_execution=16)
one_batch = tf.data.Dataset.from_tensors((x[:{batch}], y[:{batch}])).repeat()
steps = max(16, len(x) // {batch} // 16 * 16)
''' + CLOCK.format(examples="steps * {batch}") + '''
model.fit(one_batch, steps_per_epoch=steps, epochs={epochs}, callbacks=[Clock()], verbose=0)
json.dump({{"epochs_examples_per_sec": Clock.rates}}, open(sys.argv[2], "w"))
'''

PLAIN = '''
import json, sys, time
import keras, numpy as np
from tfx_hydra.models import {builder}

data = np.load(sys.argv[1])
x, y = data["x_train"].astype("float32") / 255.0, data["y_train"].astype("int32")
validation = data["x_test"].astype("float32") / 255.0, data["y_test"].astype("int32")
model = {builder}(name="{builder}", input_shape={shape}, num_classes=10, **{keys})
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])

'''


# A small Transformer text classifier, as a user's own model function (written beside the data, imported by both
# sides): raw strings -> TextVectorization (adapted on the training split) -> token + position embeddings -> BLOCKS
# pre-norm blocks of multi-head self-attention and a 2-layer feed-forward -> average -> the head.
TRANSFORMER = '''
import keras
from keras import layers


def transformer(name="transformer", num_classes=2, sequence_length=64, vocabulary=2000, width=64, heads=4,
                blocks=2, feed_forward=128, **config_keys_of_other_models):
    inputs = keras.Input(shape=(), dtype="string", name="inputs")
    tokens = layers.TextVectorization(max_tokens=vocabulary, output_sequence_length=sequence_length)(inputs)
    x = layers.Embedding(vocabulary, width)(tokens)
    x = x + layers.Embedding(sequence_length, width)(keras.ops.arange(sequence_length))
    for _ in range(blocks):
        attended = layers.MultiHeadAttention(heads, width // heads)(layers.LayerNormalization()(x),
                                                                    layers.LayerNormalization()(x))
        x = x + attended
        x = x + layers.Dense(width)(layers.Dense(feed_forward, activation="gelu")(layers.LayerNormalization()(x)))
    x = layers.GlobalAveragePooling1D()(x)
    return keras.Model(inputs, layers.Dense(num_classes, activation="softmax")(x), name=name)
'''

PLAIN_TEXT = '''
import json, sys, time
import keras, pandas as pd, tensorflow as tf
from text_models import transformer

table = pd.read_csv(sys.argv[1])
cut = int(len(table) * 0.9)
x, y = tf.constant(table.text.values[:cut].tolist()), table.label.values[:cut].astype("int32")
validation = tf.constant(table.text.values[cut:].tolist()), table.label.values[cut:].astype("int32")
model = transformer(num_classes=2)
model.layers[1].adapt(x)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])

'''
WORDS = 1500  # the made-up language's words; a text's class is which of two word sets it draws more from


def make_text_table(path: Path, count: int, seed: int = 0) -> Path:
    """`count` texts of 40-64 made-up words, label 0/1 by which half of the words they draw more from."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lines = ["text,label"]
    for i in range(count):
        label = i % 2
        words = [int(rng.integers(0, WORDS // 2) + label * (WORDS // 2)) if rng.random() < 0.6
                 else int(rng.integers(0, WORDS)) for _ in range(int(rng.integers(40, 65)))]
        lines.append(" ".join(f"w{w}" for w in words) + f",{label}")
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass(frozen=True)
class Case:
    """One model of the table: tfx_hydra's overrides for it, the builder the plain side calls with `keys`, the
    images' shape, and the share of --train it trains on (the heavier models' epochs kept to seconds)."""

    overrides: tuple
    builder: str = ""
    keys: dict = field(default_factory=dict)
    shape: tuple = (28, 28)
    share: float = 1.0


CASES = {
    "cnn": Case(("model=cnn",), "cnn"),
    "resnet_small": Case(("model=resnet_small",), "resnet_small", share=1 / 8),
    # the point of reference: three 3x3 convolutions of 32, 64 and 128 filters on 64x64x3, batch 64
    "cnn64": Case(("model=cnn", "model.filters=[32,64,128]", "data.input_shape=[64,64,3]"), "cnn",
                  {"filters": (32, 64, 128)}, (64, 64, 3), 1 / 8),
    "transformer": Case(("model._target_=text_models.transformer", "model.name=transformer", "data=text_table",
                         "data.num_classes=2", "data.test_split=0.05", "data.validation_split=0.05")),
}
# What the framework controls, one override each against its default run (the cpu profile's): the intra-op threads
# (the opposite of what auto gives a conv net), the inter-op threads (the profile's 2 -> 1), XLA, steps per
# tf.function call, mixed bfloat16 (emulated without AMX). The layout is not one on a CPU: TensorFlow's CPU
# max-pooling takes channels-last only.
LEVERS = ("hardware.intra_op_threads=1", "hardware.inter_op_threads=1", "trainer.jit_compile=true",
          "trainer.steps_per_execution=1", "precision=bf16")


def parse_args(argv=None):
    parser = bench_parser(__doc__, train=16384, epochs=5, quick="model=cnn, 512 images, 2 epochs, one lever")
    parser.add_argument("--models", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--no-levers", dest="levers", action="store_false", help="the models' default runs only")
    args = parser.parse_args(argv)
    args.levers = LEVERS[:1] if args.quick else (LEVERS if args.levers else ())
    if args.quick:
        args.models, args.train, args.epochs = ["cnn"], 512, 2
    return args


def make_images(path: Path, train: int, test: int, shape: tuple) -> Path:
    """The MNIST-shaped digits, or (for a shape of 3 channels) the same digits scaled to the shape's size, each
    channel with noise of its own: images a model can learn at any size."""
    digits = dict(np.load(make_mnist_like(path, train, test)))  # read before the file is rewritten
    if len(shape) == 2:
        return path
    height, width, channels = shape

    def resized(images):
        rows, cols = (np.arange(height) * 28 // height), (np.arange(width) * 28 // width)
        big = images[:, rows][:, :, cols].astype("int16")
        noise = np.random.default_rng(1).integers(-20, 20, size=(*big.shape, channels))
        return (big[..., None] + noise).clip(0, 255).astype("uint8")

    np.savez(path, x_train=resized(digits["x_train"]), y_train=digits["y_train"], x_test=resized(digits["x_test"]),
             y_test=digits["y_test"])
    return path


def run_plain(name: str, data: Path, epochs: int, workdir: Path, fit: str = PLAIN_FIT) -> dict:
    """The plain script's run (`fit`=STEP_ALONE_FIT: its step alone) of the model on the file, in a process of its
    own."""
    case, side = CASES[name], "plain" if fit is PLAIN_FIT else "step_alone"
    script, result = workdir / f"{side}_{name}.py", workdir / f"{side}_{name}.json"
    script.write_text(((PLAIN_TEXT if name == "transformer" else PLAIN) + fit).format(
        builder=case.builder, shape=list(case.shape), keys=dict(case.keys), batch=BATCH, epochs=epochs))
    subprocess.run([sys.executable, str(script), str(data), str(result)], cwd=workdir, check=True,
                   capture_output=True, env=child_env())
    rates = json.loads(result.read_text())["epochs_examples_per_sec"]
    return {"examples_per_sec": statistics.median(rates[1:]), "epochs_examples_per_sec": rates}


def run_framework(name: str, data: Path, epochs: int, workdir: Path, lever: tuple = ()) -> dict:
    """tfx_hydra's default run of the model on the same file (its own cache, threads, steps per call and XLA as
    the cpu profile sets them; `lever`: one override on top), batch 64; its epochs' figures and the count, the
    peak and the threads it tagged."""
    images = () if name == "transformer" else ("data=mnist", "data.validation_split=0")  # the plain side's splits
    subprocess.run([sys.executable, "-m", "tfx_hydra", *CASES[name].overrides, *images, f"data.path={data}",
                    f"trainer.epochs={epochs}", f"trainer.batch_size={BATCH}", *lever,
                    "export=none", "export.mlflow_model=false", "trainer.tensorboard=false"],
                   cwd=workdir, check=True, capture_output=True, env=child_env())
    run, epochs = latest_run(workdir)
    rates = epochs("examples_per_sec")
    return {"examples_per_sec": statistics.median(rates[1:]), "epochs_examples_per_sec": rates,
            "mfu_logged": statistics.median(epochs("mfu")[1:]),
            "flops_per_example": float(run.data.tags["model.flops_per_example.training"]),
            "intra_op_threads": run.data.tags["hardware.intra_op_threads"],
            "peak": float(run.data.tags["peak.flops_per_second"]), "peak_source": run.data.tags["peak.source"]}


def main(argv=None) -> dict:
    args = parse_args(argv)
    results = {"models": {}, "levers": {}}
    with tempfile.TemporaryDirectory(prefix="bench-mfu-") as folder:
        workdir = Path(folder)
        (workdir / "text_models.py").write_text(TRANSFORMER)
        for name in args.models:
            case, train = CASES[name], max(256, int(args.train * CASES[name].share))
            data = make_text_table(workdir / "texts.csv", train * 10 // 9) if name == "transformer" else \
                make_images(workdir / f"images_{name}.npz", train, max(256, train // 8), case.shape)
            framework = run_framework(name, data, args.epochs, workdir)
            plain = run_plain(name, data, args.epochs, workdir)
            alone = run_plain(name, data, args.epochs, workdir, STEP_ALONE_FIT)
            print(f"{name}: plain {plain['examples_per_sec']:,.0f} ex/s, "
                  f"tfx_hydra {framework['examples_per_sec']:,.0f}, step alone {alone['examples_per_sec']:,.0f}",
                  flush=True)
            per_example, peak = framework["flops_per_example"], framework["peak"]
            for side in (plain, framework, alone):
                side["mfu"] = side["examples_per_sec"] * per_example / peak
            results["models"][name] = {
                "training_flops_per_example": per_example, "train": train, "framework": framework, "plain": plain,
                "step_alone": alone,
                "ratio": {"examples_per_sec": framework["examples_per_sec"] / plain["examples_per_sec"],
                          "mfu": framework["mfu"] / plain["mfu"]}}
            results["peak"], results["peak_source"] = peak, framework["peak_source"]
            if name != "transformer":
                results["levers"][name] = {lever: lever_row(run_framework(name, data, args.epochs, workdir, (lever,)),
                                                            framework, per_example, peak) for lever in args.levers}
    print_tables(results)
    write_json(args.json, results)
    return results


def lever_row(run: dict, default: dict, per_example: float, peak: float) -> dict:
    return {"examples_per_sec": run["examples_per_sec"], "mfu": run["examples_per_sec"] * per_example / peak,
            "vs_default": run["examples_per_sec"] / default["examples_per_sec"],
            "intra_op_threads": run["intra_op_threads"]}


def print_tables(results: dict) -> None:
    print(f"peak: {results['peak'] / 1e9:,.0f} GFLOP/s ({results['peak_source']})")
    print(f"{'model':<14}{'MFLOP/example':>15}{'plain ex/s':>12}{'plain mfu':>11}{'tfx ex/s':>10}{'tfx mfu':>9}"
          f"{'ratio':>8}{'alone mfu':>11}  tfx threads")
    for model, row in results["models"].items():
        print(f"{model:<14}{row['training_flops_per_example'] / 1e6:>15,.2f}{row['plain']['examples_per_sec']:>12,.0f}"
              f"{row['plain']['mfu']:>11.1%}{row['framework']['examples_per_sec']:>10,.0f}"
              f"{row['framework']['mfu']:>9.1%}{row['ratio']['mfu']:>7.2f}x{row['step_alone']['mfu']:>11.1%}  "
              f"{row['framework']['intra_op_threads']}")
    for model, levers in results["levers"].items():
        default = results["models"][model]["framework"]
        print(f"\n{model}: the levers, one run each{'':<18}{'ex/s':>8}{'mfu':>8}{'vs default':>12}")
        print(f"  {'tfx_hydra default':<55}{default['examples_per_sec']:>8,.0f}{default['mfu']:>8.1%}{1:>11.2f}x")
        for lever, row in levers.items():
            print(f"  {lever:<55}{row['examples_per_sec']:>8,.0f}{row['mfu']:>8.1%}{row['vs_default']:>11.2f}x")


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"({time.perf_counter() - started:.0f} s)")
