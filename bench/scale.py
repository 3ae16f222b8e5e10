"""bench/scale.py: tfx_hydra against a hand-written Keras + tf.data script reading the same files, at 1x
and 10x the data (100x where writing it is cheap), in one run: peak memory of the process tree, wall time
and examples/s.

    python bench/scale.py                       # every part at its default size (~40 min on 2 cores)
    python bench/scale.py --parts csv,tfrecord  # some of them
    python bench/scale.py --quick               # tiny sizes: that the script works, not figures

Parts:
    images    an image folder of JPEGs (--images, --size px, 10 classes), model=cnn for --epochs: tfx_hydra
              (data=image_folder, the default cache=auto) vs image_dataset_from_directory and the same
              network written by hand (no cache, as Keras' guide has it)
    tfrecord  --records dense records of 784 floats in 16 files, and 10x that: a 2-batch run's wall time
              (the median of 3), on the first start (no index, nothing cached: nothing is counted before the
              first step, the files are counted while it trains), from the count cache (the starts after) and
              from to_tfrecord's index; vs tf.data reading 2 batches; at 10x, a training epoch's examples/s,
              streamed, vs TFRecordDataset by hand
    cifar     a CIFAR-shaped folder: --cifar PNGs of 32x32 in 10 classes, model=cnn for one epoch, the same
              comparison as images
    csv       --rows x 20 numeric columns, 10x and 100x that: a 2-batch run's peak memory (in memory, and
              streamed under a budget of a quarter of the table) against tfx_hydra's own on 1,000 rows and
              pyarrow's reader alone; at 10x, a training epoch's examples/s vs pandas + tf.data by hand
    pipeline  a user's own from_pipelines source of --examples, 10x and 100x that: a 2-batch run's wall time
              vs tf.data reading 2 batches by hand; at 1x, a training epoch's examples/s vs the same by hand

The process tree's memory is sampled every 50 ms (psutil), children included.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
from harness import bench_parser, write_json

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT="true")
COMMON = ["trainer.epochs=1", "export=none", "tracking=none"]


def measured(command: list[str], cwd: Path) -> dict:
    """Wall seconds, peak RSS (MiB) of the process and its children, and what it printed."""
    import psutil

    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak, watched = [0], psutil.Process(process.pid)

    def sample() -> None:
        while process.poll() is None:
            try:
                tree = [watched, *watched.children(recursive=True)]
                peak[0] = max(peak[0], sum(p.memory_info().rss for p in tree))
            except psutil.Error:
                pass
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output = process.communicate()[0]
    sampler.join()
    if process.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{output[-3000:]}")
    return {"seconds": round(time.perf_counter() - started, 1), "peak_mib": round(peak[0] / 2**20), "output": output}


def tfx_hydra(args: list[str], cwd: Path) -> dict:
    return measured([sys.executable, "-m", "tfx_hydra", *args], cwd)


def script(code: str, cwd: Path) -> dict:
    path = cwd / "by_hand.py"
    path.write_text(textwrap.dedent(code))
    return measured([sys.executable, str(path)], cwd)


def examples_per_second(output: str) -> float | None:
    """The last epoch's figure as tfx_hydra's epoch line or the hand-written script prints it."""
    import re

    found = re.findall(r"([\d,]+) ex/s", output)
    return float(found[-1].replace(",", "")) if found else None


# --- an image folder -----------------------------------------------------------------------------------

def write_images(folder: Path, count: int, size: int, suffix: str = "jpg") -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(10):
        (folder / f"class{c}").mkdir(parents=True, exist_ok=True)
        base = rng.integers(0, 255, 3)
        for i in range(count // 10):
            pixels = np.clip(rng.normal(base, 40, (size, size, 3)), 0, 255).astype("uint8")
            Image.fromarray(pixels).save(folder / f"class{c}" / f"{i}.{suffix}", **({"quality": 90} if suffix == "jpg"
                                                                                    else {}))
    return folder


KERAS_IMAGES = """
import time, keras, tensorflow as tf
train, validation = keras.utils.image_dataset_from_directory({folder!r}, validation_split=0.2, subset="both",
                                                             seed=0, image_size=({size}, {size}), batch_size=32)
network = keras.Sequential([keras.Input(({size}, {size}, 3)), keras.layers.Rescaling(1 / 255),
    keras.layers.Conv2D(32, 3, padding="same", activation="relu"), keras.layers.MaxPooling2D(2, padding="same"),
    keras.layers.Conv2D(64, 3, padding="same", activation="relu"), keras.layers.MaxPooling2D(2, padding="same"),
    keras.layers.Flatten(), keras.layers.Dense(128, activation="relu"), keras.layers.Dropout(0.2),
    keras.layers.Dense(10, activation="softmax")])
