"""Debugging wrong results on real pools: every rank's stack merged, post-mortem, breakpoints with
commands routed per rank, and expressions compared across ranks."""

from __future__ import annotations

import _thread
import re
import subprocess
import sys
import threading
import time

import pytest
from _processes import SKIP_ON_INTEL

import mpinb
from mpinb._colors import ODD
from mpinb.pool._launch import plain_mpiexec

pytestmark = [pytest.mark.every_mpi, SKIP_ON_INTEL]

RING = "comm.send([rank] * 500_000, dest=(rank + 1) % size)\ndata = comm.recv(source=(rank - 1) % size)\n"


def in_background(pool, code: str, **kwargs) -> tuple[threading.Thread, dict]:
    """Run ``code`` on ``pool`` from a thread (as another notebook thread would); its result or
    error lands in the returned dict."""
    box: dict = {}

    def run() -> None:
        try:
            box["result"] = pool.run(code, **kwargs)
        except BaseException as err:
            box["error"] = err

    runner = threading.Thread(target=run)
    runner.start()
    return runner, box


# -- stacks -----------------------------------------------------------------------------------------

@pytest.mark.quick
def test_stacks_tell_idle_waiting_and_running_ranks_apart(pool4):
    assert pool4.stacks().text().splitlines()[-1] == "ranks 0-3: idle"
    code = ("import time\ndef exchange():\n    return comm.recv(source=3)\n"
            "if rank == 3:\n    time.sleep(2.5)\n    for r in range(3):\n        comm.send(r, dest=r)\nelse:\n"
            "    exchange()\n")
    runner, box = in_background(pool4, code, timeout=30)
    time.sleep(1.0)
    stacks = pool4.stacks(samples=2, interval=0.3)
    runner.join()
    assert "error" not in box, box
    text = stacks.text()
    lines = text.splitlines()
    assert lines[0] == "4 ranks: 3 waiting in MPI, 1 running (sampled 2 times)", text
    assert lines[1].startswith("ranks 0-2: cell line 9: exchange() → exchange() line 3: return comm.recv(source=3) → "
                               "waiting in recv from rank 3 for 1."), text  # sampled at 1.0 and 1.3 s
    # (the samples are 0.3 s apart, or a little more on a loaded machine or under coverage)
    assert re.fullmatch(r"rank 3: cell line 5: time.sleep\(2.5\) → running, has not moved for 0\.[3-6] s",
                        lines[2]), text
    assert stacks.ranks[3].frames[0]["code"] == "time.sleep(2.5)"


def test_an_untraced_deadlock_shows_every_ranks_stack_in_the_error(pool4):
    code = "import numpy as np\nbig = np.zeros(1_000_000)\ncomm.Send(big, dest=(rank + 1) % size)\n"
    with pytest.raises(TimeoutError) as info:
        pool4.run(code, timeout=2, trace=False)
    message = str(info.value)
    assert "Where the ranks were when the run was stopped:" in message, message
    assert "ranks 0-3: cell line 3: comm.Send(big, dest=(rank + 1) % size) → running" in message, message
    stacks = info.value.stacks
    assert sorted(stacks.ranks) == [0, 1, 2, 3] and all(s.read == "live" for s in stacks.ranks.values())
    # the untraced Send cannot be interrupted: the pool restarts, and says so
    assert "the pool was restarted: 4 fresh ranks are starting" in message
    assert pool4.run("comm.allreduce(1)").value == {r: 4 for r in range(4)}


def test_a_traced_deadlocks_error_merges_the_ring_into_one_line(pool4):
    with pytest.raises(mpinb.DeadlockError) as info:
        pool4.run(RING, timeout=2)
    tree = str(info.value).split("Where the ranks were when the run was stopped:\n")[1]
    assert tree.splitlines()[1].startswith("ranks 0-3: cell line 1: comm.send([rank] * 500_000, dest=(rank + 1) "
                                           "% size) → waiting in send to rank r+1"), tree


def test_a_rank_in_a_long_c_call_is_read_from_outside(pool4):
    """A C loop that holds Python's lock keeps the rank from answering; it writes its stack from
    a signal handler instead, and inspect names it rather than wait for it."""
    runner, box = in_background(pool4, "if rank == 1:\n    sum(range(10**9))\n", timeout=2)
    time.sleep(0.5)
    stacks = pool4.stacks()
    assert stacks.ranks[1].read == "signal", stacks.ranks[1]
    assert "rank 1: cell line 2: sum(range(10**9)) → in a call that does not return to Python" in stacks.text(), \
        stacks.text()
    began = time.monotonic()
    seen = pool4.inspect("rank * 0")
    assert time.monotonic() - began < 6, "inspect waited for a rank that cannot answer"
    assert "rank 1" in seen.text() and "did not answer" in seen.text(), seen.text()
    runner.join()
    assert isinstance(box.get("error"), TimeoutError)


