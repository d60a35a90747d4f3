"""mpinb.progress on real pools and under plain mpiexec: what the notebook gets, how often, and
what a headless run or a terminal shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import mpinb
from mpinb.common import _progress
from mpinb.pool._launch import plain_mpiexec
from mpinb.widgets.progress import ProgressBars, ProgressView

SCRIPTS = os.path.join(os.path.dirname(__file__), "scripts")


def run_with_bars(pool, code: str, **kwargs):
    """Run ``code``; return the result, the bars' views and each rank's states as they arrived."""
    bars = ProgressBars(pool.ranks(kwargs.get("targets")))
    arrived: list[dict] = []

    def on_output(rank, kind, data):
        if kind == "progress":
            arrived.append(data)
            bars.update(data)

    result = pool.run(code, on_output=on_output, **kwargs)
    bars.finish()
    return result, [view for view, _ in bars.views.values()], arrived


def test_one_bar_gathers_every_ranks_count(pool4):
    result, (view,), _ = run_with_bars(
        pool4, "import time, mpinb\nfor i in mpinb.progress(range(12), desc='steps'):\n    time.sleep(0.02)\n")
    assert not result.errors
    assert view.counts == [12] * 4 and view.done == view.ended == [True] * 4
    assert view.total == 12 and view.desc == "steps"
    text, page = view._fallback()
    assert text.startswith("steps: 100%") and "48/48" in text and "on 4 ranks" in text and "<pre" in page


def test_a_slow_rank_is_said_to_lag(pool4):
    _, (view,), arrived = run_with_bars(
        pool4, "import time, mpinb\nfor i in mpinb.progress(range(30)):\n    time.sleep(0.06 if rank == 2 else 0.01)\n")
    lagging_seen = []
    check = ProgressView([0, 1, 2, 3])
    for moved in arrived:
        check.update(moved["mpinb_progress:0"])
        lagging_seen.append(list(check.lagging))
    assert [2] in lagging_seen, lagging_seen
    assert all(lag in ([], [2]) for lag in lagging_seen), "only the slow rank ever lags"
    assert view.lagging == [], "the run is over: nobody lags any more"


def test_updates_are_throttled_not_one_per_iteration(pool4):
    _, (view,), arrived = run_with_bars(pool4, "import mpinb\nfor i in mpinb.progress(range(200_000)):\n    pass\n")
    assert view.counts == [200_000] * 4
    per_rank = {rank: sum(rank in moved["mpinb_progress:0"] for moved in arrived) for rank in range(4)}
    assert all(1 <= n <= 2 + view.elapsed[rank] / _progress.EVERY + 1 for rank, n in per_rank.items()), per_rank


def test_several_loops_unknown_totals_and_early_exits(pool4):
    result, views, _ = run_with_bars(pool4, (
        "import mpinb\n"
        "for i in mpinb.progress(range(5), desc='first'):\n    pass\n"
        "for i in mpinb.progress((x for x in range(7)), desc='no total'):\n    pass\n"
        "for i in mpinb.progress(range(100), desc='left early'):\n    if i == 9:\n        break\n"
    ))
    assert not result.errors
    first, unknown, early = views
    assert (first.desc, first.counts) == ("first", [5] * 4)
    assert unknown.total is None and unknown.counts == [7] * 4 and "28 [" in unknown._fallback()[0]
    assert early.counts == [9] * 4 and early.ended == [True] * 4 and early.done == [False] * 4
    assert early.total == 100 and "left the loop early: ranks 0-3" in early._fallback()[0]


def test_a_loop_that_fails_on_one_rank_says_which_did_not_finish(pool4):
    result, (view,), _ = run_with_bars(
        pool4, "import mpinb\nfor i in mpinb.progress(range(10)):\n    if rank == 1 and i == 4:\n"
        "        raise ValueError('bad step')\n", check=False)
    assert list(result.errors) == [1]
    assert view.counts[1] == 4 and view.ended[1] and not view.done[1], "a loop left by an exception ends too"
    assert view.counts[0] == 10


@pytest.mark.parametrize("args, message", [
    ("range(3), total=-1", "whole number of iterations >= 0, not -1"),
    ("range(3), total=2.5", "whole number of iterations >= 0, not 2.5"),
    ("range(3), desc=7", "desc=...) must be a str, not int"),
])
def test_bad_arguments_say_what_was_wrong(pool4, args, message):
    result = pool4.run(f"import mpinb\nlist(mpinb.progress({args}))", check=False)
    assert sorted(result.errors) == [0, 1, 2, 3]
    assert message in result.errors[0].message


def test_the_magic_shows_a_bar_whose_saved_form_is_the_final_state(ip, monkeypatch):
    from IPython.core import display_functions

    shown = []
    original = display_functions.display

    def record(*objs, **kwargs):
        shown.extend(obj for obj in objs if isinstance(obj, ProgressView))
        return original(*objs, **kwargs)

    monkeypatch.setattr("mpinb.widgets.progress.display", record)
    ip.run_cell_magic("mpi", "--view none", "import mpinb\nfor i in mpinb.progress(range(3), desc='cells'):\n    pass")
    (view,) = shown
    assert view.over and view._fallback()[0].startswith("cells: 100%")


def test_plain_mpiexec_prints_one_bar_from_rank_0():
    cmd, env = plain_mpiexec(2, [sys.executable, os.path.join(SCRIPTS, "progress_loop.py")])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True, env=env)
    # (mpiexec may interleave the two ranks' lines: compare what each printed, not the lines)
    assert sorted(re.findall(r"rank \d: \d+", done.stdout)) == ["rank 0: 2450", "rank 1: 2450"]
    bars = [line for line in done.stderr.splitlines() if line.startswith("steps:")]
    assert len(bars) == 1 and "100%" in bars[0] and "50/50" in bars[0], done.stderr


@pytest.mark.unit
def test_a_count_may_be_any_whole_number_numpys_too():
    """``total=np.int64(3)`` (a length computed with numpy) is a count; a bool or a float is not."""
    import numpy as np

    assert list(_progress.progress(range(3), total=np.int64(3))) == [0, 1, 2]
    for wrong in (True, 3.0, np.float64(3), "3"):
        with pytest.raises(ValueError, match="whole number of iterations >= 0"):
            list(_progress.progress(range(3), total=wrong))


def test_the_text_bar_in_a_terminal_and_in_a_log(capsys):
    line = _progress.text_bar("fit", 450, 1000, 3.1, 145.0)
    assert line.startswith("fit:  45%|##########") and "450/1000" in line.replace(",", "") and "3.8 s" in line
    assert _progress.text_bar(None, 12, None, 0.5, 24.0) == "12 [0.5 s, 24 it/s]"
    assert list(mpinb.progress([1, 2, 3])) == [1, 2, 3]  # a plain process: rank 0 of 1
    assert "100%" in capsys.readouterr().err
