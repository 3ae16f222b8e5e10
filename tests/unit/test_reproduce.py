"""`reproduce`: its checks before any re-run, on a real MLflow store."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from tests.helpers import compose
from tfx_hydra import reproduce
from tfx_hydra.environment import installed_packages


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("tfx_hydra", artifact_location=str(tmp_path / "mlruns"))
    return uri, client, experiment


def test_unknown_run_id_names_the_store_and_the_fix(store, capsys):
    uri, _, _ = store
    assert reproduce.main(["0123456789abcdef0123456789abcdef", "--tracking-uri", uri]) == 1
    out = capsys.readouterr().out
    assert f"ReproduceError: run 0123456789abcdef0123456789abcdef is not in the MLflow store at {uri}." in out
    assert "--tracking-uri" in out


def test_a_run_without_its_config_artifact_cannot_be_reproduced(store, capsys):
    uri, client, experiment = store
    run = client.create_run(experiment, tags={"hydra.overrides": "model.units=64"})  # not made by tfx_hydra
    assert reproduce.main([run.info.run_id, "--tracking-uri", uri]) == 1
    assert f"run {run.info.run_id} has no '.hydra/overrides.yaml' artifact" in capsys.readouterr().out


def test_a_sweep_parent_points_at_its_jobs(store, capsys):
    uri, client, experiment = store
    run = client.create_run(experiment, tags={"sweep.dir": "/x/multirun/1", "command": "python -m tfx_hydra -m a=1,2"})
    assert reproduce.main([run.info.run_id, "--tracking-uri", uri]) == 1
    out = capsys.readouterr().out
    assert "is a sweep's parent run; reproduce one of its jobs." in out and "a=1,2" in out


@pytest.mark.fresh_store
def test_a_run_no_known_store_holds_is_one_error_and_no_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert reproduce.main(["abc"]) == 1
    out = capsys.readouterr().out
    assert f"run abc is in no MLflow store this machine knows: not in {tmp_path}/mlflow.db, nor in the " in out
    assert "Fix: pass --tracking-uri sqlite:////abs/path/mlflow.db" in out
    assert reproduce.main(["abc", "--tracking-uri", f"sqlite:///{tmp_path / 'nowhere.db'}"]) == 1
    assert f"there is no MLflow store at {tmp_path / 'nowhere.db'}" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # looking created nothing


def test_package_differences_list_changed_new_and_gone_packages():
    then = "keras==3.15.1\nnumpy==2.4.6\nold-lib==1.0\n"
    now = "keras==3.15.1\nnumpy==2.4.7\nnew-lib==0.1\n"
    assert reproduce.package_differences(then, now) == [
        "package new-lib: absent then, 0.1 now", "package numpy: 2.4.6 then, 2.4.7 now",
        "package old-lib: 1.0 then, absent now"]
    assert reproduce.package_differences(installed_packages(), installed_packages()) == []


def test_the_rerun_uses_the_recorded_overrides_into_the_same_store():
    source = reproduce.SourceRun(run_id="r1", experiment_id="1", launch_dir="/l",
                                 overrides=["model.units=64", "tracking.uri=sqlite:///old.db"], config={},
                                 tags={}, metrics={})
    command = reproduce.rerun_command(source, "sqlite:////l/mlflow.db", ["trainer.epochs=1"])
    assert command[1:] == ["-m", "tfx_hydra", "model.units=64", "trainer.epochs=1",
                           "tracking.uri=sqlite:////l/mlflow.db", "+tracking.tags.reproduced_from=r1"]


def test_config_differences_show_what_the_code_composes_differently_today():
    recorded = OmegaConf.to_container(compose(["model.units=64"]), resolve=False)
    recorded.pop("hydra", None)
    recorded["paths"] = {"launch_dir": "${hydra:runtime.cwd}", "output_dir": "${hydra:runtime.output_dir}"}
    source = reproduce.SourceRun(run_id="r1", experiment_id="1", launch_dir="/l", overrides=["model.units=64"],
                                 config=recorded, tags={}, metrics={})
    assert reproduce.config_differences(source) == []
    recorded["model"]["dropout"] = 0.5  # as if the default had been 0.5 when the run was made
    recorded["trainer"]["removed_option"] = 1
    assert reproduce.config_differences(source) == [
        "config model.dropout: 0.5 then, 0.2 now", "config trainer.removed_option: 1 then, absent now"]


def test_results_that_differ_say_what_bit_identical_needs_and_a_served_runs_reason():
    plain = reproduce.why_they_differ(2, {"data.input_shape": "(8, 8)"})
    assert plain.startswith("2 result(s) differ. Bit-identical re-runs need trainer.deterministic=true")
    assert "tf.data service" not in plain
    served = reproduce.why_they_differ(1, {"data.service": "grpc://localhost:5050"})
    assert served.endswith("The run read its training split from tf.data service (data.service): the workers' order "
                           "differs between runs, so its results are not bit-identical by design.")
