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
import io
import os
import re
import time
import tokenize
from pathlib import Path

import nbformat
import pytest
from _processes import wait_until_gone
from nbclient import NotebookClient

HERE = os.path.join(os.path.dirname(__file__), "..", "notebooks")
ROOT = os.path.join(HERE, "..")
EXECUTED = os.path.join(ROOT, "build", "jupyter_execute")  # where the docs build keeps what it ran
ENGLISH = sorted(glob.glob(os.path.join(HERE, "*.ipynb")))
CHINESE = sorted(glob.glob(os.path.join(HERE, "zh", "*.ipynb")))
NOTEBOOKS = ENGLISH + CHINESE


def execute(nb: nbformat.NotebookNode, cwd: str, timeout: int = 300) -> nbformat.NotebookNode:
    """Run ``nb`` in place; a cell still running after ``timeout`` s is interrupted, as the docs
    build does (docs/conf.py), so that its error says where it was."""
    NotebookClient(nb, timeout=timeout, kernel_name="python3", interrupt_on_timeout=True,
                   resources={"metadata": {"path": cwd}}).execute()
    return nb


def outputs_text(nb: nbformat.NotebookNode) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", "") or out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


@pytest.mark.timeout(600)
@pytest.mark.site
@pytest.mark.parametrize("path", [
    pytest.param(path, id=os.path.relpath(path, HERE),
                 marks=[pytest.mark.quick] if path == ENGLISH[0] else [])  # the first tutorial: `make test-quick`
    for path in NOTEBOOKS])
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
    if chinese:  # matplotlib warns of each glyph its font lacks: a Chinese label drawn as boxes
        said = "".join(out.get("text", "") for c in nb.cells for out in c.get("outputs", [])
                       if out.get("name") == "stderr")
        assert "missing from font" not in said and "need a font with Chinese" not in said, said[-500:]
    # Each exercise's stub is not written yet: its check says so, in the notebook's language.
    checks = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("mpinb.check(")]
    said = [o.get("data", {}).get("text/plain", "") for c in checks for o in c.get("outputs", [])]
    assert checks and said and all(("还没有写" if chinese else "is not written yet") in text for text in said), said
    assert not wait_until_gone(10, existing_pools), "the notebook's pool must be gone once its kernel has shut down"
    if os.path.basename(path).startswith("00-"):
        assert_readable_without_widgets(nb, chinese)


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


# Translationese a reader found (issue 30), and the terms the glossary (术语表.md) replaces them with.
REJECTED_CHINESE = {"光环": "晕环", "挂出": "发起", "孪生兄弟": "非阻塞版本", "每个数字取 5 次": "重复 5 次",
                    "在该阶段于其他副本中的拷贝上求和": "与同一阶段的其他副本求和",
                    "把每个副本都在重复的东西分片": "把每个副本重复保存的东西分片"}


@pytest.mark.unit
def test_the_chinese_text_keeps_to_the_glossarys_terms():
    """Nowhere Chinese is shown (tutorials, glossary, mpinb's messages, diagrams) uses a rejected phrase."""
    places = [*CHINESE, *glob.glob(os.path.join(HERE, "zh", "*.md")),
              *glob.glob(os.path.join(HERE, "zh", "figures", "*")), os.path.join(ROOT, "mpinb", "_zh.py")]
    found = [(os.path.relpath(path, ROOT), phrase) for path in places for phrase in REJECTED_CHINESE
             if phrase in Path(path).read_text(encoding="utf-8")]
    assert not found, [f"{path}: {phrase} (write {REJECTED_CHINESE[phrase]})" for path, phrase in found]


@pytest.mark.unit
def test_every_tutorial_has_a_chinese_twin_with_the_same_code():
    """The translations cannot drift: same cells in the same order, the same code (its comments and
    its display text aside, which the Chinese twin may translate), prose in Chinese."""
    assert [os.path.basename(p) for p in CHINESE] == [os.path.basename(p) for p in ENGLISH]
    for english, chinese in zip(ENGLISH, CHINESE):
        en, zh = nbformat.read(english, as_version=4), nbformat.read(chinese, as_version=4)
        name = os.path.basename(english)
        assert [c.cell_type for c in zh.cells] == [c.cell_type for c in en.cells], name
        for i, (a, b) in enumerate(zip(en.cells, zh.cells)):
            if a.cell_type == "code":
                assert b.get("metadata", {}) == a.get("metadata", {}), f"{name} cell {i}"
                assert code_without_its_text(b.source) == code_without_its_text(a.source, like=b.source), \
                    f"{name} cell {i}: the code differs, not only its comments and display text"
            else:
                assert chinese_in(b.source), f"{name} cell {i} is not translated"


