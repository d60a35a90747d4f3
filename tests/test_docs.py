"""The documentation site, as a reader meets it: served from build/docs (``make docs``, which
``make test`` runs first), opened in a real chromium that may fetch nothing from outside."""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest
from browser import CHROMIUM, CHROMIUM_FLAGS

pytestmark = [pytest.mark.site, pytest.mark.browser]

ROOT = os.path.join(os.path.dirname(__file__), "..")
SITE = os.path.join(ROOT, "build", "docs")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """The built site on a localhost port (built here if ``make docs`` has not run)."""
    if not os.path.exists(os.path.join(SITE, "index.html")):
        # As `make test` builds it: English by default, Chinese in notebooks/zh/ (not this session's
        # pinned English), every tutorial verified (tests/test_notebooks.py reads the copies it runs).
        env = {k: v for k, v in os.environ.items() if k != "MPINB_LANGUAGE"} | {"LC_ALL": "C.UTF-8",
                                                                               "MPINB_VERIFY": "1"}
        subprocess.run([sys.executable, "-m", "sphinx", "-q", "-c", "docs", "-b", "html", "--keep-going", ".",
                        SITE], cwd=ROOT, check=True, timeout=1500, env=env)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=SITE))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.timeout(1800)
def test_the_site_shows_the_guide_the_tutorials_with_their_results_and_the_api(site, artifacts):
    from playwright.sync_api import sync_playwright

    outside: list[str] = []
    with sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})

            def only_this_site(route):
                if urlparse(route.request.url).hostname not in ("127.0.0.1", None):
                    outside.append(route.request.url)
                    route.abort()
                else:
                    route.continue_()

            page.route("**/*", only_this_site)
            page.goto(f"{site}/index.html")
            page.wait_for_url("**/docs/index.html")
            assert "mpinb" in page.title()
            assert page.locator("text=make lab").first.is_visible(), "the quickstart, from the README"

            page.locator(".sidebar-tree a", has_text="Measuring performance").first.click()
            page.wait_for_load_state()
            assert page.url.endswith("notebooks/06-performance.html")
            plots = page.locator("article img[src*='_images']")
            assert plots.count() >= 3, "the executed notebook's plots are on the page"
            plots.first.scroll_into_view_if_needed()
            assert plots.first.evaluate("img => img.complete && img.naturalWidth > 100")
            diagram = page.locator("article .mpinb-trace svg").first
            diagram.scroll_into_view_if_needed()
            assert diagram.is_visible(), "the space-time view as its static picture"
            assert page.locator("article .mpinb-trace svg rect").count() > 10
            assert "waited" in page.locator("article").inner_text(), "the wait states, in words"
            assert "is not written yet" in page.locator("article").inner_text(), "feedback in English here"
            page.screenshot(path=os.path.join(artifacts, "docs-performance.png"))

            page.locator(".sidebar-tree a", has_text="死锁与发送模式").first.click()
            page.wait_for_load_state()
            assert page.url.endswith("notebooks/zh/01b-deadlocks-and-send-modes.html")
            assert "eager 阈值" in page.locator("article").inner_text(), "the Chinese tutorial's prose"
            assert "还没有写" in page.locator("article").inner_text(), "its check speaks Chinese too"
            picture = page.locator("article img[src*='eager-rendezvous']").first
            picture.scroll_into_view_if_needed()
            assert picture.evaluate("img => img.complete && img.naturalWidth > 300"), "the diagram, drawn"
            assert "发送方" in page.request.get(picture.evaluate("img => img.src")).text(), "the Chinese diagram"
            plot = page.locator("article img[src*='_images'][src$='.png']").first
            plot.scroll_into_view_if_needed()
            page.screenshot(path=os.path.join(artifacts, "docs-zh-plot.png"))

            page.locator(".sidebar-tree a", has_text="单边通信").first.click()
            page.wait_for_load_state()
            assert page.url.endswith("notebooks/zh/13-one-sided.html"), "the new tutorials are on the site"
            assert "每个 rank 的任务数" in page.locator("article").inner_text(), "executed, printing in Chinese"

            page.locator(".sidebar-tree a", has_text="Python API").first.click()
            page.wait_for_load_state()
            pool, progress = page.locator("dt[id='mpinb.Pool']"), page.locator("dt[id='mpinb.progress']")
            assert pool.count() == 1 and progress.count() == 1
            assert "trace_budget" in pool.inner_text()
        finally:
            browser.close()
    assert outside == [], "the site must work offline: nothing from a CDN"
