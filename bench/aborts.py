"""The time from an abort to a working next cell (the aborts are workloads/aborts.py's, which the
stress test runs too), beside plain ipyparallel's only way back from a hung MPI job: a new cluster."""

from __future__ import annotations

import time

import mpinb
from workloads.aborts import Campaign, summary


def ipyparallel_recovery(n: int = 4) -> float:
    """Plain ipyparallel's way back from a deadlocked MPI cell: its interrupt does not reach ranks
    blocked in MPI, so the cluster is stopped (ranks that outlive the stop are killed) and a new
    one started. Seconds from the abort to a new cluster's first answer."""
    import ipyparallel as ipp
    import psutil

    from mpinb.pool import find_mpiexec

    from .hang import PLAIN_RING
    from .peer import stop_ipyparallel

    def start() -> tuple:
        cluster = ipp.Cluster(engines="mpi", n=n, log_level=40)
        cluster.config.MPIEngineSetLauncher.mpi_cmd = [find_mpiexec()]
        return cluster, cluster.start_and_connect_sync()

    cluster, client = start()
    client[:].execute(PLAIN_RING, block=False)
    time.sleep(1.0)
    began = time.monotonic()
    trees = [psutil.Process(launcher.pid) for launcher in [cluster.controller, *cluster.engines.values()]]
    trees += [child for proc in list(trees) for child in proc.children(recursive=True)]
    stop_ipyparallel(cluster, client)
    for proc in psutil.wait_procs(trees, timeout=1)[1]:
        proc.kill()
    cluster, client = start()
    try:
        client[:].execute("pass", block=True)
        return time.monotonic() - began
    finally:
        stop_ipyparallel(cluster, client)


def recovery_rows(n: int = 4, count: int = 60, seed: int = 24) -> list[tuple]:
    """Abort to a working cell, median and worst over ``count`` aborts of the stress test's kinds
    (those that restart counted apart), beside plain ipyparallel's new cluster."""
    with mpinb.Pool(n) as pool:
        campaign = Campaign(pool, seed)
        try:
            stats = summary(campaign.run(count))
        finally:
            campaign.close()
    peer = ipyparallel_recovery(n)
    label = "ipyparallel: a new cluster"
    rows = []
    recovered, restarted = stats["recovered"], stats["restarted"]
    if recovered["count"]:
        rows.append((f"abort to a working cell, median of {recovered['count']} (s)", recovered["median_s"],
                     label, peer, peer / recovered["median_s"]))
        rows.append(("abort to a working cell, worst (s)", recovered["worst_s"], label, peer,
                     peer / recovered["worst_s"]))
    if restarted["count"]:
        rows.append((f"ranks stuck in a C call: abort to a restarted pool, median of {restarted['count']} (s)",
                     restarted["median_s"], label, peer, peer / restarted["median_s"]))
    return rows
