"""The tutorials run top to bottom headless (they assert their own results), and kernels clean up."""

from __future__ import annotations

import glob
import os

import nbformat
import pytest
from conftest import wait_until_gone
from nbclient import NotebookClient

NOTEBOOKS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "notebooks", "*.ipynb")))


def execute(nb: nbformat.NotebookNode, cwd: str, timeout: int = 300) -> nbformat.NotebookNode:
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": cwd}}).execute()
    return nb


def outputs_text(nb: nbformat.NotebookNode) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", "") or out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_tutorial_runs_and_checks_itself(path, tmp_path, existing_pools):
    nb = nbformat.read(path, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit notebooks cleared"
    execute(nb, str(tmp_path))
    assert not wait_until_gone(10, existing_pools), "the notebook's pool must be gone once its kernel has shut down"
    if os.path.basename(path).startswith("00-"):
        assert_readable_without_widgets(nb)


def assert_readable_without_widgets(nb: nbformat.NotebookNode) -> None:
    """nbclient/nbconvert keep no widget state: each view must carry its own text and HTML."""
    assert "[2] rank 2 received [1, 1, 1, 1, 1]" in outputs_text(nb)
    widget_outputs = [
        out for cell in nb.cells for out in cell.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in out.get("data", {})
    ]
    assert widget_outputs and all("text/html" in out["data"] for out in widget_outputs)
    pictures = [out for out in widget_outputs if "<svg" in out["data"]["text/html"]]
    assert pictures, "traced cells keep a static space-time diagram"


def test_kernel_shutdown_stops_a_pool_left_running(tmp_path, existing_pools):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("%load_ext mpinb"),
        nbformat.v4.new_code_cell("%%mpi -n 2\nprint(rank)"),
    ])
    execute(nb, str(tmp_path), timeout=120)
    assert "[1] 1" in outputs_text(nb)
    assert not wait_until_gone(10, existing_pools)
