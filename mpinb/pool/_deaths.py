"""Why ranks died, in words: the death watch's and the launcher's account of each lost rank.

What the pool tells the user when a rank is gone: which rank, how it ended (a signal, an exit
code, ``Abort``), where (its host), and what the pool was doing. The launcher's own report is read
by :mod:`._hang` (``death_report``); here it is weighed against the death watch's and the batch
system's, and against a process that is still there but has stopped answering.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import psutil

from ..common._ranges import format_ranks
from . import _slurm
from ._hang import death_report, launcher_report, peer_loss_report

if TYPE_CHECKING:
    from ._supervisor import Supervisor


def why_dead(supervisor: Supervisor, dead: list[int], during: str = "running the cell") -> str:
    """``"rank 2 died: killed by signal 9 (...) while running the cell"``, or which rank
    called ``Abort``; ``during``: what the pool was doing."""
    if not supervisor.settings.local:
        return _why_batch_dead(supervisor, dead, during)
    if supervisor.settings.on_this_host:
        # (a rank whose exit the death watch saw is dying, though tearing down its memory may
        # leave its process running for a moment)
        states = {rank: _process_state(supervisor.ranks_info[rank]["pid"]) for rank in dead
                  if rank in supervisor.ranks_info and not _seen_ending(supervisor, rank)}
        if states and all(states.values()):  # alive, yet the controller lost their heartbeat
            return (f"{format_ranks(dead, word=True)} stopped answering while {during}, though "
                    f"{'its process is' if len(dead) == 1 else 'their processes are'} "
                    f"{' and '.join(sorted({state for state in states.values() if state}))}. "
                    f"MPI cannot continue without {'it' if len(dead) == 1 else 'them'}")
    by_pid = {info["pid"]: rank for rank, info in supervisor.ranks_info.items()}
    if len(by_pid) < len(supervisor.ranks_info):  # the same pid on two hosts: the report cannot tell
        by_pid = {}
    # The launcher reports as it cleans up; on a busy machine that can take seconds. Across
    # hosts, MPICH adds how a rank ended only when it has finished.
    deadline = time.monotonic() + (6 if supervisor.settings.on_this_host else 10)
    while True:
        ended = supervisor.dead_process() is not None
        output = supervisor.launcher_output()
        if ended or time.monotonic() > deadline:
            break
        if supervisor.settings.on_this_host and launcher_report(output, by_pid)[0] is not None:
            break
        time.sleep(0.05)
    aborted = supervisor.deaths.aborted if supervisor.deaths is not None else {}
    if len(aborted) == 1:
        (rank, code), = aborted.items()
        return f"rank {rank} called Abort({code}) while {during}, which ends every rank"
    if supervisor.settings.on_this_host:
        return f"{death_report(output, by_pid, dead)} while {during}. MPI cannot continue without it"
    host_of = {rank: info["host"] for rank, info in supervisor.ranks_info.items()}
    if launcher_report(output, by_pid)[0] is None:
        if lost := peer_loss_report(output, dead, host_of):
            return f"{lost} while {during}. MPI cannot continue without it"
        return _stopped_answering(supervisor, dead, during)  # a host or its network failed, or mpiexec runs on
    return (f"{death_report(output, by_pid, dead, host_of)} while {during}. "
            "MPI cannot continue without it")

def _why_batch_dead(supervisor: Supervisor, dead: list[int], during: str) -> str:
    for engine_set in supervisor.cluster.engines.values():
        failure = _slurm.failed_tasks(engine_set)
        if failure is not None:
            ranks, host, how = failure
            return (f"{format_ranks(ranks, word=True)} on {host} died ({how}) while {during}. "
                    "MPI cannot continue without them")
    return _stopped_answering(supervisor, dead, during)

def _stopped_answering(supervisor: Supervisor, dead: list[int], during: str) -> str:
    hosts = sorted({supervisor.ranks_info[rank]["host"] for rank in dead if rank in supervisor.ranks_info})
    where = f" on {', '.join(hosts)}" if hosts else ""
    who = format_ranks(dead, word=True) if len(dead) < len(supervisor.engine_of) else "the ranks"
    one = who.startswith("rank ")
    return (f"{who}{where} stopped answering while {during} ({'its process' if one else 'their processes'} "
            f"ended, or {'its' if one else 'their'} host or its network failed). MPI cannot continue "
            f"without {'it' if one else 'them'}")


def _seen_ending(supervisor: Supervisor, rank: int) -> bool:
    return supervisor.deaths is not None and rank in supervisor.deaths.died


def _process_state(pid: int) -> str | None:
    """How a rank's process is, in words, if it still lives (``None`` if it ended)."""
    try:
        status = psutil.Process(pid).status()
    except psutil.Error:
        return None
    if status in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
        return None
    if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
        return "stopped (SIGSTOP, Ctrl-Z or a debugger)"
    return "running (too busy to answer, or stuck in a call that holds Python's lock?)"
