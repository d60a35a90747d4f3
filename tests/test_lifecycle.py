"""Starting and stopping: bad input, MPI that fails to start, and no process left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from _processes import (
    files_of_pool,
    intel_mpi,
    mpi_files_left_since,
    mpi_temporary_files,
    pool_processes,
    this_mpi,
    wait_until_gone,
)

import mpinb
from mpinb.pool._launch import find_mpiexec, mpi_family

pytestmark = pytest.mark.every_mpi


@pytest.mark.parametrize("n, error", [(0, ValueError), (-2, ValueError), (2.5, TypeError), ("4", TypeError)])
def test_bad_sizes_are_refused_before_anything_starts(n, error):
    with pytest.raises(error, match=r"n \(the number of ranks\) must be a whole number, at least 1"):
        mpinb.Pool(n)


@pytest.mark.parametrize("option, value, error, message", [
    ("start_timeout", float("nan"), ValueError, "start_timeout must be a positive, finite number of seconds"),
    ("start_timeout", float("inf"), ValueError, r"for no limit, leave it out: None"),
    ("stop_timeout", -1, ValueError, "stop_timeout must be a positive"),
    ("stop_timeout", "5", TypeError, "stop_timeout must be a number of seconds, not '5'"),
    ("trace_capacity", 0, ValueError, "trace_capacity must be a whole number, at least 1, not 0"),
    ("trace_capacity", 1.5, TypeError, "trace_capacity must be a whole number"),
    ("trace_budget", -3, ValueError, "trace_budget must be a whole number, at least 1"),
    ("max_output_lines", "10", TypeError, "max_output_lines must be a whole number"),
    ("max_output_chars", 0, ValueError, "max_output_chars must be a whole number, at least 1"),
    ("launcher", "slrum", ValueError, "unknown launcher 'slrum': use 'mpi'"),
    ("launcher", None, TypeError, "launcher must be text"),
    ("mpiexec_args", ["-n", 2], TypeError, "mpiexec_args must be a list of arguments"),
    ("env", {"": "x"}, TypeError, "env must map variable names to values"),
    ("env", ["A=1"], TypeError, "env must map variable names to values"),
    ("yield_when_idle", "no", TypeError, "yield_when_idle must be True, False or None"),
    ("controller_ip", 127, TypeError, "controller_ip must be text"),
    ("encrypt", "yes", TypeError, "encrypt must be True, False or None"),
])
def test_bad_options_are_refused_at_the_door(option, value, error, message):
    with pytest.raises(error, match=message):
        mpinb.Pool(2, **{option: value})


def test_options_set_later_are_checked_too():
    pool = mpinb.Pool(2, start_timeout=10)
    with pytest.raises(ValueError, match="max_output_lines must be a whole number, at least 1, not -1"):
        pool.max_output_lines = -1
    with pytest.raises(ValueError, match="stop_timeout must be a positive, finite number"):
        pool.stop_timeout = float("nan")
    assert pool.max_output_lines == 10_000 and pool.start_timeout == 10.0
    assert mpinb.Pool(2, **pool.options()).options() == pool.options()


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), 0, -1])
def test_a_run_timeout_that_cannot_end_a_run_is_refused(pool4, timeout):
    with pytest.raises(ValueError, match="timeout must be a positive, finite number of seconds"):
        pool4.run("1", timeout=timeout)
    assert pool4.run("1").value[0] == 1


def test_a_long_temporary_folder_still_gives_the_pool_a_private_one(tmp_path, monkeypatch, existing_pools):
    import tempfile

    long = tmp_path / ("x" * 120)
    long.mkdir()
    monkeypatch.setenv("TMPDIR", str(long))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads $TMPDIR again
    fallback = f"/tmp/mpinb-{os.getuid()}"
    fallback_was_there = os.path.exists(fallback)
    with mpinb.Pool(2) as pool:
        assert pool.run("rank").value == {0: 0, 1: 1}
        folder = pool._supervisor.run_folder
        assert folder.startswith(fallback + "/")
    assert not wait_until_gone(5, existing_pools)
    assert not os.path.exists(folder)
    if not fallback_was_there:
        with contextlib.suppress(OSError):  # (unless a test run beside uses it now)
            os.rmdir(fallback)


@pytest.mark.unit
def test_a_user_folder_removed_while_a_pool_starts_is_made_again(tmp_path, monkeypatch):
    """A cleaner of old temporary folders (systemd-tmpfiles, a test run beside) may remove the
    empty mpinb-<uid> between its check and the making of the pool's folder in it."""
    import tempfile

    from mpinb.pool import _runfolder

    monkeypatch.setattr(_runfolder, "candidates", lambda: [str(tmp_path)])
    made = tempfile.mkdtemp
    removals = []

    def removed_first(dir: str, prefix: str) -> str:
        if not removals:
            removals.append(dir)
            os.rmdir(dir)
        return made(dir=dir, prefix=prefix)

    monkeypatch.setattr(_runfolder.tempfile, "mkdtemp", removed_first)
    folder = _runfolder.make_run_folder()
    assert removals == [str(tmp_path / f"mpinb-{os.getuid()}")] and os.path.dirname(folder) == removals[0]
    assert oct(os.stat(removals[0]).st_mode & 0o777) == oct(0o700)


