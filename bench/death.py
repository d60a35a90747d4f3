"""The wait a user feels after a rank dies: the cell that met the death shows its error, the user
reads it, then runs the next cell; timed from the death to the error, and from running the next
cell to its result (at once, and after a few seconds of reading).

mpinb names the dead rank and starts fresh ranks in the background (a pool on this host); the
next cell waits for what is left of that start. ipyparallel's equivalent: its engines are one MPI
job, so a dead rank takes the job with it (MPICH's mpiexec ends the others); the user stops the
cluster and starts a new one, and the next cell runs on that.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import ipyparallel as ipp

import mpinb
from mpinb.common._leftover_files import remove_files
from mpinb.pool import find_mpiexec

from .peer import peer_segments, stop_ipyparallel

READING_S = 3.0  # the user reads the error before running the next cell
DIE = "import os\nif rank == 1:\n    os._exit(3)\ncomm.Barrier()"


def _death_then_next(die: Callable[[], object], died: type[BaseException], next_cell: Callable[[], object],
                     reading_s: float) -> tuple[float, float]:
    """Seconds from the cell that kills rank 1 (``die``) to its error, and, ``reading_s`` later, from
    the next cell to its result."""
    began = time.perf_counter()
    try:
        die()
    except died:
        pass
    else:
        raise AssertionError("rank 1 was to die")
    to_error = time.perf_counter() - began
    time.sleep(reading_s)
    began = time.perf_counter()
    next_cell()
    return to_error, time.perf_counter() - began


def _mpinb_death(pool: mpinb.Pool, reading_s: float) -> tuple[float, float]:
    def next_cell() -> None:
        assert pool.run("comm.allreduce(1)", timeout=60).value == {r: pool.size for r in range(pool.size)}

    return _death_then_next(lambda: pool.run(DIE, timeout=60), mpinb.RankDiedError, next_cell, reading_s)


def _ipyparallel_death(n: int, reading_s: float) -> tuple[float, float]:
    """The same with ipyparallel (its error: a CompositeError of the engines' errors); the next cell
    stops the cluster, starts a new one and runs there."""
    segments: set[tuple[str, int]] = set()  # MPI's shared memory: the dead job's ranks map it no more

    def start() -> tuple:
        cluster = ipp.Cluster(engines="mpi", n=n, log_level=40)
        cluster.config.MPIEngineSetLauncher.mpi_cmd = [find_mpiexec()]
        client = cluster.start_and_connect_sync()
        client[:].execute("from mpi4py import MPI\ncomm = MPI.COMM_WORLD\nrank = comm.rank", block=True)
        segments.update(peer_segments())
        return cluster, client

    running = [start()]

    def next_cell() -> None:
        stop_ipyparallel(*running.pop())
        running.append(start())
        running[0][1][:].execute("comm.allreduce(1)", block=True)

    try:
        return _death_then_next(lambda: running[0][1][:].execute(DIE, block=False).get(timeout=60),
                                ipp.error.CompositeError, next_cell, reading_s)
    finally:
        for cluster, client in running:
            stop_ipyparallel(cluster, client)
        remove_files(segments)


def death_rows(n: int = 4, repeats: int = 3) -> list[tuple]:
    rows = []
    with mpinb.Pool(n) as pool:
        pool.run("comm.Barrier()")
        ours = {reading: [_mpinb_death(pool, reading) for _ in range(repeats)] for reading in (0.0, READING_S)}
    theirs = {reading: [_ipyparallel_death(n, reading) for _ in range(repeats)] for reading in (0.0, READING_S)}
    label = "ipyparallel: a new cluster"
    ours_error = statistics.median(t for reading in ours for t, _ in ours[reading])
    theirs_error = statistics.median(t for reading in theirs for t, _ in theirs[reading])
    rows.append((f"a rank dies: the cell's error, the dead pool stopped, {n} ranks (s)", ours_error,
                 "ipyparallel: its error, the dead job left as it is",
                 theirs_error, theirs_error / ours_error))
    for reading, words in ((0.0, "run at once"), (READING_S, f"run {READING_S:g} s after the error")):
        mine = statistics.median(t for _, t in ours[reading])
        peer = statistics.median(t for _, t in theirs[reading])
        rows.append((f"a rank dies: the next cell's wait, {words}, {n} ranks (s)", mine, label, peer, peer / mine))
    return rows
