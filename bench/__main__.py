"""``python -m bench``: mpinb against plain ipyparallel and plain mpiexec, in one run.

Prints a table of medians (or best-of for MPI figures) and the ratio to the peer; ``--json PATH``
also writes every figure. Figures move with the machine's load: compare ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import ipyparallel as ipp

import mpinb
from mpinb.pool import find_mpiexec
from mpinb.pool._launch import launch_environment, mpi_family, plain_mpiexec

from .aborts import recovery_rows
from .control import control_rows
from .death import death_rows
from .first_cell import first_cell_rows
from .hang import ipyparallel_figures, mpinb_figures
from .output import output_traffic
from .peer import stop_ipyparallel
from .progress import progress_rows
from .render import first_paint, record_trace, view_build_ms
from .scale import data_rows, scale_rows
from .verify import verify_rows

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = os.path.join(HERE, "mpi_kernels.py")
OVERSUBSCRIBED = os.path.join(HERE, "oversubscribed.py")
TRACE_KERNELS = os.path.join(HERE, "trace_kernels.py")


def time_start_stop(make_pool, repeats: int) -> tuple[float, float]:
    starts, stops = [], []
    for _ in range(repeats):
        began = time.perf_counter()
        handle = make_pool()
        starts.append(time.perf_counter() - began)
        began = time.perf_counter()
        handle()
        stops.append(time.perf_counter() - began)
    return statistics.median(starts), statistics.median(stops)


def mpinb_pool(n: int):
    pool = mpinb.Pool(n).start()
    return pool.stop


def ipyparallel_cluster(n: int):
    cluster = ipp.Cluster(engines="mpi", n=n, log_level=40)  # its defaults, but for where mpiexec is
    cluster.config.MPIEngineSetLauncher.mpi_cmd = [find_mpiexec()]
    client = cluster.start_and_connect_sync()

    def stop():
        stop_ipyparallel(cluster, client)

    return stop


def round_trips(first, second, count: int) -> tuple[float, float]:
    """Median round trip of each, measured alternately so that load bursts hit both alike."""
    first(), second()
    a, b = [], []
    for _ in range(count):
        for run, times in ((first, a), (second, b)):
            began = time.perf_counter()
            run()
            times.append(time.perf_counter() - began)
    return statistics.median(a), statistics.median(b)


def mpi_library() -> str:
    """Which MPI this run measures (the figures differ by MPI: compare like with like)."""
    mpiexec = find_mpiexec()
    return f"{mpi_family(mpiexec) or 'unknown MPI'} ({mpiexec})"


def machine() -> str:
    """What this machine is, to read the figures by: its CPU, cores, Python and Python's speed
    (the notes' yardstick, ``sum(range(100))``: 1.46 us on a machine twice as slow as ours)."""
    import platform

    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as handle:
            model = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def python_speed_us() -> float:
    """The notes' yardstick of the interpreter's speed: ``sum(range(100))``, best of 5 (1.46 us on
    a machine twice as slow as the one docs/guide/performance.md's figures came from)."""
    import timeit

    loops = 200_000
    return min(timeit.repeat("sum(range(100))", number=loops, repeat=5)) / loops * 1e6


def under_mpiexec(script: str, n: int):
    """The last line rank 0 printed, as JSON, running ``script`` under plain mpiexec."""
    cmd, env = plain_mpiexec(n, [sys.executable, script])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def in_pool(pool: mpinb.Pool, script: str):
    """The same, running ``script`` unchanged inside the pool (untraced: tracing has its own rows)."""
    res = pool.run_file(script, trace=False)
    return json.loads(res.stdout[0].strip().splitlines()[-1])


# The same kernels typed into a cell: defined in the cell's namespace, on the cell's world.
TRACE_CELL = (f"exec(compile(open({os.path.join(HERE, 'kernels.py')!r}).read(), 'kernels.py', 'exec'))\n"
              "tracing_figures()")


def _figures(pool: mpinb.Pool, how: str, traced: bool) -> dict:
    """One run of the tracing kernels, in a cell or through run_file (``crowd``: the kernels for
    ranks that share cores); a traced run that recorded nothing would report untraced speed as
    traced, so it stops the benchmark."""
    if how == "cell":
        res = pool.run(TRACE_CELL, trace=traced)
        figures = res.value[0]
    else:
        res = pool.run_file(TRACE_KERNELS, args=["crowd"] if how == "crowd" else [], trace=traced)
        figures = json.loads(res.stdout[0].splitlines()[-1])
    recorded = len(res.trace) if res.trace is not None else 0
    if traced and recorded < (2_000 * pool.size if how == "crowd" else 10_000):
        raise RuntimeError(f"the traced {how} run recorded only {recorded} calls: its figures are not traced")
    if not traced and recorded:
        raise RuntimeError(f"the untraced {how} run recorded {recorded} calls")
    return figures


def _on_off(pool: mpinb.Pool, how: str, repeats: int = 5) -> tuple[list[dict], list[dict]]:
    """Traced and untraced runs alternated, so that a burst of load hits both alike. Each run's
    figure is already a best of several; across runs the median is taken, since one best-of can
    be impossibly good (an 8 MB transfer at 55 GB/s was seen once)."""
    on, off = [], []
    for _ in range(repeats):
        on.append(_figures(pool, how, True))
        off.append(_figures(pool, how, False))
    return on, off


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def _paired(on: list[dict], off: list[dict], key: str, rate: bool) -> float:
    """Traced over untraced speed, as the median of each alternated pair's ratio: a load burst
    that slows one pair moves one ratio, where a ratio of medians mixes runs minutes apart.
    ``rate``: the figure is a throughput (higher is better), else a time."""
    return statistics.median(a[key] / b[key] if rate else b[key] / a[key] for a, b in zip(on, off))


# Tracing's targets, on any machine: a traced call adds at most this much of the untraced call's
# time, or 0.5 us, whichever is larger; traced throughput is at least this share of untraced.
ADDED_SHARE, ADDED_FLOOR_US, THROUGHPUT_SHARE = 0.15, 0.5, 0.95


def added_target_us(untraced_us: float) -> float:
    return max(ADDED_FLOOR_US, ADDED_SHARE * untraced_us)


SPAWNED_CHILD = ("from mpi4py import MPI\nparent = MPI.Comm.Get_parent()\nparent.send(1, dest=0)\n"
                 "parent.Disconnect()\n")


def _spawn_ms(pool: mpinb.Pool, repeats: int = 5) -> tuple[list[float], list[float]]:
    """Rank 0 spawns 2 Python children, takes a message from each and disconnects, traced and
    untraced alternated: what the bootstrap that traces a spawned program costs (the children
    import mpinb's tracer before the program starts)."""
    with tempfile.TemporaryDirectory(prefix="mpinb-bench-") as folder:
        child = os.path.join(folder, "child.py")
        with open(child, "w") as file:
            file.write(SPAWNED_CHILD)
        cell = ("import sys, time\nstart = time.perf_counter()\nif rank == 0:\n"
                f"    inter = MPI.COMM_SELF.Spawn(sys.executable, args=[{child!r}], maxprocs=2)\n"
                "    [inter.recv(source=c) for c in range(2)]\n    inter.Disconnect()\n"
                "(time.perf_counter() - start) * 1e3")
        pool.run(cell, trace=True)  # (the first spawn also starts MPI's own machinery for it)
        on, off = [], []
        for _ in range(repeats):
            traced = pool.run(cell, trace=True)
            if traced.trace is None or not traced.trace.spawned:
                raise RuntimeError("the traced spawn recorded no child: its figure is not traced")
            on.append(traced.value[0])
            off.append(pool.run(cell, trace=False).value[0])
    return on, off


def tracing_cost() -> list[tuple]:
    """Tracing on vs off on 2 ranks (one per core, so that oversubscription noise stays out),
    in a cell and through run_file (where each run imports the kernels anew, as mpiexec does)."""
    rows = []
    with mpinb.Pool(2) as pool:
        for how in ("cell", "run_file"):
            on, off = _on_off(pool, how, repeats=7)
            for key, label in (("latency_us", "traced Send/Recv 1 byte"),
                               ("latency_lowercase_us", "traced send/recv 1 byte")):
                traced, plain = _median(on, key), _median(off, key)
                target = added_target_us(plain)
                rows.append((f"{label}, {how}, per call (us)", traced, "tracing off", plain, plain / traced))
                # ratio: the slowest traced call the target allows, over the traced call (> 1: met)
                rows.append((f"{label}, {how}, added by tracing (us)", traced - plain,
                             f"target: at most max({ADDED_FLOOR_US} us, {ADDED_SHARE:.0%} of untraced)", target,
                             (plain + target) / traced))
            for key, label, rate in (("bandwidth_8mb_gbs", "8 MB Send/Recv, {how} (GB/s)", True),
                                     ("put_1mb_gbs", "1 MB Put, Fence epochs, {how} (GB/s)", True),
                                     ("put_locked_1mb_gbs", "1 MB Put, Lock/Unlock epochs, {how} (GB/s)", True),
                                     ("put_fence_1kb_us", "1 kB Put + Fence, {how}, per epoch (us)", False),
                                     ("allreduce_1mb_ms", "1 MB Allreduce, {how} (ms)", False)):
                rows.append((f"traced {label.format(how=how)}", _median(on, key), "tracing off", _median(off, key),
                             _paired(on, off, key, rate)))
        on_ms, off_ms = _spawn_ms(pool)
        rows.append(("traced Spawn of 2 children, a message each, Disconnect, cell (ms)", statistics.median(on_ms),
                     "tracing off", statistics.median(off_ms),
                     statistics.median(b / a for a, b in zip(on_ms, off_ms))))
    # Two and four ranks per core, as when a laptop runs more ranks than it has cores (a traced
    # wait that spun without yielding once made this 100x slower). Each traced reduction that
    # runs as the blocking call waits for every member first, which costs most when ranks queue
    # for a core. Four per core only up to 64 ranks: past that the pool itself is the test.
    cores, key = os.cpu_count() or 1, "allreduce_16kb_ms"
    for crowd in [2 * cores] + ([4 * cores] if 4 * cores <= 64 else []):
        with mpinb.Pool(crowd) as pool:
            on, off = _on_off(pool, "crowd")
        rows.append((f"traced 16 kB Allreduce, {crowd} ranks on {cores} cores (ms)", _median(on, key),
                     "tracing off", _median(off, key), _paired(on, off, key, rate=False)))
    return rows


def calibration() -> dict:
    """This machine's yardsticks, printed and stored beside every figure, so that figures from
    two machines can be compared: the interpreter's speed, and MPI's own 1-byte latency under
    plain mpiexec (2 ranks), which per-call costs in Python and in MPI scale with."""
    return {"python_sum_range_100_us": python_speed_us(),
            "mpiexec_latency_1byte_us": under_mpiexec(KERNELS, 2)["latency_us"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=4, help="ranks (default 4)")
    parser.add_argument("--repeats", type=int, default=5, help="pool starts per tool (default 5)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--only", choices=["mpi", "tracing", "output", "scale", "data", "control", "progress",
                                           "recovery", "first-cell", "death", "verify"],
                        help="run only these rows")
    args = parser.parse_args(argv)
    n = args.n
    # Started in the background (nohup, CI), the process ignores SIGINT, and the stop button the
    # hang and recovery rows press (_thread.interrupt_main) would do nothing: handle it, as a kernel does.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # What plain mpiexec needs here to run at all (Open MPI as root, more ranks than cores), for
    # the peers too; MPICH ignores it.
    os.environ.update(launch_environment(4 * (os.cpu_count() or 1)))
    print(f"Machine: {machine()}", flush=True)
    print(f"MPI: {mpi_library()}", flush=True)
    yardsticks = calibration()
    print(f"Calibration: Python sum(range(100)) {yardsticks['python_sum_range_100_us']:.2f} us; plain mpiexec "
          f"1-byte latency {yardsticks['mpiexec_latency_1byte_us']:.2f} us (2 ranks)", flush=True)
    rows = []
    if args.only:
        rows = {"mpi": lambda: mpi_rows(n, args.repeats), "tracing": tracing_cost, "output": output_rows,
                "scale": scale_rows, "data": data_rows, "control": control_rows,
                "progress": progress_rows, "recovery": lambda: recovery_rows(n),
                "first-cell": lambda: first_cell_rows(n), "death": lambda: death_rows(n),
                "verify": verify_rows}[args.only]()
        _report(rows, args.json, yardsticks)
        return 0

    rows = mpi_rows(n, args.repeats)
    rows += first_cell_rows(n)
    rows += tracing_cost()
    rows += verify_rows()
    rows += output_rows()
    rows += scale_rows()
    rows += data_rows()
    rows += progress_rows()
    trace = record_trace()
    build_ms = view_build_ms(trace)  # first: the trace caches its waits and path once computed
    rows.append(("space-time view of 100,000 calls, built in the notebook (ms)",
                 build_ms, "target", 1000.0, 1000.0 / build_ms))
    paint = first_paint(trace)
    rows.append(("space-time view of 100,000 calls, first paint (ms)",
                 paint["ms"], "target", 1000.0, 1000.0 / paint["ms"]))

    ours, theirs = mpinb_figures(n), ipyparallel_figures(n)
    rows.append(("ring deadlock: diagnosis shown after (s)", ours["diagnosis_s"], "target", 2.0,
                 2.0 / ours["diagnosis_s"]))
    never = theirs["control_back_s"] is None
    rows.append(("ring deadlock: interrupt to control back (s)", ours["control_back_s"],
                 "ipyparallel: never (gave up after 10 s)" if never else "ipyparallel, same cell",
                 10.0 if never else theirs["control_back_s"],
                 (10.0 if never else theirs["control_back_s"]) / ours["control_back_s"]))
    rows.append(("ring deadlock: ranks left running after stop", 0, "ipyparallel stop_cluster",
                 theirs["ranks_left_after_stop"], float("inf") if theirs["ranks_left_after_stop"] else 1.0))
    rows += recovery_rows(n)
    rows += death_rows(n)

    crowd = 4 * (os.cpu_count() or 1)
    alone = under_mpiexec(OVERSUBSCRIBED, 1)
    with mpinb.Pool(crowd) as pool:
        mine = in_pool(pool, OVERSUBSCRIBED)
    theirs = under_mpiexec(OVERSUBSCRIBED, crowd)
    rows.append((f"compute with {crowd - 1} ranks waiting / alone", mine / alone, "plain mpiexec",
                 theirs / alone, theirs / mine))

    _report(rows, args.json, yardsticks)
    return 0


def output_rows() -> list[tuple]:
    """Bytes the live view sends while 4 ranks print 5,000 lines each (see bench/output.py)."""
    figures = output_traffic()
    return [("live output of 4 x 5,000 lines: MB sent to the browser", figures["news_bytes"] / 1e6,
             "whole output every sync (before)", figures["whole_bytes"] / 1e6,
             figures["whole_bytes"] / figures["news_bytes"])]


def mpi_rows(n: int, repeats: int) -> list[tuple]:
    """Start, stop, round trip, and MPI's own figures in a pool against plain mpiexec, on this
    environment's MPI (`make bench MPI=openmpi` for Open MPI)."""
    rows = []
    ours = time_start_stop(lambda: mpinb_pool(n), repeats)
    peer = time_start_stop(lambda: ipyparallel_cluster(n), repeats)
    rows.append(("pool start to ready (s)", ours[0], "ipyparallel Cluster(engines='mpi')", peer[0], peer[0] / ours[0]))
    rows.append(("pool stop (s)", ours[1], "ipyparallel stop_cluster", peer[1], peer[1] / ours[1]))

    with mpinb.Pool(n) as pool:
        view = pool._supervisor.client[:]
        ours_rt, peer_rt = round_trips(lambda: pool.run("pass"), lambda: view.execute("pass", block=True), 200)
        rows.append(("empty run round trip (ms)", ours_rt * 1e3, "view.execute('pass'), same ranks",
                     peer_rt * 1e3, peer_rt / ours_rt))
        # Alternate the two, so that a burst of load on the machine hits both alike.
        inside, plain = [], []
        for _ in range(5):
            inside.append(in_pool(pool, KERNELS))
            plain.append(under_mpiexec(KERNELS, n))

    # Encrypted (CurveZMQ on every socket, as across hosts by default): against ipyparallel's own
    # encrypted round trip on the same ranks, and the cost of encryption is this row against the one above.
    with mpinb.Pool(n, encrypt=True) as pool:
        view = pool._supervisor.client[:]
        ours_rt, peer_rt = round_trips(lambda: pool.run("pass"), lambda: view.execute("pass", block=True), 200)
        rows.append(("empty run round trip, encrypted (ms)", ours_rt * 1e3,
                     "view.execute('pass'), CurveZMQ, same ranks", peer_rt * 1e3, peer_rt / ours_rt))

    # Each run's figure is a best of several already; across runs the median, since one best-of
    # can be impossibly good (8 MB at 28 GB/s in a pool vs 16 under mpiexec was seen once).
    for key, label, low in (("latency_us", "1-byte ping-pong latency (us)", True),
                            ("bandwidth_gbs", "8 MB bandwidth (GB/s)", False),
                            ("allreduce_8mb_ms", f"8 MB Allreduce, {n} ranks (ms)", True)):
        mine, theirs = _median(inside, key), _median(plain, key)
        ratio = theirs / mine if low else mine / theirs
        rows.append((label, mine, "plain mpiexec", theirs, ratio))

    # One rank per core: the latency without 4-on-2-core scheduling noise (which swings 15% both ways).
    with mpinb.Pool(2) as pool:
        pair_inside = [in_pool(pool, KERNELS) for _ in range(5)]
    pair_plain = [under_mpiexec(KERNELS, 2) for _ in range(5)]
    mine, theirs = _median(pair_inside, "latency_us"), _median(pair_plain, "latency_us")
    rows.append(("1-byte ping-pong latency, 2 ranks on 2 cores (us)", mine, "plain mpiexec", theirs, theirs / mine))

    return rows


def _report(rows: list[tuple], json_path: str | None, yardsticks: dict) -> None:
    """The table, ratio first (ratios transfer between machines; absolutes do not), and the JSON
    rows, each with this machine's calibration beside it."""
    width = max(len(r[0]) for r in rows)
    print(f"{'mpinb vs peer':>13}  {'figure':{width}}  {'mpinb':>9}  {'peer':>9}  peer")
    for label, mine, peer_name, theirs, ratio in rows:
        print(f"{ratio:12.2f}x  {label:{width}}  {mine:9.3f}  {theirs:9.3f}  {peer_name}")
    print(f"(ratio > 1: mpinb is faster, or within its target; targets: MPI figures at least 0.95 of plain\n"
          f" mpiexec; traced throughput at least {THROUGHPUT_SHARE} of untraced; a traced call adds at most\n"
          f" {ADDED_FLOOR_US} us or {ADDED_SHARE:.0%} of the untraced call, whichever is larger)")
    if json_path:
        where = machine()
        with open(json_path, "w") as handle:
            json.dump([dict(zip(("figure", "mpinb", "peer", "peer_value", "ratio"), r), calibration=yardsticks,
                            machine=where) for r in rows], handle, indent=2)


if __name__ == "__main__":
    sys.exit(main())