def test_no_place_for_private_sockets_says_what_to_set(tmp_path, monkeypatch, existing_pools):
    from mpinb.pool import _runfolder

    monkeypatch.setattr(_runfolder, "candidates", lambda: [str(tmp_path / ("x" * 120))])
    with pytest.raises(mpinb.PoolStartError, match=r"its path is too long for a socket.*Set \$TMPDIR"):
        mpinb.Pool(2).start()
    assert not wait_until_gone(2, existing_pools), "nothing started, not even the watchdog"


def test_missing_mpiexec_says_how_to_install_one():
    pool = mpinb.Pool(2, mpiexec="/nonexistent/mpiexec")
    with pytest.raises(mpinb.PoolStartError, match=r"pip install 'mpinb\[mpich\]'"):
        pool.start()
    assert not pool.running


def test_an_mpi_that_fails_to_start_is_reported_quickly(existing_pools):
    pool = mpinb.Pool(2, mpiexec_args=["--no-such-option"])
    began = time.monotonic()
    with pytest.raises(mpinb.PoolStartError) as info:
        pool.start()
    assert time.monotonic() - began < 15
    text = str(info.value)
    assert "MPI launcher exited" in text and "no-such-option" in text
    assert not wait_until_gone(5, existing_pools)


def test_more_ranks_than_the_memory_holds_are_refused_with_advice(existing_pools):
    import psutil

    from mpinb.pool._launch import MEMORY_PER_RANK

    too_many = psutil.virtual_memory().available // MEMORY_PER_RANK + 100
    pool = mpinb.Pool(too_many)
    began = time.monotonic()
    with pytest.raises(mpinb.PoolStartError, match=rf"{too_many} ranks need about .* GiB of memory .* Start at most"):
        pool.start()
    assert time.monotonic() - began < 2, "refused before anything starts"
    assert not pool.running and not wait_until_gone(1, existing_pools)


def test_start_up_may_take_longer_with_more_ranks_per_core():
    from mpinb.pool._launch import LaunchSettings

    cores = os.cpu_count() or 1
    assert LaunchSettings(n=cores).default_start_timeout == 60
    assert LaunchSettings(n=cores + 62).default_start_timeout == 122
    assert LaunchSettings(n=cores + 62, launcher="slurm").default_start_timeout == 60, "ranks elsewhere"
    assert mpinb.Pool(4, start_timeout=5).start_timeout == 5


def test_using_a_stopped_pool_says_what_to_do():
    pool = mpinb.Pool(2)
    with pytest.raises(mpinb.PoolError, match="call pool.start()"):
        pool.run("pass")


