"""Stopping the peer (a plain ipyparallel cluster) without leaving its MPI files behind."""

from __future__ import annotations

from typing import Any

import psutil

from mpinb.common._leftover_files import mpi_files, remove_files


def stop_ipyparallel(cluster: Any, client: Any = None) -> None:
    """Stop ``cluster`` and remove the MPI shared-memory files its engines mapped: ipyparallel ends
    them without ``MPI_Finalize``, which left MPICH's 64 MB segment of each 64-rank job in
    /dev/shm, a benchmark run after another."""
    segments = peer_segments()
    try:
        if client is not None:
            client.close()
        cluster.stop_cluster_sync()
    finally:
        remove_files(segments)


def peer_segments() -> set[tuple[str, int]]:
    """The MPI shared-memory files mapped by this process's descendants (taken before a timed stop,
    so that the stop's figure does not include reading /proc)."""
    return mpi_files(child.pid for child in psutil.Process().children(recursive=True))
