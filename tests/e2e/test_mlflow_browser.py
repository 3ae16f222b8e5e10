"""The MLflow UI as a user sees it: a real sweep, a bare `mlflow ui` in its launch dir, headless Chromium.

Runs a two-job sweep, starts `mlflow ui` in the launch directory (MLflow's own default store there is
the sweep's ./mlflow.db; ~20 s to come up here) on 127.0.0.1, and stops it by its process group.
First its REST API is asked what the browser would show (params, per-epoch metrics, tags, artifacts),
then the experiment's runs page (in MLflow 3's Model training view) is opened in Debian's chromium
driven by Playwright: the sweep's parent run is listed, expanding it shows both jobs nested under it
(indented), and a job's page shows its parent, params and metrics, the fields MLflow fills from its
own conventions (Created by, Source, Datasets with their digests, Logged models) and its system
metrics. Screenshots go to test-artifacts/ in the repo.

The browser test needs /usr/bin/chromium (`apt-get install -y chromium`; `.ci/run` installs it).
Without it that test is skipped, except where TFX_HYDRA_REQUIRE_BROWSER=1 (CI) makes that a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import REPO, cli_env, free_ports, mlflow_runs, wait_for_http
from tests.helpers.in_process import run_cli_in_process

# one worker runs the whole module: its module-scoped fixture is built once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_mlflow_browser")]

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = REPO / "test-artifacts"
SWEEP = ["model.units=32,64", "trainer.epochs=2", "data.limit=200",
         "tracking.system_metrics.interval=1"]  # the SavedModel export and the MLflow model: kept


def require_browser():
    missing = [what for what, ok in (("chromium", os.path.exists(CHROMIUM)),
                                     ("playwright", shutil.which("playwright") or _importable("playwright")))
               if not ok]
    if missing:
        message = f"{' and '.join(missing)} not installed (apt-get install -y chromium; pip install -e '.[dev]')"
        if os.environ.get("TFX_HYDRA_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module")
def sweep_in_the_ui(tmp_path_factory):
    """(the UI's address, the sweep's runs): one sweep and one `mlflow ui`, shared by both tests."""
    launch = tmp_path_factory.mktemp("ui")
    done = run_cli_in_process(SWEEP, cwd=launch, multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    (port,) = free_ports(1)
    mlflow = Path(sys.executable).parent / "mlflow"
    server = subprocess.Popen([str(mlflow), "ui", "--host", "127.0.0.1", "--port", str(port)], cwd=launch,
                              env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{base}/health", server, timeout=120, what="mlflow ui")
        yield base, mlflow_runs(launch)
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server's workers share its process group
        server.wait(timeout=30)


def get(base: str, endpoint: str, **params) -> dict:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    with urllib.request.urlopen(f"{base}{endpoint}?{query}") as response:
        return json.loads(response.read())


def post(base: str, endpoint: str, body: dict) -> dict:
    request = urllib.request.Request(f"{base}{endpoint}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


def test_bare_mlflow_ui_in_the_launch_dir_serves_every_job(sweep_in_the_ui):
    base, _ = sweep_in_the_ui
    experiment = get(base, "/api/2.0/mlflow/experiments/get-by-name", experiment_name="tfx_hydra")["experiment"]
    runs = post(base, "/api/2.0/mlflow/runs/search", {"experiment_ids": [experiment["experiment_id"]]})["runs"]
    by_name = {r["info"]["run_name"]: r for r in runs}
    assert len(runs) == 3 and {"job 0: units 32", "job 1: units 64"} <= set(by_name)
    job = by_name["job 1: units 64"]
    run_id = job["info"]["run_id"]
    assert job["info"]["status"] == "FINISHED"
    params = {p["key"]: p["value"] for p in job["data"]["params"]}
    tags = {t["key"]: t["value"] for t in job["data"]["tags"]}
    assert params["trainer.epochs"] == "2" and params["model.units"] == "64"
    assert "model.units=64" in tags["hydra.overrides"].split() and tags["env.tensorflow"].startswith("2.")
    assert tags["mlflow.parentRunId"] in {r["info"]["run_id"] for r in runs}
    history = get(base, "/api/2.0/mlflow/metrics/get-history", run_id=run_id,
                  metric_key="epoch/val_accuracy")["metrics"]
    assert [m["step"] for m in history] == [0, 1]
    listed = {f["path"] for f in get(base, "/api/2.0/mlflow/artifacts/list", run_id=run_id)["files"]}
    assert {".hydra", "config_resolved.yaml", "environment", "export"} <= listed
    exported = {f["path"] for f in get(base, "/api/2.0/mlflow/artifacts/list", run_id=run_id,
                                        path="export/mlp/1")["files"]}
    assert "export/mlp/1/saved_model.pb" in exported
    with urllib.request.urlopen(f"{base}/") as page:  # the UI itself is served
        assert b"MLflow" in page.read()


def test_the_sweep_is_nested_in_the_mlflow_ui_and_a_job_shows_params_and_metrics(sweep_in_the_ui):
    require_browser()
    from playwright.sync_api import sync_playwright

    base, runs = sweep_in_the_ui
    (parent,) = [r for r in runs if "sweep.dir" in r.data.tags]
    children = {r.info.run_name: r for r in runs if r is not parent}
    assert set(children) == {"job 0: units 32", "job 1: units 64"}
    SCREENSHOTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 2400})
            # MLflow 3.17's UI picks its view from a browser-wide switch at the top of its side bar
            # (GenAI until clicked, then remembered), not from the experiment's mlflow.experimentKind
            # tag: the README's link opens the training view, and one click keeps it (as a user would)
            page.goto(f"{base}/#/experiments/{parent.info.experiment_id}/runs?workflowType=machine_learning")
            page.get_by_text("Model registry").first.wait_for(timeout=60_000)  # the training view's side bar
            assert "Evaluation runs" not in page.inner_text("body")
            page.get_by_text("GenAI", exact=True).first.click()
            page.get_by_text("Evaluation runs").first.wait_for(timeout=30_000)
            page.get_by_text("Model training", exact=True).first.click()  # remembered from here on
            page.get_by_text("Model registry").first.wait_for(timeout=30_000)
            parent_link = page.get_by_role("link", name=parent.info.run_name)
            parent_link.wait_for(timeout=60_000)
            assert page.get_by_role("link", name="job 0: units 32").count() == 0  # collapsed under the parent

            page.locator("[role=gridcell][col-id='attributes.`Run Name`'] button").first.click()  # expand
            child_links = [page.get_by_role("link", name=name) for name in sorted(children)]
            for link in child_links:
                link.wait_for(timeout=30_000)
            page.screenshot(path=str(SCREENSHOTS / "mlflow_ui_sweep_runs.png"))
            parent_box = parent_link.bounding_box()
            for link in child_links:  # nested: listed below the parent and indented under it
                box = link.bounding_box()
                assert box["y"] > parent_box["y"] and box["x"] > parent_box["x"]
            assert page.get_by_text(f"{len(runs)} matching runs").count() == 1
            # the list shows no metric column until asked: the README's two clicks (Columns, then a metric)
            page.get_by_role("button", name="Columns").first.click()
            page.get_by_text("objective", exact=True).first.wait_for(timeout=30_000)
            page.keyboard.press("Escape")

            child = children["job 1: units 64"]
            child_links[1].click()
            page.get_by_text("Parent run").first.wait_for(timeout=60_000)
            page.get_by_text(f"Parameters ({len(child.data.params)})").wait_for(timeout=30_000)
            page.get_by_role("link", name=parent.info.run_name).wait_for(timeout=30_000)  # fetched after the page
            page.screenshot(path=str(SCREENSHOTS / "mlflow_ui_sweep_job.png"))
            assert page.url.endswith(f"/runs/{child.info.run_id}")
            text = page.inner_text("body")
            assert parent.info.run_name in text  # the parent run link on the job's page
            params = text[text.index("Parameters ("):]
            assert "model.units\n64" in params and "trainer.epochs\n2" in params
            metrics = text[text.index("Metrics ("):text.index("Parameters (")]
            assert f"val_accuracy\n{child.data.metrics['val_accuracy']}" in metrics
            assert f"objective\n{child.data.metrics['objective']}" in metrics
            # MLflow's own fields, filled: who, from what, on which data, which model
            page.get_by_text("Logged models (1)").wait_for(timeout=30_000)  # listed once the page has fetched it
            text = page.inner_text("body")
            assert "Evaluation runs" not in text  # still the training view, as the switch was left
            about = text[text.index("About this run"):]
            assert f"Created by\n{child.data.tags['mlflow.user']}" in about
            assert f"Source\n{child.data.tags['mlflow.source.name']}" in about
            train = next(i.dataset for i in child.inputs.dataset_inputs if i.tags[0].value == "training")
            assert f"Datasets\n{train.name} ({train.digest})\nTraining" in about
            assert "Logged models (1)" in text and "Ready" in text
            assert "System metrics (" in metrics and "system/cpu_utilization_percentage" in metrics

            page.get_by_role("tab", name="System metrics").click()  # the charts MLflow's monitor fills
            page.get_by_text("system_memory_usage_megabytes").first.wait_for(timeout=30_000)
            page.screenshot(path=str(SCREENSHOTS / "mlflow_ui_system_metrics.png"))
            assert page.get_by_text("cpu_utilization_percentage").count() >= 1

            # the parent's page: who made the sweep, what it swept, and what it is
            page.goto(f"{base}/#/experiments/{parent.info.experiment_id}/runs/{parent.info.run_id}")
            page.get_by_text("About this run").first.wait_for(timeout=60_000)
            page.get_by_text("Parameters (1)").wait_for(timeout=30_000)
            page.screenshot(path=str(SCREENSHOTS / "mlflow_ui_sweep_parent.png"))
            text = page.inner_text("body")
            about = text[text.index("About this run"):]
            assert f"Created by\n{parent.data.tags['mlflow.user']}" in about, about[:2000]
            assert "space.model.units\n32,64" in text, text[:4000]
            assert "Grid sweep of 2 jobs over model.units" in text, text[:4000]  # its description
        finally:
            browser.close()
