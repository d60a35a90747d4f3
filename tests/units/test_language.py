"""What mpinb says (mpinb/_language.py, _zh.py): how its language is chosen, and each sentence has its Chinese."""

from __future__ import annotations

import pytest

from mpinb.common._protocol import wait_state
from mpinb.pool import RankFailure, RunResult
from mpinb.pool._hang import diagnose

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


def _send(peer: int, line: int = 2):
    return wait_state("send", "send", ("<mpi-cell-1>", line), comm="world", members=[0, 1, 2, 3], peer=peer,
                      nbytes=4_000_000, tag=0)


# -- the language of what mpinb says ---------------------------------------------------------------

@pytest.fixture
def automatic_language(monkeypatch):
    """No explicit choice and none in the environment: the notebook's folder and the locale decide."""
    from mpinb import _language

    monkeypatch.setattr(_language, "_chosen", None)
    for variable in ("MPINB_LANGUAGE", "JPY_SESSION_NAME", "LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(variable, raising=False)
    return _language


def test_the_language_follows_the_choice_the_notebooks_folder_and_the_locale(automatic_language, monkeypatch,
                                                                             tmp_path_factory):
    lang = automatic_language
    assert lang.language() == "en"
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert lang.language() == "zh"
    monkeypatch.setenv("LANG", "C.UTF-8")
    assert lang.language() == "en"
    monkeypatch.setenv("JPY_SESSION_NAME", "tutorials/notebooks/zh/01-point-to-point.ipynb")
    assert lang.language() == "zh", "a notebook in a zh folder"
    monkeypatch.setenv("JPY_SESSION_NAME", "zh.ipynb")
    assert lang.language() == "en", "only folders count, not the notebook's own name"
    monkeypatch.delenv("JPY_SESSION_NAME")
    zh_folder = tmp_path_factory.mktemp("x") / "zh"
    zh_folder.mkdir()
    monkeypatch.chdir(zh_folder)
    assert lang.language() == "zh", "a kernel started in its notebook's zh folder"
    monkeypatch.setenv("JPY_SESSION_NAME", "notebooks/en/a.ipynb")
    assert lang.language() == "en", "the notebook's path, when known, decides"
    monkeypatch.setenv("MPINB_LANGUAGE", "en")
    monkeypatch.setenv("JPY_SESSION_NAME", "notebooks/zh/x.ipynb")
    assert lang.language() == "en"
    lang.set_language("zh-Hans")
    assert lang.language() == "zh" and lang.say("any rank") == "任意 rank"
    assert lang.say("{ranks} raised {error}", ranks="rank 1", error="ValueError") == "rank 1 引发了 ValueError"
    assert lang.say("a sentence nobody translated") == "a sentence nobody translated"
    with pytest.raises(ValueError, match="mpinb speaks 'en' and 'zh', not 'fr'"):
        lang.set_language("fr")
    lang.set_language(None)
    assert lang.language() == "en"


def test_every_word_the_trace_view_says_is_sent_in_the_notebooks_language():
    """trace.js says its words through say("..."): each is one of trace.py's VIEW_WORDS (which go
    to the browser translated), or the view would stay English in a Chinese notebook."""
    import pathlib
    import re

    from mpinb.widgets import trace

    module = pathlib.Path(trace.__file__).with_name("trace.js").read_text()
    said = set(re.findall(r'say\("((?:[^"\\]|\\.)*)"', module))  # say("...") itself
    said |= set(re.findall(r'key\("[^"]*", "([^"]*)"', module))  # the legend's keys
    said |= set(re.findall(r'(?:text|choice|check)\("show_\w+", "([^"]*)"', module))  # the filters' labels
    said |= set(re.findall(r'\["\w+", "([^"]*)"\]', module))  # the tabs
    header = re.search(r'for \(const label of \[([^\]]*)\]', module)  # the summary's columns
    assert header is not None, "the summary's columns are said in a loop over their labels"
    said |= set(re.findall(r'"([^"]*)"', header.group(1)))
    said = {word.encode().decode("unicode_escape") for word in said}
    assert len(said) > 30
    unknown = sorted(said - set(trace.VIEW_WORDS))
    assert not unknown, f"trace.js says these, which VIEW_WORDS lacks: {unknown}"
    zh = trace.TraceView.__init__.__globals__["say"]
    from mpinb._language import set_language

    set_language("zh")
    try:
        assert zh("{count} MPI calls", count=3) == "3 次 MPI 调用"
    finally:
        set_language(None)


def test_every_sentence_mpinb_says_has_its_chinese(monkeypatch):
    """Each template given to say() (and each plain hint of the exercises) is in the catalog, with
    the same fields: a sentence added in English only would fall back silently otherwise."""
    import ast
    import pathlib
    import string

    import mpinb
    from mpinb._zh import ZH

    root = pathlib.Path(mpinb.__file__).parent
    said = []
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "say" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant):
                    said.append(first.value)
            if path.name == "_exercises.py" and isinstance(node, ast.Return) and isinstance(node.value, ast.List):
                said += [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if isinstance(node, ast.keyword) and node.arg == "hang_hint":
                said.append(node.value.value)
    from mpinb.pool import _hang
    from mpinb.widgets.trace import VIEW_WORDS

    said += [_hang.SYNCHRONOUS_SENDS, _hang.USUAL_FIXES, _hang.WINDOW_FIXES, *_hang.FIXES.values(), *VIEW_WORDS]
    assert len(said) > 60
    missing = sorted({s for s in said if s not in ZH})
    assert not missing, missing
    fields = lambda text: {f for _, f, _, _ in string.Formatter().parse(text) if f}
    assert all(fields(english) == fields(chinese) for english, chinese in ZH.items())


def test_a_deadlock_and_a_failed_run_are_told_in_chinese(automatic_language):
    automatic_language.set_language("zh")
    try:
        text = diagnose({r: _send((r + 1) % 4) for r in range(4)}, finished=[], idle=[]).text()
        assert text.startswith("死锁：") and "等待环：0 -> 1 -> 2 -> 3 -> 0" in text
        assert "rank 0: send 发往 rank 1 (tag 0, 3.8 MB)，第 2 行" in text and "常见修复" in text
        result = RunResult(ranks=[0, 1])
        result.errors[1] = RankFailure(type="ValueError", message="bad", traceback="", line=3)
        from mpinb.errors import RankError

        assert str(RankError(result)) == "rank 1 引发了 ValueError: bad (line 3)；rank 0 正常结束"
    finally:
        automatic_language.set_language(None)
