"""signals: Ctrl-C and SIGTERM end a run KILLED, never in the middle of a write.

During a run both signals raise `Interrupted` (a KeyboardInterrupt) at once, unless an
`uninterrupted()` section is open (a store write, the per-epoch backup): then the signal
waits until the section is done.

Python drops an exception raised inside a finalizer (a `__del__`, a weakref callback: it prints
"Exception ignored in ..." and goes on), and TensorFlow frees iterators and tensors by the
thousand each epoch, so now and then a Ctrl-C lands in one and is lost. The handler records every
signal it raises until the run has received it; `raise_missed_interrupt()` raises it again, after
each batch (trainer/callbacks/missed_interrupt.py) and before a run is closed FINISHED. A KeyboardInterrupt
dropped that way is not printed either (`keep_interrupts_from_finalizers`): it is recorded the same way,
so the user sees the one line that says how to resume, not "Exception ignored in ..." and a traceback.

In a Slurm job submitit started (hydra/launcher=slurm), SIGUSR2 is Slurm's warning of a time limit or a
pre-emption (submitit asks for it with `sbatch --signal=USR2@signal_delay_s`), and submitit's handler
for it checkpoints the job and requeues it. Left to itself, that handler exits from wherever training
is (a SystemExit the run would end FAILED with). So during a run it interrupts like SIGTERM: the run
ends KILLED with its backup, and `requeue_if_warned` hands over to submitit's handler once the run is
closed. The requeued job runs the same config, which resumes the same MLflow run from its backup.

While a model trains (`stopped_at_a_step()`), Ctrl-C, SIGTERM and SIGUSR2 wait for the training step in flight:
with a backup, the backup callback then writes one at that step and raises `Interrupted` (`stop_requested`), so
the resumed run goes on from that step, not from the epoch's start; without one, `MissedInterrupt` raises it at
the batch's end. A KeyboardInterrupt raised wherever the main thread is would land inside Keras' and TensorFlow's
own code mid-step, and some of it does not survive that: a device scope half entered ("Exiting device scope
without proper scope nesting": the job ended FAILED and a sweep went on to its next job) or a native abort (the
process died of SIGABRT before closing its run) -- 2 of 46 Ctrl-Cs in a sweep under load here, 0 of 45 since. A second
signal interrupts at once (a step that never ends cannot hold a process the user or the scheduler wants back).
The test split's evaluation, the reports' predictions and each export (export/step.py: a converter's own code, TFLite's,
tf2onnx's, left a process hanging with no output once when Ctrl-C landed inside it) wait the same way.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

INTERRUPTING_SIGNALS = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}
LAUNCHER_WARNING = signal.SIGUSR2  # submitit's signal for a Slurm time limit or pre-emption (see above)
SIGNAL_NUMBERS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGUSR2": LAUNCHER_WARNING}

log = logging.getLogger(__name__)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a run. `resume_hint` (set once the run is closed KILLED) is the one
    line the user sees: what happened, where the backup is, the command that resumes."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.resume_hint: str | None = None

    @property
    def exit_status(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number (130, 143)."""
        return 128 + SIGNAL_NUMBERS.get(self.signal_name, signal.SIGINT)


# uninterrupted() sections open; a signal that waits for them; a signal raised that the run has not received;
# whether training steps are running (stopped_at_a_step); a SIGTERM/SIGUSR2 that waits for the step to end
_deferred = {"depth": 0, "pending": None, "raised": None, "steps": False, "stop": None}
WAITS_FOR_THE_STEP = ("SIGINT", "SIGTERM", "SIGUSR2")


