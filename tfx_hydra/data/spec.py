"""The spec: what the model and the exports need to know about a data source's inputs and labels -- their
shape, the task, how the pipeline changed the raw values, and what the classes are called.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from tfx_hydra.errors import ConfigError, DataError
from tfx_hydra.task import Classification, Task


@dataclass(frozen=True)
class DataSpec:
    """What the model and the exports need to know about the inputs.

    The pipeline feeds the model `(raw - input_offset) * input_scale`; every export puts the same
    arithmetic in front of the model (export/served.py), so a served model takes raw inputs (pixels
    0..255, CSV values as written). Offset and scale are a number or one per feature.
    """

    input_shape: tuple[int, ...]
    num_classes: int  # the labels' width: classes, labels (multilabel) or targets (regression); 1 for binary
    input_scale: float | tuple[float, ...] = 1.0
    input_offset: float | tuple[float, ...] = 0.0
    task: Task = dataclasses.field(default_factory=Classification)  # what the labels are (tfx_hydra.task)
    input_dtype: str = "float32"  # "string": raw text, fed to the model as it is (its own layers tokenize it)
    target_mean: tuple[float, ...] | None = None  # regression: the training targets' mean and std, per target,
    target_std: tuple[float, ...] | None = None   # where the source read them (in-memory sources do)
    class_names: tuple[str, ...] = ()  # the classes' (multilabel: the tags') names in index order, where the data
    # names them (class folders, a CSV's class strings, tags) or data.class_names does; () : numbered
    feature_names: tuple[str, ...] = ()  # a table's feature columns, in the order the model takes them: served by
    # name (export/served.py); () : the inputs have no names
    feature_dtypes: tuple[str, ...] = ()  # each one's type as a reader of the file gets it: "int64" | "float64"
    read_from_file: tuple[str, ...] = ()  # the data.* settings left unset that the file answered (input_shape,
    # num_classes): said on the data line, and set in the run's config for the model's interpolations

    @property
    def names(self) -> tuple[str, ...]:
        """What each class (binary: 0 and 1; multilabel: each tag) is called, in index order: the data's
        names, else the indices as text ("0", "1", ...). A regression's targets have none: ()."""
        if self.task.name == "regression":
            return ()
        return self.class_names or tuple(str(i) for i in range(self.task.classes(self.num_classes)))

    def normalize(self, raw):
        """Raw inputs (a tensor or an array) -> what the model was trained on."""
        return raw if self.text else (raw - self.input_offset) * self.input_scale

    def denormalize(self, inputs):
        """The pipeline's inputs -> the raw values a served model takes."""
        return inputs if self.text else inputs / self.input_scale + self.input_offset

    @property
    def text(self) -> bool:
        return self.input_dtype == "string"


def with_class_names(spec: DataSpec, found: Sequence[str] | None, configured: Sequence[str] | None) -> DataSpec:
    """The spec with its classes' names: `configured` (data.class_names) where given, else the names the data
    holds (`found`: class folders, class strings, tags), else none (DataSpec.names numbers them). Names that do
    not match the labels (their count) are one DataError before training."""
    names = tuple(str(n) for n in (configured if configured is not None else found or ()))
    if not names:
        return dataclasses.replace(spec, class_names=())
    given = configured is not None
    if spec.task.name == "regression":
        if given:
            raise ConfigError("data.class_names names classes, but task=regression predicts numbers.",
                              fix="data.class_names=null")
        return dataclasses.replace(spec, class_names=())
    wanted = spec.task.classes(spec.num_classes)
    if len(names) != wanted:
        where = "data.class_names" if given else "the data"
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise DataError(f"{where} names {len(names)} classes ({shown}), but the labels have {wanted} "
                        f"({spec.task.describe(spec.num_classes)}).",
                        fix="one name per class, in index order" if given else f"data.num_classes={len(names)}")
    bad = next((n for n in names if not n.strip() or "\n" in n), None)
    if bad is not None:
        raise DataError(f"the class name {bad!r} is empty or spans lines: a served model answers with it.",
                        fix="data.class_names=[...] with a name per class on one line")
    return dataclasses.replace(spec, class_names=names)


def fill_in_config(data_cfg, spec: DataSpec) -> None:
    """The data.* settings left unset that the file answered (spec.read_from_file), written into the run's
    config: the model's `${data.input_shape}` and `${data.num_classes}` then mean the file's."""
    for key in spec.read_from_file:
        data_cfg[key] = list(spec.input_shape) if key == "input_shape" else spec.num_classes
