"""The Python API on real pools, written once and run at sizes 1 and 4."""

from __future__ import annotations

import os
import re
import time

import numpy as np
import pytest

import mpinb
from mpinb.common._values import ReprOnly

pytestmark = pytest.mark.every_mpi


@pytest.mark.quick
def test_values_and_stdout_per_rank(any_pool):
    res = any_pool.run("x = rank * 2\nprint(x)\nx")
    n = any_pool.size
    assert res.ranks == list(range(n))
    assert res.value == {r: 2 * r for r in range(n)}
    assert res.stdout == {r: f"{2 * r}\n" for r in range(n)}
    assert res.ok and res.errors == {}


def test_namespace_starts_with_mpi_names(any_pool):
    res = any_pool.run(
        "from mpi4py import MPI as M\n"
        "(MPI is M, comm is M.COMM_WORLD, rank == comm.Get_rank(), size == comm.Get_size(), np.__name__)"
    )
    assert set(res.value.values()) == {(True, True, True, True, "numpy")}


def test_variables_persist_between_runs(any_pool):
    any_pool.run("kept = rank + 100")
    assert any_pool.pull("kept") == [r + 100 for r in range(any_pool.size)]


def test_mpi_collective_inside_run(any_pool):
    res = any_pool.run("comm.allreduce(rank + 1)")
    n = any_pool.size
    assert set(res.value.values()) == {n * (n + 1) // 2}


def test_push_pull(any_pool):
    any_pool.push({"a": 1, "b": [1, 2]})
    assert any_pool.pull("a") == [1] * any_pool.size
    assert any_pool.pull("b") == [[1, 2]] * any_pool.size


@pytest.mark.parametrize("targets", [[9], "9", 9])
def test_push_to_a_rank_outside_the_pool_says_so(any_pool, targets):
    with pytest.raises(ValueError, match="outside the pool"):
        any_pool.push({"a": 1}, targets=targets)


def test_pull_of_a_missing_name_says_which_ranks(any_pool):
    with pytest.raises(NameError, match="no variable 'never_defined'"):
        any_pool.pull("never_defined")


@pytest.mark.parametrize("bad", ["1x", "a b", "", 3])
def test_bad_variable_names_are_refused(any_pool, bad):
    with pytest.raises(ValueError, match="not a valid Python variable name"):
        any_pool.pull(bad)


def test_scatter_gather_round_trip_uneven(any_pool):
    data = np.arange(10 * 3, dtype=float).reshape(10, 3)
    any_pool.scatter("part", data)
    parts = any_pool.pull("part")
    assert sum(len(p) for p in parts) == 10
    assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1
    np.testing.assert_array_equal(any_pool.gather("part"), data)
    shapes = any_pool.run("part.shape").value
    assert all(shape[1:] == (3,) for shape in shapes.values())


def _shared_files(pool: mpinb.Pool) -> set[str]:
    """The data moves' files in shared memory that this process or the pool's ranks made (each
    is named after its maker's pid): not those of another test run beside this one."""
    import glob

    pids = {os.getpid(), *(row["pid"] for row in pool.status())}
    return {path for pid in pids for path in glob.glob(f"/dev/shm/mpinb-{pid}-*")}


def test_large_arrays_travel_through_shared_memory_and_leave_nothing_there(any_pool):
    before = _shared_files(any_pool)
    big = np.arange(3 * 2**18, dtype=np.float64).reshape(-1, 3)[:, ::2]  # 4 MB, not contiguous
    records = np.zeros(70_000, dtype=[("x", "f8"), ("n", "i4"), ("tag", "S8")])  # 1.4 MB, structured
    records["n"] = np.arange(len(records))
    any_pool.push({"big": big, "records": records, "small": np.ones(3)})
    same = any_pool.run("(big.shape, float(big.sum()), big.flags.writeable, int(records['n'][-1]), "
                        "records.dtype.names, small.sum())").value
    assert set(same.values()) == {(big.shape, float(big.sum()), True, 69_999, ("x", "n", "tag"), 3.0)}
    any_pool.run("big[0, 0] = rank")  # each rank's copy is its own
    pulled = any_pool.pull("big")
    assert [part[0, 0] for part in pulled] == list(range(any_pool.size))
    np.testing.assert_array_equal(pulled[-1][1:], big[1:])
    any_pool.scatter("rows", big)
    np.testing.assert_array_equal(any_pool.gather("rows"), big)
    assert any_pool.pull("rows", targets=[0])[0].shape[1:] == (2,)
    assert _shared_files(any_pool) == before, "every file in shared memory is removed"


# In a mount namespace of its own with a 64 MB /dev/shm: how much of it a pool holds before a push
# of 32 MB, and after (the ranks keep the array); printed as "BEFORE AFTER" in bytes.
SMALL_SHM = """
import os, sys, numpy as np, mpinb
def used():
    stat = os.statvfs("/dev/shm")
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize
with mpinb.Pool(2) as pool:
    pool.run("comm.Barrier()")
    before = used()
    pool.push({"big": np.ones(4 * 2**20)})
    assert pool.run("float(big.sum())").value == {0: 4 * 2**20, 1: 4 * 2**20}
    print(before, used(), flush=True)
"""


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/unshare"), reason="needs root, to mount")
def test_a_finished_push_holds_nothing_of_dev_shm(existing_pools):
    """``/dev/shm`` is small on many machines and MPI's own shared memory needs it: once a push has
    ended, the ranks hold their array in their own memory, and ``/dev/shm`` is as it was (a mapping
    kept open would keep the 32 MB counted there, and another program's shared memory then dies of
    SIGBUS)."""
    import subprocess
    import sys

    from _processes import wait_until_gone

    mount = "mount -t tmpfs -o size=64m,mode=1777 tmpfs /dev/shm && exec \"$0\" -c \"$1\""
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, sys.executable,
                           SMALL_SHM], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = map(int, done.stdout.split())
    assert after - before < 2**20, f"/dev/shm holds {(after - before) / 2**20:.1f} MB more after the push"
    assert not wait_until_gone(10, existing_pools)