network.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
started = time.perf_counter()
history = network.fit(train.prefetch(tf.data.AUTOTUNE), validation_data=validation, epochs={epochs}, verbose=0)
print(f"{{int(train.cardinality()) * 32 * {epochs} / (time.perf_counter() - started):,.0f}} ex/s")
"""


def images(work: Path, count: int, size: int, epochs: int, suffix: str = "jpg") -> dict:
    folder = write_images(work / f"images-{suffix}", count, size, suffix)
    ours = tfx_hydra(["data=image_folder", f"data.directory={folder}", f"data.input_shape=[{size},{size},3]",
                      "data.num_classes=10", "model=cnn", *COMMON, f"trainer.epochs={epochs}"], work)
    keras = script(KERAS_IMAGES.format(folder=str(folder), size=size, epochs=epochs), work)
    line = next((line for line in ours["output"].splitlines() if "data: image_folder" in line), "")
    return {"images": count, "size": size, "tfx_hydra_peak_mib": ours["peak_mib"], "keras_peak_mib": keras["peak_mib"],
            "tfx_hydra_seconds": ours["seconds"], "keras_seconds": keras["seconds"],
            "tfx_hydra_ex_per_s": examples_per_second(ours["output"]),
            "keras_ex_per_s": examples_per_second(keras["output"]), "cache": line.split("; cache: ")[-1]}


# --- TFRecords -----------------------------------------------------------------------------------------

def write_records(folder: Path, count: int, shards: int = 16) -> str:
    """Dense records of 784 floats, as a user's own writer leaves them (no index)."""
    import tensorflow as tf

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    writers = [tf.io.TFRecordWriter(str(folder / f"train-{i}.tfrecord")) for i in range(shards)]
    for n in range(count):
        example = tf.train.Example(features=tf.train.Features(feature={
            "inputs": tf.train.Feature(float_list=tf.train.FloatList(value=rng.random(784, dtype="float32"))),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[n % 10]))}))
        writers[n % shards].write(example.SerializeToString())
    for writer in writers:
        writer.close()
    return str(folder / "train-*.tfrecord")


KERAS_RECORDS = """
import glob, tensorflow as tf
features = {{"inputs": tf.io.FixedLenFeature([784], tf.float32), "label": tf.io.FixedLenFeature([], tf.int64)}}
data = tf.data.TFRecordDataset(sorted(glob.glob({pattern!r}))).batch(32).map(lambda r: tf.io.parse_example(r, features))
for batch in data.take(2):
    pass
"""


MLP_TRAINED_BY_HAND = """
network = keras.Sequential([keras.Input(({inputs},)), keras.layers.Dense(128, activation="relu"),
                            keras.layers.Dropout(0.2), keras.layers.Dense({classes}, activation="softmax")])
network.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
network.fit(train.take(2), verbose=0)  # traced: the timed epoch is training alone, as tfx_hydra's epoch line is
started = time.perf_counter()
network.fit(train, epochs=1, verbose=0)
print(f"{{{count} / (time.perf_counter() - started):,.0f}} ex/s")
"""


def trained_by_hand(data: str, inputs: int, classes: int, count: str) -> str:
    """A script that builds `train` (`data`), then trains tfx_hydra's default MLP on it by hand for one timed
    epoch and prints its examples/s (`count`: the examples an epoch holds, as Python)."""
    return data + MLP_TRAINED_BY_HAND.format(inputs=inputs, classes=classes, count=count)


KERAS_RECORDS_TRAINED = """
import glob, time, keras, tensorflow as tf
features = {{"inputs": tf.io.FixedLenFeature([784], tf.float32), "label": tf.io.FixedLenFeature([], tf.int64)}}
files = sorted(glob.glob({pattern!r}))
train = (tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE).shuffle(2048, seed=0).batch(32)
         .map(lambda r: (lambda e: (e["inputs"], e["label"]))(tf.io.parse_example(r, features)),
              num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))
"""


def median_seconds(command, repeat: int) -> float:
    """The median wall time of `repeat` runs: single start-ups vary by seconds from run to run on a small VM."""
    import statistics

    return statistics.median(command()["seconds"] for _ in range(repeat))


