"""A command on a pseudo-terminal, as a person's shell runs it: what their terminal receives."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from tests.helpers import cli_env

# What TensorFlow's C++ side prints while it starts (absl's preamble, oneDNN, CUDA probing).
NATIVE_CHATTER = ("absl::InitializeLog", "oneDNN custom operations", "cuda drivers", "cuInit", "I0000", "E0000",
                  "W0000", "cudart_stub", "port.cc")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def new_user_env() -> dict[str, str]:
    """The environment of someone who just installed: no TF_CPP_MIN_LOG_LEVEL, no COLUMNS."""
    env = cli_env()
    for name in ("TF_CPP_MIN_LOG_LEVEL", "COLUMNS", "LINES"):
        env.pop(name, None)
    return env


def run_on_a_terminal(args: list[str], cwd: Path, columns: int = 60, module: str = "tfx_hydra",
                      timeout: float = 300, interrupt_after: str | None = None,
                      env: dict[str, str] | None = None) -> tuple[int, str]:
    """`python -m MODULE ARGS` with a pseudo-terminal of `columns` columns as stdin, stdout and
    stderr: what the user's terminal receives (colour codes removed). `interrupt_after`: a second
    after the terminal has shown that text, Ctrl-C (SIGINT to the command, as the terminal sends it)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    child = subprocess.Popen([sys.executable, "-m", module, *args], cwd=cwd, env=new_user_env() | (env or {}),
                             stdin=follower, stdout=follower, stderr=follower, close_fds=True)
    os.close(follower)
    received, seen = b"", None
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        received += chunk
        if interrupt_after and interrupt_after in ANSI.sub("", received[-4096:].decode(errors="replace")):
            seen = seen or time.monotonic()
            if time.monotonic() - seen > 1.0:
                interrupt_after = None
                child.send_signal(signal.SIGINT)
    os.close(leader)
    status = child.wait(timeout=timeout)
    return status, ANSI.sub("", received.decode(errors="replace")).replace("\r\n", "\n")


def assert_no_native_chatter(shown: str) -> None:
    for text in NATIVE_CHATTER:
        assert text not in shown, f"{text!r} reached the terminal:\n{shown[:3000]}"
