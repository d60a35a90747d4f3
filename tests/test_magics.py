"""The magics through IPython's own entry points, on the shared 4-rank pool."""

from __future__ import annotations

import os
import time

import pytest
from IPython.core.error import UsageError

import mpinb
from mpinb.notebook import _session as session
from mpinb.widgets import RankOutput

SCRIPTS = os.path.join(os.path.dirname(__file__), "scripts")


@pytest.fixture
def shown(monkeypatch):
    """The per-rank views the magics displayed during one test."""
    views = []
    original = RankOutput.finish

    def record(self, result, how=""):
        original(self, result, how)
        views.append(self)

    monkeypatch.setattr(RankOutput, "finish", record)
    return views


@pytest.mark.quick
def test_the_ring_from_the_issue(ip, shown):
    ip.run_cell_magic("mpi", "-n 4", (
        "from mpi4py import MPI\n"
        "comm = MPI.COMM_WORLD\n"
        "r, s = comm.Get_rank(), comm.Get_size()\n"
        "comm.send([r] * 5, dest=(r + 1) % s)\n"
        "print('rank', r, 'received', comm.recv(source=(r - 1) % s))\n"
    ))
    view = shown[-1]
    assert view.stdout == [f"rank {r} received {[(r - 1) % 4] * 5}\n" for r in range(4)]
    assert view.state == ["ok"] * 4
    text, page = view._fallback()
    assert "[2] rank 2 received [1, 1, 1, 1, 1]" in text
    assert "rank 2 received" in page


def test_cells_share_the_ranks_variables(ip):
    ip.run_cell_magic("mpi", "", "shared = rank * 3")
    assert ip.run_line_magic("mpi", "pull shared") == [0, 3, 6, 9]


def test_values_are_shown_per_rank(ip, shown):
    ip.run_cell_magic("mpi", "", "rank ** 2")
    assert shown[-1].values == ["0", "1", "4", "9"]
    text, _ = shown[-1]._fallback()
    assert "Out[3]: 9" in text


def test_targets_and_output_modes(ip, shown):
    ip.run_cell_magic("mpi", "--targets 1,3 --output merged", "print('hi from', rank)")
    assert shown[-1].ranks == [1, 3] and shown[-1].mode == "merged"
    assert [m[2] for m in shown[-1].merged] == ["hi from 1\n", "hi from 3\n"]
    ip.run_cell_magic("mpi", "-o rank0", "print(rank)")
    text, _ = shown[-1]._fallback()
    assert text.strip() == "[0] 0"


def test_ipython_syntax_in_a_cell(ip):
    ip.run_cell_magic("mpi", "", "%time x_from_magic = rank + 1")
    assert ip.run_line_magic("mpi", "pull x_from_magic") == [1, 2, 3, 4]


def test_one_line_form(ip):
    ip.run_line_magic("mpi", "line_var = size - rank")
    assert ip.run_line_magic("mpi", "pull line_var") == [4, 3, 2, 1]


def test_push_notebook_variables(ip):
    ip.user_ns["from_notebook"] = {"k": [1, 2]}
    ip.run_line_magic("mpi", "push from_notebook")
    assert ip.run_line_magic("mpi", "pull from_notebook") == [{"k": [1, 2]}] * 4


def test_run_a_script(ip, shown):
    ip.run_line_magic("mpi", f"run {os.path.join(SCRIPTS, 'ring.py')}")
    assert shown[-1].stdout[1] == "rank 1 of 4 got [0, 0, 0]\n"


def test_status(ip, capsys):
    ip.run_line_magic("mpi", "status")
    # In a plain shell the table is printed as text.
    out = capsys.readouterr().out
    assert "4 ranks" in out and "idle" in out


def test_failing_cell_marks_ranks_and_raises_once(ip, shown):
    result = ip.run_cell("%%mpi\nif rank >= 2:\n    1 / 0\n")
    assert isinstance(result.error_in_exec, mpinb.RankError)
    assert shown[-1].state == ["ok", "ok", "error", "error"]
    assert "ranks 2-3 raised ZeroDivisionError: division by zero (line 3)" in str(result.error_in_exec)


def test_syntax_error_is_reported_once(ip):
    result = ip.run_cell("%%mpi\nx = (\n")
    err = result.error_in_exec
    assert isinstance(err, mpinb.CellSyntaxError) and isinstance(err.error, SyntaxError)
    lines = err._render_traceback_()
    assert lines[0].strip() == 'File "<mpi cell>", line 2'
    assert lines[-1] == "SyntaxError: '(' was never closed"


