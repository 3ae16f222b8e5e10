"""callbacks: the Keras callbacks a run trains with, one concept per module, as Keras' own
`keras/src/callbacks/` keeps them.

    nonfinite_guard.py  NonFiniteGuard: a NaN/inf loss or weight stops training, with the fix
    epoch_backup.py     EpochBackup: BackupAndRestore(double_checkpoint=True) that a kill cannot tear, also
                        within epochs (trainer.backup_every) and at SIGTERM's step; resumed mid-epoch exactly
    input_wait.py       InputWait: the share of each epoch's training time spent waiting for data
    compute_rate.py     ComputeRate: the step's FLOPs counted once, each epoch's TFLOP/s and MFU
    epoch_clock.py      EpochClock: each epoch's seconds and examples/s, and its line on the terminal
    epoch_progress.py   EpochProgress: a progress bar inside the epoch, on an interactive terminal only
    midway.py           MidwayReport: a long epoch's line every trainer.log_every where no bar shows, and its
                        running metrics in MLflow
    tensorboard.py      TensorBoardWithGraph: TensorBoard with the op-level graph
    keep_best.py        KeepBest: the best epoch's weights put back when training ends (trainer.keep_best)
    missed_interrupt.py MissedInterrupt: a Ctrl-C a finalizer swallowed, raised again after the batch

At an epoch's end they run in the order the trainer lists them: the guard first (a diverged
epoch is neither shown, logged nor backed up), the tracking write last (an epoch reaches MLflow
once it is backed up). Imported by the train step only: these modules import Keras at the top,
which costs seconds that config validation and `--help` never pay.
"""

from tfx_hydra.trainer.callbacks.compute_rate import ComputeRate
from tfx_hydra.trainer.callbacks.epoch_backup import EpochBackup
from tfx_hydra.trainer.callbacks.epoch_clock import EpochClock
from tfx_hydra.trainer.callbacks.epoch_progress import EpochProgress, terminal_console
from tfx_hydra.trainer.callbacks.input_wait import InputWait
from tfx_hydra.trainer.callbacks.keep_best import KeepBest
from tfx_hydra.trainer.callbacks.midway import MidwayReport
from tfx_hydra.trainer.callbacks.missed_interrupt import MissedInterrupt
from tfx_hydra.trainer.callbacks.nonfinite_guard import (
           NonFiniteGuard,
           floating_weights,
           non_finite_weights,
           weights_all_finite,
)
from tfx_hydra.trainer.callbacks.tensorboard import TensorBoardWithGraph

__all__ = ["ComputeRate", "EpochBackup", "EpochClock", "EpochProgress", "InputWait", "KeepBest", "MidwayReport",
           "MissedInterrupt", "NonFiniteGuard", "TensorBoardWithGraph", "floating_weights", "non_finite_weights",
           "terminal_console", "weights_all_finite"]
