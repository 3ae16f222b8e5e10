"""One input contract for every served form, held for every data source, task and exporter.

Each row trains a small run on files this test writes (or, for the digits, scikit-learn's bundled ones), with
every exporter selected and the MLflow model logged. Then the test reads raw examples back from the source's
own files with its own readers (PIL, the csv module, json, TFRecord parsing, TFDS' reader), never with
tfx_hydra's, and sends them to every artifact through that format's own runtime: the SavedModel's
serving_default, the reloaded .keras file, LiteRT, ONNX Runtime, TF.js in Node, MLflow's pyfunc (what
`mlflow models serve` runs), and for one row per task `mlflow models serve` itself over HTTP. Each must answer
as the SavedModel does (within 1e-5, relative where values exceed 1), with the classes called by the names the
data gives them, and `mode=evaluate` on the SavedModel must give the run's own test metrics: the served model
is the trained one, fed raw values.

A data source or an exporter cannot join without a row: the first test lists conf/data/ and conf/export/ and
fails on an option no row covers.
"""

from __future__ import annotations

import csv as csv_module
import json
import os
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import REPO, cli_env, mlflow_runs, serve_on_a_free_port, stop_server, write_mnist_npz
from tests.helpers.in_process import run_cli_in_process

pytestmark = pytest.mark.slow

NUMERIC = ("savedmodel", "keras", "tflite", "onnx", "mlflow")  # text rows: savedmodel, keras, mlflow (the others
TEXT = ("savedmodel", "keras", "mlflow")                       # refuse string ops before training)
TRANSFORMER = ("savedmodel", "keras", "tflite", "mlflow")  # tf2onnx cannot convert a transformer's exact GELU (Erfc)
PARITY = 1e-5
FAST = ["trainer.tensorboard=false", "trainer.batch_size=16", "export.savedmodel.warmup_requests=0"]


@dataclass
class Raw:
    """What the test read back from the source's files: raw inputs, their labels, the classes' names."""
    inputs: np.ndarray
    labels: np.ndarray | None = None
    names: list[str] = field(default_factory=list)
    every: np.ndarray | None = None  # every example of the file, where the input example must be among them
    frame: object = None  # a table's rows of `inputs` as pandas.read_csv gives the file's (the label column too)
    label: str | None = None  # that frame's label column


@dataclass
class Row:
    source: str  # the data option (conf/data/<source>.yaml), or from_pipelines
    task: str
    make: Callable[[Path], tuple[list[str], Raw]]  # writes the files, returns the overrides and what they hold
    formats: tuple[str, ...] = NUMERIC
    tfjs: bool = False  # also through TF.js (one row per task: each conversion runs the converter's own TensorFlow)
    serve: bool = False  # also through `mlflow models serve` over HTTP (one row per task)
    model: str = ""  # a model whose served forms carry more than its network (keras_hub: the preset's preprocessor)

    @property
    def id(self) -> str:
        return "-".join(part for part in (self.model, self.source, self.task) if part)


# --- the rows: each writes its files and reads them back ----------------------------------------------

def digits_classification(folder: Path):
    from sklearn.datasets import load_digits

    bunch = load_digits()  # the bundled digits.csv.gz, pixels 0..16
    images = bunch.images.astype("float32")
    return ["data=digits", "trainer.epochs=3", "data.limit=400"], Raw(images[:40], bunch.target[:40],
                                                                      [str(i) for i in range(10)], images)


def synthetic_regression(folder: Path):
    seed, count = 3, 400
    inputs = np.random.default_rng(seed).normal(size=(count, 5)).astype("float32")  # the source's own first draw
    return (["data=synthetic", "task=regression", f"seed={seed}", f"data.num_examples={count}", "data.input_shape=[5]",
             "data.num_classes=1", "data.normalization=standardize", "trainer.epochs=3"], Raw(inputs[:40]))


def keras_classification(folder: Path):
    path = write_mnist_npz(folder / "mnist.npz", train=300, test=60)
    with np.load(path) as arrays:
        raw = Raw(arrays["x_test"][:40].astype("float32"), arrays["y_test"][:40], [str(i) for i in range(10)])
    return ["data=mnist", f"data.path={path}", "trainer.epochs=2", "model.units=32"], raw