def test_what_a_thread_prints_after_its_cell_ended_is_capped_too(existing_pools):
    """A thread that outlives its cell and prints on: between runs the cap holds as in a run, so
    neither the rank nor the notebook keeps megabytes of it, and the next run says what was cut."""
    with mpinb.Pool(2, max_output_chars=10_000) as pool:
        pool.run("import threading, time\n"
                 "def chatter():\n    time.sleep(0.3)\n    for i in range(200_000):\n        print('x' * 50)\n"
                 "chatty = threading.Thread(target=chatter)\nchatty.start()")
        time.sleep(2)  # the thread prints about 10 MB after its cell ended
        following = pool.run("chatty.join()")
        assert all("after the last run ended, this rank printed" in following.stdout[rank] for rank in (0, 1))
        kept = sum(len(metadata.get("stdout") or "") for metadata in pool._supervisor.client.metadata.values()
                   if isinstance(metadata, dict))  # (the entries of messages, by id)
        assert kept < 3 * 2 * 10_000, f"the notebook keeps {kept:,} characters of a thread's output"


def test_scatter_of_fewer_large_rows_than_ranks_leaves_the_last_ranks_empty(any_pool):
    data = np.arange(2 * 2**17, dtype=float).reshape(2, -1)  # 2 MB: through shared memory
    any_pool.scatter("few", data)
    assert [len(part) for part in any_pool.pull("few")] == {1: [2], 4: [1, 1, 0, 0]}[any_pool.size]
    np.testing.assert_array_equal(any_pool.gather("few"), data)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("rows", [8, 2**17], ids=["small", "large"])
def test_array_subclasses_keep_their_type_both_ways(any_pool, rows):
    masked = np.ma.masked_array(np.arange(rows * 2, dtype=float).reshape(rows, 2), mask=False)
    masked[1, 0] = np.ma.masked
    matrix = np.asmatrix(np.ones((rows, 2)))
    records = np.rec.fromarrays([np.arange(rows), np.zeros(rows)], names="a,b")
    any_pool.push({"masked": masked, "matrix": matrix, "records": records})
    kinds = any_pool.run("(type(masked).__name__, bool(masked.mask[1, 0]), type(matrix).__name__, "
                         "type(records).__name__, int(records.a[-1]))").value
    assert set(kinds.values()) == {("MaskedArray", True, "matrix", "recarray", rows - 1)}
    pulled = any_pool.pull("masked")[0]
    assert isinstance(pulled, np.ma.MaskedArray) and pulled.mask[1, 0] and not pulled.mask[0, 0]
    assert isinstance(any_pool.pull("matrix")[-1], np.matrix)
    assert isinstance(any_pool.pull("records")[-1], np.recarray)
    any_pool.scatter("part", masked)
    whole = any_pool.gather("part")
    assert isinstance(whole, np.ma.MaskedArray) and whole.mask[1, 0] and whole.mask.sum() == 1
    np.testing.assert_array_equal(whole.data, masked.data)
    any_pool.scatter("part", records)
    back = any_pool.gather("part")
    assert isinstance(back, np.recarray) and list(back.a) == list(range(rows))


