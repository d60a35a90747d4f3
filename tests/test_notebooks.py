"""The tutorials run top to bottom headless (they assert their own results), and kernels clean up.

``make test`` builds the documentation first, which executes every tutorial (MyST-NB, through
nbclient, a cell that raises fails the build); the copies it executed are checked here rather
than running each tutorial a second time, as long as they are newer than the notebook and than
every file of mpinb. Without a fresh copy (pytest run on its own), the tutorial runs here.

Either way every run verifies (``MPINB_VERIFY=1``: ``make test`` builds the site so), and a
correctness finding may show only under a cell tagged ``unsafe-on-purpose``, each of which must
show one: the tutorials teach correct MPI except where they show a bug, and say so there.
"""

from __future__ import annotations

import functools
import glob
import os

import nbformat
import pytest
from conftest import wait_until_gone
from nbclient import NotebookClient

HERE = os.path.join(os.path.dirname(__file__), "..", "notebooks")
ROOT = os.path.join(HERE, "..")
EXECUTED = os.path.join(ROOT, "build", "jupyter_execute")  # where the docs build keeps what it ran
ENGLISH = sorted(glob.glob(os.path.join(HERE, "*.ipynb")))
CHINESE = sorted(glob.glob(os.path.join(HERE, "zh", "*.ipynb")))
NOTEBOOKS = ENGLISH + CHINESE


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
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.relpath(p, HERE) for p in NOTEBOOKS])
def test_tutorial_runs_and_checks_itself(path, tmp_path, existing_pools, monkeypatch):
    nb = nbformat.read(path, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit notebooks cleared"
    chinese = path in CHINESE
    executed = executed_by_the_docs_build(path)
    if executed is not None:
        nb = nbformat.read(executed, as_version=4)
        # (a cell tagged raises-exception shows an error on purpose: a deadlock, a wrong answer)
        errors = [out for c in nb.cells if "raises-exception" not in c.get("metadata", {}).get("tags", [])
                  for out in c.get("outputs", []) if out.get("output_type") == "error"]
        assert not errors, f"the docs build ran it with an error: {errors[0].get('ename')}: {errors[0].get('evalue')}"
        expected = [c for c in nb.cells if "raises-exception" in c.get("metadata", {}).get("tags", [])]
        assert all(any(out.get("output_type") == "error" for out in c.get("outputs", [])) for c in expected), \
            "a cell that must raise did not"
        assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code" and c.source.strip()), \
            "every code cell ran"
    else:
        if chinese:  # as JupyterLab starts its kernel: it names the notebook, whose folder sets the language
            monkeypatch.delenv("MPINB_LANGUAGE")
            monkeypatch.setenv("JPY_SESSION_NAME", os.path.relpath(path, ROOT))
        monkeypatch.setenv("MPINB_VERIFY", "1")
        execute(nb, str(tmp_path))
    assert_findings_only_on_purpose(nb)
    # Each exercise's stub is not written yet: its check says so, in the notebook's language.
    checks = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("mpinb.check(")]
    said = [o.get("data", {}).get("text/plain", "") for c in checks for o in c.get("outputs", [])]
    assert checks and said and all(("还没有写" if chinese else "is not written yet") in text for text in said), said
    assert not wait_until_gone(10, existing_pools), "the notebook's pool must be gone once its kernel has shut down"
    if os.path.basename(path).startswith("00-"):
        assert_readable_without_widgets(nb)


ON_PURPOSE = "unsafe-on-purpose"


def assert_findings_only_on_purpose(nb: nbformat.NotebookNode) -> None:
    """Correctness findings under the cells tagged ``unsafe-on-purpose`` and nowhere else."""
    shown, tagged = [], []
    for number, cell in enumerate(nb.cells, 1):
        if ON_PURPOSE in cell.get("metadata", {}).get("tags", []):
            tagged.append(number)
        if any('class="mpinb-findings"' in str(out.get("data", {}).get("text/html", ""))
               for out in cell.get("outputs", [])):
            shown.append(number)
    assert shown == tagged, (f"findings under cells {shown}, tagged {ON_PURPOSE} {tagged}: "
                             "make the example correct, or tag the cell that shows a bug on purpose")


def executed_by_the_docs_build(path: str) -> str | None:
    """The docs build's executed copy of the tutorial at ``path``, if it is newer than the
    tutorial and than every file of mpinb (else it may show what older code did)."""
    copy = os.path.join(EXECUTED, os.path.relpath(path, ROOT))
    if not os.path.exists(copy):
        return None
    newest = max(os.path.getmtime(path), _newest_in_mpinb())
    return copy if os.path.getmtime(copy) > newest else None


@functools.cache
def _newest_in_mpinb() -> float:
    """When mpinb's code last changed (once per test session, not once per tutorial)."""
    return max(os.path.getmtime(os.path.join(folder, name)) for folder, _, names in os.walk(os.path.join(ROOT, "mpinb"))
               for name in names if not name.endswith(".pyc"))


def test_every_tutorial_has_a_chinese_twin_with_the_same_code():
    """The translations cannot drift: same cells in the same order, code identical, prose in Chinese."""
    assert [os.path.basename(p) for p in CHINESE] == [os.path.basename(p) for p in ENGLISH]
    for english, chinese in zip(ENGLISH, CHINESE):
        en, zh = nbformat.read(english, as_version=4), nbformat.read(chinese, as_version=4)
        name = os.path.basename(english)
        assert [c.cell_type for c in zh.cells] == [c.cell_type for c in en.cells], name
        for i, (a, b) in enumerate(zip(en.cells, zh.cells)):
            if a.cell_type == "code":
                assert b.source == a.source and b.get("metadata", {}) == a.get("metadata", {}), f"{name} cell {i}"
            else:
                assert any("\u4e00" <= ch <= "\u9fff" for ch in b.source), f"{name} cell {i} is not translated"


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