@pytest.mark.parametrize(
    "line, message",
    [
        ("-n 0", "must be a whole number, at least 1, not 0"),
        ("-n many", "must be a whole number, at least 1, not .many."),
        ("--bogus", "unrecognized arguments: --bogus"),
        ("--targets 4", "rank 4 outside the pool"),
        ("--timeout -1", "must be more than 0 seconds"),
        ("--timeout nan", "must be more than 0 seconds \\(a finite number\\), got nan"),
        ("--output fancy", "invalid choice: 'fancy'"),
        ("-n 8", "run `%mpi restart -n 8` first"),
        ("'unclosed", "cannot read the arguments"),
    ],
)
def test_cell_usage_errors(ip, line, message):
    with pytest.raises(UsageError, match=message):
        ip.run_cell_magic("mpi", line, "pass")


@pytest.mark.parametrize(
    "line, message",
    [
        ("", "%mpi start"),
        ("pull", "name one variable"),
        ("pull nothing_like_this", "no variable 'nothing_like_this'"),
        ("push", "name the notebook variables"),
        ("push not_in_the_notebook", "the notebook has no variable not_in_the_notebook"),
        ("run", "the following arguments are required: script"),
        ("run missing_script.py", "no script at"),
        ("status now", "takes no arguments"),
        ("start -n 2", "already running"),
        ("restart --start-timeout 0", "must be more than 0 seconds"),
        ("restart --start-timeout 1e999", "a finite number"),
    ],
)
def test_line_usage_errors(ip, line, message):
    with pytest.raises(UsageError, match=message):
        ip.run_line_magic("mpi", line)


def test_timeout_option(ip, shown):
    with pytest.raises(TimeoutError):
        ip.run_cell_magic("mpi", "--timeout 0.5", "import time\ntime.sleep(20)")
    assert shown[-1].state == ["interrupted"] * 4
    ip.run_cell_magic("mpi", "", "after_timeout = comm.allreduce(1)")
    assert ip.run_line_magic("mpi", "pull after_timeout") == [4] * 4


def test_autompi_makes_every_cell_parallel(ip):
    ip.run_line_magic("autompi", "on")
    try:
        ip.run_cell("auto_var = rank + 10")
        assert "auto_var" not in ip.user_ns
        ip.run_cell("%mpi status")  # magics still work while it is on
    finally:
        ip.run_line_magic("autompi", "off")
    assert ip.run_line_magic("mpi", "pull auto_var") == [10, 11, 12, 13]
    ip.run_cell("local_again = 1")
    assert ip.user_ns["local_again"] == 1
    with pytest.raises(UsageError):
        ip.run_line_magic("autompi", "maybe")


def test_start_stop_restart_through_magics(ip, capsys):
    shared = session.current_pool()
    session.use_pool(None)
    try:
        ip.run_line_magic("mpi", "start -n 2")
        assert "started 2 MPI ranks" in capsys.readouterr().out
        ip.run_cell_magic("mpi", "", "gone_after_restart = 1")
        ip.run_line_magic("mpi", "restart -n 3")
        assert session.current_pool().size == 3
        with pytest.raises(UsageError, match="no variable 'gone_after_restart'"):
            ip.run_line_magic("mpi", "pull gone_after_restart")
        ip.run_line_magic("mpi", "stop")
        assert session.current_pool() is None
        ip.run_line_magic("mpi", "stop")
        assert "no pool was running" in capsys.readouterr().out
        # A cell with no running pool starts one, with a one-line notice.
        ip.run_cell_magic("mpi", "-n 2", "pass")
        assert "started 2 MPI ranks" in capsys.readouterr().out
        ip.run_line_magic("mpi", "stop")
    finally:
        session.stop_pool()
        session.use_pool(shared)


def test_a_rank_death_in_a_cell_is_not_a_usage_error(ip):
    shared = session.current_pool()
    session.use_pool(None)
    try:
        ip.run_line_magic("mpi", "start -n 2")
        with pytest.raises(mpinb.RankDiedError) as info:
            ip.run_cell_magic("mpi", "", "import os\nif rank == 1:\n    os._exit(3)\ncomm.Barrier()")
        assert info.value._render_traceback_() == [f"RankDiedError: {info.value}"]
        assert "rank 1 died" in str(info.value)
    finally:
        session.stop_pool()
        session.use_pool(shared)


