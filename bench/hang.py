"""The classic ring deadlock: how fast mpinb explains it and gives control back, and what plain
ipyparallel does with the same cell."""

from __future__ import annotations

import _thread
import signal
import threading
import time

import ipyparallel as ipp
import psutil

import mpinb
from mpinb.pool import find_mpiexec

from .peer import stop_ipyparallel

RING = "comm.send([rank] * 500_000, dest=(rank + 1) % size)\ndata = comm.recv(source=(rank - 1) % size)\n"
PLAIN_RING = "from mpi4py import MPI\ncomm = MPI.COMM_WORLD\nrank, size = comm.Get_rank(), comm.Get_size()\n" + RING


def mpinb_figures(n: int = 4) -> dict:
    """Seconds from the cell's start (the ranks block at once) to the diagnosis, and from the
    interrupt to control back."""
    with mpinb.Pool(n) as pool:
        pool.run("pass")
        notices = []
        began = time.monotonic()
        interrupt_at = 3.0
        threading.Timer(interrupt_at, _thread.interrupt_main).start()
        try:
            pool.run(RING, on_output=lambda r, kind, d: notices.append(time.monotonic()) if kind == "hang" else None)
        except KeyboardInterrupt:
            back = time.monotonic()
        ok = pool.run("comm.allreduce(1)").value == {r: n for r in range(n)}
    return {"diagnosis_s": notices[0] - began if notices else float("nan"),
            "control_back_s": back - began - interrupt_at, "pool_usable_after": ok}


def ipyparallel_figures(n: int = 4, patience: float = 10.0) -> dict:
    """The same cell on plain ipyparallel MPI engines: interrupt, then wait ``patience`` seconds."""
    cluster = ipp.Cluster(engines="mpi", n=n, log_level=40)
    cluster.config.MPIEngineSetLauncher.mpi_cmd = [find_mpiexec()]
    client = cluster.start_and_connect_sync()
    trees = [psutil.Process(launcher.pid) for launcher in [cluster.controller, *cluster.engines.values()]]
    trees += [child for proc in list(trees) for child in proc.children(recursive=True)]
    try:
        view = client[:]
        pending = view.execute(PLAIN_RING, block=False)
        time.sleep(3.0)
        sent = time.monotonic()
        client.send_signal(signal.SIGINT, block=True)
        returned = pending.wait(patience)
        back = time.monotonic() - sent if returned else None
    finally:
        try:
            stop_ipyparallel(cluster, client)
        finally:
            _, alive = psutil.wait_procs(trees, timeout=3)
            left = len(alive)
            for proc in alive:  # ranks blocked in MPI ignore the stop; end them for the next figures
                proc.kill()
    return {"control_back_s": back, "ranks_left_after_stop": left}