class _FailsOnRank:
    """A value that cannot be unpickled on one rank (as a rank out of memory would fail)."""

    def __init__(self, rank: int):
        self.rank = rank

    def __reduce__(self):
        return eval, (f"1 / 0 if __import__('mpi4py.MPI').MPI.COMM_WORLD.rank == {self.rank} else 'taken'",)


def test_a_rank_that_cannot_take_its_value_is_named_and_the_others_are_told(pool4):
    pool4.push({"taken": None})
    with pytest.raises(mpinb.TransferError) as info:
        pool4.push({"taken": _FailsOnRank(2)})
    text = str(info.value)
    assert "rank 2: ZeroDivisionError" in text and "ranks 0-1, 3 have the new value" in text, text
    assert "rank 2 keep" in text, text
    assert info.value.done == [0, 1, 3] and list(info.value.failed) == [2]
    assert pool4.pull("taken") == ["taken", "taken", None, "taken"], "the failed rank keeps what it had"


def _busy(pool, rank: int, seconds: float):
    """Keep one rank busy outside any run (its next request waits in its queue)."""
    supervisor = pool._supervisor
    return supervisor.client[supervisor.engine_of[rank]].apply_async(time.sleep, seconds)


@pytest.mark.parametrize("move", ["push", "scatter", "pull", "gather"])
def test_a_data_move_that_passes_its_timeout_says_where_each_rank_stands(pool4, move):
    pool4.push({"moved": np.zeros(4)})
    shared_before = _shared_files(pool4)
    sleeping = _busy(pool4, 1, 3)
    began = time.monotonic()
    with pytest.raises(mpinb.TransferTimeoutError) as info:
        if move == "push":
            pool4.push({"moved": np.ones(4)}, timeout=0.5)
        elif move == "scatter":
            pool4.scatter("moved", np.ones((4, 2**16)), timeout=0.5)  # 2 MB: through shared memory
        else:
            getattr(pool4, move)("moved", timeout=0.5)
    assert time.monotonic() - began < 3, "the wait ended at the timeout, not when the rank was free"
    text = str(info.value)
    assert "did not end within 0.5 s" in text and "rank 1 did not answer in time" in text, text
    if move in ("push", "scatter"):
        assert "ranks 0, 2-3 have the new value" in text
    else:
        assert "nothing was returned" in text
    sleeping.get(5)
    sums = pool4.run("float(np.asarray(moved).sum())").value
    if move in ("push", "scatter"):
        assert sums[1] == 0.0 and all(sums[rank] > 0 for rank in (0, 2, 3)), sums
    else:
        assert set(sums.values()) == {0.0}, sums
    assert _shared_files(pool4) <= shared_before, "no file is left in shared memory"


def test_the_stop_button_ends_a_data_move_and_says_where_each_rank_stands(pool4):
    import _thread
    import threading

    sleeping = _busy(pool4, 3, 3)
    threading.Timer(0.3, _thread.interrupt_main).start()
    began = time.monotonic()
    told = r"interrupted.*rank 3 did not answer in time.*ranks 0-2 have the new value"
    with pytest.raises(KeyboardInterrupt, match=told):
        pool4.push({"stopped": 1})
    assert time.monotonic() - began < 2.5
    sleeping.get(5)
    assert pool4.run("'stopped' in globals()").value == {0: True, 1: True, 2: True, 3: False}
    pool4.run("globals().pop('stopped', None);")


def test_a_data_move_timeout_must_be_a_duration(pool4):
    with pytest.raises(ValueError, match="timeout must be a positive, finite number of seconds"):
        pool4.pull("x", timeout=float("nan"))


def test_scatter_refuses_a_scalar(any_pool):
    with pytest.raises(ValueError, match="at least one dimension"):
        any_pool.scatter("s", 5)


def test_identical_tracebacks_are_merged(any_pool):
    with pytest.raises(mpinb.RankError) as info:
        any_pool.run("y = 1\n1 / 0\n")
    err = info.value
    groups = err.groups()
    assert len(groups) == 1
    ranks, failure = groups[0]
    assert ranks == list(range(any_pool.size))
    assert failure.type == "ZeroDivisionError" and failure.line == 2
    assert err.render().count("ZeroDivisionError") == 1
    assert "mpinb" not in failure.traceback, "internal frames must not show"
    # The pool is fine afterwards and kept what ran before the error.
    assert any_pool.pull("y") == [1] * any_pool.size