def test_restart_keeps_how_the_pool_was_started(ip):
    """`%mpi restart` alone keeps the launch (hosts, mpiexec arguments) and the pool's other
    settings; a launch flag replaces the launch."""
    shared = session.current_pool()
    session.use_pool(None)
    try:
        ip.run_line_magic("mpi", "start -n 2 --hosts localhost")
        session.current_pool().trace_capacity = 123
        before = session.current_pool().options()
        assert "localhost" in before["mpiexec_args"]
        ip.run_line_magic("mpi", "restart -n 3")
        assert session.current_pool().size == 3 and session.current_pool().options() == before
        ip.run_line_magic("mpi", "restart --launcher mpi")
        after = session.current_pool().options()
        assert after["mpiexec_args"] == [] and after["trace_capacity"] == 123
        assert session.current_pool().size == 3
    finally:
        session.stop_pool()
        session.use_pool(shared)


@pytest.mark.quick
def test_traced_cells_show_the_message_views(ip, monkeypatch):
    from mpinb.widgets import TraceView

    views = []
    monkeypatch.setattr(TraceView, "__init__", _recording_init(TraceView.__init__, views))
    ip.run_cell_magic("mpi", "", "comm.send(rank, dest=(rank + 1) % size)\ncomm.recv(source=(rank - 1) % size)")
    assert len(views) == 1 and len(views[0].matrix_count) == 4
    text, page = views[0]._fallback()
    assert "<svg" in page and "msgs out" in text
    ip.run_cell_magic("mpi", "--no-trace", "comm.Barrier()")
    ip.run_cell_magic("mpi", "--view none", "comm.Barrier()")
    ip.run_cell_magic("mpi", "", "x_without_mpi = 1")
    assert len(views) == 1, "no views for untraced cells, --view none, or cells without MPI calls"
    ip.run_line_magic("mpi", "trace")
    assert len(views) == 2 and views[1].expanded
    assert mpinb.last_trace() is not None and len(mpinb.last_trace()) == 4


def _recording_init(original, views):
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        views.append(self)
    return init


def test_trace_view_usage_errors(ip):
    with pytest.raises(UsageError, match="invalid choice: 'wide'"):
        ip.run_cell_magic("mpi", "--view wide", "pass")
    with pytest.raises(UsageError, match="%mpi trace"):
        ip.run_line_magic("mpi", "trace sideways")


def test_a_deadlocked_cell_shows_its_diagnosis_live_then_once_in_the_error(ip, shown, monkeypatch):
    notices = []
    original = RankOutput.append

    def record(self, rank, kind, data):
        if kind == "hang":
            notices.append(data)
        original(self, rank, kind, data)

    monkeypatch.setattr(RankOutput, "append", record)
    with pytest.raises(mpinb.DeadlockError) as info:
        ip.run_cell_magic("mpi", "--timeout 3", (
            "comm.send([rank] * 500_000, dest=(rank + 1) % size)\n"
            "comm.recv(source=(rank - 1) % size)\n"))
    assert notices, "the diagnosis shows in the cell's output while the ranks hang"
    assert "Wait-for cycle: 0 -> 1 -> 2 -> 3 -> 0" in notices[-1]
    assert "rank 0: send to rank 1" in notices[-1] and "at line 2" in notices[-1]
    view = shown[-1]
    assert view.notice == "", "once the error shows the diagnosis, the live notice gives way to it"
    assert "Wait-for cycle" not in "".join(view._fallback())
    assert "\n".join(info.value._render_traceback_()).count("Wait-for cycle: 0 -> 1 -> 2 -> 3 -> 0") == 1
    assert view.state == ["interrupted"] * 4
    ip.run_cell_magic("mpi", "", "after_deadlock = comm.allreduce(1)")
    assert ip.run_line_magic("mpi", "pull after_deadlock") == [4] * 4


def test_compare_shows_the_last_two_traced_runs_side_by_side(ip, monkeypatch):
    monkeypatch.setattr(session.SESSION, "previous_trace", None)
    monkeypatch.setattr(session.SESSION, "last_trace", None)
    with pytest.raises(UsageError, match="not two traced runs yet"):
        ip.run_line_magic("mpi", "compare")
    slow = "import time\nif rank == 1:\n    time.sleep(0.3)\ncomm.allreduce(rank)"
    ip.run_cell_magic("mpi", "--view none", slow)
    ip.run_cell_magic("mpi", "--view none", slow.replace("0.3", "0.01"))
    view = ip.run_line_magic("mpi", "compare")
    comparison = view.comparison
    wall_before, wall_after = comparison.wall()
    assert wall_before - wall_after > 0.2
    waiting = {row["rank"]: row["waiting_a"] - row["waiting_b"] for row in comparison.per_rank()}
    assert all(waiting[r] > 0.2 for r in (0, 2, 3)) and abs(waiting[1]) < 0.05
    (allreduce,) = [row for row in comparison.per_op() if row["op"] == "allreduce"]
    assert allreduce["calls_a"] == allreduce["calls_b"] == 4 and allreduce["seconds_a"] > 0.6
    text, page = view._fallback()
    assert text.splitlines()[0].split() == ["before", "after", "change"]
    assert "wall time" in text and "(-" in text
    assert page.count("<svg") == 2
    views = [child for child in view.children if hasattr(child, "axis_end")]
    assert len(views) == 2 and views[0].axis_end == views[1].axis_end >= wall_before


