"""Runs mpiexec, and once it has ended, ends whatever it left behind.

mpiexec's helpers (MPICH's proxies, the ssh that reaches another host) run in sessions of their
own. When mpiexec dies before them, as after a failed launch across hosts, they are orphans that
nothing ends. As Linux's child subreaper this process inherits them, and ends them once mpiexec
has ended. Signals are passed on to mpiexec.

It also removes the session folder that Open MPI's launcher keeps in ``$TMPDIR/ompi.<its pid>``
when it did not end in order (killed, say), as :mod:`mpinb.common._leftover_files` describes.

Run as a script with the standard library only (``python -I -S _reaper.py MPIEXEC ARGS...``):
it starts beside the ranks and must cost them nothing. Exits with mpiexec's status.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
GRACE = 0.5  # seconds an orphan gets to end at SIGTERM before SIGKILL
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def children() -> list[int]:
    """This process's children (orphans of mpiexec's helpers come here when their parent dies)."""
    me, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                if int(handle.read().rpartition(")")[2].split()[1]) == me:
                    found.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def end_orphans() -> None:
    """SIGTERM each child, SIGKILL it after the grace; repeat as their own children come here."""
    first_asked: dict[int, float] = {}
    while True:
        while True:  # reap whatever has ended
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break
        now = time.monotonic()
        for pid in children():
            asked = first_asked.setdefault(pid, now)
            try:
                os.kill(pid, signal.SIGTERM if now - asked < GRACE else signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def remove_session(launcher: int) -> None:
    """Open MPI's launcher's session folder, if it left one: imported only now, so that starting
    mpiexec waits for nothing (mpinb's standard-library module, from this tree)."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from mpinb.common._leftover_files import launcher_sessions, remove_folders

    remove_folders(launcher_sessions([launcher]))


def main(argv: list[str]) -> int:
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        os.execvp(argv[0], argv)  # no subreaper here: mpiexec as it is
    mpiexec = os.posix_spawnp(argv[0], argv, dict(os.environ))
    for sig in FORWARDED:
        signal.signal(sig, lambda received, _frame: os.kill(mpiexec, received))
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        if pid == mpiexec:
            break
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_IGN)  # ending the orphans is not to be interrupted
    end_orphans()
    remove_session(mpiexec)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
