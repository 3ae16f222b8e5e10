"""The MLflow UI as a user sees it: a real sweep, a real `mlflow server`, headless Chromium.

Runs a two-job sweep, starts `mlflow server` on 127.0.0.1 (~20 s to come up here), opens the
experiment's runs page (in MLflow 3's Model training view) in Debian's chromium driven by
Playwright, and checks that the sweep's parent run is listed, that expanding it shows both jobs
nested under it (indented), and that a job's page shows its parent, params and metrics, the
fields MLflow fills from its own conventions (Created by, Source, Datasets with their digests,
Logged models) and its system metrics. Screenshots go to test-artifacts/ in the repo.

Needs /usr/bin/chromium (`apt-get install -y chromium`; `.ci/run` installs it). Without it the
test is skipped, except where TFX_HYDRA_REQUIRE_BROWSER=1 (CI) makes that a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, cli_env, free_ports, mlflow_runs, run_cli, wait_for_http

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = REPO / "test-artifacts"


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


@pytest.fixture
def sweep_on_a_server(tmp_path):
    require_browser()
    done = run_cli(["model.units=32,64", "trainer.epochs=1", "data.limit=200", "export=none",
                    "tracking.system_metrics.interval=1"], cwd=tmp_path, multirun=True)  # the MLflow model: kept
    assert done.returncode == 0, done.stderr[-3000:]
    (port,) = free_ports(1)
    mlflow = Path(sys.executable).parent / "mlflow"
    server = subprocess.Popen([str(mlflow), "server", "--backend-store-uri", f"sqlite:///{tmp_path}/mlflow.db",
                               "--host", "127.0.0.1", "--port", str(port)], cwd=tmp_path, env=cli_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{base}/health", server, timeout=120, what="mlflow server")
        yield base, mlflow_runs(tmp_path)
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server's workers share its process group
        server.wait(timeout=30)


def test_the_sweep_is_nested_in_the_mlflow_ui_and_a_job_shows_params_and_metrics(sweep_on_a_server):
    from playwright.sync_api import sync_playwright

    base, runs = sweep_on_a_server
    (parent,) = [r for r in runs if "sweep.dir" in r.data.tags]
    children = {r.info.run_name: r for r in runs if r is not parent}
    assert set(children) == {"0: model.units=32", "1: model.units=64"}
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
            assert page.get_by_role("link", name="0: model.units=32").count() == 0  # collapsed under the parent

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

            child = children["1: model.units=64"]
            child_links[1].click()
            page.get_by_text("Parent run").first.wait_for(timeout=60_000)
            page.get_by_text(f"Parameters ({len(child.data.params)})").wait_for(timeout=30_000)
            page.get_by_role("link", name=parent.info.run_name).wait_for(timeout=30_000)  # fetched after the page
            page.screenshot(path=str(SCREENSHOTS / "mlflow_ui_sweep_job.png"))
            assert page.url.endswith(f"/runs/{child.info.run_id}")
            text = page.inner_text("body")
            assert parent.info.run_name in text  # the parent run link on the job's page
            params = text[text.index("Parameters ("):]
            assert "model.units\n64" in params and "trainer.epochs\n1" in params
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
        finally:
            browser.close()
