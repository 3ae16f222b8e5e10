"""KeepBest: the best epoch's weights (trainer.keep_best), put back into the model when training ends, so the
test split is evaluated and every export is written with them; independent of early stopping, which may
stop later or never.

The best-so-far is written beside the run's backup (best.weights.h5 and best.json: its epoch and value)
each time it improves, so a run killed and resumed still knows it; without a backup it is kept in memory.
"""

from __future__ import annotations

import json
import os

import keras
import numpy as np

BEST_WEIGHTS, BEST_RECORD = "best.weights.h5", "best.json"


class KeepBest(keras.callbacks.Callback):
    def __init__(self, monitor: str, mode: str, folder: str | None) -> None:
        super().__init__()
        self.monitor, self.mode, self.folder = monitor, mode, folder
        self.better = None  # np.less or np.greater: from the mode, or (auto) from the metric, at the first epoch's end
        self.best_epoch: int | None = None
        self.best_value: float | None = None
        self._weights = None

    def on_train_begin(self, logs=None):
        record = os.path.join(self.folder, BEST_RECORD) if self.folder else None
        if record and os.path.exists(record):  # a resumed run: the best so far, from before the kill
            with open(record, encoding="utf-8") as file:
                saved = json.load(file)
            self.best_epoch, self.best_value = saved["epoch"], saved["value"]

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if self.better is None:  # not at train begin: Keras builds the compiled metrics (their direction) on the
            self.better = self.direction()  # first batch, and an unbuilt `accuracy` read as best low
        if value is None or (self.best_value is not None and not self.better(value, self.best_value)):
            return
        self.best_epoch, self.best_value = epoch, float(value)
        self._weights = self.model.get_weights()
        if self.folder:
            os.makedirs(self.folder, exist_ok=True)
            self.model.save_weights(os.path.join(self.folder, BEST_WEIGHTS))
            with open(os.path.join(self.folder, BEST_RECORD), "w", encoding="utf-8") as file:
                json.dump({"epoch": epoch, "value": self.best_value, "monitor": self.monitor}, file)

    def direction(self):
        """mode=auto as Keras' EarlyStopping decides it: a loss goes down; a compiled metric goes the way it
        says (`_direction`: AUC, accuracy, R² up; MAE, RMSE down)."""
        if self.mode != "auto":
            return np.less if self.mode == "min" else np.greater
        name = self.monitor.removeprefix("val_")
        metrics = [m for group in getattr(self.model, "metrics", []) for m in getattr(group, "metrics", [group])]
        found = next((m for m in metrics if m.name == name and hasattr(m, "_direction")), None)
        return np.greater if found is not None and found._direction == "up" else np.less

    def on_train_end(self, logs=None):
        if self._weights is not None:
            self.model.set_weights(self._weights)
        elif self.folder and os.path.exists(os.path.join(self.folder, BEST_WEIGHTS)):  # the best was before the kill
            self.model.load_weights(os.path.join(self.folder, BEST_WEIGHTS))