def test_errors_on_some_ranks_name_them(pool4):
    with pytest.raises(mpinb.RankError) as info:
        pool4.run("if rank == 1:\n    raise KeyError('k')\nrank")
    err = info.value
    assert set(err.failures) == {1}
    assert "rank 1 raised KeyError: 'k' (line 2)" in str(err)
    assert "ranks 0, 2-3 finished without error" in str(err)
    assert err.result.value[3] == 3, "the other ranks' results are kept"


def test_check_false_returns_the_failures(pool4):
    res = pool4.run("1 / (rank % 2)", check=False)
    assert set(res.errors) == {0, 2}
    assert res.value[1] == 1.0


def test_syntax_error_is_raised_once_without_running(any_pool):
    any_pool.run("marker = 0")
    with pytest.raises(SyntaxError):
        any_pool.run("marker = 1\nx = (")
    assert any_pool.pull("marker") == [0] * any_pool.size


def test_targets_run_on_a_subset(pool4):
    pool4.run("hit = False")
    res = pool4.run("hit = True\nrank", targets="0,2-3")
    assert res.ranks == [0, 2, 3]
    assert pool4.pull("hit") == [True, False, True, True]
    assert pool4.run("rank", targets=[1]).value == {1: 1}
    assert pool4.run("rank", targets=range(2)).value == {0: 0, 1: 1}
    assert pool4.pull("hit", targets=1) == [False]


@pytest.mark.parametrize(
    "targets, message",
    [(4, "rank 4 outside the pool"), ("0,7-8", "ranks 7-8 outside"), ("x", "cannot read targets"),
     ("3-1", "runs backwards"), ([], "selects no rank")],
)
def test_bad_targets_are_refused(pool4, targets, message):
    with pytest.raises(ValueError, match=message):
        pool4.run("pass", targets=targets)


def test_values_that_cannot_travel_come_back_as_repr(pool4):
    res = pool4.run("import threading\nthreading.Lock()")
    assert all(isinstance(v, ReprOnly) and "lock" in repr(v) for v in res.value.values())
    res = pool4.run("class Local:\n    def __repr__(self): return 'Local()'\nLocal()")
    assert all(repr(v) == "Local()" for v in res.value.values())


def test_objects_of_cell_classes_travel_between_ranks(pool4):
    res = pool4.run(
        "class Point:\n    def __init__(self, x): self.x = x\n"
        "got = comm.sendrecv(Point(rank), dest=(rank + 1) % size, source=(rank - 1) % size)\n"
        "got.x"
    )
    assert res.value == {r: (r - 1) % 4 for r in range(4)}


def test_trailing_semicolon_hides_the_value(pool4):
    assert pool4.run("1 + 1;").value == {r: None for r in range(4)}


def test_one_thread_per_rank_unless_the_user_says(any_pool):
    res = any_pool.run("import os\nos.environ['OMP_NUM_THREADS'], os.environ['OPENBLAS_NUM_THREADS']")
    assert set(res.value.values()) == {("1", "1")}


def test_output_is_capped_with_a_notice(pool4):
    pool4.max_output_lines = 50
    try:
        res = pool4.run("for i in range(100_000): print(i)", targets=[0])
    finally:
        pool4.max_output_lines = 10_000
    lines = res.stdout[0].splitlines()
    assert lines[:50] == [str(i) for i in range(50)]
    assert "output cut: 99,950 more lines" in res.stdout[0]
    assert res.dropped_lines == {0: 99_950}


def test_what_the_file_descriptors_receive_is_output_too_and_capped(pool4):
    res = pool4.run("import os\nos.write(1, f'fd {rank}\\n'.encode())\nos.write(2, b'err\\n')")
    assert res.stdout == {r: f"fd {r}\n" for r in range(4)}, "every rank's, the relayed ones' too"
    assert res.stderr == {r: "err\n" for r in range(4)}
    pool4.max_output_lines = 5
    try:
        res = pool4.run("import os\nfor i in range(1000):\n    os.write(1, b'%d\\n' % i)\n"
                        "from IPython.display import display\nfor i in range(100):\n    display(i)")
    finally:
        pool4.max_output_lines = 10_000
    for r in range(4):  # the file descriptors are read by a thread: a display may come first
        text, notice = res.stdout[r].split("\n[mpinb] output cut: ")
        shown = text.splitlines()
        assert shown == [str(i) for i in range(len(shown))], text[:200]
        assert len(shown) + len(res.outputs[r]) == 5, "lines and displays share the cap"
        lines, displays = re.match(r"([\d,]+) more lines .*?(?:and ([\d,]+) displays )?not shown", notice).groups()
        assert int(lines.replace(",", "")) + int(displays or 0) == 1000 + 100 - 5, notice


