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


# JupyterLab (the default) and Jupyter Notebook 7: the same widgets must work in both.
APPS = {"lab": ("jupyterlab", "LabApp", "lab/tree"), "notebook": ("notebook", "JupyterNotebookApp", "notebooks")}


@contextmanager
def jupyterlab(root: str, app: str = "lab", theme: str = "JupyterLab Light") -> Iterator[str]:
    """Serve JupyterLab (or Notebook 7: ``app="notebook"``) on ``root`` in ``theme``; yield the
    base URL with its token query and the app."""
    module, app_class, _ = APPS[app]
    port, token = _free_port(), secrets.token_hex(16)
    settings = os.path.join(root, ".settings")
    os.makedirs(settings, exist_ok=True)
    with open(os.path.join(settings, "overrides.json"), "w") as handle:
        json.dump({**SETTINGS, "@jupyterlab/apputils-extension:themes": {"theme": theme}}, handle)
    log = open(os.path.join(root, f"{module}.log"), "w")
    # Kernels write their debugger's copies of cells to $TMPDIR/ipykernel_<pid>, and leave them:
    # inside the test's folder, they go with it.
    temporary = os.path.join(root, ".tmp")
    os.makedirs(temporary, exist_ok=True)
    server = subprocess.Popen(
        [sys.executable, "-m", module, "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         # (Notebook 7 reads its settings through JupyterLab's server extension, LabApp, too)
         f"--LabApp.app_settings_dir={settings}",
         *(["--LabApp.news_url=None"] if app == "lab" else [f"--{app_class}.app_settings_dir={settings}"]),
         "--allow-root"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, "TMPDIR": temporary},
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
                    raise RuntimeError(f"{module} did not start") from None
                time.sleep(0.2)
        yield f"{base}|{token}|{app}"
    except BaseException:
        # what the server and its kernels logged goes into the test's report: a failure in CI
        # is read there, without the machine
        log.flush()
        with open(log.name, errors="replace") as handle:
            print(f"--- the last lines of {module}'s log ---\n", *handle.readlines()[-60:], sep="", end="")
        raise
    finally:
        server.terminate()  # shuts its kernels down, which stops their pools
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@contextmanager
def page_on(server: str, notebook: str):
    """A chromium page with ``notebook`` open in JupyterLab (or Notebook 7)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    base, token, app = server.split("|")
    with sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{base}/{APPS[app][2]}/{notebook}?token={token}&reset")
            page.wait_for_selector(".jp-Notebook", timeout=60_000)
            # The toolbar says "idle" even before a kernel exists; JupyterLab's status bar (Notebook
            # 7's kernel indicator) waits for it.
            idle = (".jp-StatusBar-Widget:has-text('| Idle')" if app == "lab"
                    else "[data-status='idle']")
            try:
                page.wait_for_selector(idle, timeout=60_000, state="attached")
                connected = _kernel_connected(base, token, 90)
            except PlaywrightTimeout:
                # seen once beside two other stages: the kernel started and its websocket connected
                # within 2 s, but JupyterLab's status bar never said Idle
                connected = False
            if not connected:
                # On a loaded machine Notebook 7 may start a second kernel for the page, stop the
                # first while it imports, and stay connected to the stopped one: its cells would
                # then never run. A person reloads the page; so does the test (once).
                print("mpinb tests: the page's kernel never answered; reloading the page")
                page.reload()
                page.wait_for_selector(idle, timeout=60_000, state="attached")
                assert _kernel_connected(base, token, 90), "the notebook's kernel never became idle, connected"
            try:
                yield page
            except BaseException:
                print("--- the notebook's cells as the page showed them ---")
                print(_cells_as_shown(page))
                raise
        finally:
            browser.close()


def _kernel_connected(base: str, token: str, seconds: float) -> bool:
    """Whether, within ``seconds``, the server has a kernel that is idle with a page connected."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=5) as answer:
                kernels = json.load(answer)
        except OSError:
            kernels = []
        if any(k.get("execution_state") == "idle" and k.get("connections", 0) >= 1 for k in kernels):
            return True
        time.sleep(0.5)
    return False


def _cells_as_shown(page) -> str:
    """Each code cell's prompt, first line and output text, as the page shows them now."""
    try:
        return page.evaluate(r"""() => [...document.querySelectorAll('.jp-CodeCell')].map((cell, i) => {
            const prompt = cell.querySelector('.jp-InputPrompt')?.innerText.trim() ?? '';
            const source = (cell.querySelector('.jp-InputArea .cm-line')?.innerText ?? '').slice(0, 60);
            const output = (cell.querySelector('.jp-OutputArea')?.innerText ?? '').trim().slice(-600);
            return `cell ${i} ${prompt} ${source}\n${output}`; }).join('\n')""")
    except Exception as err:  # a closed page: say why it cannot be read
        return f"(the page could not be read: {err})"


def run_all(page) -> None:
    """Run every cell through the Run menu, as a person would."""
    page.click(".lm-MenuBar-itemLabel:text-is('Run')", timeout=10_000)
    page.click('li[data-command="runmenu:run-all"]', timeout=10_000)