# -- post-mortem ------------------------------------------------------------------------------------

@pytest.mark.quick
def test_post_mortem_on_the_rank_that_divided_by_zero(pool4):
    with pytest.raises(mpinb.RankError):
        pool4.run("def ratio(a, b):\n    return a / b\nshare = 12\nparts = rank - 2\nratio(share, parts)")
    session = pool4.post_mortem()
    assert session.rank == 2 and session.kind == "post-mortem"
    assert "-> return a / b" in session.opening
    assert session.command("p a, b").strip() == "(12, 0)"
    assert "-> ratio(share, parts)" in session.command("up")
    assert session.command("p parts, share").strip() == "(0, 12)"
    where = session.command("where")
    assert "_execute.py" not in where and "ipykernel" not in where, "only the user's frames"
    assert "nothing to step or continue" in session.command("n")
    pool4.run("fine = 1")  # a new run forgets the failure
    with pytest.raises(LookupError, match="the last run did not fail"):
        pool4.post_mortem()


def test_post_mortem_of_an_interrupted_deadlock_shows_where_each_rank_waited(pool4):
    with pytest.raises(mpinb.DeadlockError):
        pool4.run("step = 3\n" + RING, timeout=1.5)
    session = pool4.post_mortem(1)
    assert "-> comm.send([rank] * 500_000, dest=(rank + 1) % size)" in session.opening
    assert session.command("p step, rank").strip() == "(3, 1)"


def test_a_running_rank_is_read_live(pool4):
    runner, box = in_background(pool4, "import time\ncounter = 41\nif rank == 0:\n    time.sleep(2)\n", timeout=30)
    time.sleep(0.7)
    session = pool4.post_mortem(0)
    assert session.kind.startswith("live")
    assert session.command("p counter + 1").strip() == "42"
    assert "stepping needs it stopped at a breakpoint" in session.command("n")
    runner.join()


# -- breakpoints --------------------------------------------------------------------------------------

def test_a_stopped_rank_is_waited_for_not_called_a_deadlock(pool4):
    """Rank 2 stops while the others block receiving from it: no deadlock diagnosis, no timeout
    while it is stopped (3 s here), and continue finishes the cell."""
    seen: list[str] = []
    notices: list[str] = []

    def at_stop(breakpoints) -> None:
        seen.append(repr(breakpoints.view()))
        if len(seen) == 1:
            time.sleep(4)  # longer than the cell's timeout
            seen.append(repr(breakpoints.view()))
            seen.append(breakpoints.command("p value"))
            seen.append(breakpoints.command("c"))

    code = ("value = rank * 10\nif rank == 2:\n    breakpoint()\n    for r in (0, 1, 3):\n"
            "        comm.send(value, dest=r)\nelse:\n    got = comm.recv(source=2)\ngot if rank != 2 else value")
    began = time.monotonic()
    result = pool4.run(code, timeout=3, debug=at_stop,
                       on_output=lambda rank, kind, data: notices.append(data) if kind == "hang" else None)
    assert result.value == {0: 20, 1: 20, 2: 20, 3: 20}
    assert time.monotonic() - began > 4
    assert not notices, "no hang is diagnosed while a rank is stopped"
    assert "rank 2 stopped at line 4: for r in (0, 1, 3):" in seen[1], seen
    assert "rank 0 recv from rank 2" in seen[1] and "waiting for rank 2, stopped at line 4" in seen[1], seen
    assert seen[2] == "20"