def write_table(path: Path, header: list[str], rows: list[list]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv_module.writer(out)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def read_table(path: Path, columns: list[str]) -> np.ndarray:
    with open(path, newline="", encoding="utf-8") as text:
        return np.asarray([[float(row[c]) for c in columns] for row in csv_module.DictReader(text)], "float32")


def read_frame(path: Path, rows) -> object:
    """The table's `rows` as the plainest Python client reads them: pandas.read_csv, every column."""
    import pandas

    return pandas.read_csv(path).iloc[rows].reset_index(drop=True)


def csv_classification(folder: Path):
    """scikit-learn's iris, species by name: the names travel."""
    from sklearn.datasets import load_iris

    iris = load_iris()
    columns = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
    species = [str(iris.target_names[t]) for t in iris.target]
    path = write_table(folder / "iris.csv", [*columns, "species"],
                       [[*map(float, x), s] for x, s in zip(iris.data, species)])
    every = read_table(path, columns)
    raw = Raw(every[::4], np.asarray(species[::4]), sorted(set(species)), every, read_frame(path, slice(None, None, 4)),
              "species")
    return (["data=csv", f"data.path={path}", "data.label_column=species", "data.input_shape=[4]",
             "data.num_classes=3", "trainer.epochs=15", "optimizer.learning_rate=0.01"], raw)


def csv_binary(folder: Path):
    """scikit-learn's breast cancer table as its raw measurements (areas in the hundreds), named by data.class_names."""
    from sklearn.datasets import load_breast_cancer

    bunch = load_breast_cancer()
    columns = [f"f{i}" for i in range(bunch.data.shape[1])]
    path = write_table(folder / "cancer.csv", [*columns, "label"],
                       [[*map(float, x), int(t)] for x, t in zip(bunch.data, bunch.target)])
    every = read_table(path, columns)
    raw = Raw(every[::10], bunch.target[::10], ["malignant", "benign"], every, read_frame(path, slice(None, None, 10)),
              "label")
    return (["data=csv", f"data.path={path}", "task=binary", f"data.input_shape=[{len(columns)}]",
             "data.num_classes=1", "data.class_names=[malignant,benign]", "trainer.epochs=4"], raw)


def csv_multilabel(folder: Path):
    """Tags in one column, split at ';': their names travel."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 6)) * [1, 10, 100, 1, 1, 1] + [0, 50, 500, 0, 0, 0]
    tags = [";".join(t for t, on in (("red", r[0] > 0), ("big", r[1] > 50), ("far", r[2] > 500)) if on) for r in x]
    columns = [f"f{i}" for i in range(6)]
    rows = [[*map(float, values), t] for values, t in zip(x, tags)]
    path = write_table(folder / "tagged.csv", [*columns, "tags"], rows)
    return (["data=csv", f"data.path={path}", "task=multilabel", "data.label_column=tags",
             "data.label_delimiter=';'", "data.input_shape=[6]", "data.num_classes=3", "trainer.epochs=4"],
            Raw(read_table(path, columns)[:40], None, ["big", "far", "red"], frame=read_frame(path, slice(0, 40)),
                label="tags"))


def csv_regression(folder: Path):
    """scikit-learn's diabetes table in its raw units, as the issue that asked for this test measured it."""
    from sklearn.datasets import load_diabetes

    bunch = load_diabetes(scaled=False)
    path = write_table(folder / "diabetes.csv", [*bunch.feature_names, "target"],
                       [[*map(float, x), float(t)] for x, t in zip(bunch.data, bunch.target)])
    return (["data=csv", f"data.path={path}", "task=regression", "data.label_column=target",
             "data.input_shape=[10]", "data.num_classes=1", "trainer.epochs=10", "optimizer.learning_rate=0.01"],
            Raw(read_table(path, bunch.feature_names)[:40], bunch.target[:40], [],
                read_table(path, bunch.feature_names), read_frame(path, slice(0, 40)), "target"))


SHAPES = ("bars", "dots", "plain")


def write_images(folder: Path, count: int = 20, size: int = 12) -> dict[str, list[Path]]:
    """PNGs of three kinds, one class folder each, with pixel values 0..255."""
    from PIL import Image

    rng = np.random.default_rng(2)
    written = {}
    for index, name in enumerate(SHAPES):
        (folder / name).mkdir(parents=True)
        for i in range(count):
            pixels = rng.integers(0, 60, (size, size, 3))
            if name == "bars":
                pixels[::3] = 250
            elif name == "dots":
                pixels[::4, ::4] = 250
            path = folder / name / f"{i}.png"
            Image.fromarray(pixels.astype("uint8")).save(path)
            written.setdefault(name, []).append(path)
    return written


def read_pngs(paths: list[Path]) -> np.ndarray:
    from PIL import Image

    return np.stack([np.asarray(Image.open(p).convert("RGB"), "float32") for p in paths])


def image_folder_classification(folder: Path):
    written = write_images(folder / "images")
    paths = [p for name in SHAPES for p in written[name][:6]]
    return (["data=image_folder", f"data.directory={folder / 'images'}", "data.input_shape=[12,12,3]",
             "data.num_classes=3", "model=cnn", "trainer.epochs=3"],
            Raw(read_pngs(paths), None, list(SHAPES)))


def image_folder_multilabel(folder: Path):
    written = write_images(folder / "images")
    rows = [[f"{name}/{p.name}", "striped;busy" if name == "bars" else "busy" if name == "dots" else "calm"]
            for name in SHAPES for p in written[name]]
    labels = write_table(folder / "tags.csv", ["file", "tags"], rows)
    return (["data=image_folder", "task=multilabel", f"data.directory={folder / 'images'}",
             f"data.labels_csv={labels}", "data.input_shape=[12,12,3]", "data.num_classes=3", "model=cnn",
             "trainer.epochs=2"],
            Raw(read_pngs([folder / "images" / row[0] for row in rows[::5]]), None, ["busy", "calm", "striped"]))


def tfrecord_classification(folder: Path):
    """Dense records of 0..255 values, scaled by raw_scale: the records hold the raw values."""
    rng = np.random.default_rng(4)
    x = rng.integers(0, 256, (240, 10)).astype("float32")
    y = (x[:, 0] > 128).astype("int64") + (x[:, 1] > 128).astype("int64")
    for split, rows in (("train", slice(0, 160)), ("validation", slice(160, 200)), ("test", slice(200, 240))):
        with tf.io.TFRecordWriter(str(folder / f"{split}.tfrecord")) as records:
            for inputs, label in zip(x[rows], y[rows]):
                records.write(tf.train.Example(features=tf.train.Features(feature={
                    "inputs": tf.train.Feature(float_list=tf.train.FloatList(value=inputs)),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))})).SerializeToString())
    read = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(str(folder / "test.tfrecord"))]
    inputs = np.asarray([list(e.features.feature["inputs"].float_list.value) for e in read], "float32")
    return (["data=tfrecord", f"data.train_files={folder / 'train.tfrecord'}",
             f"data.validation_files={folder / 'validation.tfrecord'}", f"data.test_files={folder / 'test.tfrecord'}",
             "data.input_shape=[10]", "data.num_classes=3", "data.raw_scale=0.00392156862745098",
             "data.class_names=[none,one,both]", "trainer.epochs=4"], Raw(inputs, None, ["none", "one", "both"]))


