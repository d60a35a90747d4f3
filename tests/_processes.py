"""What the tests know of the processes and files that pools leave: which belong to this test
session, and whether they are gone. Imported as a module by conftest.py and by the tests."""

from __future__ import annotations

import functools
import glob
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable

import psutil
import pytest

import mpinb

POOL_MARKERS = ("ipyparallel", "ipengine", "ipcontroller", "mpiexec", "hydra_pmi_proxy",
                "mpinb/pool/_watchdog.py", "mpinb/pool/_controller_main.py", "mpinb/rank/_engine_main.py")
ARTIFACTS = os.path.join(os.path.dirname(__file__), "..", "test-artifacts")


# This checkout's mpinb: pools of another checkout or install (a second test run, the user's own
# notebook) are theirs, not this run's.
OUR_MPINB = os.path.dirname(os.path.abspath(mpinb.__file__))
# This test session's mark, which every process it starts inherits (ranks, launcher daemons, Slurm
# steps, the test hosts' daemons through the ssh stand-in): `make test` runs several sessions side
# by side from one checkout (.ci/suite.py's stages, on one MPI or on several), and each one's
# checks must not take another's pools for its own.
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
    session beside this one (should a launcher's daemon lose its session's mark on the way)."""
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


def command_line(proc: psutil.Process) -> str:
    """``PID: COMMAND LINE`` (cut at 200 characters), for a message; "(ended)" once it has."""
    try:
        return f"{proc.pid}: {' '.join(proc.cmdline())[:200]}"
    except psutil.Error:
        return f"{proc.pid}: (ended)"


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kernel_temporary_folders() -> set[str]:
    """The folders ipykernel's debugger left in the temporary folder (``ipykernel_<pid>``) for
    a kernel that has ended (a running kernel's, of another test run, is not left yet)."""
    return {path for path in glob.glob(os.path.join(tempfile.gettempdir(), "ipykernel_*"))
            if not ((pid := path.rpartition("_")[2]).isdigit() and psutil.pid_exists(int(pid)))}


# Which MPI writes the files of each prefix in mpinb.common._leftover_files: a test session looks only at its
# own MPI's, so that sessions on other MPIs can go beside it (Intel MPI's launcher writes none of
# them); beside one on the same MPI, it counts only what no live process holds.
WRITTEN_BY = {"/dev/shm/mpich_shm_": "MPICH", "/tmp/hydra_hwloc_xmlfile_": "MPICH",
              "/dev/shm/sm_segment.": "Open MPI", "/dev/shm/vader_segment.": "Open MPI",
              "/dev/shm/Intel_MPI_": "Intel MPI"}


def mpi_temporary_files() -> set[str]:
    """This MPI's shared-memory segments and the temporary files and folders its launcher writes
    (see mpinb.common._leftover_files)."""
    from mpinb.common._leftover_files import LAUNCHER_FILE_PREFIXES, MPI_SEGMENT_PREFIXES

    ours = this_mpi()
    prefixes = [prefix for prefix in LAUNCHER_FILE_PREFIXES + MPI_SEGMENT_PREFIXES if WRITTEN_BY[prefix] == ours]
    found = {path for prefix in prefixes for path in glob.glob(prefix + "*")}
    return found | (_orphaned_sessions() if ours == "Open MPI" else set())


def settled(leftovers: Callable[[], set[str]], seconds: float) -> set[str]:
    """What ``leftovers()`` still finds after up to ``seconds``: another test session beside this
    one (make test's stages) may be making or removing files of its own just as this one looks."""
    deadline = time.monotonic() + seconds
    while (found := leftovers()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def mpi_files_left_since(before: set[str], seconds: float = 5.0) -> set[str]:
    """This MPI's files made since ``before`` that no process holds (those a live process holds,
    of another session, are not left), once they settle for up to ``seconds``."""
    return settled(lambda: mpi_temporary_files() - before - in_use(), seconds)


def _orphaned_sessions() -> set[str]:
    """Open MPI's launcher's session folders ($TMPDIR/ompi.<its pid>) whose launcher is gone, and
    every job folder of an MPI singleton (a process that started MPI without mpiexec:
    $TMPDIR/ompi.<host>.<uid>/jf.0/<job>), which Open MPI 5 leaves even after MPI_Finalize."""
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
    from mpinb.common._leftover_files import launcher_files, mpi_segments

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
    from mpinb.common._leftover_files import mpi_files

    return {path for path, _ in mpi_files(proc.pid for proc in psutil.process_iter())}


# The test files of every_mpi that Intel MPI's stages skip: before .ci/suite.py, make test ran a
# shorter list of files on Intel MPI, and these were never in it (Intel MPI's runtime has not been
# made to pass them here: MPI_Comm_spawn crashes under it, for one).
NOT_ON_INTEL = "never run on Intel MPI here: make test runs on it the files it always ran (see tests/_processes.py)"
# (a condition in a string is evaluated when the test is set up, not when its file is collected:
# asking mpiexec which MPI it is starts a process)
SKIP_ON_INTEL = pytest.mark.skipif("__import__('_processes').intel_mpi()", reason=NOT_ON_INTEL)