def chinese_in(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def code_without_its_text(source: str, like: str | None = None) -> list[str]:
    """The tokens of a cell without its comments, and with each string that the Chinese twin
    translates (``like``: its string tokens that hold Chinese, at the same places) reduced to the
    replacement fields it formats (in any order: a translation may reorder them), so that only
    code can differ."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
              if t.type not in (tokenize.COMMENT, tokenize.NL)]
    if like is None:
        translated = [t.type == tokenize.STRING and chinese_in(t.string) for t in tokens]
    else:
        twins = [t for t in tokenize.generate_tokens(io.StringIO(like).readline)
                 if t.type not in (tokenize.COMMENT, tokenize.NL)]
        translated = [t.type == tokenize.STRING and chinese_in(t.string) for t in twins]
        translated += [False] * (len(tokens) - len(translated))
    return [f"text {sorted(re.findall(r'{[^{}]*}', t.string))}" if display and t.type == tokenize.STRING else t.string
            for t, display in zip(tokens, translated)]


GOALS = {"en": ("> **What you will be able to do**", "> **Prerequisites:**"),
         "zh": ("> **学完本篇，你将能够：**", "> **先修：**")}
TAKEAWAYS = {"en": "## Takeaways", "zh": "## 要点回顾"}


@pytest.mark.unit
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.relpath(p, HERE) for p in NOTEBOOKS])
def test_every_tutorial_opens_with_its_goals_and_ends_with_its_takeaways(path):
    """A learner sees first what the notebook will teach and what it assumes, and last what to keep."""
    cells = nbformat.read(path, as_version=4).cells
    language = "zh" if path in CHINESE else "en"
    goals, needs = GOALS[language]
    assert cells[0].source.startswith("# "), "the title comes first"
    box = cells[1]
    assert box.cell_type == "markdown" and box.source.startswith(goals) and needs in box.source, \
        f"the second cell is the goals box: {goals} ... {needs}"
    assert box.source.count("\n> - ") >= 2, "at least two goals"
    last = cells[-1]
    assert last.cell_type == "markdown" and last.source.startswith(TAKEAWAYS[language]), "the last cell sums up"
    assert last.source.count("\n- ") >= 2, "at least two takeaways"


def assert_readable_without_widgets(nb: nbformat.NotebookNode, chinese: bool) -> None:
    """nbclient/nbconvert keep no widget state: each view must carry its own text and HTML."""
    assert f"[2] rank 2 {'收到' if chinese else 'received'} [1, 1, 1, 1, 1]" in outputs_text(nb)
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


@pytest.mark.timeout(120)
def test_the_docs_build_interrupts_a_hung_cell_and_says_where_the_ranks_wait(tmp_path, existing_pools,
                                                                           monkeypatch):
    """A tutorial cell that hangs while the site is built is interrupted at the timeout, so the
    build fails with mpinb's account of the hang (the wait-for cycle), not a bare timeout."""
    import importlib.util

    from jupyter_cache.executors import utils
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setattr(utils, "executenb", utils.executenb)  # (conf.py's wrapping, undone after)
    spec = importlib.util.spec_from_file_location("docs_conf", os.path.join(ROOT, "docs", "conf.py"))
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # (it wraps the executor MyST-NB calls)
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("%load_ext mpinb"),
        nbformat.v4.new_code_cell("%%mpi -n 2\ncomm.recv(source=1 - rank)"),
    ])
    began = time.monotonic()
    result = utils.single_nb_execution(nb, cwd=str(tmp_path), timeout=15, allow_errors=False)
    assert isinstance(result.err, CellExecutionError), result.exc_string
    assert "0 -> 1 -> 0" in str(result.err), str(result.err)
    assert time.monotonic() - began < 60
    assert not wait_until_gone(10, existing_pools)


@pytest.mark.unit
def test_the_twin_check_sets_aside_comments_and_translated_text_but_not_code():
    en = 'x = 1  # one\nprint(f"rank {rank} got {x}")\nplt.title("loss")\nkey = "loss"\n'
    zh = 'x = 1  # 一\n# 另一行注释\nprint(f"rank {rank} 收到 {x}")\nplt.title("损失")\nkey = "loss"\n'
    assert code_without_its_text(zh) == code_without_its_text(en, like=zh)
    assert code_without_its_text(zh.replace("x = 1", "x = 2")) != code_without_its_text(en, like=zh)
    assert code_without_its_text(zh.replace("{x}", "{y}")) != code_without_its_text(en, like=zh)
    assert code_without_its_text(zh.replace('key = "loss"', 'key = "lost"')) != code_without_its_text(en, like=zh)


IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)]+)\)")


@pytest.mark.unit
def test_the_diagrams_are_drawn_by_their_script_and_shown_in_both_languages():
    """Every picture a tutorial shows is a local SVG that docs/draw_figures.py draws (so the two
    languages cannot drift), with no external reference (learners may be offline), and each
    English picture has its Chinese twin, in Chinese, at the same place."""
    import importlib.util
    import xml.etree.ElementTree as ElementTree

    spec = importlib.util.spec_from_file_location("draw_figures", os.path.join(ROOT, "docs", "draw_figures.py"))
    draw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(draw)
    for path, content in draw.drawn().items():
        with open(path, encoding="utf-8") as handle:
            assert handle.read() == content, f"{path} is not what docs/draw_figures.py draws: run it"
        root = ElementTree.fromstring(content)
        assert root.tag.endswith("svg") and "http" not in content.replace("http://www.w3.org/2000/svg", "")
        if os.sep + "zh" + os.sep in str(path):
            assert chinese_in("".join(root.itertext())), f"{path} is not in Chinese"
    shown = 0
    for english, chinese in zip(ENGLISH, CHINESE):
        en, zh = nbformat.read(english, as_version=4), nbformat.read(chinese, as_version=4)
        for a, b in zip(en.cells, zh.cells):
            pictures, twins = IMAGE.findall(a.source), IMAGE.findall(b.source)
            assert [target for _, target in pictures] == [target for _, target in twins], english
            for (alt, target), (zh_alt, _) in zip(pictures, twins):
                assert alt and chinese_in(zh_alt), f"{target}: say in words what the picture shows"
                assert os.path.isfile(os.path.join(HERE, target)) and os.path.isfile(os.path.join(HERE, "zh", target))
                shown += 1
    assert shown >= 4
