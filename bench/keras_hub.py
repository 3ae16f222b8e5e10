"""A BERT-shaped keras-hub classifier fine-tuned by a hand-written keras-hub script (A) and by
`python -m tfx_hydra model=keras_hub` (B): same preset folder, same texts, batch and epochs.

    python bench/keras_hub.py                      # 3 pairs, 4,000 reviews, a 2-layer BERT (hidden 64), 3 epochs
    python bench/keras_hub.py --quick              # 1 pair, 600 reviews, 1 epoch: about a minute
    python bench/keras_hub.py --preset FOLDER      # a real preset (save_to_preset) instead of the generated one
    python bench/keras_hub.py --json out.json      # also write every figure as JSON

A is what keras-hub's guides write: `TextClassifier.from_preset(folder, num_classes=2)` and `fit` on a
`text_dataset_from_directory` pipeline (keras-hub maps its preprocessor over the data). B is tfx_hydra's run: the
preprocessor inside the model, tracked in MLflow, no export. Both train the whole backbone with Adam. Pairs
alternate their order (AB, BA, ...) so drift hits both. Per pair and as medians it prints training examples/s
(fit's wall time, validation included, as each side times it) and each process's peak resident memory, and the
ratios B/A.

The generated preset has no pretrained weights (none can be downloaded here); its shape, not its knowledge, is
what the speed depends on.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import bench_parser, child_env, write_json

# Python puts this script's folder first on the import path, where this file (keras_hub.py) would stand in for the
# keras_hub package: the folder leaves the path once harness is imported from it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
WORDS = {"neg": "awful terrible boring dull poor sad weak bland".split(),
         "pos": "great superb lovely fine happy warm bright vivid".split()}
FILLER = [f"w{i}" for i in range(1500)]  # the rest of the vocabulary: words that say nothing


def parse_args(argv=None) -> argparse.Namespace:
    parser = bench_parser(__doc__, train=4000, epochs=3, quick="1 pair, 600 reviews, 1 epoch")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--preset", help="a keras-hub preset folder (default: a generated 2-layer BERT)")
    parser.add_argument("--plain", nargs=2, metavar=("DATA", "OUT"), help=argparse.SUPPRESS)  # side A, in its process
    args = parser.parse_args(argv)
    if args.quick:
        args.pairs, args.train, args.epochs = 1, 600, 1
    return args


def write_reviews(folder: Path, count: int, seed: int = 0) -> Path:
    """folder/<neg|pos>/<n>.txt: `count` reviews of 40 words whose own words say their class."""
    rng = random.Random(seed)
    for name, own in WORDS.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(count // 2):
            words = [rng.choice(FILLER) for _ in range(36)] + [rng.choice(own) for _ in range(4)]
            rng.shuffle(words)
            (folder / name / f"{i:05d}.txt").write_text(" ".join(words) + ".\n")
    return folder


def make_preset(folder: Path) -> Path:
    """A 2-layer BERT (hidden 64, 4 heads, sequences of 64) and its preprocessor, saved by keras-hub."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *sorted({*FILLER, *sum(WORDS.values(), [])})]
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary)
    backbone = keras_hub.models.BertBackbone(vocabulary_size=len(vocabulary), num_layers=2, num_heads=4,
                                             hidden_dim=64, intermediate_dim=128, max_sequence_length=64)
    backbone.save_to_preset(str(folder))
    keras_hub.models.BertTextClassifierPreprocessor(tokenizer=tokenizer, sequence_length=64).save_to_preset(
        str(folder))
    return folder


