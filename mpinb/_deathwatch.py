"""Notices the moment each local rank's process ends, to tell which rank died first.

When one rank dies, mpiexec kills the others within milliseconds, so polling cannot tell the
culprit from the victims; a thread blocked on the ranks' pidfds records each exit as it happens.
"""

from __future__ import annotations

import os
import select
import threading
import time


class DeathWatch:
    """Records ``rank -> time of death`` for the given ``{rank: pid}`` (Linux pidfds)."""

    def __init__(self, pids: dict[int, int]):
        self.died: dict[int, tuple[int, float]] = {}  # rank -> (poll round, time)
        self._fds: dict[int, int] = {}
        self._stop = False
        if not hasattr(os, "pidfd_open"):
            return
        for rank, pid in pids.items():
            try:
                self._fds[os.pidfd_open(pid)] = rank
            except OSError:
                self.died[rank] = (0, time.monotonic())
        self._thread = threading.Thread(target=self._watch, name="mpinb-deathwatch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        fds = dict(self._fds)
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        batch = 0
        while not self._stop and len(self.died) < len(fds):
            ready = poller.poll(200)
            batch += 1
            for fd, _ in ready:
                poller.unregister(fd)
                if not self._stop and fds[fd] not in self.died:
                    self.died[fds[fd]] = (batch, time.monotonic())

    def first(self) -> list[int]:
        """The rank(s) seen dead first; several only if they ended at the same moment."""
        if not self.died:
            return []
        earliest = min(batch for batch, _ in self.died.values())
        return sorted(r for r, (batch, _) in self.died.items() if batch == earliest)

    def close(self) -> None:
        self._stop = True
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = {}
