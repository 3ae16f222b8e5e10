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