def text_folder_classification(folder: Path):
    words = {"cooking": "bake simmer flour oven", "sports": "goal match league coach", "tech": "chip code cloud data"}
    rng = np.random.default_rng(5)
    for name, vocabulary in words.items():
        (folder / "texts" / name).mkdir(parents=True)
        for i in range(24):
            text = " ".join(rng.choice(vocabulary.split(), 6))
            (folder / "texts" / name / f"{i}.txt").write_text(text, encoding="utf-8")
    texts = [(folder / "texts" / n / f"{i}.txt").read_text(encoding="utf-8") for n in words for i in range(0, 24, 6)]
    return (["experiment=text_classification", "data=text_folder", f"data.directory={folder / 'texts'}",
             "data.num_classes=3", "trainer.epochs=3", "export=[savedmodel,keras]"],
            Raw(np.asarray(texts, dtype=object), None, sorted(words)))


def keras_hub_text_classification(folder: Path):
    """A tiny BERT-shaped preset the test saves with keras-hub (its vocabulary the texts' words), fine-tuned whole:
    raw strings in, the preset's tokenizer inside every served form."""
    from tests.helpers.presets import save_tiny_text_preset

    overrides, raw = text_folder_classification(folder)
    words = [w for text in (folder / "texts").rglob("*.txt") for w in text.read_text(encoding="utf-8").split()]
    preset = save_tiny_text_preset(folder / "preset", words)
    return ([o for o in overrides if not o.startswith(("experiment=", "export="))]
            + ["model=keras_hub", f"model.preset={preset}", "model.freeze_backbone=false",
               "optimizer.learning_rate=0.01"]), raw


