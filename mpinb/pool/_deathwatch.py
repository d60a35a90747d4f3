"""Notices the moment each local rank's process ends, to tell which rank died first.

When one rank dies, mpiexec kills the others within milliseconds, so polling cannot tell the
culprit from the victims. Each local rank connects a Unix socket to this watch when it starts
(``MPINB_DEATHWATCH``) and never writes to it again: the kernel closes it as the rank's exit
begins, in the same step that tells mpiexec, so the culprit's end of file always comes before
the victims' (which mpiexec kills only then). A rank's pidfd (its process is gone) is the
fallback, for a rank that never connected; it is a weaker witness, since a victim can finish
dying before a culprit that is slow to tear down.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time


class DeathWatch:
    """Records ``rank -> time of death``; ranks connect to :attr:`address` when they start.
    Its socket is made in ``folder``, which only this user may enter (see ``_runfolder``)."""

    def __init__(self, folder: str) -> None:
        self.died: dict[int, tuple[int, float]] = {}  # rank -> (poll round, time)
        self.aborted: dict[int, int] = {}  # rank -> the error code it passed to Abort
        self.address = os.path.join(folder, "deathwatch")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.address)
        self._listener.listen(1024)
        self._pidfds: dict[int, int] = {}  # fd -> rank
        self._connections: dict[int, tuple[socket.socket, int | None]] = {}  # fd -> (socket, rank)
        self._wake_r, self._wake_w = os.pipe()
        self._lock = threading.Lock()
        self._stop = False
        self._thread = threading.Thread(target=self._watch, name="mpinb-deathwatch", daemon=True)
        self._thread.start()

    def watch_pids(self, pids: dict[int, int]) -> None:
        """Also watch the processes themselves (``{rank: pid}``), once the ranks are known."""
        if not hasattr(os, "pidfd_open"):
            return
        with self._lock:
            for rank, pid in pids.items():
                try:
                    self._pidfds[os.pidfd_open(pid)] = rank
                except OSError:
                    self._record(rank, 0)
        os.write(self._wake_w, b"x")

    def _watch(self) -> None:
        poller = select.poll()
        poller.register(self._listener.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        registered: set[int] = set()
        batch = 0
        while not self._stop:
            with self._lock:
                for fd in set(self._pidfds) - registered:
                    poller.register(fd, select.POLLIN)
                    registered.add(fd)
            ready = poller.poll(200)
            batch += 1
            for fd, _ in ready:
                if self._stop:
                    return
                if fd == self._wake_r:
                    os.read(fd, 64)
                elif fd == self._listener.fileno():
                    connection, _ = self._listener.accept()
                    self._connections[connection.fileno()] = (connection, None)
                    poller.register(connection.fileno(), select.POLLIN)
                elif fd in self._connections:
                    self._read(poller, fd, batch)
                elif fd in self._pidfds:
                    poller.unregister(fd)
                    self._record(self._pidfds[fd], batch)

    def _read(self, poller, fd: int, batch: int) -> None:
        connection, rank = self._connections[fd]
        try:
            data = connection.recv(64)
        except OSError:
            data = b""
        if data:
            for line in data.decode(errors="replace").splitlines():
                word, _, value = line.partition(" ")
                if rank is None:
                    rank = int(word)
                    self._connections[fd] = (connection, rank)
                elif word == "abort":  # it is about to end the job: the first to die, by intent
                    self.aborted[rank] = int(value)
                    self._record(rank, batch)
        else:
            poller.unregister(fd)
            del self._connections[fd]
            connection.close()
            if rank is not None:
                self._record(rank, batch)

    def _record(self, rank: int, batch: int) -> None:
        if rank not in self.died:
            self.died[rank] = (batch, time.monotonic())

    def first(self) -> list[int]:
        """The rank(s) seen dead first; several only if they ended at the same moment."""
        died = dict(self.died)
        if not died:
            return []
        earliest = min(batch for batch, _ in died.values())
        return sorted(r for r, (batch, _) in died.items() if batch == earliest)

    def close(self) -> None:
        self._stop = True
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        self._thread.join(timeout=1)
        for connection, _ in list(self._connections.values()):
            connection.close()
        for fd in [*self._pidfds, self._wake_r, self._wake_w]:
            try:
                os.close(fd)
            except OSError:
                pass
        self._pidfds, self._connections = {}, {}
        self._listener.close()
        try:
            os.remove(self.address)
        except OSError:
            pass
