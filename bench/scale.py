"""How a pool's costs grow with its ranks, against plain ipyparallel, one size after the other.

For each size: start to ready, an empty cell, a 1 MB Allreduce cell, the memory each rank costs
(its proportional share, PSS: shared libraries counted once across the ranks), and stop. The peer
is ipyparallel as users get it (``Cluster(engines="mpi")``, its defaults); when it cannot start
that many ranks (its engines give up registering after 5 s), it is started again with a longer
registration timeout so that its cells can still be measured, and the row says so.

Each tool's pool runs alone, so neither competes with the other's idle ranks for the cores.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import ipyparallel as ipp
import psutil

import mpinb
from mpinb.common._leftover_files import remove_files
from mpinb.pool import find_mpiexec

from .peer import peer_segments, stop_ipyparallel

ALLREDUCE_SETUP = "import numpy as np\nfrom mpi4py import MPI\nsend = np.ones(131072)\nreceive = np.empty(131072)"
ALLREDUCE = "MPI.COMM_WORLD.Allreduce(send, receive)"  # 131,072 float64: 1 MB


def _median_ms(run: Callable[[], object], count: int) -> float:
    run()
    times = []
    for _ in range(count):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e3


def _pss_mb(pids: list[int]) -> float:
    """Mean proportional share of memory per process, in MB."""
    shares = [psutil.Process(pid).memory_full_info().pss for pid in pids]
    return statistics.mean(shares) / 2**20


def mpinb_figures(n: int, cells: int) -> dict:
    began = time.perf_counter()
    pool = mpinb.Pool(n).start()
    figures = {"ready_s": time.perf_counter() - began}
    try:
        figures["empty_ms"] = _median_ms(lambda: pool.run("pass"), cells)
        pool.run(ALLREDUCE_SETUP, trace=False)
        figures["allreduce_ms"] = _median_ms(lambda: pool.run(ALLREDUCE, trace=False), cells)
        figures["pss_mb"] = _pss_mb([row["pid"] for row in pool.status()])
    finally:
        began = time.perf_counter()
        pool.stop()
        figures["stop_s"] = time.perf_counter() - began
    return figures


def ipyparallel_figures(n: int, cells: int) -> dict:
    figures: dict = {"note": ""}
    cluster = client = None
    for registration in (None, 300.0):
        cluster = ipp.Cluster(engines="mpi", n=n, log_level=40)
        cluster.config.MPIEngineSetLauncher.mpi_cmd = [find_mpiexec()]
        if registration:
            cluster.config.EngineLauncher.engine_args = [f"--IPEngine.timeout={registration}"]
            cluster.engine_timeout = int(registration)
        began = time.perf_counter()
        try:
            client = cluster.start_and_connect_sync(n=n)
            client.wait_for_engines(n, timeout=registration or 60)
        except Exception as err:  # noqa: BLE001 - the peer failing to start is a figure too
            figures["note"] = f"ipyparallel's defaults failed ({type(err).__name__}); "
            try:
                stop_ipyparallel(cluster)
            except Exception:  # noqa: BLE001
                pass
            continue
        figures.setdefault("ready_s", time.perf_counter() - began)
        break
    if client is None:
        return figures
    try:
        view = client[:]
        figures["empty_ms"] = _median_ms(lambda: view.execute("pass", block=True), cells)
        view.execute(ALLREDUCE_SETUP, block=True)
        figures["allreduce_ms"] = _median_ms(lambda: view.execute(ALLREDUCE, block=True), cells)
        figures["pss_mb"] = _pss_mb(view.apply_sync(lambda: __import__("os").getpid()))
    finally:
        segments = peer_segments()
        client.close()
        began = time.perf_counter()
        cluster.stop_cluster_sync()
        figures["stop_s"] = time.perf_counter() - began
        remove_files(segments)
    return figures


def scale_rows(sizes: tuple[int, ...] = (4, 16, 64), cells: int = 30) -> list[tuple]:
    rows = []
    for n in sizes:
        ours, theirs = mpinb_figures(n, cells), ipyparallel_figures(n, cells)
        peer = "ipyparallel " + (theirs["note"] + "with a 300 s registration timeout" if theirs["note"]
                                 else "(its defaults)")
        for key, label, low in (("ready_s", "start to ready (s)", True), ("stop_s", "stop (s)", True),
                                ("empty_ms", "empty cell (ms)", True),
                                ("allreduce_ms", "1 MB Allreduce cell (ms)", True),
                                ("pss_mb", "memory per rank, PSS (MB)", True)):
            mine, other = ours[key], theirs.get(key, float("nan"))
            label_here = f"{n} ranks: {label}"
            if key == "ready_s" and theirs["note"]:
                rows.append((label_here, mine, "ipyparallel (its defaults): did not start", float("nan"),
                             float("nan")))
                continue
            rows.append((label_here, mine, peer, other, other / mine if low else mine / other))
    return rows


def _median_s(run: Callable[[], object], count: int) -> float:
    return _median_ms(run, count) / 1e3


# (ranks, MB scattered and gathered, MB pushed to and pulled from every rank): a pull of 200 MB
# from each of 64 ranks would be 12.8 GB in the notebook, more than this machine holds twice over.
DATA_SIZES = ((4, 200, 200), (16, 200, 50), (64, 200, 20))


def data_rows(sizes: tuple[tuple[int, int, int], ...] = DATA_SIZES, count: int = 3) -> list[tuple]:
    """push, scatter, gather and pull of one float64 array, against ipyparallel's view methods on
    its own engines (its defaults), each tool's pool alone."""
    rows = []
    for n, split_mb, each_mb in sizes:
        rows += _data_rows(n, split_mb, each_mb, count)
    return rows