@pytest.mark.quick
def test_start_stop_restart_leave_nothing_behind(existing_pools):
    pool = mpinb.Pool(2)
    with pool:
        assert pool.run("size").value == {0: 2, 1: 2}
        pids = [row["pid"] for row in pool.status()]
        pool.restart(3)
        assert pool.run("size").value == {0: 3, 1: 3, 2: 3}
        assert not any(_alive(pid) for pid in pids)
    began = time.monotonic()
    assert not wait_until_gone(5, existing_pools)
    assert time.monotonic() - began < 5
    assert not pool.running


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="MPI's shared memory lives in /dev/shm on Linux")
@pytest.mark.skipif(intel_mpi(), reason="Intel MPI unlinks its shared-memory files as soon as it maps them")
def test_mpi_shared_memory_is_removed_with_the_pool_also_after_a_rank_died():
    """Ranks exit without MPI_Finalize, which would have removed MPI's shared-memory files."""
    with mpinb.Pool(3) as pool:
        pool.run("import numpy as np\ncomm.Allreduce(np.ones(2**20), np.empty(2**20))")
        used = files_of_pool(pool)
        assert any(path.startswith("/dev/shm/") for path in used), "the ranks share memory through /dev/shm"
        with pytest.raises(mpinb.RankDiedError):
            pool.run("import os\nif rank == 1:\n    os._exit(3)\ncomm.Barrier()")
        assert not used & mpi_temporary_files(), "the dead pool's files are gone"
        pool.run("import numpy as np\ncomm.Allreduce(np.ones(2**20), np.empty(2**20))")
        restarted = files_of_pool(pool)
        assert restarted and not restarted & used
    assert not restarted & mpi_temporary_files(), "and the restarted pool's"


@pytest.mark.skipif(mpi_family(find_mpiexec()) != "MPICH" or intel_mpi(),
                    reason="MPICH's hydra_pmi_proxy writes the topology file (Intel MPI's does not)")
def test_a_killed_mpiexec_leaves_no_launcher_file_behind():
    """hydra_pmi_proxy removes its topology file in /tmp only when mpiexec stops it in order."""
    with mpinb.Pool(2) as pool:
        written = {path for path in files_of_pool(pool) if path.startswith("/tmp/hydra_hwloc_xmlfile_")}
        assert written, "the proxy wrote the host's topology for the ranks"
        ranks = [psutil.Process(info["pid"]) for info in pool.status()]
        mpiexec = ranks[0].parent().parent()  # rank, proxy, mpiexec
        assert mpiexec.name().startswith("mpiexec")
        mpiexec.kill()
        mpiexec.wait(10)
        # The proxy ends the ranks once it sees mpiexec gone, which on a loaded machine can come
        # after a short run (a Barrier between live ranks then simply succeeds, as it should).
        _, alive = psutil.wait_procs(ranks, timeout=30)
        assert not alive, "the ranks outlived their mpiexec by 30 s"
        with pytest.raises(mpinb.RankDiedError):
            pool.run("comm.Barrier()", timeout=30)
        assert pool.run("rank").value == {0: 0, 1: 1}, "the pool was started again"
        assert not written & mpi_temporary_files(), "the killed launcher's file is gone with its pool"
        restarted = files_of_pool(pool)
        assert restarted and not restarted & written
    assert not restarted & mpi_temporary_files(), "and the restarted pool's"


@pytest.mark.skipif(mpi_family(find_mpiexec()) != "Open MPI", reason="Open MPI's prterun keeps a session folder")
def test_a_killed_mpiexec_leaves_no_session_folder_behind():
    """prterun removes its session folder ($TMPDIR/ompi.<pid>) only when it exits in order."""
    import tempfile

    def session(pool) -> str:
        rank = psutil.Process(pool.status()[0]["pid"])
        launcher = next(proc for proc in rank.parents() if proc.name().startswith(("prterun", "mpiexec")))
        return os.path.join(tempfile.gettempdir(), f"ompi.{launcher.pid}")

    with mpinb.Pool(2) as pool:
        first = session(pool)
        assert os.path.isdir(first), "prterun keeps its session there"
        psutil.Process(int(first.rpartition(".")[2])).kill()
        with pytest.raises(mpinb.RankDiedError):
            # (orphaned ranks can finish a quick cell before the launcher's death reaches them)
            pool.run("import time\ntime.sleep(5)\ncomm.Barrier()", timeout=30)
        assert pool.run("rank").value == {0: 0, 1: 1}, "the pool was started again"
        assert not os.path.exists(first), "the killed launcher's session folder is gone"
        second = session(pool)
        assert os.path.isdir(second)
    assert not os.path.exists(second), "and the restarted pool's, stopped in order"


