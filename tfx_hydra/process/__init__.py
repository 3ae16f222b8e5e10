"""process: what the machine does to a run's process, said the way a user can act on.

    signals.py  Ctrl-C and SIGTERM end a run KILLED, never in the middle of a write (`uninterrupted`),
                and never lost in a finalizer, nor printed from one (`raise_missed_interrupt`,
                `keep_interrupts_from_finalizers`); Slurm's time-limit warning
                in a submitit job too, which is then requeued (`requeue_if_warned`); during training each
                waits for the step in flight, to be backed up at it (`stopped_at_a_step`)
    faults.py   a full disk said once, with where it happened and where else files can go; any
                error said as one line for a run's `error` tag
    long_lived.py  TensorFlow's first import paused from and then frozen out of the garbage collector; a
                job's custom-gradient registrations (TensorFlow never drops them) forgotten when it ends

Below everything else: tracking, the callbacks and the export step use them; they import nothing of ours
but errors.py.
"""

from tfx_hydra.process.faults import as_disk_full, describe_error, disk_full_error, disk_full_said, full_disk_path
from tfx_hydra.process.signals import (
    Interrupted,
    held_signals,
    interrupt_on_signals,
    interrupt_received,
    interrupts_not_lost_to_errors,
    keep_interrupts_from_finalizers,
    raise_missed_interrupt,
    requeue_if_warned,
    restore_handlers,
    stop_now,
    stop_requested,
    stopped_at_a_step,
    uninterrupted,
)

__all__ = ["Interrupted", "as_disk_full", "describe_error", "disk_full_error", "disk_full_said", "full_disk_path",
           "held_signals",
           "interrupt_on_signals", "interrupt_received", "interrupts_not_lost_to_errors",
           "keep_interrupts_from_finalizers", "raise_missed_interrupt",
           "requeue_if_warned", "restore_handlers", "stop_now", "stop_requested", "stopped_at_a_step", "uninterrupted"]
