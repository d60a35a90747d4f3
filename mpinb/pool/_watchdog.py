"""Stops a pool's processes when the process that owns the pool dies, even by SIGKILL.

Run as a script (not ``-m``) so that starting it imports nothing of mpinb. The owner keeps this
process's stdin open and writes ``watch PID...`` lines; end of file (which the
kernel delivers when the owner dies) means: terminate those process trees. ``release`` forgets
them after an orderly stop, so that reused PIDs are never touched.
"""

from __future__ import annotations

import os
import signal
import sys


def stop_trees(pids: set[int], grace: float = 1.0) -> None:
    """SIGTERM each process, its descendants and the rest of its session, SIGKILL what is left
    after ``grace`` seconds."""
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
    for line in sys.stdin:
        command, _, args = line.strip().partition(" ")
        if command == "watch":
            watched.update((int(pid), start_time(int(pid))) for pid in args.split())
        elif command == "release":
            watched.clear()
    stop_trees({pid for pid, started in watched.items() if start_time(pid) in (started, None)})


def start_time(pid: int) -> str | None:
    """When the process began (in clock ticks since boot), ``None`` if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


if __name__ == "__main__":
    main()