def tfrecord(work: Path, count: int, repeat: int = 3) -> dict:
    from tfx_hydra.data import record_index, record_splits

    results = {}
    os.environ["XDG_CACHE_HOME"] = ENV["XDG_CACHE_HOME"] = str(work / "cache")  # a machine that counted nothing yet
    for scale in (1, 10):
        pattern = write_records(work / f"records{scale}x", count * scale)
        run = ["data=tfrecord", f"data.train_files={pattern}", "data.input_shape=[28,28]", "data.num_classes=10",
               "data.limit_batches=2", "data.cache=false", *COMMON]
        files = sorted(str(p) for p in (work / f"records{scale}x").glob("*.tfrecord"))
        first = median_seconds(lambda: tfx_hydra(run, work), repeat)  # nothing known (the runs end before counting)
        record_index.remember({path: record_splits.tfrecord_count(path, lambda: False) for path in files})
        cached = median_seconds(lambda: tfx_hydra(run, work), repeat)  # the counts a first start's thread kept
        record_index.write_index(str(work / f"records{scale}x"), record_index.known_counts(files))
        indexed = median_seconds(lambda: tfx_hydra(run, work), repeat)  # as to_tfrecord leaves them: the index
        keras = median_seconds(lambda: script(KERAS_RECORDS.format(pattern=pattern), work), repeat)
        results[f"{scale}x"] = {"records": count * scale, "first_start_s": first, "cached_s": cached,
                                "indexed_s": indexed, "tf_data_s": keras}
        if scale == 10:  # a training epoch over every record, streamed (no cache) by both
            trained = tfx_hydra([*run[:4], "data.cache=false", "data.test_split=0.01", "data.validation_split=0.01",
                                 *COMMON, "trainer.epochs=2"], work)
            records_by_hand = KERAS_RECORDS_TRAINED.format(pattern=pattern)
            by_hand = script(trained_by_hand(records_by_hand, 784, 10, str(count * scale)), work)
            results["10x"] |= {"tfx_hydra_ex_per_s": examples_per_second(trained["output"]),
                               "keras_ex_per_s": examples_per_second(by_hand["output"])}
    return results


# --- a CSV ----------------------------------------------------------------------------------------------

def write_csv(path: Path, rows: int) -> Path:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 20)).astype("float32")
    with open(path, "w") as file:
        file.write(",".join([f"f{i}" for i in range(20)] + ["label"]) + "\n")
        np.savetxt(file, np.column_stack([x, x[:, 0] > 0]), fmt=["%.6f"] * 20 + ["%d"], delimiter=",")
    return path


ARROW_CSV = """
import numpy as np, pyarrow.csv as pc
table = pc.read_csv({path!r})
x = np.column_stack([table.column(i).to_numpy().astype("float32") for i in range(20)])
"""

KERAS_CSV = """
import time, keras, numpy as np, pandas as pd, tensorflow as tf
table = pd.read_csv({path!r}, engine="pyarrow", dtype="float32")
x, y = table.drop(columns="label").to_numpy(), table["label"].to_numpy().astype("int64")
x = (x - x.mean(axis=0)) / x.std(axis=0)
train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=0).batch(32).prefetch(tf.data.AUTOTUNE)
"""


def csv(work: Path, rows: int, scales=(1, 10, 100)) -> dict:
    """Peak memory of a 2-batch run (in memory, and streamed with a budget under the table's size) against
    tfx_hydra's own on a 1,000-row file (the process baseline), and a training epoch's examples/s against
    pandas + tf.data by hand (the whole file trained on by both: test_split=0 validation_split=0 is not
    allowed, so tfx_hydra trains on its 72 % split; examples/s compares rates, not totals)."""
    results = {}
    tiny = write_csv(work / "rows-tiny.csv", 1_000)
    run = ["data=csv", "data.input_shape=[20]", "data.num_classes=2", *COMMON]
    baseline = tfx_hydra([*run, f"data.path={tiny}", "data.limit_batches=2"], work)["peak_mib"]
    for scale in scales:
        path = write_csv(work / f"rows{scale}x.csv", rows * scale)
        float32 = rows * scale * 21 * 4 / 2**20
        ours = tfx_hydra([*run, f"data.path={path}", "data.limit_batches=2"], work)
        streamed = tfx_hydra([*run, f"data.path={path}", "data.limit_batches=2",
                              f"data.cache_budget={max(1, int(float32 / 4))}MiB"], work)
        arrow = measured([sys.executable, "-c", ARROW_CSV.format(path=str(path))], work)
        figures = {"rows": rows * scale, "file_mib": round(path.stat().st_size / 2**20),
                   "float32_mib": round(float32), "peak_mib": ours["peak_mib"], "seconds": ours["seconds"],
                   "baseline_mib": baseline, "above_baseline_x_float32": round((ours["peak_mib"] - baseline)
                                                                              / max(float32, 1), 2),
                   "streamed_peak_mib": streamed["peak_mib"], "streamed_seconds": streamed["seconds"],
                   "pyarrow_peak_mib": arrow["peak_mib"], "pyarrow_seconds": arrow["seconds"]}
        if scale == 10:
            trained = tfx_hydra([*run, f"data.path={path}", "trainer.epochs=2"], work)  # the 2nd: traced
            keras = script(trained_by_hand(KERAS_CSV.format(path=str(path)), 20, 2, "len(x)"), work)
            figures |= {"tfx_hydra_ex_per_s": examples_per_second(trained["output"]),
                        "keras_ex_per_s": examples_per_second(keras["output"])}
        results[f"{scale}x"] = figures
    return results