def test_after_a_death_the_error_comes_at_once_and_the_pool_starts_in_the_background():
    with mpinb.Pool(2) as pool:
        pool.run("comm.Barrier()")
        start_s = _timed(pool.restart)
        began = time.monotonic()
        with pytest.raises(mpinb.RankDiedError) as info:
            pool.run("import os\nif rank == 1:\n    os._exit(3)\ncomm.Barrier()")
        to_error = time.monotonic() - began
        assert "2 fresh ranks are starting in the background" in str(info.value)
        assert pool.running and pool._starting is not None, "the start goes on after the error"
        assert to_error < start_s, f"the error took {to_error:.2f} s, a start {start_s:.2f} s"
        assert pool.run("comm.allreduce(1)").value == {0: 2, 1: 2}, "the next run waits for it"
        assert pool._starting is None


def test_a_background_start_that_fails_says_so_at_the_next_run(existing_pools):
    before = mpi_temporary_files()
    with mpinb.Pool(2) as pool:
        pool.start_timeout = 0.01  # too short for any start
        with pytest.raises(mpinb.RankDiedError):
            pool.run("import os\nif rank == 1:\n    os._exit(3)\ncomm.Barrier()")
        with pytest.raises(mpinb.PoolStartError, match=r"(?s)could not start again after the last failure .*"
                                                       r"`%mpi restart` \(Pool.restart\(\)\) tries again"):
            pool.run("rank")
        assert not pool.running
        pool.start_timeout = None
        assert pool.restart().run("rank").value == {0: 0, 1: 1}
    assert not wait_until_gone(10, existing_pools)
    # (a start broken off while the ranks are in MPI_Init: Intel MPI's segment, made just then)
    assert not mpi_files_left_since(before), "a start broken off left MPI's files"


def _timed(call) -> float:
    began = time.monotonic()
    call()
    return time.monotonic() - began


