"""A pytest plugin (tests/conftest.py loads it): what a test leaves in its process's globals is put back after it.

MLflow keeps a process-wide tracking URI (`mlflow.set_tracking_uri`), registry URI, active experiment and stack of
active runs, and reads `MLFLOW_*` variables; a test that sets one and does not put it back makes a later test on the
same worker read another test's store (`runs:/<id>` not found), and which test meets it depends on how the suite
was spread over its workers. So after every test: the environment and the working directory are what they were,
MLflow's URIs and active experiment are what they were, and a run the test left active is ended.
`tests/unit/test_global_state.py` runs two tests with and without this plugin and shows the second fails without it.
"""

from __future__ import annotations

import os
import sys

import pytest


def mlflow_state() -> tuple | None:
    """MLflow's process-wide settings as they are (None: MLflow is not imported, so it holds none yet)."""
    if "mlflow" not in sys.modules:
        return None
    from mlflow.tracking import fluent
    from mlflow.tracking._model_registry import utils as registry
    from mlflow.tracking._tracking_service import utils as tracking

    return tracking._tracking_uri, registry._registry_uri, fluent._active_experiment_id, len(active_runs())


def active_runs() -> list:
    from mlflow.tracking import fluent

    return fluent._active_run_stack.get()


def restore_mlflow_state(state: tuple | None) -> None:
    if "mlflow" not in sys.modules:
        return
    from mlflow.tracking import fluent
    from mlflow.tracking._model_registry import utils as registry
    from mlflow.tracking._tracking_service import utils as tracking

    tracking_uri, registry_uri, experiment_id, runs = state or (None, None, None, 0)
    stack = active_runs()
    while len(stack) > runs:  # a run the test started and left active: ended, as its process would at exit
        import mlflow

        mlflow.end_run("KILLED")
    tracking._tracking_uri, registry._registry_uri, fluent._active_experiment_id = (tracking_uri, registry_uri,
                                                                                   experiment_id)


def restore_environment(before: dict[str, str]) -> None:
    for name in set(os.environ) - set(before):
        del os.environ[name]
    for name, value in before.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def process_globals_put_back():
    environment, cwd, mlflow = dict(os.environ), os.getcwd(), mlflow_state()
    yield
    restore_mlflow_state(mlflow)
    restore_environment(environment)
    if os.getcwd() != cwd:
        os.chdir(cwd)