def test_a_rank_log_keeps_a_bounded_copy_of_its_file_descriptors(pool4):
    """The log lives as long as the pool: 6 MB written to fd 1 leave at most 4 MB there."""
    log = pool4._supervisor.cluster.engines[next(iter(pool4._supervisor.cluster.engines))].output_file
    before = os.path.getsize(log)
    res = pool4.run("import os\nfor _ in range(6 * 64):\n    os.write(1, b'.' * 16383 + b'\\n')",
                    targets=[0])
    assert "output cut" in res.stdout[0]
    grown = os.path.getsize(log) - before
    assert 0 < grown <= 4 * 2**20 + 200, grown
    with open(log, "rb") as handle:
        handle.seek(before)
        assert b"this rank's log keeps the first 4 MB of its stdout" in handle.read()


def test_text_that_cannot_be_encoded_loses_nothing_else(any_pool):
    res = any_pool.run("print('before')\nprint('bad \\udcff surrogate')\nprint('after')")
    assert set(res.stdout.values()) == {"before\nbad \\udcff surrogate\nafter\n"}


def test_a_closed_stdout_fails_that_cell_only(any_pool):
    with pytest.raises(mpinb.RankError, match="I/O operation on closed file"):
        any_pool.run("import sys\nprint('open')\nsys.stdout.close()\nprint('closed')")
    assert set(any_pool.run("print('printing again')").stdout.values()) == {"printing again\n"}


def test_rich_display_is_kept_per_rank(pool4):
    res = pool4.run(
        "from IPython.display import display, HTML\n"
        "display(HTML(f'<b>rank {rank}</b>'))\n"
        "import matplotlib.pyplot as plt\n"
        "plt.plot([0, rank])\n"
    )
    for r in range(4):
        bundles = res.outputs[r]
        assert bundles[0]["data"]["text/html"] == f"<b>rank {r}</b>"
        assert any("image/png" in b["data"] for b in bundles), "the figure is shown after the cell"


def test_live_output_reaches_the_callback_while_running(pool4):
    seen = []
    code = "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.4)"
    pool4.run(code, targets=[0], on_output=lambda rank, kind, data: seen.append((rank, kind, data)))
    text = "".join(data for rank, kind, data in seen if kind == "stdout")
    assert text == "tick 0\ntick 1\ntick 2\n"
    assert len([1 for _, kind, _ in seen if kind == "stdout"]) >= 2, "output arrived in pieces, live"


@pytest.mark.quick
def test_timeout_interrupts_and_the_pool_survives(pool4):
    with pytest.raises(TimeoutError, match="did not finish within 1 s"):
        pool4.run("import time\ntime.sleep(30)", timeout=1)
    result = pool4.last_result
    assert all(f.type == "KeyboardInterrupt" for f in result.errors.values())
    assert pool4.run("comm.allreduce(1)").value == {r: 4 for r in range(4)}


def test_bad_code_argument(pool4):
    with pytest.raises(TypeError, match="string of Python source"):
        pool4.run(42)
    with pytest.raises(ValueError, match="positive, finite number of seconds"):
        pool4.run("pass", timeout=0)


def test_status_lists_every_rank(pool4):
    import threading

    rows = pool4.status()
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    assert all(r["state"] == "idle" and r["memory_mb"] > 1 for r in rows)
    assert len({r["pid"] for r in rows}) == 4
    # while a run is out (here from another thread), its ranks are busy, the others idle
    runner = threading.Thread(target=pool4.run, args=("import time\ntime.sleep(1.5)",), kwargs={"targets": [1, 2]})
    runner.start()
    time.sleep(0.5)
    during = {row["rank"]: row["state"] for row in pool4.status()}
    runner.join()
    assert during == {0: "idle", 1: "busy", 2: "busy", 3: "idle"}
    assert {row["state"] for row in pool4.status()} == {"idle"}, "a run's end is the pool's own: no lag"