@pytest.mark.parametrize("launcher", ["running", "killed first"])
def test_dead_notebook_process_takes_its_pool_with_it(launcher, existing_pools):
    before = mpi_temporary_files()
    owner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import contextlib, mpinb, psutil, sys
            pool = mpinb.Pool(2).start()
            if {launcher == "killed first"}:
                for proc in psutil.Process().children(recursive=True):
                    with contextlib.suppress(psutil.Error):  # (a child may end meanwhile)
                        if proc.name().startswith("mpiexec"):
                            proc.kill()
                            proc.wait(10)
            print("ready", flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert owner.stdout.readline().strip() == "ready"
        assert len(pool_processes()) >= 4
        owner.send_signal(signal.SIGKILL)
        owner.wait(5)
        assert not wait_until_gone(10, existing_pools), "a SIGKILLed owner must not leave ranks running"
        assert not mpi_files_left_since(before), "nor MPI's files"
    finally:
        owner.kill()


def test_oversubscribed_pool_yields_and_stays_usable():
    ranks = 4 * (os.cpu_count() or 1)
    with mpinb.Pool(ranks) as pool:
        env = pool.run("import os\nos.environ.get('MPIR_CVAR_ENABLE_HEAVY_YIELD')", targets=[0]).value[0]
        assert env == "1"
        began = time.monotonic()
        for _ in range(5):
            assert set(pool.run("comm.allreduce(rank)").value.values()) == {ranks * (ranks - 1) // 2}
        assert time.monotonic() - began < 10


def test_user_environment_reaches_the_ranks():
    with mpinb.Pool(1, env={"OMP_NUM_THREADS": "3", "MY_SETTING": "x"}) as pool:
        value = pool.run("import os\nos.environ['OMP_NUM_THREADS'], os.environ['MY_SETTING']").value
    assert value == {0: ("3", "x")}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_launcher_options_reach_ipyparallel_launcher():
    with mpinb.Pool(1, launcher_options={"stop_seconds_until_kill": 2}) as pool:
        (engine_set,) = pool._supervisor.cluster.engines.values()
        assert engine_set.stop_seconds_until_kill == 2
        assert pool.run("rank").value == {0: 0}


def test_the_notebook_process_never_initializes_mpi(tmp_path):
    """Only the ranks run MPI: a singleton MPI_Init in the notebook hangs under Slurm or Open MPI."""
    script = tmp_path / "script.py"
    script.write_text("from mpi4py import MPI\nprint(MPI.COMM_WORLD.Get_rank())\n")
    code = textwrap.dedent(f"""
        import sys
        import mpinb, mpinb.pool, mpinb.notebook, mpinb.notebook.kernel, mpinb.teach
        import mpinb.cli._doctor, mpinb.cli, mpinb.trace, mpinb.widgets, mpinb.train, mpinb.rank
        with mpinb.Pool(2) as pool:
            res = pool.run("comm.allreduce(rank)")
            res.trace.summary(), res.trace.messages(), res.trace.matrix(), res.trace.collectives()
            pool.run_file({str(script)!r})
        assert "mpi4py.MPI" not in sys.modules, "the notebook process imported mpi4py.MPI"
        import mpi4py
        mpi4py.rc.initialize = False  # so that this check cannot initialize MPI itself
        from mpi4py import MPI
        print(res.value, MPI.Is_initialized())
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "{0: 1, 1: 1} False"



def test_the_doctors_look_at_the_library_starts_no_mpi():
    """``mpinb doctor`` reads the library's version in a process of its own, without mpiexec: one
    that initialised MPI there would be a singleton, whose session folder and shared-memory
    segment Open MPI 5 leaves behind (seen: one per ``mpinb doctor``)."""
    from mpinb.cli._doctor import Report, _Found, _library

    before = mpi_temporary_files()
    report = Report()
    _library(report, _Found(2))
    assert report.problems == 0, report.lines
    assert "on " + {"Intel MPI": "Intel(R) MPI"}.get(this_mpi(), this_mpi()) in report.lines[0], report.lines
    assert mpi_files_left_since(before) == set()

@pytest.mark.skipif(sys.platform != "linux", reason="a child subreaper is Linux's")
@pytest.mark.timeout(30)
def test_what_mpiexec_leaves_behind_ends_with_it(tmp_path):
    """mpiexec runs under a reaper: helpers that outlive it (in sessions of their own, as MPICH's
    proxies are) are ended once it exits, and its exit status is passed on."""
    import psutil

    reaper = os.path.join(os.path.dirname(mpinb.__file__), "pool", "_reaper.py")
    pids = tmp_path / "pids"
    # an "mpiexec" that leaves two helpers behind, one of which ignores SIGTERM
    script = (f"setsid sleep 60 & echo $! >> {pids}; "
              f"setsid sh -c 'trap \"\" TERM; sleep 61' & echo $! >> {pids}; sleep 0.2; exit 3")
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-I", "-S", reaper, "sh", "-c", script], timeout=20)
    assert done.returncode == 3, "mpiexec's status"
    assert time.monotonic() - began < 5
    left = [int(pid) for pid in pids.read_text().split()]
    assert len(left) == 2 and not any(psutil.pid_exists(pid) for pid in left), "the helpers ended with it"


@pytest.mark.parametrize("session, ours", [(None, True), ("another", False)])
def test_the_leak_checks_take_only_this_test_runs_processes_for_their_own(session, ours):
    """`make test` runs test sessions side by side from one checkout: a process that another
    session started is marked so, and is not this session's, so that neither one's checks see the
    other's pools as left behind."""
    from _processes import OUR_MPINB, SESSION_VARIABLE

    env = dict(os.environ, **({SESSION_VARIABLE: session} if session else {}))
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                                 os.path.join(OUR_MPINB, "rank", "_engine_main.py")], env=env)
    try:  # (Popen returns once the child has exec'd: its command line is the stand-in's)
        assert (stand_in.pid in {p.pid for p in pool_processes()}) == ours
    finally:
        stand_in.kill()
        stand_in.wait(10)


@pytest.mark.unit
def test_each_leftover_file_is_told_apart_by_the_mpi_that_writes_it():
    """The checks of MPI's leftover files look only at this MPI's, so that runs on two MPIs can go
    side by side: each prefix that mpinb cleans up must say which MPI writes it."""
    from _processes import WRITTEN_BY

    from mpinb.common._leftover_files import LAUNCHER_FILE_PREFIXES, MPI_SEGMENT_PREFIXES

    assert set(WRITTEN_BY) == set(LAUNCHER_FILE_PREFIXES + MPI_SEGMENT_PREFIXES)
    assert set(WRITTEN_BY.values()) <= {"MPICH", "Open MPI", "Intel MPI"}
