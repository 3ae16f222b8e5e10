"""long_lived: the first import of a library is frozen out of the garbage collector, once per process.

Each case runs in a fresh interpreter (without TensorFlow: a standard-library module stands in for it),
because the test process has imported everything already, and freezing is for the life of a process.
"""

from __future__ import annotations

import subprocess
import sys

FIRST_IMPORT = """
import gc
from tfx_hydra.process.long_lived import long_lived_imports

assert gc.get_freeze_count() == 0
with long_lived_imports("xml.dom.minidom"):
    paused = not gc.isenabled()
    import xml.dom.minidom
frozen = gc.get_freeze_count()
print(paused, frozen > 1000, gc.isenabled())

with long_lived_imports("xml.dom.minidom"):  # already imported: nothing is paused, nothing more frozen
    paused_again = not gc.isenabled()
    import json
print(paused_again, gc.get_freeze_count() == frozen)

try:
    with long_lived_imports("email.parser"):
        raise ImportError("a broken install")
except ImportError:
    pass
print(gc.isenabled())

gc.disable()  # a host that runs with the collector off keeps it off
with long_lived_imports("html.parser"):
    import html.parser
print(gc.isenabled())
"""


def test_the_first_import_is_paused_and_frozen_and_a_second_is_left_alone():
    done = subprocess.run([sys.executable, "-c", FIRST_IMPORT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:4] == ["True True True", "False True", "True", "False"]


def test_a_jobs_custom_gradient_registrations_are_forgotten_and_earlier_ones_kept():
    """TensorFlow registers a gradient function each time it traces a tf.custom_gradient (Keras' train
    step does, through tf.distribute's all_reduce) and never drops it, with the traced graph it holds.
    A job's registrations go once it has ended; those made before it stay."""
    import keras
    import numpy as np
    import tensorflow as tf

    from tfx_hydra.process.long_lived import CUSTOM_GRADIENT, custom_gradients, forget_custom_gradients

    @tf.custom_gradient
    def earlier(x):  # made before the job: someone else's, kept
        return tf.identity(x), lambda dy: dy

    tf.function(earlier).get_concrete_function(tf.TensorSpec([2]))
    kept = custom_gradients()
    assert kept and all(name.startswith(CUSTOM_GRADIENT) for name in kept)

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])  # the job: a real fit, traced
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.ones((8, 3)), np.ones((8, 2)), epochs=1, verbose=0)
    made = custom_gradients() - kept
    assert made, "Keras' train step registered no custom gradient: the leak this guards against is gone"
    del model
    keras.backend.clear_session()

    assert forget_custom_gradients(kept) == len(made)
    assert custom_gradients() == kept
    assert forget_custom_gradients(kept) == 0  # nothing left to forget