def test_commands_go_to_one_rank_a_group_or_every_stopped_rank(pool4):
    said: list[str] = []
    steps = iter(["p rank", "1: p rank * 100", "@3: n", "0-1: c", "view", "2: p total", "c"])

    def at_stop(breakpoints) -> None:
        line = next(steps)
        said.append(line + " => " + (repr(breakpoints.view()) if line == "view" else breakpoints.command(line)))

    code = "total = rank\nbreakpoint()\ntotal += 1\ntotal *= 2\ntotal"
    result = pool4.run(code, debug=at_stop, timeout=60)
    assert result.value == {r: (r + 1) * 2 for r in range(4)}
    assert said[0] == "p rank => [rank 0] 0\n[rank 1] 1\n[rank 2] 2\n[rank 3] 3"
    assert said[1] == "1: p rank * 100 => 100"
    assert "-> total *= 2" in said[2], said  # @3: the ranks stopped at line 3 stepped to line 4
    assert said[4].startswith("view => ranks 2-3 stopped at line 4: total *= 2"), said
    assert "ranks 0-1 done with this run" in said[4], said
    assert said[5] == "2: p total => 3"


def test_continue_one_rank_while_the_others_stay_stopped(pool4):
    views: list = []

    def at_stop(breakpoints) -> None:
        views.append(breakpoints.view())
        breakpoints.command("1: c" if len(views) == 1 else "c")

    pool4.run("x = rank\nbreakpoint()\nx += 1", debug=at_stop, timeout=60)
    second = repr(views[1])
    assert "rank 1 done with this run" in second and "ranks 0, 2-3 stopped at line 3" in second, second


def test_scripted_commands_then_headless_runs_continue(pool4, capsys):
    result = pool4.run("y = 7\nbreakpoint()\ny = y * 6\ny", debug=["p y", "n", "p y"], timeout=60)
    assert result.value == {r: 42 for r in range(4)}
    out = capsys.readouterr().out
    assert "(mpinb debug) p y\n[ranks 0-3] 7" in out and "[ranks 0-3] 42" in out, out
    assert "nobody can type commands here (a headless run): they continue" in out, out


def test_mpinb_breakpoint_on_some_ranks_and_conditions(pool4):
    stopped: list[list[int]] = []

    def at_stop(breakpoints) -> None:
        stopped.append(sorted(breakpoints.stopped))
        breakpoints.command("c")

    pool4.run("import mpinb\nfor i in range(3):\n    mpinb.breakpoint(ranks='1-2', condition='i == 1')",
              debug=at_stop, timeout=60)
    assert stopped == [[1, 2]]
    with pytest.raises(mpinb.RankError, match="the breakpoint's condition 'j == 1' raised NameError"):
        pool4.run("import mpinb\nmpinb.breakpoint(condition='j == 1')", timeout=60)


def test_the_stop_button_ends_a_debugging_session_and_the_pool_goes_on(pool4):
    def at_stop(breakpoints) -> None:
        _thread.interrupt_main()
        time.sleep(1)

    with pytest.raises(KeyboardInterrupt):
        pool4.run("breakpoint()\nz = 1", debug=at_stop, timeout=60)
    assert pool4.run("comm.allreduce(1)").value == {r: 4 for r in range(4)}
    with pytest.raises(KeyboardInterrupt, match="the run was interrupted"):  # q, as the stop button
        pool4.run("breakpoint()\nz = 1", debug=["q"], timeout=60)
    assert pool4.run("comm.allreduce(2)").value == {r: 8 for r in range(4)}


def test_commands_to_running_ranks_are_refused(pool4):
    said: list[str] = []

    def at_stop(breakpoints) -> None:
        try:
            breakpoints.command("3: p 1")
        except ValueError as err:
            said.append(str(err))
        breakpoints.command("c")

    pool4.run("import time\nif rank == 0:\n    breakpoint()\n    pass\nelse:\n    time.sleep(0.5)\n", debug=at_stop,
              timeout=60)
    assert said and "rank 3 not stopped at a breakpoint" in said[0] and "(rank 0)" in said[0], said


