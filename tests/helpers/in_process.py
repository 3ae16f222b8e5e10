"""`python -m tfx_hydra ARGS` in the test's own process: the same entrypoint (`tfx_hydra.__main__.main`),
Hydra's app and job logging, our error reporting and exit status, without paying a fresh interpreter's
imports (Python, TensorFlow, Keras, MLflow: ~9 s a call on this project's 2-core machine).

A subprocess stays the tool where the process itself is under test: signals and kills, what reaches
file descriptor 2, a real terminal, servers, a strategy that configures TensorFlow at its start.
Everything else a command does -- its config, its MLflow records, its files, what it prints, the
processes its launcher starts -- is the same in process. Exit hooks the command registers (a sweep whose
sweeper raised closes its parent in one) run when it returns, as the interpreter runs them at its exit.

What a run leaves in the process is put back afterwards, so the next test starts clean: the
environment, argv and working directory, the logging configuration Hydra's job logging applied,
Hydra's global state, Keras' dtype policy and TensorFlow's op determinism, and joblib's worker processes.
"""

from __future__ import annotations

import atexit
import io
import logging
import os
import sys
import tempfile
import traceback
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator


@dataclass
class Completed:
    """What the tests read of a finished command, as subprocess.CompletedProcess names it."""

    returncode: int
    stdout: str
    stderr: str


def _logging_state() -> tuple:
    """The logging configuration as it is, then hidden from the configuration a run applies: Python's
    dictConfig (Hydra's job logging) flushes and closes every handler the process has ever made, pytest's
    own among them, so they are taken out of logging's registry for the run (a private list, read by
    dictConfig alone) and put back after."""
    loggers = {name: (logger.level, list(logger.handlers), logger.propagate, logger.disabled)
               for name, logger in logging.root.manager.loggerDict.items() if isinstance(logger, logging.Logger)}
    registry = (logging._handlerList[:], dict(logging._handlers))
    logging._handlerList[:] = []
    logging._handlers.clear()
    return logging.root.level, list(logging.root.handlers), loggers, registry


def _restore_logging(state: tuple) -> None:
    level, handlers, loggers, (handler_list, named_handlers) = state
    logging._handlerList[:] = handler_list + logging._handlerList
    logging._handlers.clear()
    logging._handlers.update(named_handlers)
    for handler in logging.root.handlers[:]:
        if handler not in handlers:
            logging.root.removeHandler(handler)
            handler.close()  # the job's log file
    for handler in handlers:
        if handler not in logging.root.handlers:
            logging.root.addHandler(handler)
    logging.root.setLevel(level)
    for name, logger in logging.root.manager.loggerDict.items():
        if not isinstance(logger, logging.Logger):
            continue
        if name in loggers:  # a logger made during the run keeps what its library set, as in a process
            logger.level, logger.handlers, logger.propagate, logger.disabled = loggers[name]


def _reset_frameworks() -> None:
    """What a run sets for its process and a later test must not inherit."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    GlobalHydra.instance().clear()
    HydraConfig.instance().cfg = None  # `HydraConfig.initialized()` is False again, as outside an app
    if "keras" in sys.modules:
        import keras
        from tensorflow.python.framework import config as tf_config  # the switch tf.config has no public "off" for

        keras.mixed_precision.set_global_policy("float32")
        tf_config.disable_op_determinism()  # trainer.deterministic=true turns it on for good
        keras.backend.clear_session()  # the run's models and graphs, and Keras' layer-name counters
    loky = sys.modules.get("joblib.externals.loky.reusable_executor")
    executor = getattr(loky, "_executor", None)
    if executor is not None:  # joblib's worker processes end with the command, as they do with its process:
        executor.shutdown(wait=True, kill_workers=True)  # reused, they would keep the earlier one's working dir


@contextmanager
def _exit_hooks_run_on_return() -> Iterator[None]:
    """The command's own exit hooks (tfx_hydra's: a sweep's parent closed when its sweeper raised) run when
    the block ends, last registered first, as the interpreter runs them at exit; a library's go to the real
    atexit, since the library stays loaded in this process."""
    hooks: list = []
    register, unregister = atexit.register, atexit.unregister

    def register_ours(hook, *hook_args, **hook_kwargs):
        if not getattr(hook, "__module__", "").startswith("tfx_hydra"):
            return register(hook, *hook_args, **hook_kwargs)
        hooks.append((hook, hook_args, hook_kwargs))
        return hook

    def unregister_ours(hook) -> None:
        hooks[:] = [entry for entry in hooks if entry[0] != hook]
        unregister(hook)

    atexit.register, atexit.unregister = register_ours, unregister_ours
    try:
        yield
    finally:
        atexit.register, atexit.unregister = register, unregister
        for hook, hook_args, hook_kwargs in reversed(hooks):
            hook(*hook_args, **hook_kwargs)


def _exit_status(code) -> int:
    """What the interpreter makes of `sys.exit(code)`: a message-only exit is printed and is status 1."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
        return 1
    return 0 if code is None else code


def run_cli_in_process(args: list[str], cwd: Path | str, multirun: bool = False,
                       env: dict[str, str] | None = None) -> Completed:
    """`python -m tfx_hydra [-m] ARGS` run from `cwd`, with `env` on top of the test environment the
    subprocess helper gives (tests.helpers.cli_env): its exit status and what it printed."""
    from tfx_hydra.__main__ import main

    return run_in_process(main, ["tfx-hydra", *(["-m"] if multirun else []), *args], cwd, env)


def run_in_process(main: Callable[[], int | None], argv: list[str], cwd: Path | str,
                   env: dict[str, str] | None = None) -> Completed:
    """A command's `main()` (tfx_hydra's, or `python -m tfx_hydra.reproduce`'s: main() reads sys.argv when
    given no arguments) with `argv` as sys.argv, run from `cwd` as the subprocess helper would run it."""
    from tests.helpers import cli_env

    saved_environ, saved_argv, saved_cwd = dict(os.environ), sys.argv[:], os.getcwd()
    saved_logging = _logging_state()
    saved_tempdir, tempfile.tempdir = tempfile.tempdir, None  # read TMPDIR again, as a new process would
    environment = cli_env() | (env or {})  # read before the clear: the test's environment, as a subprocess has it
    os.environ.clear()
    os.environ.update(environment)
    sys.argv = list(argv)
    os.chdir(cwd)
    out, err, code = io.StringIO(), io.StringIO(), 0
    try:
        with redirect_stdout(out), redirect_stderr(err), _exit_hooks_run_on_return():
            try:
                code = _exit_status(main())  # a main that returns its status, as sys.exit(main()) takes it
            except SystemExit as exit_:
                code = _exit_status(exit_.code)
            except BaseException:  # noqa: BLE001 - what the interpreter does with an uncaught error
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_environ)
        tempfile.tempdir = saved_tempdir
        _restore_logging(saved_logging)
        _reset_frameworks()
    return Completed(code, out.getvalue(), err.getvalue())
