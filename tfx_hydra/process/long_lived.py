"""long_lived: TensorFlow's import, kept out of the garbage collector's way.

Importing TensorFlow and Keras makes about half a million Python objects that live as long as the
process. CPython's full collections scan every tracked object, so each one after that import costs
~0.5 s of CPU on a fast x86 core: eight of them run during the import itself, and Keras'
`clear_session` plus the automatic ones add a few per run. Pausing the collector for the import and
then freezing what it made (`gc.freeze`, the same tool pre-fork servers use) takes those objects out
of every later scan. Measured on a 2-core AMD EPYC (bench/startup.py): a 2-epoch run's full collections
took 0.7-0.8 s instead of 2.1-2.3 s, and the tests' in-process runs ~35 % less CPU.
"""

from __future__ import annotations

import gc
import sys
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def long_lived_imports(first: str = "tensorflow") -> Iterator[None]:
    """Around the process's first import of `first` (and what is imported with it): no collection
    while it loads, then everything alive is frozen out of later collections. A process that has
    already imported `first` (a test, a notebook, a user's script calling us) is left as it is:
    freezing there would also freeze whatever garbage it holds."""
    if first in sys.modules or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # O(1): the objects move to the permanent generation, none is scanned
        gc.enable()
