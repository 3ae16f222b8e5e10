"""process/signals: a launcher's time-limit warning (SIGUSR2, submitit's in a Slurm job) interrupts a run like
SIGTERM, then goes to the launcher's own handler; outside such a job SIGUSR2 is left alone. The real thing,
on a real Slurm with submitit's handler, is tests/e2e/test_slurm.py; here a recording function stands in for
submitit's handler, so the nesting (a search worker's handlers around each trial's run) is checked in isolation.
"""

from __future__ import annotations

import os
import signal

import pytest

from tfx_hydra.process import Interrupted, interrupt_on_signals, requeue_if_warned, restore_handlers

pytestmark = pytest.mark.signals


@pytest.fixture
def launcher_handler():
    """A launcher's SIGUSR2 handler, as submitit installs one before the job's function runs."""
    calls: list[int] = []

    def requeue(signum, frame):
        calls.append(signum)

    previous = signal.signal(signal.SIGUSR2, requeue)
    yield requeue, calls
    signal.signal(signal.SIGUSR2, previous)


def test_the_launcher_s_warning_interrupts_the_run_then_reaches_the_launcher_s_handler(launcher_handler):
    requeue, calls = launcher_handler
    worker = interrupt_on_signals()  # a search worker's, around its trials
    try:
        run = interrupt_on_signals()  # a trial's run, inside it
        try:
            with pytest.raises(Interrupted) as interrupted:
                os.kill(os.getpid(), signal.SIGUSR2)
        finally:
            restore_handlers(run)
    finally:
        restore_handlers(worker)
    assert interrupted.value.signal_name == "SIGUSR2" and interrupted.value.exit_status == 128 + signal.SIGUSR2
    assert calls == []  # the run is closed first: nothing requeued from inside training
    assert signal.getsignal(signal.SIGUSR2) is requeue  # the launcher's own handler is back
    requeue_if_warned(interrupted.value)
    assert calls == [signal.SIGUSR2]


def test_other_interrupts_are_not_handed_to_the_launcher(launcher_handler):
    _, calls = launcher_handler
    requeue_if_warned(Interrupted("SIGTERM"))
    requeue_if_warned(KeyboardInterrupt())
    assert calls == []


def test_without_a_launcher_sigusr2_is_not_taken_over():
    previous = signal.signal(signal.SIGUSR2, signal.SIG_DFL)
    try:
        handlers = interrupt_on_signals()
        try:
            assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
            assert set(handlers) == {signal.SIGINT, signal.SIGTERM}
        finally:
            restore_handlers(handlers)
    finally:
        signal.signal(signal.SIGUSR2, previous)