def keras_hub_image_classification(folder: Path):
    """A tiny vision transformer preset: the files' 12x12 pixels in, the preset's converter resizing them to 16x16
    and scaling them inside every served form."""
    from tests.helpers.presets import save_tiny_image_preset

    overrides, raw = image_folder_classification(folder)
    preset = save_tiny_image_preset(folder / "preset")
    return ([o for o in overrides if o != "model=cnn"]
            + ["model=keras_hub", f"model.preset={preset}", "model.freeze_backbone=false",
               "optimizer.learning_rate=0.01"]), raw


def text_table_multilabel(folder: Path):
    rng = np.random.default_rng(6)
    lines = []
    for _ in range(120):
        tags = [t for t in ("urgent", "billing") if rng.random() < 0.5]
        words = ["now asap"] * ("urgent" in tags) + ["invoice refund"] * ("billing" in tags) + ["hello there"]
        lines.append({"text": " ".join(words), "tags": ";".join(tags)})
    path = folder / "tickets.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    read = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return (["experiment=text_classification", "data=text_table", "task=multilabel", f"data.path={path}",
             "data.label_column=tags", "data.label_delimiter=';'", "data.num_classes=2", "trainer.epochs=3",
             "export=[savedmodel,keras]"],
            Raw(np.asarray([r["text"] for r in read[:30]], dtype=object), None, ["billing", "urgent"]))


def tfds_classification(folder: Path):
    """A TFDS dataset prepared here (tests/helpers/tiny_tfds.py's builder), read back with TFDS' own reader."""
    from tests.helpers.tiny_tfds import prepare_tiny_shapes

    builder = prepare_tiny_shapes(folder / "tfds")
    test = list(builder.as_dataset(split="test", as_supervised=True).as_numpy_iterator())
    inputs = np.stack([image for image, _ in test]).astype("float32")
    return (["data=tfds", "data.name=tiny_shapes", f"data.data_dir={folder / 'tfds'}", "data.input_shape=[8,8,1]",
             "data.num_classes=2", "data.validation_split=validation", "trainer.epochs=3"],
            Raw(inputs, None, ["dark", "light"]))


OWN_DATA = '''"""A user's own source: its pipelines already standardized, as many are; it says what it did."""
import numpy as np
import tensorflow as tf

from tfx_hydra.data import from_pipelines


def standardized(path, input_shape, num_classes, task, batch_size, seed, **pipeline):
    with np.load(path) as arrays:
        x, y = arrays["x"], arrays["y"]
    mean, std = x[:200].mean(axis=0), x[:200].std(axis=0)
    scaled = ((x - mean) / std).astype("float32")
    parts = [tf.data.Dataset.from_tensor_slices((scaled[a:b], y[a:b])) for a, b in ((0, 200), (200, 250), (250, 300))]
    return from_pipelines(*parts, input_shape=input_shape, num_classes=num_classes, batch_size=batch_size, seed=seed,
                          task=task,
                          input_scale=[float(v) for v in 1 / std], input_offset=[float(v) for v in mean],
                          class_names=["no", "yes"], **pipeline)
'''


OWN_PROJECT = '''[tool.tfx_hydra]
config_dir = "conf"
python_path = ["."]
'''
OWN_OPTION = '''defaults:
  - pipeline@_here_: default
  - _self_

_target_: own_data.standardized
path: ???
input_shape: [3]
num_classes: 1
task: ${task.name}
batch_size: ${trainer.batch_size}
seed: ${seed}
'''


