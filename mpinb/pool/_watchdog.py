"""Stops a pool's processes when the process that owns the pool dies, even by SIGKILL.

Run as a script (not ``-m``) so that starting it imports nothing of mpinb. The owner keeps this
process's stdin open and writes ``watch PID...`` lines; end of file (which the
kernel delivers when the owner dies) means: terminate those process trees, unlink the MPI
shared memory their processes had mapped, and remove every path given by a ``sweep PATTERN``
line (the pool's folders and files). ``release`` forgets all of it after an orderly stop, so that
reused PIDs are never touched.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import sys
from collections.abc import Iterable


def stop_trees(pids: set[int], grace: float = 1.0) -> set[tuple[str, int]]:
    """SIGTERM each process, its descendants and the rest of its session, SIGKILL what is left
    after ``grace`` seconds; the MPI shared-memory files that they had mapped."""
    import psutil  # only now: the watchdog starts beside the ranks and must cost them nothing
    procs = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            procs += [proc, *proc.children(recursive=True)]
        except psutil.Error:
            continue
    known = {proc.pid for proc in procs}
    procs += [proc for proc in in_sessions(pids) if proc.pid not in known]
    segments = mpi_files(proc.pid for proc in procs)
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)
    return segments


def in_sessions(leaders: set[int]) -> list:
    """Every process in the sessions that these processes lead (each launcher has its own), also
    those whose parent has gone: an orphan keeps its session, and Linux reuses no session's id
    while a process is in it."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) in leaders and proc.pid != os.getpid():
                found.append(proc)
        except (OSError, psutil.Error):
            continue
    return found


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the kernel's interrupt is not for us
    watched: dict[int, str | None] = {}  # pid -> its start time, to know it if its pid is reused
    swept: list[str] = []
    for line in sys.stdin:
        command, _, args = line.rstrip("\n").partition(" ")
        if command == "watch":
            watched.update((int(pid), start_time(int(pid))) for pid in args.split())
        elif command == "sweep":
            swept.append(args)
        elif command == "release":
            watched.clear()
            swept.clear()
    segments = stop_trees({pid for pid, started in watched.items() if start_time(pid) in (started, None)})
    remove_files(segments)
    sweep(swept)


def sweep(patterns: list[str]) -> None:
    """Remove every file and folder that matches one of ``patterns`` (glob patterns)."""
    for pattern in patterns:
        for path in glob.glob(pattern):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


# Shared-memory files of MPICH and Open MPI. A rank unlinks them in MPI_Finalize, which ranks of
# a pool never call (see rank/_engine_main.py): without this, every stopped pool left its
# segments in /dev/shm (5 GB after a day of tests here).
MPI_SEGMENT_PREFIXES = ("/dev/shm/mpich_shm_", "/dev/shm/sm_segment.", "/dev/shm/vader_segment.")
# MPICH's hydra_pmi_proxy writes the host's topology to this file (the path is compiled in, no
# TMPDIR) and removes it only when it exits in order: a killed mpiexec left one per pool.
LAUNCHER_FILE_PREFIXES = ("/tmp/hydra_hwloc_xmlfile_",)


def mpi_files(pids: Iterable[int]) -> set[tuple[str, int]]:
    """The MPI shared-memory files that these processes have mapped and the launchers' temporary
    files that they hold open, as (path, inode)."""
    pids = set(pids)
    return mpi_segments(pids) | launcher_files(pids)


def mpi_segments(pids: Iterable[int]) -> set[tuple[str, int]]:
    """The MPI shared-memory files (path, inode) that these processes have mapped."""
    found = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as handle:
                for line in handle:
                    fields = line.rstrip("\n").split(maxsplit=5)
                    if len(fields) == 6 and fields[5].startswith(MPI_SEGMENT_PREFIXES):
                        found.add((fields[5], int(fields[4])))
        except (OSError, ValueError):
            continue
    return found


def launcher_files(pids: Iterable[int]) -> set[tuple[str, int]]:
    """The launchers' temporary files (path, inode) that these processes hold open."""
    found = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                path = os.readlink(f"/proc/{pid}/fd/{fd}")
                if path.startswith(LAUNCHER_FILE_PREFIXES):
                    found.add((path, os.stat(f"/proc/{pid}/fd/{fd}").st_ino))
            except OSError:
                continue
    return found


def remove_files(segments: set[tuple[str, int]]) -> None:
    """Unlink each file that is still the one the ranks mapped (a new job may reuse its name)."""
    for path, inode in segments:
        try:
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        except OSError:
            pass


def start_time(pid: int) -> str | None:
    """When the process began (in clock ticks since boot), ``None`` if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


if __name__ == "__main__":
    main()
