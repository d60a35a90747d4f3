"""A real JupyterLab served on localhost and driven by Debian's chromium through Playwright."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import nbformat

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
# No news toast, no "what's new" dialog: nothing may cover the notebook.
SETTINGS = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
}


def write_notebook(path: str, sources: list[str]) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def jupyterlab(root: str) -> Iterator[str]:
    """Serve JupyterLab on ``root``; yield the base URL with its token query."""
    port, token = _free_port(), secrets.token_hex(16)
    settings = os.path.join(root, ".settings")
    os.makedirs(settings, exist_ok=True)
    with open(os.path.join(settings, "overrides.json"), "w") as handle:
        json.dump(SETTINGS, handle)
    log = open(os.path.join(root, "jupyterlab.log"), "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         f"--LabApp.app_settings_dir={settings}", "--LabApp.news_url=None", "--allow-root"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("JupyterLab did not start") from None
                time.sleep(0.2)
        yield f"{base}|{token}"
    finally:
        server.terminate()  # shuts its kernels down, which stops their pools
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@contextmanager
def page_on(server: str, notebook: str):
    """A chromium page with ``notebook`` open in JupyterLab."""
    from playwright.sync_api import sync_playwright

    base, token = server.split("|")
    with sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{base}/lab/tree/{notebook}?token={token}&reset")
            page.wait_for_selector(".jp-Notebook", timeout=60_000)
            # The toolbar says "idle" even before a kernel exists; the status bar waits for it.
            page.wait_for_selector(".jp-StatusBar-Widget:has-text('| Idle')", timeout=60_000)
            yield page
        finally:
            browser.close()


def run_all(page) -> None:
    """Run every cell through the Run menu, as a person would."""
    page.click(".lm-MenuBar-itemLabel:text-is('Run')", timeout=10_000)
    page.click('li[data-command="runmenu:run-all"]', timeout=10_000)
