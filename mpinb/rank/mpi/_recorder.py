"""Where a rank keeps the MPI calls it traced during one run: a bounded buffer of events.

With the C tracer (``_native``), its buffer holds the C calls' events and the Python calls'
event objects alike, in call order; without it, a Python list does.
"""

from __future__ import annotations

import time
from types import ModuleType

from mpi4py import MPI

from ...common._events import COLLECTIVE, RECV, SEND, WAIT
from ...common._protocol import Recording, WaitState

DEFAULT_CAPACITY = 100_000


class Recorder:
    """Per-rank event buffer. ``on`` is checked first by every traced call, so off costs one test."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        self.on = False
        self.capacity = capacity
        self.native: ModuleType | None = None  # the C tracer's module, whose buffer then holds the events
        self.events: list = []
        self.dropped = 0
        self.comms: dict[str, list[int]] = {}  # communicator id -> world ranks of its members
        self.remote: dict[str, list[int]] = {}  # an intercommunicator's id -> its remote group's world ranks
        self.files: dict[str, str] = {}  # a file's id -> its name as opened
        self.neighbors: dict[str, list[int]] = {}  # topology's id -> this rank's out-neighbours (world ranks)
        # a user's line -> the library line behind a call it led to (see _calls.LIBRARY_ROOTS);
        # one dict for the run, which the C tracer fills too
        self.via: dict[tuple[str, int], tuple[str, int]] = {}
        self._freed: list[str] = []  # communicators freed while recording: forgotten at stop
        self.clock_offset = 0.0  # add to this rank's clock to get rank 0's
        self._began = 0.0

    def start(self, capacity: int | None = None) -> None:
        if capacity:
            self.capacity = capacity
        self.events = []
        self.dropped = 0
        self.via.clear()
        if self.native is not None:
            self.native.start(self.capacity)
        self._began = time.perf_counter()
        self.on = True

    def stop(self) -> Recording:
        """Stop recording; return what was recorded, in a form that pickles cheaply."""
        self.on = False
        if self.native is not None:
            self.events, self.dropped = self.native.stop()
        used = {event[2] for event in self.events}
        comms = {cid: members for cid, members in self.comms.items() if cid in used}
        neighbors = {cid: outs for cid, outs in self.neighbors.items() if cid in used}
        remote = {cid: ranks for cid, ranks in self.remote.items() if cid in used}
        files = {cid: name for cid, name in self.files.items() if cid in used}
        for cid in self._freed:
            self._drop(cid)
        self._freed = []
        recording: Recording = {
            "events": self.events,
            "dropped": self.dropped,
            "comms": comms,
            "began": self._began,
            "ended": time.perf_counter(),
            "offset": self.clock_offset,
        }
        if self.via:
            recording["via"] = dict(self.via)
        if neighbors:
            recording["neighbors"] = neighbors
        if remote:
            recording["remote"] = remote
        if files:
            recording["files"] = files
        return recording

    def forget(self, cid: str | None) -> None:
        """A freed communicator: its members are kept only until the run that used it ends."""
        if cid is None:
            return
        if self.on:
            self._freed.append(cid)
        else:
            self._drop(cid)

    def _drop(self, cid: str) -> None:
        self.comms.pop(cid, None)
        self.neighbors.pop(cid, None)
        self.remote.pop(cid, None)
        self.files.pop(cid, None)

    def add_unfinished(self, state: WaitState) -> None:
        """The call that an interrupt broke off, as an event that never ended (``end`` and
        ``returned`` NaN): the trace of a stopped run shows what each rank was still waiting in."""
        if not self.on:
            return
        kind = {"send": SEND, "recv": RECV, "collective": COLLECTIVE, "wait": WAIT}[state["kind"]]
        members = state["members"]
        world_peer = state["root"] if kind == COLLECTIVE else state["peer"]
        peer = members.index(world_peer) if members and world_peer in members else -1
        start = time.perf_counter() - max(time.time() - state.get("since", time.time()), 0.0)
        nan = float("nan")
        op = f"Wait ({state['op']})" if state.get("via") == "wait" else state["op"]
        self.add((op, kind, state["comm"] or "", peer, state["tag"], state["bytes"], 0, start, nan, nan,
                  state["file"], state["line"]))

    def add(self, event) -> None:
        if self.native is not None:
            self.native.add(event)
        elif len(self.events) < self.capacity:
            self.events.append(event)
        else:
            self.dropped += 1


RECORDER = Recorder()


def polite_barrier(comm: MPI.Intracomm, pause: float = 0.002) -> None:
    """A barrier that sleeps between checks instead of spinning (for start-up, not hot paths)."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(pause)


def align_clock(comm: MPI.Intracomm, rounds: int = 20) -> float:
    """Estimate this rank's clock offset to rank 0 (Cristian's method, best of ``rounds``).

    Collective over ``comm``. Ranks on rank 0's host share its monotonic clock, so their offset is
    exactly zero (an estimate taken while ranks start on busy cores could be off by the round
    trip); across hosts the estimate keeps message arrows pointing forward.
    """
    import socket

    rank = comm.Get_rank()
    hosts = comm.allgather(socket.gethostname())
    if all(host == hosts[0] for host in hosts):
        RECORDER.clock_offset = 0.0
        return 0.0
    best_rtt, offset = float("inf"), 0.0
    for peer in range(1, comm.Get_size()):
        if hosts[peer] == hosts[0]:
            continue
        for _ in range(rounds):
            if rank == 0:
                comm.recv(source=peer, tag=7)
                comm.send(time.perf_counter(), dest=peer, tag=7)
            elif rank == peer:
                sent = time.perf_counter()
                comm.send(None, dest=0, tag=7)
                remote = comm.recv(source=0, tag=7)
                arrived = time.perf_counter()
                if arrived - sent < best_rtt:
                    best_rtt = arrived - sent
                    offset = remote - (sent + arrived) / 2
    if hosts[rank] == hosts[0]:
        offset = 0.0
    RECORDER.clock_offset = offset
    return offset