def test_a_scripts_breakpoint_under_plain_mpiexec_is_pythons_pdb(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("import mpinb\nfrom mpi4py import MPI\nvalue = 6 * 7\nbreakpoint()\n"
                      "mpinb.breakpoint(ranks=[5])\nprint('after', value)\n")
    cmd, env = plain_mpiexec(1, [sys.executable, str(script)])
    done = subprocess.run(cmd, input="p value\nc\n", capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert "(Pdb) 42" in done.stdout and "after 42" in done.stdout, done.stdout


# -- side by side -------------------------------------------------------------------------------------

@pytest.mark.quick
def test_inspect_finds_the_one_rank_whose_array_differs(pool4):
    pool4.run("import numpy as np\ngrid = np.arange(12.0).reshape(3, 4)\nif rank == 2:\n    grid[1, 2] = -1.0")
    seen = pool4.inspect("grid")
    assert seen.odd_ranks() == [2]
    text = seen.text()
    assert text.startswith("grid on 4 ranks: rank 2 differs from the others"), text
    assert "first: [1, 2]: -1 vs 6" in text, text
    assert ODD in seen._repr_html_(), "the rank that differs is drawn in orange"
    assert pool4.inspect("grid.sum() - grid[1, 2]").agree


def test_inspect_says_which_ranks_lack_a_name(pool4):
    pool4.run("if rank % 2:\n    odd_only = rank")
    with pytest.raises(NameError, match="ranks 0, 2 have no variable 'odd_only'"):
        pool4.inspect("odd_only")
    seen = pool4.inspect("odd_only", targets="1,3")
    assert [ranks for ranks, _ in seen.groups()] == [[1], [3]]


def test_large_values_do_not_travel_whole(pool4):
    pool4.run("import numpy as np\nbig = np.ones(5_000_000)")
    began = time.monotonic()
    seen = pool4.inspect("big")
    assert seen.agree and time.monotonic() - began < 5
    summary = seen.summaries[0]
    assert summary["size"] == 5_000_000 and len(summary["repr"]) < 200 and len(summary["blocks"]) == 64


def test_a_rank_that_answers_may_take_longer_to_compute_than_to_answer(pool4):
    """A crowded machine may take more than ANSWER_WITHIN to digest a value: a rank whose control
    channel answers is given COMPUTE_WITHIN for it, not reported as stuck in a C call."""
    from mpinb.pool._channel import ANSWER_WITHIN

    seen = pool4.inspect(f"__import__('time').sleep({ANSWER_WITHIN + 0.5}) or rank * 0 + 7")
    assert seen.agree and all(summary.get("value") == 7 for summary in seen.summaries.values()), seen


def test_a_slow_repr_costs_one_answer_and_the_ranks_answer_the_next_question(pool4):
    """A value whose ``__repr__`` outlasts the limit: that inspect says so within the limit, and the
    next question is answered, since the repr ran on a helper thread, not the control channel's."""
    pool4.run("import time\nclass Slow:\n    def __repr__(self):\n        time.sleep(20)\n        return 'slow'\n"
              "slow = Slow()")
    try:
        began = time.monotonic()
        seen = pool4.inspect("slow")
        assert time.monotonic() - began < 15
        assert set(seen.failures) == {0, 1, 2, 3}, seen
        assert all("did not finish within" in why for why in seen.failures.values()), seen.failures
        assert pool4.inspect("rank * 0 + 1").agree, "the next question is answered"
    finally:
        pool4.run("del slow, Slow")


def test_what_a_debugger_command_prints_is_capped_as_a_runs_output_is(pool4):
    pool4.max_output_chars = 10_000
    try:
        with pytest.raises(mpinb.RankError):
            pool4.run("big = 'x' * 1_000_000\nif rank == 1:\n    raise ValueError('look at big')")
        printed = pool4.post_mortem(1).command("p big")
        assert len(printed) < 11_000 and "more characters not shown (max_output_chars)" in printed
    finally:
        pool4.max_output_chars = 1_000_000
        pool4.run("del big")


# -- magics -------------------------------------------------------------------------------------------

def test_the_magics(ip, capsys):
    ip.run_line_magic("mpi", "stacks")
    ip.run_cell("%%mpi\nfailing = [1, 2]\nfailing[rank]")
    capsys.readouterr()
    ip.run_line_magic("mpi", "debug -c 'p failing' -c q")
    out = capsys.readouterr().out
    assert "rank 2, post-mortem:" in out and "[1, 2]" in out, out
    shown = ip.run_line_magic("mpi", "inspect len(failing) * rank --targets 0-1")
    assert [ranks for ranks, _ in shown.groups()] == [[0], [1]]
    ip.run_cell('%%mpi --debug "p rank ;; c"\nbreakpoint()\nafter = 1')
    assert "(mpinb debug) p rank" in capsys.readouterr().out


@pytest.mark.parametrize("line, error", [
    ("debug 9", "the pool has ranks 0-3"),
    ("inspect", "an expression to evaluate"),
    ("inspect nowhere_at_all", "ranks 0-3 have no variable 'nowhere_at_all'"),
    ("stacks --samples 0", "at least 1"),
])
def test_bad_debugger_input_is_a_usage_error(ip, line, error):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match=error):
        ip.run_line_magic("mpi", line)
