"""Shared pools (real MPI, real ipyparallel) and the check that no process outlives the tests."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

import pytest

import mpinb
from mpinb.notebook import _session as session

# What mpinb says follows the locale; tests read its English (the Chinese has tests of its own),
# and kernels, ranks and servers the tests start inherit this.
os.environ["MPINB_LANGUAGE"] = "en"
# A background job of a non-interactive shell (how CI systems and `nohup` start commands) runs with
# SIGINT ignored, and so does everything it starts: then _thread.interrupt_main(), the tests' stop
# button, does nothing at all. A notebook's kernel always handles SIGINT; so does the test process.
signal.signal(signal.SIGINT, signal.default_int_handler)

# A local pool makes a folder for its sockets in $XDG_RUNTIME_DIR/mpinb-<uid>, else in the temporary
# folder (mpinb/pool/_runfolder.py): this run's pools use a runtime folder of the run's own, which
# the run's end removes, after checking that every pool removed its own folder in it.
RUNTIME_FOLDER = os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="mpinb-tests-")
# Pools keep connection files, launchers' logs and stacks in the IPython profile "mpinb"
# ($IPYTHONDIR, else ~/.ipython): this run's pools (and its kernels) use an IPython folder of the
# run's own. A run then never reads what another run or the user's own pools left in ~/.ipython,
# and the run's end can check that its pools removed their files there. Unlike the runtime
# folder, it stands for a folder in the home directory, which the test hosts share as compute
# nodes do (tests/multihost_cluster.py): a folder of its own in /tmp.
IPYTHON_FOLDER = os.environ["IPYTHONDIR"] = tempfile.mkdtemp(prefix="mpinb-tests-ipython-")
PROFILE_FOLDERS = [os.path.join(IPYTHON_FOLDER, "profile_mpinb", name) for name in ("log", "security", "stacks")]


def _remove_the_runs_folders() -> None:
    shutil.rmtree(RUNTIME_FOLDER, ignore_errors=True)
    shutil.rmtree(IPYTHON_FOLDER, ignore_errors=True)


atexit.register(_remove_the_runs_folders)  # (also when pytest stops before configuring: a usage error)

# (imported after the folders are set: its import marks this session's processes)
from _processes import (  # noqa: E402
    ARTIFACTS,
    command_line,
    kernel_temporary_folders,
    mpi_files_left_since,
    mpi_temporary_files,
    pool_processes,
    settled,
    wait_until_gone,
)


@pytest.fixture
def existing_pools() -> set[int]:
    """PIDs of pool processes that other (shared) fixtures already run, to leave out of leak checks."""
    return {p.pid for p in pool_processes()}


@pytest.fixture(scope="session", autouse=True)
def no_process_outlives_the_tests():
    """What the tests start, they stop; pools that ran before them (the user's own) are left be."""
    before = {p.pid for p in pool_processes()}
    mpi_files_before = mpi_temporary_files()
    kernel_folders_before = kernel_temporary_folders()
    yield
    session.stop_pool()
    # (a value of the ranks' mpinb.rank or mpi4py objects unpickled here would start MPI in the
    # notebook's process: the test process is a notebook's)
    assert "mpi4py.MPI" not in sys.modules, "a test made the test process import mpi4py.MPI"
    left = wait_until_gone(ignore=before)
    user_folder = os.path.join(RUNTIME_FOLDER, f"mpinb-{os.getuid()}")
    pool_folders = os.listdir(user_folder) if os.path.isdir(user_folder) else []
    profile_files = sorted(os.path.relpath(os.path.join(top, name), IPYTHON_FOLDER)
                           for folder in PROFILE_FOLDERS for top, _, names in os.walk(folder) for name in names)
    _remove_the_runs_folders()
    assert not left, "pool processes outlived the test session: " + ", ".join(command_line(p) for p in left)
    assert not pool_folders, f"pools' socket folders outlived the tests in {user_folder}: " + ", ".join(
        sorted(pool_folders))
    assert not profile_files, "pools' files outlived the tests in their IPython profile: " + ", ".join(profile_files)
    left_files = mpi_files_left_since(mpi_files_before, seconds=15)
    assert not left_files, "MPI's files outlived the tests: " + ", ".join(sorted(left_files))
    left_folders = settled(lambda: kernel_temporary_folders() - kernel_folders_before, seconds=15)
    assert not left_folders, "kernels' folders outlived the tests: " + ", ".join(sorted(left_folders))


def _made_during(path: str) -> str:
    """Which test ran when ``path`` was last changed: where to look for what left it."""
    try:
        changed = os.stat(path).st_mtime
    except OSError:
        return "gone since"
    running = [test for began, test in _TESTS_BEGAN if began <= changed]
    return f"changed during {running[-1]}" if running else "changed before the first test"


@pytest.fixture(autouse=True)
def shared_pools_stay_usable(request):
    """A shared pool that a test leaves unusable fails that test and is restarted for the next,
    so that one failure stays one failure instead of the first of many timeouts."""
    yield
    for name, value in list(request.node.funcargs.items()):
        # (a pool a test stopped on purpose, or replaced through the magics, is not checked)
        if isinstance(value, mpinb.Pool) and value.running:
            problem = _unusable(value)
            if problem:
                value.restart()
                pytest.fail(f"the test left its shared pool ({name}) unusable ({problem}); it was restarted "
                            "for the next test", pytrace=False)


def _unusable(pool: mpinb.Pool) -> str | None:
    """Why ``pool`` cannot run a collective on every rank now, or None."""
    try:
        values = pool.run("comm.allreduce(1)", timeout=30, trace=False).value
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    expected = {rank: pool.size for rank in range(pool.size)}
    return None if values == expected else f"allreduce gave {values}"


@pytest.fixture(scope="session", params=[1, 4], ids=["1-rank", "4-ranks"])
def any_pool(request):
    """The same tests at size 1 and size N, as mpi4py's own suite does."""
    with mpinb.Pool(request.param) as pool:
        yield pool


@pytest.fixture(scope="session")
def pool4():
    with mpinb.Pool(4) as pool:
        yield pool


@pytest.fixture(scope="session")
def ip(pool4):
    """An IPython shell with ``%load_ext mpinb`` whose magics use the shared 4-rank pool."""
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()  # the test session's one shell (start_ipython() gives None once one is made)
    shell.run_line_magic("load_ext", "mpinb")
    session.use_pool(pool4)
    yield shell
    session.use_pool(None)


@pytest.fixture(scope="session")
def artifacts() -> str:
    os.makedirs(ARTIFACTS, exist_ok=True)
    return os.path.abspath(ARTIFACTS)


_SECONDS_PER_FILE: dict[str, float] = {}
_CPU_PER_FILE: dict[str, float] = {}


def _cpu_seconds() -> float:
    """CPU time of this process and of every process it reaped (a pool's mpiexec, and through it
    the ranks; a kernel; a subprocess): what a test cost the cores, not only how long it took. A
    process is counted when it is reaped: a pool shared by several tests counts for the file whose
    test stops it (the session's shared pools, for the last file)."""
    import resource

    return sum(usage.ru_utime + usage.ru_stime for usage in
               (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


_TESTS_BEGAN: list[tuple[float, str]] = []  # (wall clock, test): which test ran when a file was made


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    began = _cpu_seconds()
    _TESTS_BEGAN.append((time.time(), item.nodeid))
    try:
        return (yield)
    finally:
        file = item.nodeid.split("::", 1)[0]
        _CPU_PER_FILE[file] = _CPU_PER_FILE.get(file, 0.0) + _cpu_seconds() - began


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    file = report.nodeid.split("::", 1)[0]
    _SECONDS_PER_FILE[file] = _SECONDS_PER_FILE.get(file, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    """Where the run's minutes went, a line per test file (setup, call and teardown; wall time and
    the CPU time of the session and the processes it reaped): what to look at first when
    `make test` grows past its budget. ``MPINB_TIMINGS=FILE`` also writes them as JSON
    (.ci/suite.py gathers each stage's)."""
    rows = {file: {"seconds": round(seconds, 2), "cpu_s": round(_CPU_PER_FILE.get(file, 0.0), 2)}
            for file, seconds in _SECONDS_PER_FILE.items()}
    if os.environ.get("MPINB_TIMINGS"):
        with open(os.environ["MPINB_TIMINGS"], "w") as handle:
            json.dump(rows, handle, indent=1)
    if not rows:
        return
    terminalreporter.section("seconds per test file (wall, CPU)")
    for file, row in sorted(rows.items(), key=lambda item: -item[1]["seconds"]):
        terminalreporter.write_line(f"{row['seconds']:8.1f} s {row['cpu_s']:8.1f} CPU s  {file}")


# `unit` means "starts no process" (`make check` runs these on every edit): a unit test that starts
# one (a pool, a kernel, a subprocess) fails, saying what it started.
_STARTS = ("subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.exec", "os.system", "os.spawn")
_started_by_unit_test: list[list[str]] = []  # (while a unit test runs: what its thread started)


def _note_starts(event: str, args: tuple) -> None:
    # (only the test's own thread: a pool of another test may start processes from a thread of its own)
    if _started_by_unit_test and event.startswith(_STARTS) and threading.current_thread() is threading.main_thread():
        _started_by_unit_test[-1].append(f"{event} {str(args)[:120]}")


sys.addaudithook(_note_starts)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    if item.get_closest_marker("unit") is None:
        return (yield)
    started: list[str] = []
    _started_by_unit_test.append(started)
    try:
        return (yield)
    finally:
        _started_by_unit_test.remove(started)
        if started:
            pytest.fail("a test marked unit started a process (mark it otherwise, or start none): "
                        + "; ".join(started[:3]), pytrace=False)


# Every test collected, before `-m` deselects any: tests/test_layout.py checks that .ci/suite.py's
# stages run each one where it should.
COLLECTED = pytest.StashKey[list]()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, items: list[pytest.Item]) -> None:
    session.stash[COLLECTED] = list(items)


@pytest.fixture
def collected_tests(request) -> list[pytest.Item]:
    """Every test this session collected, also those that `-m` or `-k` left out."""
    return request.session.stash.get(COLLECTED, [])


def pytest_unconfigure(config: pytest.Config) -> None:
    """The run's folders go also when no test ran (`--collect-only`, nothing selected)."""
    _remove_the_runs_folders()
