"""trained: what a training phase ended with, kept in its backup folder until the run is FINISHED.

A phase's last epoch backup is not what the run goes on with: early stopping's restore, trainer.keep_best and the
EMA choose other weights as training ends, and the phase's figures (its epochs' history, which weights were kept,
its timing) are made then. So when a phase's training ends (EpochBackup.on_train_end, signals held), the weights the
model then holds and those figures are written to `<phase backup>/trained/` -- whole or not at all: a folder
written under another name and renamed into place -- and the epoch backup they replace is removed. A run stopped
after that (in the fine-tuning phase, its test evaluation, an export, the model's logging), by any signal or a
kill -9, resumes from it: the same command puts those weights back, trains nothing more of that phase and goes on.
run.py removes the whole backup folder once the run is FINISHED, and only then.

The weights are kept as the arrays `model.get_weights()` gives, in its order, and put back with `set_weights`:
exactly the trained values, whatever state the optimizer is in, so the weights' sha256 is the uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict

import numpy as np

from tfx_hydra.tracking import TRAINED_DIR, TRAINED_RECORD
from tfx_hydra.trainer.backups import FINETUNE_BACKUP
from tfx_hydra.trainer.kept_weights import Kept

WEIGHTS = "weights.npz"


def exists(phase_dir: str | None) -> bool:
    return bool(phase_dir) and os.path.isfile(os.path.join(phase_dir, TRAINED_DIR, TRAINED_RECORD))


def save(phase_dir: str, model, history, epochs_planned: int, last_phase: bool) -> None:
    """The model's weights and the phase's history (with `kept`, `timings`, `input_bound`) into
    `<phase_dir>/trained/`, whole; then the epoch backup beside it is removed (a fine-tuning phase's folder stays)."""
    folder = os.path.join(phase_dir, TRAINED_DIR)
    partial = f"{folder}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    np.savez(os.path.join(partial, WEIGHTS), *[np.asarray(w) for w in model.get_weights()])
    record = {"epoch": list(history.epoch), "history": {k: [float(v) for v in values]
                                                        for k, values in history.history.items()},
              "kept": asdict(history.kept), "timings": dict(getattr(history, "timings", {})),
              "input_bound": getattr(history, "input_bound", None), "compute": getattr(history, "compute", None),
              "epochs_trained": (history.epoch[-1] + 1) if history.epoch else 0,
              "epochs_planned": epochs_planned, "last_phase": last_phase}
    with open(os.path.join(partial, TRAINED_RECORD), "w", encoding="utf-8") as file:
        json.dump(record, file)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(partial, folder)
    for name in os.listdir(phase_dir):  # the epoch backup (Keras' files, the logs, KeepBest's best): replaced
        if name not in (TRAINED_DIR, FINETUNE_BACKUP):
            path = os.path.join(phase_dir, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


def restore(phase_dir: str, model):
    """The weights a phase ended with, put back into `model`, and its history as training returned it."""
    import keras

    folder = os.path.join(phase_dir, TRAINED_DIR)
    with np.load(os.path.join(folder, WEIGHTS)) as saved:
        model.set_weights([saved[f"arr_{index}"] for index in range(len(saved.files))])
    with open(os.path.join(folder, TRAINED_RECORD), encoding="utf-8") as file:
        record = json.load(file)
    history = keras.callbacks.History()
    history.set_model(model)
    history.epoch, history.history = record["epoch"], record["history"]
    history.kept, history.timings, history.input_bound = (Kept(**record["kept"]), record["timings"],
                                                          record["input_bound"])
    history.compute = record.get("compute")  # a record written before compute was kept has none
    return history


def phase_dir(backup_dir: str, finetuning: bool) -> str:
    return os.path.join(backup_dir, FINETUNE_BACKUP) if finetuning else backup_dir


def whole_history(history, saved_logs: dict, first_epoch: int) -> None:
    """The phase's every epoch in `history`, in order, from the logs its backup saved at each epoch's end: a
    resumed phase's History holds only the epochs this process trained."""
    epochs = sorted(int(epoch) for epoch in saved_logs if int(epoch) >= first_epoch)
    if epochs == list(history.epoch):
        return
    history.epoch, history.history = epochs, {}
    for epoch in epochs:
        for key, value in saved_logs[str(epoch)].items():
            history.history.setdefault(key, []).append(value)
