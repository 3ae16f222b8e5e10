"""known_stores: the MLflow stores this machine's runs were recorded in, so a run id alone finds its store.

Every tracked run adds its store's URI to a list in the user's state folder (`$XDG_STATE_HOME/tfx_hydra/stores`,
by default `~/.local/state/tfx_hydra/stores`: one URI a line, each once). `tfx-hydra-reproduce RUN_ID` and
`tfx-hydra promote RUN_ID`, given no --tracking-uri nor MLFLOW_TRACKING_URI, look for the run in the launch
folder's store, then in these, and say which held it. Looking never writes: a SQLite store is opened read-only
(a store that is not there is not created), a server is asked once with a short timeout. A URI with a password in
it is not kept (the list is a plain file).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import urllib.error
import urllib.parse
import urllib.request

SQLITE = "sqlite:///"


def list_path() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "tfx_hydra", "stores")


def remember_store(uri: str) -> None:
    """Add `uri` to the list (once). A list that cannot be written is no reason to stop a run."""
    if "@" in urllib.parse.urlsplit(uri).netloc or uri in known_stores():
        return
    try:
        os.makedirs(os.path.dirname(list_path()), exist_ok=True)
        with open(list_path(), "a", encoding="utf-8") as listed:
            listed.write(uri + "\n")
    except OSError:
        pass


def known_stores() -> list[str]:
    """The URIs in the list, oldest first, each once."""
    try:
        with open(list_path(), encoding="utf-8") as listed:
            return list(dict.fromkeys(line.strip() for line in listed if line.strip()))
    except OSError:
        return []


def holds_run(uri: str, run_id: str, timeout: float = 3.0) -> bool:
    """Whether the store at `uri` has run `run_id`, asked without writing anything (and without MLflow)."""
    if uri.startswith(SQLITE):
        path = uri[len(SQLITE):]
        if not os.path.isfile(path):
            return False
        try:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout)) as db:
                return db.execute("SELECT 1 FROM runs WHERE run_uuid = ?", (run_id,)).fetchone() is not None
        except sqlite3.Error:
            return False
    if uri.startswith(("http://", "https://")):
        query = urllib.parse.urlencode({"run_id": run_id})
        try:
            with urllib.request.urlopen(f"{uri.rstrip('/')}/api/2.0/mlflow/runs/get?{query}",  # noqa: S310
                                        timeout=timeout) as answer:
                return "run" in json.loads(answer.read() or b"{}")
        except (urllib.error.URLError, OSError, ValueError):
            return False
    return False


def store_holding(run_id: str, first: str | None = None) -> str | None:
    """The first of `first` (the launch folder's store) and the known stores that holds `run_id`, or None."""
    for uri in [*([first] if first else []), *known_stores()]:
        if holds_run(uri, run_id):
            return uri
    return None
