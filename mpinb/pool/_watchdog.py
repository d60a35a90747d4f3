"""Stops a pool's processes when the process that owns the pool dies, even by SIGKILL.

Run as a script (not ``-m``) so that starting it imports nothing of mpinb. The owner keeps this
process's stdin open and writes ``watch PID...`` lines; end of file (which the
kernel delivers when the owner dies) means: terminate those process trees. ``release`` forgets
them after an orderly stop, so that reused PIDs are never touched.
"""

from __future__ import annotations

import signal
import sys


def stop_trees(pids: set[int], grace: float = 1.0) -> None:
    """SIGTERM each process and its descendants, SIGKILL what is left after ``grace`` seconds."""
    import psutil  # only now: the watchdog starts beside the ranks and must cost them nothing
    procs = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            procs += [proc, *proc.children(recursive=True)]
        except psutil.Error:
            continue
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


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the kernel's interrupt is not for us
    watched: set[int] = set()
    for line in sys.stdin:
        command, _, args = line.strip().partition(" ")
        if command == "watch":
            watched.update(int(pid) for pid in args.split())
        elif command == "release":
            watched.clear()
    stop_trees(watched)


if __name__ == "__main__":
    main()