def plain(preset: str, data: str, epochs: int, batch: int, out: str) -> None:
    """Side A, as keras-hub's guides write it (run in a process of its own)."""
    import keras
    import keras_hub

    train, validation = keras.utils.text_dataset_from_directory(data, batch_size=batch, validation_split=0.1,
                                                                subset="both", seed=42)
    classifier = keras_hub.models.TextClassifier.from_preset(preset, num_classes=2)
    classifier.compile(optimizer=keras.optimizers.Adam(1e-3),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    started = time.perf_counter()
    history = classifier.fit(train, validation_data=validation, epochs=epochs, verbose=0)
    seconds = time.perf_counter() - started
    count = sum(int(labels.shape[0]) for _, labels in train)
    Path(out).write_text(json.dumps({"examples_per_sec": count * epochs / seconds,
                                     "val_accuracy": history.history["val_accuracy"][-1]}))


def measured(command: list[str], cwd: Path) -> tuple[float, float]:
    """Run `command`; its wall seconds and its peak resident memory in MiB (the process's own, from wait4)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... failed:\n{process.stderr.read().decode()[-3000:]}")
    return time.perf_counter() - started, usage.ru_maxrss / 1024


def run_plain(preset: Path, data: Path, args, workdir: Path) -> dict:
    out = workdir / "plain.json"
    wall, rss = measured([sys.executable, str(Path(__file__).resolve()), "--plain", str(data), str(out),
                          "--preset", str(preset), "--epochs", str(args.epochs), "--batch", str(args.batch)], workdir)
    return {**json.loads(out.read_text()), "peak_rss_mib": rss, "wall_seconds": wall}


def run_framework(preset: Path, data: Path, args, workdir: Path) -> dict:
    from mlflow.tracking import MlflowClient

    wall, rss = measured([sys.executable, "-m", "tfx_hydra", "model=keras_hub", f"model.preset={preset}",
                          "model.freeze_backbone=false", "data=text_folder", f"data.directory={data}",
                          "data.num_classes=2", f"trainer.epochs={args.epochs}", f"trainer.batch_size={args.batch}",
                          "optimizer.learning_rate=0.001", "trainer.tensorboard=false", "export=none"], workdir)
    client = MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                order_by=["attributes.start_time DESC"], max_results=1)
    return {"examples_per_sec": run.data.metrics["train_examples_per_sec"],
            "val_accuracy": run.data.metrics["val_accuracy"], "peak_rss_mib": rss, "wall_seconds": wall}



def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.plain:
        plain(args.preset, args.plain[0], args.epochs, args.batch, args.plain[1])
        return {}
    with tempfile.TemporaryDirectory(prefix="tfx_hydra-bench-keras-hub-") as folder:
        root = Path(folder)
        preset = Path(args.preset) if args.preset else make_preset(root / "preset")
        data = write_reviews(root / "reviews", args.train)
        pairs = []
        for index in range(args.pairs):
            sides = [("A", run_plain), ("B", run_framework)]
            figures = {}
            for name, side in sides if index % 2 == 0 else sides[::-1]:
                workdir = root / f"pair{index}_{name}"
                workdir.mkdir()
                figures[name] = side(preset, data, args, workdir)
            pairs.append(figures)
            a, b = figures["A"], figures["B"]
            print(f"pair {index + 1}: examples/s A {a['examples_per_sec']:.0f}  B {b['examples_per_sec']:.0f}  "
                  f"(B/A {b['examples_per_sec'] / a['examples_per_sec']:.3f}); peak RSS A {a['peak_rss_mib']:.0f} MiB"
                  f"  B {b['peak_rss_mib']:.0f} MiB (B-A {b['peak_rss_mib'] - a['peak_rss_mib']:+.0f})")
    median = {side: {key: statistics.median(p[side][key] for p in pairs) for key in pairs[0][side]}
              for side in ("A", "B")}
    ratio = median["B"]["examples_per_sec"] / median["A"]["examples_per_sec"]
    extra = median["B"]["peak_rss_mib"] - median["A"]["peak_rss_mib"]
    print(f"medians: training examples/s B/A {ratio:.3f} (target >= 0.95); peak RSS B-A {extra:+.0f} MiB "
          f"(target <= +300); val_accuracy A {median['A']['val_accuracy']:.3f}  B {median['B']['val_accuracy']:.3f}")
    results = {"pairs": pairs, "median": median, "examples_per_sec_ratio": ratio, "peak_rss_extra_mib": extra,
               "train": args.train, "epochs": args.epochs, "batch": args.batch}
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