def from_pipelines_binary(folder: Path):
    """A project of the user's (found from the launch folder) whose data=own is its own function's pipelines."""
    rng = np.random.default_rng(7)
    x = (rng.normal(size=(300, 3)) * [5, 50, 0.5] + [100, 1000, 2]).astype("float32")
    y = ((x[:, 0] - 100) / 5 + (x[:, 1] - 1000) / 50 > 0).astype("float32")
    np.savez(folder / "own.npz", x=x, y=y)
    (folder / "pyproject.toml").write_text(OWN_PROJECT, encoding="utf-8")
    (folder / "conf" / "data").mkdir(parents=True)
    (folder / "conf" / "data" / "own.yaml").write_text(OWN_OPTION, encoding="utf-8")
    (folder / "own_data.py").write_text(OWN_DATA, encoding="utf-8")
    return ["data=own", f"data.path={folder / 'own.npz'}", "trainer.epochs=4"], Raw(x[250:], y[250:], ["no", "yes"])


ROWS = [
    Row("digits", "classification", digits_classification, tfjs=True),
    Row("synthetic", "regression", synthetic_regression),
    Row("keras", "classification", keras_classification),
    Row("csv", "classification", csv_classification, serve=True),
    Row("csv", "binary", csv_binary, tfjs=True, serve=True),
    Row("csv", "multilabel", csv_multilabel, tfjs=True, serve=True),
    Row("csv", "regression", csv_regression, tfjs=True, serve=True),
    Row("image_folder", "classification", image_folder_classification),
    Row("image_folder", "multilabel", image_folder_multilabel),
    Row("tfrecord", "classification", tfrecord_classification),
    Row("text_folder", "classification", text_folder_classification, formats=TEXT),
    Row("text_table", "multilabel", text_table_multilabel, formats=TEXT),
    Row("tfds", "classification", tfds_classification),
    Row("from_pipelines", "binary", from_pipelines_binary),
    Row("text_folder", "classification", keras_hub_text_classification, formats=TEXT, serve=True, model="keras_hub"),
    Row("image_folder", "classification", keras_hub_image_classification, formats=TRANSFORMER, serve=True,
        model="keras_hub"),
]
INHERITING = {"mnist", "fashion_mnist", "cifar10", "cifar100"}  # conf/data options that are data=keras presets


# A causal LM's served forms answer generated text, not values mode=evaluate scores: tests/e2e/test_causal_lm.py sends
# its prompts to each (the SavedModel in a fresh process, the MLflow model over HTTP and through mlflow.pyfunc).
GENERATING_SOURCES, GENERATING_TASKS = {"text_corpus"}, {"causal_lm"}


def test_every_data_source_task_and_exporter_has_a_row():
    sources = {p.stem for p in (REPO / "conf" / "data").glob("*.yaml")} - INHERITING - GENERATING_SOURCES
    exporters = {p.stem for p in (REPO / "conf" / "export").glob("*.yaml")} - {"none"}
    tasks = {p.stem for p in (REPO / "conf" / "task").glob("*.yaml")} - GENERATING_TASKS
    assert sources | {"from_pipelines"} == {row.source for row in ROWS}, "a data source without a parity row"
    assert tasks == {row.task for row in ROWS}
    covered = {f for row in ROWS for f in row.formats} | ({"tfjs"} if any(row.tfjs for row in ROWS) else set())
    assert exporters | {"mlflow"} == covered, "an exporter without a parity row"
    assert {row.task for row in ROWS if row.serve} == tasks and {row.task for row in ROWS if row.tfjs} == tasks


# --- each format's own runtime ----------------------------------------------------------------------------

def keras_answers(path: str, raw: np.ndarray) -> np.ndarray:
    import keras

    from tfx_hydra.export.keras import register_keras_classes

    register_keras_classes()
    return np.asarray(keras.models.load_model(path, compile=False)(tf.constant(raw)))