@pytest.mark.quick
def test_keyboard_interrupt_stops_the_ranks_and_the_pool_survives(pool4):
    import _thread
    import threading
    import time

    timer = threading.Timer(0.5, _thread.interrupt_main)  # what the notebook's stop button does
    began = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt, match="interrupted"):
        pool4.run("import time\nstarted = True\ntime.sleep(30)")
    assert time.monotonic() - began < 3
    assert all(f.type == "KeyboardInterrupt" for f in pool4.last_result.errors.values())
    assert pool4.pull("started") == [True] * 4, "the ranks keep what they did before the interrupt"
    assert pool4.run("comm.allreduce(rank)").value == {r: 6 for r in range(4)}


# -- runs relayed by rank 0 (mpinb.rank._relay) ---------------------------------------------------


def test_a_run_on_several_ranks_costs_the_notebook_one_request(pool4):
    history = pool4._supervisor.client.history
    before = len(history)
    res = pool4.run("print('hello from', rank)\nrank", targets="1-3")
    assert len(history) == before + 1, "one request to rank 0, which relays the run"
    assert res.value == {1: 1, 2: 2, 3: 3}
    assert res.stdout == {r: f"hello from {r}\n" for r in (1, 2, 3)}


def test_output_of_a_relayed_rank_arrives_while_the_run_goes_on(pool4):
    seen: list[tuple[int, float]] = []
    began = time.monotonic()

    def on_output(rank: int, kind: str, data: object) -> None:
        if kind == "stdout":
            seen.append((rank, time.monotonic() - began))

    pool4.run("import sys, time\nif rank == 2:\n    print('early', flush=True)\ntime.sleep(1.5)",
              on_output=on_output)
    early = [at for rank, at in seen if rank == 2]
    assert early and early[0] < 1.2, f"rank 2's line came at {early} s, not before the run ended (1.5 s)"


def test_a_late_reply_is_not_mixed_into_the_next_run(pool4):
    """A rank that takes a while to stop answers after rank 0 stopped gathering (1 s after the
    interrupt); its reply to the abandoned run must not count as its reply to the next one. The
    pool waits for it to be idle before it returns."""
    stubborn = (
        "import time\n"
        "if rank == 3:\n"
        "    try:\n"
        "        time.sleep(30)\n"
        "    except KeyboardInterrupt:\n"
        "        time.sleep(1.5)\n"
        "    late = 'stale'\n"
        "'late' if rank == 3 else 'on time'"
    )
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish within 1 s"):
        pool4.run(stubborn, timeout=1)
    assert time.monotonic() - began > 1 + 1.5, "the pool waited for rank 3 to stop"
    res = pool4.run("rank * 10", timeout=20)
    assert res.value == {0: 0, 1: 10, 2: 20, 3: 30}
    assert pool4.pull("late", targets=3) == ["stale"]


def test_a_rank_that_ignores_the_interrupt_is_interrupted_again(pool4):
    """Code that catches KeyboardInterrupt and carries on gets a second one 2 s after the first;
    the next run finds every rank idle."""
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        pool4.run("import time\nif rank == 0:\n    try:\n        time.sleep(30)\n"
                  "    except KeyboardInterrupt:\n        time.sleep(30)", timeout=0.5)
    took = time.monotonic() - began
    assert 0.5 + 2 < took < 0.5 + 5, f"took {took:.1f} s"
    began = time.monotonic()
    assert pool4.run("rank").value == {0: 0, 1: 1, 2: 2, 3: 3}
    assert time.monotonic() - began < 1.5, "rank 0 was idle: not queued behind the old run"


def test_the_relay_drops_messages_that_are_not_signed(pool4, tmp_path):
    """Anyone on the host can connect to rank 0's sockets; only the pool's signed messages count."""
    import pickle

    import zmq

    from mpinb import rank as _rank

    class Planted:
        def __reduce__(self):
            return (open, (str(tmp_path / "planted"), "w"))

    _, replies = pool4.call(_rank.open_hub, "127.0.0.1")  # the open hub's addresses
    intruder = zmq.Context.instance().socket(zmq.PUSH)
    intruder.setsockopt(zmq.LINGER, 0)
    try:
        intruder.connect(replies)
        intruder.send_multipart([b"1 1", pickle.dumps(Planted()), b"not a signature"])
        assert pool4.run("rank").value == {0: 0, 1: 1, 2: 2, 3: 3}
    finally:
        intruder.close()
    assert not (tmp_path / "planted").exists()
