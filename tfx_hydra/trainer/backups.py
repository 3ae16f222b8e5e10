"""The per-epoch backup's folder over a run's life: chosen before training (the interrupted run's
when resuming), looked in for the fine-tuning phase's, removed once the run is FINISHED.

Keras' BackupAndRestore (callbacks/epoch_backup.py) writes and restores what is inside; the
folder's name is a run tag, so a resumed run finds its backup from MLflow alone.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

from tfx_hydra.metrics import FINETUNE_PHASE
from tfx_hydra.settings.checks import require_interval
from tfx_hydra.settings.schemas import TrainerConfig
from tfx_hydra.tracking import BACKUP_TAG, Tracker

log = logging.getLogger(__name__)


class EndsTraining(Exception):
    """Raised by a callback handed to training (a search's pruning) to end it for good: nothing will resume
    the run, so its backups go with it."""

FINETUNE_BACKUP = "finetune"  # phase two's backup, inside the run's backup folder


def choose_backup_dir(tracker: Tracker, output_dir: str, chief: bool) -> str:
    """Where BackupAndRestore keeps the per-epoch backup: the interrupted run's when resuming,
    this run's output dir otherwise. A non-chief worker writes its own to a throwaway folder, but starts from a copy
    of the chief's (the job's folder is the same on every worker): a resumed multi-worker job has every worker go on
    from the same step, or their collectives would not match."""
    if not chief:
        folder = tempfile.mkdtemp(prefix="tfx_hydra-worker-backup-")
        if os.path.isdir(os.path.join(output_dir, "backup")):
            shutil.copytree(os.path.join(output_dir, "backup"), folder, dirs_exist_ok=True)
        return folder
    backup_dir = tracker.resumed_backup_dir or os.path.join(output_dir, "backup")
    tracker.set_tags({BACKUP_TAG: backup_dir})
    tracker.flush()  # with all recorded so far, in the store before training: a run killed in it resumes
    return backup_dir


def phase_backup(backup_dir: str, trainer: TrainerConfig, phase: str, datasets, plan, tracker: Tracker,
                 on_trained=None):
    """The phase's EpochBackup: at each epoch's end and every trainer.backup_every within one, and `on_trained`
    as training ends (trained.py). A fine-tuning phase trains epochs numbered on from the first phase's, in a
    backup of its own (FINETUNE_BACKUP). A training split read from tf.data service (datasets.served) comes in
    the workers' order: a resumed epoch could not skip the batches it trained, so backups are taken at epoch ends."""
    from tfx_hydra.trainer.callbacks import EpochBackup

    num_train, served = datasets.num_train, datasets.served
    finetuning = phase == FINETUNE_PHASE
    every = trainer.backup_every if trainer.backup_every == "auto" else \
        require_interval("trainer.backup_every", trainer.backup_every)
    batch = int(plan.global_size if plan else trainer.batch_size)
    if num_train is None and trainer.backup_every is not None:
        log.info("backups: at epoch ends only, the training pipeline does not know its length (a resumed epoch "
                 "would teach Keras too few batches); dataset.apply(tf.data.experimental.assert_cardinality(N)) "
                 "backs up within epochs again")
    if served and trainer.backup_every is not None:
        log.info("backups: at epoch ends only, the training split is read from tf.data service (data.service): its "
                 "order is the workers', so a resumed epoch starts again from its first batch")
    return EpochBackup(backup_dir, trainer.epochs + trainer.finetune_epochs if finetuning else trainer.epochs,
                       catch_up=tracker.log_missing_epochs,
                       epochs_key="trainer.finetune_epochs" if finetuning else "trainer.epochs",
                       epochs_before=trainer.epochs if finetuning else 0, every=every,
                       steps_per_epoch=-(-num_train // batch) if num_train is not None else None,
                       within_epochs=num_train is not None and not served, on_trained=on_trained)


def finetuning_backup_exists(backup_dir: str, trainer: TrainerConfig) -> bool:
    """A run killed in its fine-tuning phase resumes there: phase one's result is in that backup."""
    resuming = bool(trainer.finetune_epochs and trainer.backup and
                    os.path.isdir(os.path.join(backup_dir, FINETUNE_BACKUP)))
    if resuming:
        log.info("resuming in the fine-tuning phase: the head-training phase finished before the interruption")
    return resuming


def remove_backup(backup_dir: str | None, chief: bool = True) -> None:
    """Once the run is FINISHED (run.py), or training ended for good (a pruned trial): the backup folder and all
    it holds (each phase's epoch backup or its end, the exports done) go; a worker's throwaway folder too."""
    if backup_dir and os.path.isdir(backup_dir):
        shutil.rmtree(backup_dir, ignore_errors=not chief)
