"""The line Hydra writes before it re-raises a failed job's error, held back: a user error is said
in one message and its Fix; a programming error gets the line back above its traceback."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Iterator

JOB_ERROR_LINE = "Error executing job with overrides:"


class HeldJobErrorLine:
    """sys.stderr, holding back the line Hydra writes before it re-raises a failed job's error
    ("Error executing job with overrides: [...]"). A user error is said in one message and its
    Fix, so the line is dropped; a programming error gets it back (`release`) above its traceback."""

    def __init__(self, stream) -> None:
        self.stream, self.held = stream, ""

    def write(self, text: str) -> int:
        if text.startswith(JOB_ERROR_LINE):
            self.held += text
            return len(text)
        return self.stream.write(text)

    def release(self) -> None:
        if self.held:
            self.stream.write(self.held)
            self.held = ""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextmanager
def held_job_error_line() -> Iterator[HeldJobErrorLine]:
    holder = HeldJobErrorLine(sys.stderr)
    sys.stderr = holder
    try:
        yield holder
    finally:
        sys.stderr = holder.stream