def _data_rows(n: int, split_mb: int, each_mb: int, count: int) -> list[tuple]:
    import numpy as np

    rng = np.random.default_rng(0)
    split, each = rng.random(split_mb * 2**20 // 8), rng.random(each_mb * 2**20 // 8)
    ours: dict[str, float] = {}
    with mpinb.Pool(n) as pool:
        ours["push"] = _median_s(lambda: pool.push({"data": each}), count)
        ours["scatter"] = _median_s(lambda: pool.scatter("part", split), count)
        ours["gather"] = _median_s(lambda: pool.gather("part"), count)
        ours["first pull"] = _once_s(lambda: pool.pull("data"))  # cold: nothing of it mapped here yet
        ours["pull"] = _median_s(lambda: pool.pull("data"), count)
    cluster = ipp.Cluster(engines="mpi", n=n, log_level=40)
    cluster.config.MPIEngineSetLauncher.mpi_cmd = [find_mpiexec()]
    if n > 16:  # its engines give up registering after 5 s, which 64 starting ranks need more than
        cluster.config.EngineLauncher.engine_args = ["--IPEngine.timeout=300"]
        cluster.engine_timeout = 300
    client = cluster.start_and_connect_sync(n=n)
    theirs: dict[str, float] = {}
    try:
        client.wait_for_engines(n, timeout=300)
        view = client[:]
        theirs["push"] = _median_s(lambda: view.push({"data": each}, block=True), count)
        theirs["scatter"] = _median_s(lambda: view.scatter("part", split, block=True), count)
        theirs["gather"] = _median_s(lambda: view.gather("part", block=True), count)
        theirs["first pull"] = _once_s(lambda: view.pull("data", block=True))
        theirs["pull"] = _median_s(lambda: view.pull("data", block=True), count)
    finally:
        stop_ipyparallel(cluster, client)
    sizes = {"push": f"{each_mb} MB to each", "pull": f"{each_mb} MB from each",
             "scatter": f"{split_mb} MB", "gather": f"{split_mb} MB"}
    rows = [("push", "push", ""), ("scatter", "scatter", ""), ("gather", "gather", ""),
            ("first pull", "pull", ", first call (cold)"), ("pull", "pull", ", later calls (warm median)")]
    return [(f"{method} of {sizes[method]}, {n} ranks{when} (s)", ours[key], "ipyparallel view." + method,
             theirs[key], theirs[key] / ours[key]) for key, method, when in rows]


def _once_s(run: Callable[[], object]) -> float:
    began = time.perf_counter()
    run()
    return time.perf_counter() - began
