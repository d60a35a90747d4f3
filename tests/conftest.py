"""Shared pools (real MPI, real ipyparallel) and the check that no process outlives the tests."""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import sys
import tempfile
import time

import psutil
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

POOL_MARKERS = ("ipyparallel", "ipengine", "ipcontroller", "mpiexec", "hydra_pmi_proxy",
                "mpinb/pool/_watchdog.py", "mpinb/pool/_controller_main.py", "mpinb/rank/_engine_main.py")
ARTIFACTS = os.path.join(os.path.dirname(__file__), "..", "test-artifacts")


# This checkout's mpinb: pools of another checkout or install (a second test run, the user's own
# notebook) are theirs, not this run's.
OUR_MPINB = os.path.dirname(os.path.abspath(mpinb.__file__))
# This test run's mark, which every process it starts inherits (ranks and launcher daemons too):
# `make test` runs the tests on two MPIs side by side from one checkout, and each run's checks
# must not take the other's pools for its own.
SESSION_VARIABLE = "MPINB_TEST_SESSION"
OUR_SESSION = os.environ[SESSION_VARIABLE] = f"pytest-{os.getpid()}"


def pool_processes() -> list[psutil.Process]:
    """Every process on this machine that belongs to a pool of this test run (this checkout's
    mpinb, and not marked as another run's)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "name"]):
        try:
            text = " ".join(proc.info["cmdline"] or [proc.info["name"] or ""])
        except psutil.Error:
            continue
        if any(marker in text for marker in POOL_MARKERS) and _session_of(proc) in (None, OUR_SESSION) \
                and not _of_another_venv(text) and _of_this_checkout(proc, text):
            found.append(proc)
    return found


def _session_of(proc: psutil.Process) -> str | None:
    """The test run that started the process, if its environment says so."""
    try:
        return proc.environ().get(SESSION_VARIABLE)
    except psutil.Error:  # (ended meanwhile, or a zombie: it cannot be told apart)
        return None


# The venvs of this checkout (one per MPI: .venv, .venv-impi, .venv-openmpi), and this run's.
VENV_PROGRAM = re.compile(re.escape(os.path.dirname(OUR_MPINB)) + r"/(\.venv[^/\s]*)/bin/")
OUR_VENV = os.path.basename(sys.prefix)


def _of_another_venv(text: str) -> bool:
    """Whether the process runs a program of another venv of this checkout: another MPI's test
    run beside this one (a launcher's daemon started on a test host may not carry its run's mark
    in its environment: MPICH's hydra_pmi_proxy, started through sh there, did not)."""
    return any(venv != OUR_VENV for venv in VENV_PROGRAM.findall(text))


def _of_this_checkout(proc: psutil.Process, text: str) -> bool:
    """Whether the process, or one of its parents (mpiexec's daemons name no file), runs this
    checkout's mpinb; an orphan that names no mpinb (a daemon whose parents are gone) counts, to be
    safe. A chain of parents that reaches init without naming this checkout is another's (a
    second checkout's test run on the same machine)."""
    for step in range(8):
        if OUR_MPINB in text:
            return True
        try:
            parent = proc.parent()
            if parent is None or parent.pid == 1:
                return step == 0 and proc.ppid() in (0, 1) and "/mpinb/" not in text
            proc, text = parent, " ".join(parent.cmdline())
        except psutil.Error:
            return True
    return False


def wait_until_gone(seconds: float = 10.0, ignore: set[int] = frozenset()) -> list[psutil.Process]:
    """Pool processes (other than ``ignore``) still alive after ``seconds``; ``[]`` is good."""
    deadline = time.monotonic() + seconds
    while True:
        left = [p for p in pool_processes() if p.pid not in ignore and _alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


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
    shutil.rmtree(RUNTIME_FOLDER, ignore_errors=True)
    shutil.rmtree(IPYTHON_FOLDER, ignore_errors=True)
    assert not left, "pool processes outlived the test session: " + ", ".join(
        f"{p.pid} {' '.join(p.cmdline())[:80]}" for p in left
    )
    assert not pool_folders, f"pools' socket folders outlived the tests in {user_folder}: " + ", ".join(
        sorted(pool_folders))
    assert not profile_files, "pools' files outlived the tests in their IPython profile: " + ", ".join(profile_files)
    left_files = mpi_temporary_files() - mpi_files_before - in_use()
    assert not left_files, "MPI's files outlived the tests: " + ", ".join(sorted(left_files))
    left_folders = kernel_temporary_folders() - kernel_folders_before
    assert not left_folders, "kernels' folders outlived the tests: " + ", ".join(sorted(left_folders))


def kernel_temporary_folders() -> set[str]:
    """The folders ipykernel's debugger left in the temporary folder (``ipykernel_<pid>``) for
    a kernel that has ended (a running kernel's, of another test run, is not left yet)."""
    import glob
    import tempfile

    return {path for path in glob.glob(os.path.join(tempfile.gettempdir(), "ipykernel_*"))
            if not ((pid := path.rpartition("_")[2]).isdigit() and psutil.pid_exists(int(pid)))}


# Which MPI writes the files of each prefix in mpinb._leftovers: a test run looks only at its own
# MPI's, so that runs on two MPIs can go side by side (Intel MPI's launcher writes none of them).
WRITTEN_BY = {"/dev/shm/mpich_shm_": "MPICH", "/tmp/hydra_hwloc_xmlfile_": "MPICH",
              "/dev/shm/sm_segment.": "Open MPI", "/dev/shm/vader_segment.": "Open MPI",
              "/dev/shm/Intel_MPI_": "Intel MPI"}


def mpi_temporary_files() -> set[str]:
    """This MPI's shared-memory segments and the temporary files and folders its launcher writes
    (see mpinb._leftovers)."""
    import glob

    from mpinb._leftovers import LAUNCHER_FILE_PREFIXES, MPI_SEGMENT_PREFIXES

    ours = this_mpi()
    prefixes = [prefix for prefix in LAUNCHER_FILE_PREFIXES + MPI_SEGMENT_PREFIXES if WRITTEN_BY[prefix] == ours]
    found = {path for prefix in prefixes for path in glob.glob(prefix + "*")}
    return found | (_orphaned_sessions() if ours == "Open MPI" else set())


def _orphaned_sessions() -> set[str]:
    """Open MPI's launcher's session folders ($TMPDIR/ompi.<its pid>) whose launcher is gone, and
    every job folder of an MPI singleton (a process that started MPI without mpiexec:
    $TMPDIR/ompi.<host>.<uid>/jf.0/<job>), which Open MPI 5 leaves even after MPI_Finalize."""
    import glob
    import tempfile

    top = tempfile.gettempdir()
    launchers = {path for path in glob.glob(os.path.join(top, "ompi.*"))
                 if (pid := os.path.basename(path).removeprefix("ompi.")).isdigit()
                 and not psutil.pid_exists(int(pid))}
    return launchers | set(glob.glob(os.path.join(top, "ompi.*.*", "jf.*", "*")))


def intel_mpi() -> bool:
    """Whether this environment's mpiexec is Intel MPI's (an MPICH derivative: mpi_family says
    "MPICH" for it, but its launcher and shared memory behave in their own ways)."""
    return this_mpi() == "Intel MPI"


@functools.cache
def this_mpi() -> str:
    """"MPICH", "Open MPI" or "Intel MPI": this environment's, from its ``mpiexec --version``."""
    import subprocess

    from mpinb.pool._launch import find_mpiexec, mpi_family_in

    said = subprocess.run([find_mpiexec(), "--version"], capture_output=True, text=True, timeout=30)
    text = said.stdout + said.stderr
    return "Intel MPI" if "Intel(R) MPI" in text else mpi_family_in(text) or "MPICH"


def files_of_pool(pool) -> set[str]:
    """The MPI segments that the pool's ranks map and the launcher files their parents (MPICH's
    proxies) hold open: this pool's own, whatever other pools on the machine write meanwhile."""
    from mpinb._leftovers import launcher_files, mpi_segments

    pids = [state["pid"] for state in pool.status()]
    parents = set()
    for pid in pids:
        try:
            parents.add(psutil.Process(pid).ppid())
        except psutil.Error:
            continue
    return {path for path, _ in mpi_segments(pids) | launcher_files(parents)}


def in_use() -> set[str]:
    """Every such file that a process on this machine has open or mapped (another pool's is not ours)."""
    from mpinb._leftovers import mpi_files

    return {path for path, _ in mpi_files(proc.pid for proc in psutil.process_iter())}


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


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    file = report.nodeid.split("::", 1)[0]
    _SECONDS_PER_FILE[file] = _SECONDS_PER_FILE.get(file, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    """Where the run's minutes went, a line per test file (setup, call and teardown): what to
    look at first when `make test` grows past its budget."""
    if not _SECONDS_PER_FILE:
        return
    terminalreporter.section("seconds per test file")
    for file, seconds in sorted(_SECONDS_PER_FILE.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s  {file}")
