"""How close to the machine: model FLOPs utilisation (MFU) and examples/s of model=cnn and model=resnet_small
through tfx_hydra and through a hand-written Keras script, side by side on the same data, on this machine.

    python bench/mfu.py                 # both models, 16,384 MNIST-shaped images, 5 epochs, batch 64
    python bench/mfu.py --quick         # model=cnn, 512 images, 2 epochs: a minute (CI runs it)

Both sides train the same architecture (tfx_hydra's builder, which the plain script calls as it would a model
function of its own) on the same arrays (an MNIST-shaped .npz both read), batch 64, the same epochs, each epoch
validated on the file's test split (an epoch's examples/s is timed from its start to its end, validation included,
on both sides). A side's MFU is its median epoch's examples/s (the first epoch, which traces and compiles, left out)
x the step's training FLOPs per example (one count for both: trainer/flops.py, XLA's matmuls and convolutions) / this
CPU's peak in float32 (peak.py: a 2048x2048 matmul, measured once and cached). tfx_hydra's side is its CLI's default
run of the model (the cpu profile's threads, cache, steps per call), its epochs' figures read back from MLflow
(`examples_per_sec`, and the `mfu` it logged); the plain side times its own epochs with a Keras callback.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import bench_parser, child_env, latest_run, make_mnist_like, write_json

REPO = Path(__file__).resolve().parents[1]
BATCH = 64

# Both plain scripts end the same way: the model fit on (x, y), each epoch timed by a Keras callback.
PLAIN_FIT = '''
class Clock(keras.callbacks.Callback):
    rates = []
    def on_epoch_begin(self, epoch, logs=None):
        self.began = time.perf_counter()
    def on_epoch_end(self, epoch, logs=None):
        self.rates.append(len(x) / (time.perf_counter() - self.began))

model.fit(x, y, batch_size={batch}, epochs={epochs}, validation_data=validation, callbacks=[Clock()], verbose=0)
json.dump({{"epochs_examples_per_sec": Clock.rates}}, open(sys.argv[2], "w"))
'''

PLAIN = '''
import json, sys, time
import keras, numpy as np
from tfx_hydra.models import {model}

data = np.load(sys.argv[1])
x, y = data["x_train"].astype("float32") / 255.0, data["y_train"].astype("int32")
validation = data["x_test"].astype("float32") / 255.0, data["y_test"].astype("int32")
model = {model}(name="{model}", input_shape=[28, 28], num_classes=10)
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


def parse_args(argv=None):
    parser = bench_parser(__doc__, train=16384, epochs=5, quick="model=cnn, 512 images, 2 epochs")
    parser.add_argument("--models", nargs="+", default=["cnn", "resnet_small", "transformer"])
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.train, args.epochs = ["cnn"], 512, 2
    return args


def run_plain(model: str, data: Path, epochs: int, workdir: Path) -> dict:
    script, result = workdir / f"plain_{model}.py", workdir / f"plain_{model}.json"
    script.write_text(((PLAIN_TEXT if model == "transformer" else PLAIN) + PLAIN_FIT).format(
        model=model, batch=BATCH, epochs=epochs))
    subprocess.run([sys.executable, str(script), str(data), str(result)], cwd=workdir, check=True,
                   capture_output=True, env=child_env())
    rates = json.loads(result.read_text())["epochs_examples_per_sec"]
    return {"examples_per_sec": statistics.median(rates[1:]), "epochs_examples_per_sec": rates}


def run_framework(model: str, data: Path, epochs: int, workdir: Path) -> dict:
    """tfx_hydra's default run of the model on the same file (its own cache, threads, steps per call and XLA as
    the cpu profile sets them), batch 64; its last epoch's figures and the count and peak it tagged."""
    chosen = [f"model={model}", "data=mnist", "data.validation_split=0"] if model != "transformer" else [
        "model._target_=text_models.transformer", "model.name=transformer", "data=text_table", "data.num_classes=2",
        "data.test_split=0.05", "data.validation_split=0.05"]  # the user's own model; as the plain side, 90 % trained
    subprocess.run([sys.executable, "-m", "tfx_hydra", *chosen, f"data.path={data}",
                    f"trainer.epochs={epochs}", f"trainer.batch_size={BATCH}",
                    "export=none", "export.mlflow_model=false", "trainer.tensorboard=false"],
                   cwd=workdir, check=True, capture_output=True, env=child_env())
    run, epochs = latest_run(workdir)
    rates = epochs("examples_per_sec")
    return {"examples_per_sec": statistics.median(rates[1:]), "epochs_examples_per_sec": rates,
            "mfu_logged": statistics.median(epochs("mfu")[1:]),
            "flops_per_example": float(run.data.tags["model.flops_per_example.training"]),
            "peak": float(run.data.tags["peak.flops_per_second"]), "peak_source": run.data.tags["peak.source"]}


def main(argv=None) -> dict:
    args = parse_args(argv)
    results = {"models": {}}
    with tempfile.TemporaryDirectory(prefix="bench-mfu-") as folder:
        workdir = Path(folder)
        images = make_mnist_like(workdir / "mnist.npz", args.train, max(256, args.train // 8))
        (workdir / "text_models.py").write_text(TRANSFORMER)
        texts = make_text_table(workdir / "texts.csv", args.train * 10 // 9) if "transformer" in args.models else None
        for model in args.models:
            data = texts if model == "transformer" else images
            framework = run_framework(model, data, args.epochs, workdir)
            plain = run_plain(model, data, args.epochs, workdir)
            per_example, peak = framework["flops_per_example"], framework["peak"]
            for side in (plain, framework):
                side["mfu"] = side["examples_per_sec"] * per_example / peak
            results["models"][model] = {
                "training_flops_per_example": per_example, "framework": framework, "plain": plain,
                "ratio": {"examples_per_sec": framework["examples_per_sec"] / plain["examples_per_sec"],
                          "mfu": framework["mfu"] / plain["mfu"]}}
            results["peak"], results["peak_source"] = peak, framework["peak_source"]
    print(f"peak: {results['peak'] / 1e9:,.0f} GFLOP/s ({results['peak_source']})")
    print(f"{'model':<14}{'MFLOP/example':>15}{'plain ex/s':>12}{'plain mfu':>11}{'tfx ex/s':>10}{'tfx mfu':>9}"
          f"{'ratio':>8}")
    for model, row in results["models"].items():
        print(f"{model:<14}{row['training_flops_per_example'] / 1e6:>15,.2f}{row['plain']['examples_per_sec']:>12,.0f}"
              f"{row['plain']['mfu']:>11.1%}{row['framework']['examples_per_sec']:>10,.0f}"
              f"{row['framework']['mfu']:>9.1%}{row['ratio']['mfu']:>7.2f}x")
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"({time.perf_counter() - started:.0f} s)")
