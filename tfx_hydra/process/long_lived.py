"""long_lived: a process that lives long -- TensorFlow's import kept out of the garbage collector's way,
and the graphs TensorFlow's gradient registry would keep from each job it runs.

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


# TensorFlow registers a gradient function in a process-wide registry each time it traces a
# `tf.custom_gradient` -- tf.distribute's all_reduce of the gradients does, in every Keras train step,
# under any strategy -- and never removes it. Each registration holds its traced graph (~4 MiB for the
# digits MLP), so a process running job after job (a search's worker, the basic launcher, a joblib
# process) grew by that per job: 978 -> 1166 MiB over 50 trials (bench/hpo.py). Verified on TF 2.21.
CUSTOM_GRADIENT = "CustomGradient-"  # tensorflow/python/ops/custom_gradient.py names them so


def _gradient_registry() -> dict | None:
    """TensorFlow's registry of gradient functions by op type, or None (TensorFlow not imported yet, or
    a release that keeps it elsewhere: then nothing is forgotten, as before)."""
    if "tensorflow" not in sys.modules:
        return None
    from tensorflow.python.framework import ops

    return getattr(getattr(ops, "_gradient_registry", None), "_registry", None)


def custom_gradients() -> set[str]:
    """The custom-gradient registrations this process holds now."""
    registry = _gradient_registry()
    return {name for name in registry if name.startswith(CUSTOM_GRADIENT)} if registry is not None else set()


def forget_custom_gradients(kept: set[str]) -> int:
    """Drop the custom-gradient registrations made since `kept` was taken (a job's, once it has ended and
    its model and traced functions are gone); returns how many."""
    registry = _gradient_registry()
    if registry is None:
        return 0
    made = [name for name in list(registry) if name.startswith(CUSTOM_GRADIENT) and name not in kept]
    for name in made:
        registry.pop(name, None)
    return len(made)
