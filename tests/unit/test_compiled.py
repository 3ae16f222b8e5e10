"""The loss, the metrics and the callbacks of the user's own, each named by a `_target_` in the trainer's
config: built, compiled, run after ours, logged under their names. The user's code is a module this
test writes outside the package."""

from __future__ import annotations

import textwrap

import pytest

from tests.helpers.fakes import RecordingTracker
from tests.helpers.training import compiled
from tfx_hydra.errors import ConfigError
from tfx_hydra.metrics import end_of_run_names, epoch_names
from tfx_hydra.settings.schemas import TrainerConfig
from tfx_hydra.tracking import flatten
from tfx_hydra.trainer import train

USERS_CODE = '''
import keras


def halved_crossentropy(weight=0.5):
    """A loss factory of the user's: the usual loss, scaled."""
    base = keras.losses.SparseCategoricalCrossentropy()

    def loss(y_true, y_pred):
        return weight * base(y_true, y_pred)

    return loss


class EpochCounter(keras.callbacks.Callback):
    """Counts epochs, and records which of tfx_hydra's metrics it saw each epoch's end."""

    seen = []

    def __init__(self, label):
        super().__init__()
        self.label = label

    def on_epoch_end(self, epoch, logs=None):
        EpochCounter.seen.append((self.label, epoch, sorted(logs)))
'''


@pytest.fixture
def users_module(tmp_path, monkeypatch):
    (tmp_path / "userpkg").mkdir()
    (tmp_path / "userpkg" / "__init__.py").write_text("")
    (tmp_path / "userpkg" / "training.py").write_text(textwrap.dedent(USERS_CODE))
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    return importlib.import_module("userpkg.training")


def test_a_users_loss_metric_and_callback_train_and_are_logged_by_name(users_module, data):
    trainer = TrainerConfig(
        epochs=2, verbose=False, tensorboard=False, backup=False,
        loss={"_target_": "userpkg.training.halved_crossentropy", "weight": 0.5},
        metrics=["accuracy", {"_target_": "keras.metrics.SparseTopKCategoricalAccuracy", "k": 3, "name": "top3"}],
        callbacks=[{"_target_": "userpkg.training.EpochCounter", "label": "mine"}])
    assert "val_top3" in epoch_names(trainer.metrics) and "test_top3" in end_of_run_names(trainer)
    model = compiled(trainer)
    tracker = RecordingTracker()
    from tfx_hydra.trainer.compiled import user_callbacks

    history = train(model, data, trainer, tracker, users=user_callbacks(trainer.callbacks))
    assert {"accuracy", "loss", "top3", "val_accuracy", "val_loss", "val_top3"} <= set(history.history)
    assert max(history.history["top3"]) >= max(history.history["accuracy"])  # top-3 is never below top-1
    assert [(label, epoch) for label, epoch, _ in users_module.EpochCounter.seen] == [("mine", 0), ("mine", 1)]
    # run after ours: the epoch clock's figures are in the logs the user's callback sees
    assert "examples_per_sec" in users_module.EpochCounter.seen[0][2]
    assert {"top3", "val_top3"} <= set(tracker.epochs[0][1])  # logged to MLflow under the node's name


def test_the_users_nodes_are_params_by_position():
    flat = flatten({"trainer": {"callbacks": [{"_target_": "userpkg.training.EpochCounter", "label": "mine"}],
                                "metrics": ["accuracy"]}})
    assert flat == {"trainer.callbacks.0._target_": "userpkg.training.EpochCounter",
                    "trainer.callbacks.0.label": "mine", "trainer.metrics": "['accuracy']"}


@pytest.mark.parametrize("fields, message", [
    ({"loss": 3}, "trainer.loss=3 is not a name or a node with a _target_."),
    ({"metrics": [{"_target_": "keras.metrics.SparseTopKCategoricalAccuracy"}]},
     "trainer.metrics[0] (keras.metrics.SparseTopKCategoricalAccuracy) has no name"),
    ({"callbacks": ["EarlyStopping"]}, "trainer.callbacks[0]=EarlyStopping is not a node with a _target_."),
])
def test_a_node_that_cannot_be_built_is_said_before_training(fields, message):
    with pytest.raises(ConfigError) as raised:
        TrainerConfig(**fields)
    assert message in str(raised.value)


def test_a_callback_that_is_no_keras_callback_is_said(users_module):
    from tfx_hydra.trainer.compiled import user_callbacks

    with pytest.raises(ConfigError, match=r"trainer.callbacks\[0\] \(userpkg.training.halved_crossentropy\) built a "
                       r"function, not a keras.callbacks.Callback"):
        user_callbacks([{"_target_": "userpkg.training.halved_crossentropy"}])


def test_a_target_that_cannot_be_imported_names_the_module_and_where_python_looked():
    with pytest.raises(ConfigError) as raised:
        compiled(TrainerConfig(loss={"_target_": "nopkg.losses.focal"}), tracker=RecordingTracker())
    said = str(raised.value)
    assert "trainer.loss._target_=nopkg.losses.focal cannot be imported: " in said
    assert "No module named 'nopkg'" in said and "sys.path: " in said and "Fix: install the package" in said
