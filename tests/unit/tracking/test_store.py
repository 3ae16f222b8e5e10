"""store: where the MLflow store is, and failing fast when it cannot be used."""

from __future__ import annotations

import time

import pytest

from tests.helpers import free_ports
from tfx_hydra.errors import TrackingError
from tfx_hydra.settings.schemas import TrackingConfig
from tfx_hydra.tracking import check_store_reachable, resolve_artifact_location, resolve_tracking_uri, ui_command


def test_default_store_is_sqlite_in_the_launch_dir(tmp_path):
    assert resolve_tracking_uri(TrackingConfig(), str(tmp_path)) == f"sqlite:///{tmp_path}/mlflow.db"
    relative = TrackingConfig(uri="sqlite:///stores/team.db")
    assert resolve_tracking_uri(relative, str(tmp_path)) == f"sqlite:///{tmp_path}/stores/team.db"
    assert resolve_tracking_uri(TrackingConfig(uri="http://mlflow:5000"), str(tmp_path)) == "http://mlflow:5000"
    uri = resolve_tracking_uri(TrackingConfig(), str(tmp_path))
    assert resolve_artifact_location(TrackingConfig(), str(tmp_path), uri) == f"{tmp_path}/mlruns/tfx_hydra"
    assert ui_command(uri, str(tmp_path)) == f"cd {tmp_path} && mlflow ui"


def test_an_unreachable_server_fails_at_once_with_the_fix():
    uri = f"http://127.0.0.1:{free_ports(1)[0]}"
    started = time.perf_counter()
    with pytest.raises(TrackingError) as caught:
        check_store_reachable(uri, timeout=5)
    assert time.perf_counter() - started < 5
    message = str(caught.value)
    assert f"tracking.uri={uri} is unreachable" in message and "Connection refused" in message
    assert "tracking=none" in message


def test_an_unwritable_sqlite_folder_is_reported(tmp_path):
    with pytest.raises(TrackingError, match=r"the folder .*missing does not exist or is not writable"):
        check_store_reachable(f"sqlite:///{tmp_path}/missing/mlflow.db", timeout=1)


@pytest.mark.fresh_store
@pytest.mark.signals
def test_a_ctrl_c_while_mlflow_migrates_a_new_store_waits_for_it_so_the_store_is_whole(tmp_path):
    """Fault injection: Ctrl-C planted right after one of the migration's ALTER TABLEs (the instant cannot be
    caused otherwise). Raised there, it left a store every later open refused ("duplicate column name")."""
    import os
    import signal

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from tfx_hydra.process import Interrupted
    from tfx_hydra.tracking import connect

    planted = []

    def ctrl_c_after_a_migration_step(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("ALTER TABLE") and not planted:
            planted.append(statement)
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(100))  # bytecode after the signal: Python's own handler would raise here

    before = signal.getsignal(signal.SIGINT)
    event.listen(Engine, "after_cursor_execute", ctrl_c_after_a_migration_step)
    try:
        with pytest.raises(KeyboardInterrupt) as caught:
            connect(TrackingConfig(experiment="first"), str(tmp_path))
    finally:
        event.remove(Engine, "after_cursor_execute", ctrl_c_after_a_migration_step)
    assert planted and signal.getsignal(signal.SIGINT) == before
    client, experiment_id, _ = connect(TrackingConfig(experiment="first"), str(tmp_path))
    assert client.get_experiment(experiment_id).name == "first"
    assert isinstance(caught.value, Interrupted) and caught.value.exit_status == 130  # raised once it was whole