# --- a user's own pipeline -------------------------------------------------------------------------------

OWN_SOURCE = """
import tensorflow as tf
from tfx_hydra.data import from_pipelines


def examples(count):
    return tf.data.Dataset.range(count).map(lambda i: (tf.random.stateless_normal([784], seed=tf.stack([i, 0])),
                                                      i % 10))


def source(batch_size, seed, count, input_shape, num_classes, test_split, validation_split, normalization,
           **pipeline):  # the keys data=digits' node brings, which this source does not use
    return from_pipelines(examples(count), examples(count // 10), examples(count // 10), input_shape=input_shape,
                          num_classes=num_classes, batch_size=batch_size, seed=seed, name="own", **pipeline)
"""

KERAS_OWN = """
import tensorflow as tf
data = tf.data.Dataset.range({count}).map(lambda i: (tf.random.stateless_normal([784], seed=tf.stack([i, 0])),
                                                    i % 10)).batch(32)
for batch in data.take(2):
    pass
"""


KERAS_OWN_TRAINED = """
import time, keras, tensorflow as tf
train = (tf.data.Dataset.range({count}).map(lambda i: (tf.random.stateless_normal([784], seed=tf.stack([i, 0])),
                                                       i % 10), num_parallel_calls=tf.data.AUTOTUNE)
         .shuffle(2048, seed=0).batch(32).prefetch(tf.data.AUTOTUNE))
"""


def own_pipeline(work: Path, count: int, scales=(1, 10, 100)) -> dict:
    """A 2-batch run on a user's from_pipelines source of `count`, 10x and 100x `count` examples: start-up must
    not grow with the pipeline's length (nothing read through before training), against tf.data by hand; at 1x,
    a training epoch's examples/s beside the same pipeline trained by hand (neither cached)."""
    (work / "own_source.py").write_text(OWN_SOURCE)
    source = ["data._target_=own_source.source", "data.num_classes=10", "data.input_shape=[784]", "data.cache=false"]
    results = {}
    for scale in scales:
        ours = tfx_hydra([*source, f"+data.count={count * scale}", "data.limit_batches=2", *COMMON], work)
        keras = script(KERAS_OWN.format(count=count * scale), work)
        results[f"{scale}x"] = {"examples": count * scale, "seconds": ours["seconds"], "peak_mib": ours["peak_mib"],
                                "tf_data_seconds": keras["seconds"]}
    trained = tfx_hydra([*source, f"+data.count={count}", *COMMON, "trainer.epochs=2"], work)  # the 2nd: traced
    by_hand = script(trained_by_hand(KERAS_OWN_TRAINED.format(count=count), 784, 10, str(count)), work)
    results["1x"] |= {"tfx_hydra_ex_per_s": examples_per_second(trained["output"]),
                      "keras_ex_per_s": examples_per_second(by_hand["output"])}
    return results


def main() -> None:
    parser = bench_parser(__doc__, train=0, epochs=2, quick="tiny sizes: the script works, the figures mean nothing")
    parser.add_argument("--parts", default="images,cifar,tfrecord,csv,pipeline")
    parser.add_argument("--cifar", type=int, default=50_000, help="32x32 PNGs in the CIFAR-shaped folder")
    parser.add_argument("--examples", type=int, default=100_000, help="examples of the user's own pipeline")
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--size", type=int, default=160)
    parser.add_argument("--records", type=int, default=40_000)
    parser.add_argument("--rows", type=int, default=50_000)
    args = parser.parse_args()
    if args.quick:
        args.images, args.size, args.records, args.rows, args.epochs = 100, 16, 500, 500, 1
        args.cifar, args.examples = 200, 1_000
    parts = args.parts.split(",")
    results = {}
    with tempfile.TemporaryDirectory(prefix="tfx_hydra-scale-") as folder:
        work = Path(folder)
        if "images" in parts:
            results["images"] = images(work, args.images, args.size, args.epochs)
        if "cifar" in parts:
            results["cifar"] = images(work, args.cifar, 32, 1, suffix="png")
        if "tfrecord" in parts:
            results["tfrecord"] = tfrecord(work, args.records, repeat=1 if args.quick else 3)
        if "csv" in parts:
            results["csv"] = csv(work, args.rows, scales=(1, 10) if args.quick else (1, 10, 100))
        if "pipeline" in parts:
            results["pipeline"] = own_pipeline(work, args.examples, scales=(1, 10) if args.quick else (1, 10, 100))
    for part, figures in results.items():
        print(f"{part}:")
        for key, value in figures.items():
            print(f"  {key}: {value}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