def interrupt_on_signals() -> dict | None:
    """Turn Ctrl-C and SIGTERM (what Slurm and `kill` send before killing) into KeyboardInterrupt for
    the run's duration, so the run ends KILLED with its backup kept: at once, unless an
    `uninterrupted()` section is open, in which case when it closes. Main thread only (Python's rule)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    keep_interrupts_from_finalizers()
    caught = dict(INTERRUPTING_SIGNALS)
    if callable(signal.getsignal(LAUNCHER_WARNING)):  # a launcher's handler (submitit's), or ours around a run's
        caught[LAUNCHER_WARNING] = "SIGUSR2"

    def interrupt(signum, frame):
        name = caught[signum]
        if _deferred["steps"] and name in WAITS_FOR_THE_STEP and not _deferred["stop"]:
            _deferred["stop"] = name  # the step in flight ends, is backed up, then the run stops
            return
        if _deferred["depth"]:
            _deferred["pending"] = _deferred["pending"] or name
            return
        _deferred["raised"] = name
        raise Interrupted(name)
    interrupt.interrupts_the_run = True
    return {signum: signal.signal(signum, interrupt) for signum in caught}


def keep_interrupts_from_finalizers() -> None:
    """From now on in this process, a KeyboardInterrupt a finalizer drops is recorded for
    `raise_missed_interrupt()` instead of printed: a Ctrl-C landing in SQLAlchemy's or TensorFlow's
    cleanup is the user's Ctrl-C, not an error. Every other unraisable error goes to the hook that was
    there (Python's printout, pytest's warning). Installing it twice keeps one."""
    previous = sys.unraisablehook
    if getattr(previous, "keeps_interrupts", False):
        return

    def record_interrupt_or_pass_on(unraisable) -> None:
        if not issubclass(unraisable.exc_type, KeyboardInterrupt):
            previous(unraisable)
            return
        name = getattr(unraisable.exc_value, "signal_name", "SIGINT")
        _deferred["raised"] = _deferred["raised"] or name
        log.debug("%s landed in a finalizer (%r): raised again at the next check", name, unraisable.object)

    record_interrupt_or_pass_on.keeps_interrupts = True
    sys.unraisablehook = record_interrupt_or_pass_on


def requeue_if_warned(interrupt: BaseException) -> None:
    """After a run ended KILLED by Slurm's time-limit or pre-emption warning, its handlers put back:
    submitit's own handler checkpoints the job (the same Hydra job, to run again), requeues it
    (`scontrol requeue`) and exits the process. Any other interrupt, or one outside a submitit job, is left
    to go on as it was."""
    launcher = signal.getsignal(LAUNCHER_WARNING)
    if isinstance(interrupt, Interrupted) and interrupt.signal_name == "SIGUSR2" and callable(launcher) \
            and not getattr(launcher, "interrupts_the_run", False):
        launcher(LAUNCHER_WARNING, None)


def interrupt_received() -> None:
    """The run has the interrupt (its KeyboardInterrupt reached the run's handler): nothing to raise again."""
    _deferred["raised"] = None


@contextmanager
def interrupts_not_lost_to_errors() -> Iterator[None]:
    """An error raised while an interrupt was on its way to the run is the interrupt: a library whose own
    cleanup fails when a KeyboardInterrupt lands inside it (TensorFlow's device scope, half entered: "Exiting device
    scope without proper scope nesting") raises its error in the interrupt's place. The run then ends KILLED with
    its backup and the line that resumes it, not FAILED with a traceback, and a sweep stops instead of going on."""
    try:
        yield
    except Exception as err:
        if _deferred["raised"]:
            raise Interrupted(_deferred["raised"]) from err
        raise


def raise_missed_interrupt() -> None:
    """Raise again a signal whose KeyboardInterrupt a finalizer swallowed (see the module's docstring)."""
    if _deferred["raised"]:
        raise Interrupted(_deferred["raised"])


def restore_handlers(previous: dict | None) -> None:
    # the run is over: a signal held for it has done its work
    _deferred["pending"] = _deferred["raised"] = _deferred["stop"] = None
    for signum, handler in (previous or {}).items():
        signal.signal(signum, handler)


@contextmanager
def held_signals() -> Iterator[None]:
    """`uninterrupted()` where no run has put its handlers in place yet (Python's own would raise in the
    middle): Ctrl-C/SIGTERM wait for the block, then raise `Interrupted`. The handlers that were there are
    put back, and a missed interrupt an enclosing run recorded is kept for it."""
    previous = interrupt_on_signals()
    try:
        with uninterrupted():
            yield
    finally:
        for signum, handler in (previous or {}).items():
            signal.signal(signum, handler)


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Hold Ctrl-C/SIGTERM until the block is done, then raise it.

    Some writes must not be cut in half: a KeyboardInterrupt inside SQLite's commit leaves the
    store locked by the dead transaction, so the run could not be marked KILLED and stayed
    RUNNING (1 in 6 signals landing in a metric write, measured); a backup cut mid-write cannot
    be resumed. Store writes and the per-epoch backup run inside this.
    """
    _deferred["depth"] += 1
    try:
        yield
    finally:
        _deferred["depth"] -= 1
    if _deferred["depth"] == 0 and _deferred["pending"]:
        name, _deferred["pending"] = _deferred["pending"], None
        _deferred["raised"] = name
        raise Interrupted(name)


@contextmanager
def stopped_at_a_step() -> Iterator[None]:
    """Training (and the test split's evaluation, the predictions, each export): Ctrl-C, SIGTERM and SIGUSR2 wait for
    the step in flight (see the module's docstring). A request still waiting when the block ends (it came after the
    last step) interrupts then."""
    _deferred["steps"], _deferred["stop"] = True, None
    try:
        yield
    finally:
        _deferred["steps"] = False
        name, _deferred["stop"] = _deferred["stop"], None
    if name:
        _deferred["raised"] = name
        raise Interrupted(name)


def stop_requested() -> str | None:
    """The signal (SIGINT, SIGTERM, SIGUSR2) waiting for the training step to end, if any."""
    return _deferred["stop"]


def stop_now() -> None:
    """The waiting signal's interrupt, raised once its step is backed up."""
    name, _deferred["stop"] = _deferred["stop"], None
    _deferred["raised"] = name
    raise Interrupted(name)
