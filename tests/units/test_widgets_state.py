"""The widgets' Python side (mpinb/widgets/): what the output and progress views hold and send; no browser."""

from __future__ import annotations

import pytest

from mpinb.pool import RunResult

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


def test_the_live_view_is_sent_only_what_is_new(monkeypatch):
    from mpinb.widgets import RankOutput
    from mpinb.widgets import output as output_module

    sent: list[dict] = []
    view = RankOutput([0, 1])
    monkeypatch.setattr(view, "send", lambda content, buffers=None: sent.append(content))
    monkeypatch.setattr(output_module, "_SYNC_INTERVAL", 0.0)
    view.append(0, "stdout", "hello ")
    view.append(1, "stderr", "warning\n")
    view.append(0, "stdout", "world\n")
    assert [m["items"] for m in sent] == [[["text", 0, "stdout", "hello "]], [["text", 1, "stderr", "warning\n"]],
                                          [["text", 0, "stdout", "world\n"]]]
    assert view.stdout == ["", ""], "the whole output is state only at the end"
    view._on_view_message(view, {"type": "snapshot"}, None)  # a view that opens late gets everything
    assert view.stdout == ["hello world\n", ""] and view.stderr == ["", "warning\n"]
    view.append(1, "stdout", "more\n")
    assert sent[-1]["items"] == [["text", 1, "stdout", "more\n"]]
    view.finish(RunResult(ranks=[0, 1], stdout={0: "hello world\n", 1: "more\n"}, stderr={1: "warning\n"}))
    assert view.stdout == ["hello world\n", "more\n"] and view.state == ["ok", "ok"]
    assert view.merged == [[0, "stdout", "hello "], [1, "stderr", "warning\n"], [0, "stdout", "world\n"],
                           [1, "stdout", "more\n"]]


def test_progress_view_lag_time_left_and_saved_text():
    from mpinb.widgets.progress import ProgressView

    view = ProgressView([0, 1, 2, 3])
    state = {"bar": 0, "desc": "fit", "total": 100, "done": False, "ended": False}
    view.update({r: {**state, "n": 50, "elapsed": 1.0} for r in (0, 1, 2)} | {3: {**state, "n": 10, "elapsed": 1.0}})
    assert view.lagging == [3]
    assert "9.0 s" in view.line, "the slowest rank's time left: 90 more at 10 per second"
    assert view.line.startswith("fit:  40%") and view.line.endswith("on 4 ranks")
    view.update({3: {**state, "n": 10, "elapsed": 1.0, "ended": True}})
    assert view.lagging == [], "a rank that left the loop does not lag"
    view.finish()
    assert "left the loop early: rank 3" in view._fallback()[0]
    unknown = ProgressView([0, 1])
    unknown.update({0: {**state, "total": None, "n": 100, "elapsed": 1.0}, 1: {**state, "total": None, "n": 30,
                                                                                 "elapsed": 1.0}})
    assert unknown.lagging == [1] and unknown.line.startswith("fit: 130 [")
    # rank 1 reported 0.3 s before the others, at the same rate: not behind
    stale = ProgressView([0, 1, 2])
    stale.update({0: {**state, "n": 60, "elapsed": 1.2}, 1: {**state, "n": 45, "elapsed": 0.9},
                  2: {**state, "n": 30, "elapsed": 1.2}})
    assert stale.lagging == [2]
