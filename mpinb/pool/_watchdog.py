"""Stops a pool's processes when the process that owns the pool dies, even by SIGKILL.

Run as a script (not ``-m``) so that starting it imports nothing of mpinb but the standard-library
:mod:`mpinb.common._leftover_files` and :mod:`mpinb.common._shared_memory` (and psutil once its
owner is gone). The owner keeps this
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
import time
from typing import TYPE_CHECKING

if __name__ == "__main__":  # a script: its own checkout's (or installation's) mpinb, nothing else
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mpinb.common._leftover_files import launcher_sessions, mpi_files, remove_files, remove_folders
from mpinb.common._shared_memory import remove_written_by

if TYPE_CHECKING:
    import psutil


def process_trees(leaders: list[psutil.Process]) -> list[psutil.Process]:
    """These processes, their descendants, and every other process in the sessions they lead: an
    ``ssh`` that mpiexec started keeps its launcher's session when mpiexec dies before it."""
    import psutil  # only now: the watchdog starts beside the ranks and must cost them nothing

    tree = []
    for proc in leaders:
        try:
            tree += [proc, *proc.children(recursive=True)]
        except psutil.Error:
            pass
    # a leader's pid that now belongs to another process is not ours (see in_sessions)
    sessions = {proc.pid for proc in leaders if proc.is_running() or not psutil.pid_exists(proc.pid)}
    known = {proc.pid for proc in tree}
    return tree + [proc for proc in in_sessions(sessions) if proc.pid not in known]


def freeze_trees(leaders: list[psutil.Process]) -> list[psutil.Process]:
    """These process trees (see process_trees), every process stopped (SIGSTOP), again for any
    child forked meanwhile: frozen, they fork and make nothing more while what they hold is read.
    The caller kills them (SIGKILL ends a stopped process; SIGTERM would wait for a SIGCONT)."""
    import psutil

    frozen: dict[int, psutil.Process] = {}
    try:
        while new := [proc for proc in process_trees(leaders) if proc.pid not in frozen]:
            for proc in new:
                frozen[proc.pid] = proc
                try:
                    proc.suspend()
                except psutil.Error:
                    continue
    except BaseException:  # (an interrupt: none stays frozen)
        kill(list(frozen.values()))
        raise
    return list(frozen.values())


def kill(procs: list[psutil.Process]) -> None:
    """SIGKILL to each of ``procs`` that is still there."""
    import psutil

    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            continue


def in_sessions(leaders: set[int]) -> list[psutil.Process]:
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


def end_processes(procs: list[psutil.Process], grace: float = 1.0, ask_first: bool = True) -> None:
    """SIGTERM each process (unless ``ask_first`` is false: they were already asked), SIGKILL
    what is still running after ``grace`` seconds, and wait as long again for those to end."""
    import psutil

    if ask_first:
        for proc in procs:
            try:
                proc.terminate()
            except psutil.Error:
                pass
    alive = still_running(procs, grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    still_running(alive, grace)


def still_running(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` for ``procs`` to end; those still running. A zombie has ended: only
    its parent can reap it (Open MPI's daemon leaves its ranks so when it is stopped first)."""
    import psutil

    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for proc in procs:
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.01)


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
    import psutil  # only now that the owner is gone: the watchdog starts beside the ranks

    leaders = []
    for pid, started in watched.items():
        if start_time(pid) in (started, None):
            try:
                leaders.append(psutil.Process(pid))
            except psutil.Error:
                continue
    procs = process_trees(leaders)
    leftovers = mpi_files(proc.pid for proc in procs)  # while they still map them
    sessions = launcher_sessions(proc.pid for proc in procs)
    end_processes(procs)
    remove_files(leftovers)
    remove_folders(sessions)
    remove_written_by([proc.pid for proc in procs])  # the arrays of a data move in flight
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


def start_time(pid: int) -> str | None:
    """When the process began (in clock ticks since boot), ``None`` if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


if __name__ == "__main__":
    main()
