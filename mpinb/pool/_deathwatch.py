"""Notices the moment each local rank's process ends, to tell which rank died first.

When one rank dies, mpiexec kills the others within milliseconds, so polling cannot tell the
culprit from the victims. Each local rank connects a Unix socket to this watch when it starts
(``MPINB_DEATHWATCH``) and never writes to it again: the kernel closes it as the rank's exit
begins, in the same step that tells mpiexec, so the culprit's end of file always comes before
the victims' (which mpiexec kills only then). The watch waits with epoll, whose ready list keeps
the order in which the kernel saw the events: a watch that wakes late, on a busy machine, finds
the culprit and its victims together but still in that order. A rank's pidfd (its process is
gone) is the fallback, for a rank that never connected; it is a weaker witness, since a victim
can finish dying before a culprit that is slow to tear down.
"""

from __future__ import annotations

import itertools
import os
import select
import socket
import threading
import time


class DeathWatch:
    """Records ``rank -> (order, time) of death``; ranks connect to :attr:`address` when they
    start. Its socket is made in ``folder``, which only this user may enter (see ``_runfolder``)."""

    def __init__(self, folder: str) -> None:
        self.died: dict[int, tuple[int, float]] = {}  # rank -> (order seen, time)
        self.aborted: dict[int, int] = {}  # rank -> the error code it passed to Abort
        self._order = itertools.count()  # next() is atomic: both threads record
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
                    self._record(rank)
        os.write(self._wake_w, b"x")

    def _watch(self) -> None:
        # Edge-triggered for the ranks' sockets and pidfds: an event enters the ready list once,
        # when it happens, and is never put back at the list's end (as level-triggered ones are).
        events = select.epoll()
        events.register(self._listener.fileno(), select.EPOLLIN)
        events.register(self._wake_r, select.EPOLLIN)
        registered: set[int] = set()
        try:
            while not self._stop:
                with self._lock:
                    for fd in set(self._pidfds) - registered:
                        events.register(fd, select.EPOLLIN | select.EPOLLET)
                        registered.add(fd)
                for fd, _ in events.poll(0.2):  # in the order the kernel saw them
                    if self._stop:
                        return
                    if fd == self._wake_r:
                        os.read(fd, 64)
                    elif fd == self._listener.fileno():
                        self._accept(events)
                    elif fd in self._connections:
                        self._read(events, fd)
                    elif fd in self._pidfds:
                        events.unregister(fd)
                        self._record(self._pidfds[fd])
        finally:
            events.close()

    def _accept(self, events: select.epoll) -> None:
        connection, _ = self._listener.accept()
        connection.setblocking(False)
        self._connections[connection.fileno()] = (connection, None)
        events.register(connection.fileno(), select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLET)

    def _read(self, events: select.epoll, fd: int) -> None:
        connection, rank = self._connections[fd]
        ended = False
        data = b""
        while True:  # edge-triggered: read all there is now
            try:
                chunk = connection.recv(4096)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                ended = True
                break
            data += chunk
        for line in data.decode(errors="replace").splitlines():
            word, _, value = line.partition(" ")
            if rank is None:
                rank = int(word)
                self._connections[fd] = (connection, rank)
            elif word == "abort":  # it is about to end the job: the first to die, by intent
                self.aborted[rank] = int(value)
                self._record(rank)
        if ended:
            events.unregister(fd)
            del self._connections[fd]
            connection.close()
            if rank is not None:
                self._record(rank)

    def _record(self, rank: int) -> None:
        if rank not in self.died:
            self.died[rank] = (next(self._order), time.monotonic())

    def first(self) -> list[int]:
        """The rank seen dead first (as a list: none, or one)."""
        died = dict(self.died)
        return [min(died, key=lambda rank: died[rank][0])] if died else []

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
