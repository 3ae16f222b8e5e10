"""What tfx_hydra keeps for the next start on this machine, in this user's cache folder
($XDG_CACHE_HOME/tfx_hydra, else ~/.cache/tfx_hydra): small JSON files -- the TFRecord counts (data/record_index.py),
the CPU's measured peak (peak.py), the steps' FLOP counts (trainer/flops.py). A file that cannot be read is an empty
one, and one that cannot be written costs only the work again: what it held is worked out again."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile


def cache_file(name: str) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tfx_hydra", name)


def read_json(path: str) -> dict:
    """The JSON object in `path`; {} when there is none, or something else is there."""
    try:
        with open(path, encoding="utf-8") as file:
            value = json.load(file)
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}


def write_json(path: str, value: dict) -> None:
    """Written whole then renamed: two runs starting together never read half a file."""
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tfx_hydra-", suffix=".json")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        json.dump(value, file, indent=1, sort_keys=True)
    os.replace(temporary, path)


def remember(path: str, entries: dict) -> None:
    """`entries` added to the JSON object at `path` (its folder made), for the next start; a home that cannot be
    written (read-only, full) only means the work is done again."""
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_json(path, read_json(path) | entries)
