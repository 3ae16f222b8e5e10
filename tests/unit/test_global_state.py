"""The plugin that puts back a test's process-wide leftovers (tests/helpers/global_state.py): two tests on one
worker, the first setting MLflow's tracking URI, an `MLFLOW_*` variable and an active run, the second expecting a
process without them. Without the plugin the second fails, as two tests of the suite did when they shared a worker
with the served-parity tests (`runs:/<id>` looked up in another test's store)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]

TWO_TESTS = '''
import os

import mlflow


def test_one_sets_mlflows_globals(tmp_path):
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'elsewhere.db'}")
    os.environ["MLFLOW_EXPERIMENT_NAME"] = "elsewhere"
    mlflow.start_run()


def test_two_meets_a_process_without_them(tmp_path):
    assert "elsewhere" not in mlflow.get_tracking_uri()
    assert "MLFLOW_EXPERIMENT_NAME" not in os.environ
    assert mlflow.active_run() is None
'''


@pytest.mark.slow  # a pytest session of its own each (9 s on 2 cores): among the quick subset's heaviest
@pytest.mark.parametrize("plugin", [True, False], ids=["with the plugin", "without it"])
def test_a_tests_mlflow_globals_do_not_reach_the_next_test(pytester, monkeypatch, plugin):
    pytester.makepyfile(test_pair=TWO_TESTS)
    pytester.chdir()
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))  # the plugin is the suite's own module
    args = ["-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts="]
    result = pytester.runpytest_subprocess(*args, *(["-p", "tests.helpers.global_state"] if plugin else []))
    if plugin:
        result.assert_outcomes(passed=2)
    else:  # the second test sees the first one's store, variable and run
        result.assert_outcomes(passed=1, failed=1)
        assert "elsewhere" in result.stdout.str()