def test_compare_names_runs_in_notebook_variables_and_says_what_is_wrong(ip):
    ip.user_ns["fast"] = ip.run_line_magic("mpi", "comm.Barrier()") or mpinb.current_pool().last_result
    ip.user_ns["untraced"] = mpinb.current_pool().run("comm.Barrier()", trace=False)
    ip.user_ns["text"] = "a string"
    view = ip.run_line_magic("mpi", "compare fast fast")
    assert view.comparison.labels == ("fast", "fast") and "fast" in view._fallback()[0].splitlines()[0]
    with pytest.raises(UsageError, match="no notebook variable named nowhere"):
        ip.run_line_magic("mpi", "compare fast nowhere")
    with pytest.raises(UsageError, match="'untraced' run has no trace"):
        ip.run_line_magic("mpi", "compare fast untraced")
    with pytest.raises(UsageError, match="the 'text' run is a str"):
        ip.run_line_magic("mpi", "compare text fast")
    with pytest.raises(UsageError, match="%mpi compare \\[A B\\]"):
        ip.run_line_magic("mpi", "compare one")


# -- the pool that %load_ext starts in the background (notebook/_prestart.py) ----------------------

def _saved_notebook(tmp_path, *cells: str) -> str:
    import nbformat

    path = tmp_path / "lesson.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
    return str(path)


@pytest.fixture
def no_shared_pool(ip, monkeypatch):
    """The magics without the shared pool, as a fresh notebook has them; put back afterwards."""
    monkeypatch.delenv("MPINB_RANKS", raising=False)
    monkeypatch.delenv("MPINB_PRESTART", raising=False)
    shared = session.current_pool()
    session.use_pool(None)
    yield
    session.stop_pool()
    session.use_pool(shared)


def test_load_ext_starts_the_size_the_notebook_asks_for_in_the_background(ip, no_shared_pool, tmp_path,
                                                                          monkeypatch, capsys):
    notebook = _saved_notebook(tmp_path, "%load_ext mpinb", "# a lesson", "%%mpi -n 3\nprint(rank)")
    monkeypatch.setenv("JPY_SESSION_NAME", notebook)
    began = time.monotonic()
    session.prestart()  # what %load_ext mpinb does (the shell has loaded the extension already)
    assert time.monotonic() - began < 1.0, "the start goes on in the background"
    assert session.current_pool() is None and session.SESSION.prestarted is not None
    session.SESSION.prestarted.take()  # the user reads the notebook meanwhile
    began = time.monotonic()
    ip.run_cell_magic("mpi", "", "x = rank")
    assert time.monotonic() - began < 2.0, "the first cell finds its pool ready"
    assert "started 3 MPI ranks in the background at %load_ext" in capsys.readouterr().out
    assert session.current_pool().size == 3
    assert ip.run_line_magic("mpi", "pull x") == [0, 1, 2]


def test_a_cell_of_another_size_stops_the_background_pool_and_starts_its_own(ip, no_shared_pool, tmp_path,
                                                                             monkeypatch, capsys):
    monkeypatch.setenv("JPY_SESSION_NAME", _saved_notebook(tmp_path, "%%mpi -n 3\npass"))
    session.prestart()
    background = session.SESSION.prestarted.pool
    ip.run_cell_magic("mpi", "-n 2", "pass")
    assert "started 2 MPI ranks in" in capsys.readouterr().out
    assert session.current_pool().size == 2 and not background.running
    # %mpi start with settings of its own does not take a background pool either
    session.stop_pool()
    session.prestart()
    background = session.SESSION.prestarted.pool
    ip.run_line_magic("mpi", "start -n 3 --start-timeout 30")
    assert session.current_pool() is not background and not background.running


def test_no_background_start_when_the_size_cannot_be_told_or_it_is_turned_off(ip, no_shared_pool, tmp_path,
                                                                                 monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    session.prestart()  # a console: nothing says what will be asked
    assert session.SESSION.prestarted is None
    monkeypatch.setenv("JPY_SESSION_NAME", _saved_notebook(tmp_path, "%%mpi -n 2\npass"))
    monkeypatch.setenv("MPINB_PRESTART", "0")
    session.prestart()
    assert session.SESSION.prestarted is None
