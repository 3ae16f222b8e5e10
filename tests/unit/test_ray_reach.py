"""What a Ray sweep checks before its first job on a cluster with nodes on other machines (ray_reach.py): which
stores are files on this machine, and which of a job's settings are local paths a node must see. The look on the
nodes themselves runs on a real Ray cluster (tests/e2e/test_ray.py)."""

from __future__ import annotations

from tests.helpers import compose
from tfx_hydra.sweeps.ray_reach import file_stores, local_paths


def test_a_file_store_or_study_is_named_once_and_servers_are_not(tmp_path):
    default = compose([], launch_dir=tmp_path)
    assert list(file_stores([default, default], str(tmp_path))) == [
        f"tracking.uri: the MLflow store sqlite:///{tmp_path / 'mlflow.db'} is a file on this machine"]
    assert list(file_stores([compose(["tracking.uri=http://mlflow:5000"], launch_dir=tmp_path)], str(tmp_path))) == []
    assert list(file_stores([compose(["tracking=none"], launch_dir=tmp_path)], str(tmp_path))) == []
    search = compose(["hparams_search=optuna", "tracking.uri=http://mlflow:5000"], launch_dir=tmp_path)
    assert list(file_stores([search], str(tmp_path))) == [
        "hparams_search.storage=null: the Optuna study is a file on this machine (optuna.db in the launch directory)"]
    served = compose(["hparams_search=optuna", "tracking.uri=http://mlflow:5000",
                      "hparams_search.storage=postgresql://db/optuna"], launch_dir=tmp_path)
    assert list(file_stores([served], str(tmp_path))) == []


def test_the_local_paths_a_job_names_are_found_whatever_the_option(tmp_path):
    table = tmp_path / "data" / "rows.csv"
    table.parent.mkdir()
    table.write_text("a,label\n1,0\n")
    assert local_paths(compose(["data=csv", f"data.path={table}"], launch_dir=tmp_path), str(tmp_path)) == {
        str(table)}
    assert local_paths(compose(["data=csv", "data.path=data/rows.csv"], launch_dir=tmp_path), str(tmp_path)) == {
        str(table)}  # relative to the launch directory, as the job reads it
    records = compose(["data=tfrecord", f"data.train_files={tmp_path}/data/train-*.tfrecord", "data.num_classes=2"],
                      launch_dir=tmp_path)
    assert local_paths(records, str(tmp_path)) == {str(tmp_path / "data")}  # a glob: its folder
    remote = compose(["data=csv", "data.path=gs://bucket/rows.csv"], launch_dir=tmp_path)
    assert local_paths(remote, str(tmp_path)) == set()  # object storage: every node reads it
    assert local_paths(compose([], launch_dir=tmp_path), str(tmp_path)) == set()  # digits: no file
