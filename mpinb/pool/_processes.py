"""Signals to exactly the pool's own rank processes on this host.

A pid names whatever process holds it now: once a rank has exited, its pid can be given to
another process (of this user, or of any user when the notebook runs as root), and a signal sent
by pid would hit it. A pidfd (Linux 5.3) refers to the one process it was opened for, and only
ever fails once that process is gone. Elsewhere the process's start time stands in for it.
"""

from __future__ import annotations

import os
import signal

import psutil


class RankProcesses:
    """The local ranks' processes, opened once when the ranks report their pids."""

    def __init__(self, pids: dict[int, int]):
        self._pidfds: dict[int, int] = {}
        self._started: dict[int, tuple[int, float]] = {}  # rank -> (pid, start time), without pidfds
        for rank, pid in pids.items():
            try:
                if hasattr(os, "pidfd_open"):
                    self._pidfds[rank] = os.pidfd_open(pid)
                else:
                    self._started[rank] = (pid, psutil.Process(pid).create_time())
            except (OSError, psutil.Error):  # gone already: nothing to signal
                continue

    def signal(self, ranks: list[int], signum: int) -> None:
        """``signum`` to each of ``ranks`` still running; a rank that is gone is skipped."""
        for rank in ranks:
            try:
                if rank in self._pidfds:
                    signal.pidfd_send_signal(self._pidfds[rank], signum)
                elif rank in self._started:
                    pid, started = self._started[rank]
                    if psutil.Process(pid).create_time() == started:
                        os.kill(pid, signum)
            except (OSError, psutil.Error):  # gone, or (never for our own) not ours to signal
                continue

    def close(self) -> None:
        for fd in self._pidfds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._pidfds, self._started = {}, {}