def tflite_answers(path: str, raw: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path)
    (source,), (target,) = interpreter.get_input_details(), interpreter.get_output_details()
    interpreter.resize_tensor_input(source["index"], raw.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(source["index"], raw)
    interpreter.invoke()
    return interpreter.get_tensor(target["index"])


def onnx_answers(path: str, raw: np.ndarray) -> tuple[np.ndarray, dict]:
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    answer = session.run(None, {session.get_inputs()[0].name: raw})[0]
    return answer, session.get_modelmeta().custom_metadata_map


def mlflow_model(run_id: str, launch: Path):
    """The MLflow model through MLflow's pyfunc (what `mlflow models serve` runs), and its input example."""
    import mlflow
    from mlflow.models import Model


    mlflow.set_tracking_uri(f"sqlite:///{launch / 'mlflow.db'}")  # runs:/ resolves through it (put back after the test)
    local = mlflow.artifacts.download_artifacts(f"runs:/{run_id}/model", dst_path=str(launch / "mlflow_model"))
    return mlflow.pyfunc.load_model(local), Model.load(local).load_input_example(local)


def answers_of(answered) -> dict:
    return {k: np.asarray(v) for k, v in answered.items()} if isinstance(answered, dict) else {"": np.asarray(answered)}


def tfjs_answers(folder: str, raw: np.ndarray, tmp: Path) -> tuple[dict, dict]:
    modules = os.environ.get("TFX_HYDRA_TFJS_NODE_MODULES", "")
    inputs, outputs = tmp / "tfjs_in.json", tmp / "tfjs_out.json"
    inputs.write_text(json.dumps(raw.tolist()))
    done = subprocess.run(["node", str(REPO / "tests" / "tfjs" / "predict.js"), folder, str(inputs), str(outputs)],
                          env={**os.environ, "NODE_PATH": modules}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    metadata = json.loads((Path(folder) / "model.json").read_text()).get("userDefinedMetadata", {})
    return {k: np.asarray(v) for k, v in json.loads(outputs.read_text()).items()}, metadata


def tfjs_here() -> bool:
    """TF.js runs where .ci/run built its converter environment and Node has @tensorflow/tfjs."""
    here = os.access(os.environ.get("TFX_HYDRA_TFJS_CONVERTER", ""), os.X_OK) and os.path.isdir(
        os.path.join(os.environ.get("TFX_HYDRA_TFJS_NODE_MODULES", ""), "@tensorflow", "tfjs"))
    if not here and os.environ.get("TFX_HYDRA_REQUIRE_TFJS") == "1":
        pytest.fail("TFX_HYDRA_REQUIRE_TFJS=1 but no TF.js converter environment and Node modules")
    return here


def assert_same(kind: str, answered, expected) -> None:
    answered, expected = np.asarray(answered, "float32").reshape(expected.shape), np.asarray(expected, "float32")
    difference = float(np.max(np.abs(answered - expected))) / max(1.0, float(np.max(np.abs(expected))))
    assert difference <= PARITY, f"{kind} answers raw examples {difference:.3g} away from the SavedModel"


def decoded(values) -> list:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in np.asarray(values).reshape(-1)]


def assert_names(kind: str, answers: dict, task: str, names: list[str]) -> None:
    """The names beside the indices: `class` by name for a class index, `tags` for each label that is 1."""
    if task in ("classification", "binary"):
        index = np.asarray(answers["class_index"]).reshape(-1)
        assert decoded(answers["class"]) == [names[i] for i in index], kind
    elif task == "multilabel":
        on = np.asarray(answers["labels"])
        expected = np.where(on == 1, np.broadcast_to(np.asarray(names), on.shape), "")
        assert decoded(answers["tags"]) == expected.reshape(-1).tolist(), kind


# --- the matrix -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_every_served_form_answers_raw_examples_from_the_files_as_the_savedmodel_does(row, tmp_path):
    overrides, raw = row.make(tmp_path)
    tfjs = row.tfjs and tfjs_here()
    exports = [f for f in row.formats if f != "mlflow"] + (["tfjs"] if tfjs else [])
    done = run_cli_in_process([*overrides, *FAST, f"task={row.task}", f"export=[{','.join(exports)}]",
                               "export.mlflow_model=true", "export.strict=true",
                               *(["export.tfjs.converter=" + os.environ["TFX_HYDRA_TFJS_CONVERTER"]] if tfjs else [])],
                              cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    # `mlflow models serve` boots (~15 s: a fresh interpreter imports TensorFlow) while the formats are checked
    starting = ThreadPoolExecutor(1).submit(start_mlflow_server, run.info.run_id, tmp_path) if row.serve else None
    try:
        check_every_format(row, raw, run, tmp_path, tfjs, overrides, starting)
    finally:
        if starting is not None and starting.exception() is None:  # a server that never came up says so above
            stop_server(starting.result()[0])


def check_every_format(row: Row, raw: Raw, run, tmp_path: Path, tfjs: bool, overrides: list[str], starting) -> None:
    tags = run.data.tags
    assert json.loads(tags["data.class_names"]) == raw.names if raw.names else "data.class_names" not in tags

    serve = tf.saved_model.load(tags["export.savedmodel.path"]).signatures["serving_default"]
    reference = {k: v.numpy() for k, v in serve(inputs=tf.constant(list(raw.inputs) if raw.inputs.dtype == object
                                                                    else raw.inputs)).items()}
    main = "predictions" if row.task == "regression" else "probabilities"
    expected = reference[main]
    if raw.names:
        assert_names("the SavedModel", reference, row.task, raw.names)
        saved_names = Path(tags["export.savedmodel.path"], "assets.extra", "labels.txt").read_text().splitlines()
        assert saved_names == raw.names
    if "keras" in row.formats:
        assert_same(".keras", keras_answers(tags["export.keras.path"], raw.inputs), expected)
    if "tflite" in row.formats:
        assert_same("TFLite", tflite_answers(tags["export.tflite.path"], raw.inputs), expected)
    if "onnx" in row.formats:
        answer, metadata = onnx_answers(tags["export.onnx.path"], raw.inputs)
        assert_same("ONNX", answer, expected)
        assert json.loads(metadata["class_names"]) == raw.names if raw.names else "class_names" not in metadata
        if raw.frame is not None:  # a positional format: its input's column order in its metadata
            assert json.loads(metadata["feature_names"]) == [c for c in raw.frame.columns if c != raw.label]
    if tfjs:
        answers, metadata = tfjs_answers(tags["export.tfjs.path"], raw.inputs, tmp_path)
        assert_same("TF.js", answers[main], expected)
        assert metadata.get("class_names", []) == raw.names
        if raw.frame is not None:
            assert metadata.get("feature_names") == [c for c in raw.frame.columns if c != raw.label]
    model, example = mlflow_model(run.info.run_id, tmp_path)
    mlflow = answers_of(model.predict(raw.inputs if raw.frame is None else raw.frame))  # a table: its rows as read
    assert_same("the MLflow model", mlflow[main], expected)
    if raw.names:
        assert_names("the MLflow model", mlflow, row.task, raw.names)
    if raw.frame is not None:
        check_table_by_name(model, raw, tags["export.savedmodel.path"], main, expected)
    if raw.every is not None:  # the MLflow model's input example: rows of the file as written, not scaled ones
        every = raw.every.reshape(len(raw.every), -1)
        example = example[[c for c in raw.frame.columns if c in example]] if raw.frame is not None else example
        for values in np.asarray(example, "float32").reshape(-1, every.shape[1]):
            nearest = np.min(np.max(np.abs(every - values), axis=1) / np.maximum(1.0, np.abs(values).max()))
            assert nearest < 1e-4, f"the input example {values[:4]}... is no row of the file"

    evaluated = run_cli_in_process([*overrides, *FAST, f"task={row.task}", "mode=evaluate",
                                    f"export.source={tags['export.savedmodel.path']}", "tracking.run_name=evaluate"],
                                   cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    (evaluation,) = [r for r in mlflow_runs(tmp_path) if r.info.run_name == "evaluate"]
    for name in ("test_loss", "test_mae") if row.task == "regression" else ("test_loss", "test_accuracy"):
        assert evaluation.data.metrics[name] == pytest.approx(run.data.metrics[name], rel=1e-4, abs=1e-5), name

    if row.serve:  # a table's rows by column name, in another order than the file's, its label column sent too
        frame = raw.frame[list(reversed(raw.frame.columns))].head(3) if raw.frame is not None else None
        bodies = [json.dumps({"inputs": raw.inputs[:3].tolist()} if frame is None else
                             {"dataframe_split": json.loads(frame.to_json(orient="split", index=False))})]
        if row.id == "csv-regression":  # the docs' request: the diabetes file's first row, by its columns' names
            bodies.append(readme_body('"data": [[32.1, 59.0'))
            asked = json.loads(bodies[1])["dataframe_split"]
            first = raw.frame.iloc[0]
            assert {name: value for name, value in zip(asked["columns"], asked["data"][0])} == pytest.approx(
                {name: float(first[name]) for name in asked["columns"]}, rel=1e-6)
        served, *readme = ask_mlflow_server(starting.result()[1], bodies)
        assert_same("mlflow models serve", served[main], expected[:3])
        if raw.names:
            assert_names("mlflow models serve", served, row.task, raw.names)
        if readme:  # ... answered as the SavedModel answers it, and as the docs show (+-5%: another CPU's sums)
            (answer,), = readme[0]["predictions"]
            assert answer == pytest.approx(float(expected[0][0]), rel=1e-5)
            shown = float(readme_answer('"data": [[32.1, 59.0'))
            assert answer == pytest.approx(shown, rel=0.05), f"the docs show {shown}, the served model says {answer}"


def check_table_by_name(model, raw: Raw, savedmodel: str, main: str, expected: np.ndarray) -> None:
    """A table model takes its rows by column name, in every form that can hold names: the MLflow model (its
    columns in any order, the label column left out or sent; a missing column refused, named) and the
    SavedModel's by_name signature as TF Serving binds a row of named values; the positional formats record the
    order beside them (their .features.txt, ONNX's metadata)."""
    import mlflow

    from tfx_hydra.export.requests import answer_rest

    features = [c for c in raw.frame.columns if c != raw.label]
    for kind, frame in (("columns reordered", raw.frame[list(reversed(raw.frame.columns))]),
                        ("the label column left out", raw.frame[features])):
        assert_same(f"the MLflow model ({kind})", answers_of(model.predict(frame))[main], expected)
    with pytest.raises(mlflow.exceptions.MlflowException, match=rf"Model is missing inputs \['{features[1]}'\]"):
        model.predict(raw.frame.drop(columns=[features[1]]))
    rows = json.loads(raw.frame[features[::-1]].head(5).to_json(orient="records"))  # {"size_m2": 190.4, ...} each
    named = answer_rest(savedmodel, {"signature_name": "by_name", "instances": rows})["predictions"]
    assert_same("the SavedModel by name", [answer[main] for answer in named] if isinstance(named[0], dict) else named,
                expected[:5])
    missing = answer_rest(savedmodel, {"signature_name": "by_name", "instances": [
        {k: v for k, v in row.items() if k != features[1]} for row in rows]})
    assert features[1] in missing["error"]
    beside = Path(savedmodel).parents[1] / "mlp.features.txt"
    assert beside.read_text().splitlines() == features


SERVED_PAGE = REPO / "docs" / "how-to" / "tasks.md"  # where the MLflow model is asked over HTTP


def readme_body(holding: str) -> str:
    """The -d body of the docs' `curl .../invocations` line whose body holds `holding`."""
    lines = SERVED_PAGE.read_text().splitlines()
    (line,) = [line for line in lines if "curl -s" in line and "/invocations" in line and holding in line]
    return line.split(" -d '", 1)[1].rstrip("'")


def readme_answer(holding: str) -> str:
    """The answer the docs show under that curl line (`# {"predictions": {"predictions": [[171.2]]}}`)."""
    lines = SERVED_PAGE.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if "curl -s" in line and holding in line)
    return lines[index + 1].split("[[", 1)[1].split("]]", 1)[0]


def start_mlflow_server(run_id: str, launch: Path):
    """`mlflow models serve -m runs:/<id>/model` on a free port, once it answers: (its process, its port)."""
    env = cli_env() | {"MLFLOW_TRACKING_URI": f"sqlite:///{launch / 'mlflow.db'}",
                       "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    return serve_on_a_free_port(
        lambda port: [str(Path(sys.executable).parent / "mlflow"), "models", "serve", "-m", f"runs:/{run_id}/model",
                      "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)],
        launch, env, launch / "serve.log", "mlflow models serve", timeout=180)


def ask_mlflow_server(port: int, bodies: list[str]) -> list[dict]:
    """The server's answers to /invocations for each JSON body, as a client sends them: the first's as arrays by
    output name, the others as the server's JSON."""
    answers = []
    for body in bodies:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request) as response:
            answers.append(json.loads(response.read()))
    predictions = answers[0]["predictions"]
    first = {k: np.asarray(v) for k, v in predictions.items()} if isinstance(predictions, dict) \
        else {"": np.asarray(predictions)}
    return [first, *[answer["predictions"] for answer in answers[1:]]]
