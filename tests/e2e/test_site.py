"""The documentation site as a reader meets it: `mkdocs build --strict` (a broken link, a missing page or a bad
include fails it), served over HTTP as `mkdocs serve` would, opened in Debian's chromium driven by Playwright: the
navigation holds the site's sections, and the search box finds a key (`cache_budget`), a command (`promote`) and
an option (`cv=kfold`) on the pages that explain them. A screenshot goes to test-artifacts/ in the repo.

Needs /usr/bin/chromium and playwright (as the MLflow UI test does); without them the browser part is skipped,
except where TFX_HYDRA_REQUIRE_BROWSER=1 (CI) makes that a failure. The build itself always runs."""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.e2e.test_mlflow_browser import CHROMIUM, SCREENSHOTS, require_browser
from tests.helpers import REPO

pytestmark = pytest.mark.slow

SECTIONS = ["Home", "Getting started", "Tutorials", "How-to guides", "Reference", "Explanation", "Development",
            "Changelog"]
SEARCHED = {"cache_budget": ["Data", "Every key of data"], "promote": ["Exports"],
            "cv=kfold": ["k-fold cross-validation"]}


def build_site(site: Path, source: Path = REPO) -> subprocess.CompletedProcess:
    """`mkdocs build -f <source>/mkdocs.yml`, started from the folder the site goes into: the docs build from
    whatever folder a user is in, the README's and the changelog's parts included."""
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(source / "mkdocs.yml"),
                           "-d", str(site)], cwd=site.parent, capture_output=True, text=True, timeout=300,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    built = build_site(folder)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return folder


def test_the_site_builds_strictly_and_refuses_a_broken_link(site, tmp_path):
    for page in ("index.html", "getting-started/index.html", "how-to/data/index.html", "configuration/index.html",
                 "reference/keys/data/index.html",
                 "explanation/architecture/index.html", "changelog/index.html"):
        assert (site / page).is_file(), page
    assert "Quickstart" in (site / "getting-started" / "index.html").read_text()  # the README's part, included
    assert "The one flow" in (site / "explanation" / "architecture" / "index.html").read_text()
    contracts = (site / "reference" / "extending" / "index.html").read_text()  # from the code's docstrings
    assert "from_pipelines" in contracts and "tf.data pipelines of unbatched" in contracts and "RunResult" in contracts
    source = copy_of_the_site_source(tmp_path / "source")  # never the repo's own docs: other workers build them
    broken = source / "docs" / "how-to" / "kfold.md"
    broken.write_text(broken.read_text() + "\n[a page that moved](no-such-page.md)\n")
    failed = build_site(tmp_path / "broken", source)
    assert failed.returncode != 0 and "no-such-page.md" in failed.stdout + failed.stderr


def copy_of_the_site_source(target: Path) -> Path:
    """What `mkdocs build` reads: its config, the pages, the Markdown files they include and the package whose
    docstrings the reference renders. A copy, so a test that breaks a page never breaks another's build."""
    target.mkdir()
    shutil.copy2(REPO / "mkdocs.yml", target)
    for markdown in REPO.glob("*.md"):
        shutil.copy2(markdown, target)
    ignored = shutil.ignore_patterns("__pycache__", "outputs", "mlruns", "data", "*.keras", "*.csv")
    for folder in ("docs", "tfx_hydra", "bench", "examples"):
        shutil.copytree(REPO / folder, target / folder, ignore=ignored)
    return target


def test_the_site_in_a_browser_navigates_by_section_and_its_search_finds_keys_commands_and_options(site):
    require_browser()
    from playwright.sync_api import sync_playwright

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    SCREENSHOTS.mkdir(exist_ok=True)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(url)
            navigation = page.locator("nav.md-nav--primary").inner_text()
            for section in SECTIONS:
                assert section in navigation, (section, navigation[:2000])
            for query, titles in SEARCHED.items():
                page.goto(url)
                page.locator("input.md-search__input").click()
                page.keyboard.type(query, delay=30)  # as a reader types: the search answers each key
                page.locator(".md-search-result__item").first.wait_for(timeout=15_000)
                found = page.locator(".md-search-result__item h1").all_inner_texts()
                assert set(titles) <= set(found[:4]), (query, found)  # among the first results
                if query == "cache_budget":
                    page.screenshot(path=str(SCREENSHOTS / "docs_site_search.png"))
            page.goto(url + "how-to/search/")
            assert "hparams_search" in page.locator("article").inner_text()
            browser.close()
    finally:
        server.shutdown()
    assert (SCREENSHOTS / "docs_site_search.png").stat().st_size > 10_000
