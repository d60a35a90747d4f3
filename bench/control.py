"""What each rank costs the pool's control path, measured where it can be and modelled beyond.

Measured on real pools (4, 16, 64 ranks): CPU seconds of the notebook, of the controller (all its
processes: hub, schedulers, heart monitor) and of rank 0 at start-up, while idle (heartbeats),
per empty cell and per cell in which every rank prints a line, with ipyparallel's own per-engine
path (``view.execute``) on the same ranks beside it. The per-rank cost is the slope of a
least-squares line through the sizes.

Measured with many light ranks (1,024 and 4,096): rank 0's relay with that many subscribers and
replies (one helper process plays the other ranks over real sockets), the notebook turning that
many replies into a result, and the trace of a ring exchange on that many ranks (its matching).
"""

from __future__ import annotations

import os
import pickle
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import psutil

import mpinb

CELLS = 30
LIGHT_SIZES = (1024, 4096)


def _cpu(processes: list[psutil.Process]) -> float:
    total = 0.0
    for proc in processes:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def _controller(pool: mpinb.Pool) -> list[psutil.Process]:
    here = psutil.Process()
    return [p for p in here.children(recursive=True) if "_controller_main" in " ".join(p.cmdline())]


def _cost_per_cell(run: Callable[[], object], groups: dict[str, list[psutil.Process]]) -> dict[str, float]:
    """CPU ms per cell of each group of processes, over CELLS cells."""
    run()
    before = {name: _cpu(procs) for name, procs in groups.items()}
    began = time.perf_counter()
    for _ in range(CELLS):
        run()
    costs = {name: (_cpu(procs) - before[name]) / CELLS * 1e3 for name, procs in groups.items()}
    costs["wall"] = (time.perf_counter() - began) / CELLS * 1e3
    return costs


def pool_costs(n: int) -> dict[str, float]:
    me = psutil.Process()
    notebook_before = _cpu([me])
    pool = mpinb.Pool(n).start()
    try:
        controller = _controller(pool)
        ranks = [psutil.Process(row["pid"]) for row in pool.status()]
        figures = {"start_controller_ms": _cpu(controller) * 1e3,
                   "start_notebook_ms": (_cpu([me]) - notebook_before) * 1e3}
        idle_before = _cpu(controller)
        time.sleep(5.0)
        figures["idle_controller_ms_per_s"] = (_cpu(controller) - idle_before) / 5.0 * 1e3
        groups = {"notebook": [me], "controller": controller, "rank0": ranks[:1], "others": ranks[1:]}
        view = pool._supervisor.client[:]
        for label, run in (("empty", lambda: pool.run("pass")),
                           ("print", lambda: pool.run("print(rank)")),
                           ("ipp_empty", lambda: view.execute("pass", block=True)),
                           ("ipp_print", lambda: view.execute("print(rank)", block=True))):
            for name, value in _cost_per_cell(run, groups).items():
                figures[f"{label}_{name}_ms"] = value / (n - 1) if name == "others" else value
    finally:
        pool.stop()
    return figures


def slope(sizes: list[int], values: list[float]) -> tuple[float, float]:
    """Least-squares ``(fixed, per_rank)`` of ``value = fixed + per_rank * size``."""
    mean_n, mean_v = statistics.mean(sizes), statistics.mean(values)
    per_rank = (sum((n - mean_n) * (v - mean_v) for n, v in zip(sizes, values))
                / sum((n - mean_n) ** 2 for n in sizes))
    return mean_v - per_rank * mean_n, per_rank


# -- many light ranks --------------------------------------------------------------------------

_MEMBERS = r"""
import hashlib, hmac, pickle, sys, zmq
runs_address, replies_address, count, key = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].encode()
reply = pickle.dumps({"value": None, "repr": "", "why": "", "has_value": False, "error": None, "trace": None,
                      "dropped_lines": 0, "elapsed": 1e-4, "wrote": False})
context = zmq.Context()
context.set(zmq.MAX_SOCKETS, count + 16)
subscribers = []
for _ in range(count):
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(runs_address)
    subscribers.append(sub)
push = context.socket(zmq.PUSH)
push.connect(replies_address)
poller = zmq.Poller()
for sub in subscribers:
    poller.register(sub, zmq.POLLIN)
def sign(*frames):
    digest = hmac.new(key, digestmod=hashlib.sha256)
    for frame in frames:  # as mpinb.rank._relay._Signer signs
        digest.update(len(frame).to_bytes(8, "little"))
        digest.update(frame)
    return digest.hexdigest().encode()
while True:
    for sub, _ in poller.poll():
        kind, payload, _signature = sub.recv_multipart()
        if kind == b"stop":
            sys.exit(0)
        if kind != b"run" or sub is not subscribers[0]:
            continue  # every subscriber got it; one answers for all, rank by rank
        cell = pickle.loads(payload)[0]
        for rank in range(1, count + 1):
            header = f"{cell} {rank}".encode()
            push.send_multipart([header, reply, sign(header, reply)])
"""


def light_relay(members: int, cells: int = 10) -> float:
    """ms for rank 0 to publish an empty run to ``members`` subscribers and gather their replies."""
    from mpinb.rank import _relay

    key = os.urandom(16).hex().encode()
    hub = _relay._Hub("127.0.0.1", _relay._Signer(key))
    runs, replies = hub.addresses()
    helper = subprocess.Popen([sys.executable, "-c", _MEMBERS, runs, replies, str(members), key.decode()])
    try:
        if hub.wait_for_members(members, timeout=120) < members:
            raise RuntimeError(f"only {hub.members} of {members} light ranks subscribed")
        times = []
        for cell in range(1, cells + 1):
            began = time.perf_counter()
            hub.publish(b"run", pickle.dumps((cell, "run_cell", (), list(range(members + 1)), {})))
            got = hub.gather(cell, set(range(1, members + 1)), None)
            times.append(time.perf_counter() - began)
            if len(got) != members:
                raise RuntimeError(f"gathered {len(got)} of {members} replies")
        return statistics.median(times) * 1e3
    finally:
        hub.publish(b"stop", b"")
        try:
            helper.wait(timeout=30)
        finally:
            helper.kill()
            hub.runs.close()
            hub.replies.close()


def light_collect(ranks: int) -> float:
    """ms for the notebook to turn ``ranks`` pickled replies into a RunResult."""
    from mpinb.pool._run import Outcome, collect

    reply = pickle.dumps({"value": None, "repr": "", "why": "", "has_value": False, "error": None,
                          "trace": None, "dropped_lines": 0, "elapsed": 1e-4, "wrote": False})

    class Arrived:  # what Relayed holds once rank 0's reply arrived
        def __init__(self) -> None:
            self.stdout = self.stderr = [""] * ranks
            self.outputs = [[] for _ in range(ranks)]
            self.gathered = [reply] * ranks

        def replies(self):
            return [pickle.loads(r) for r in self.gathered]

    began = time.perf_counter()
    collect(Outcome(Arrived(), list(range(ranks))), ranks)  # type: ignore[arg-type]
    return (time.perf_counter() - began) * 1e3


def light_trace(ranks: int) -> tuple[float, float]:
    """(ms to build and match, bytes per rank pickled) for one ring exchange on ``ranks`` ranks."""
    from mpinb.common._events import RECV, SEND
    from mpinb.trace import Trace

    recorded = {}
    for rank in range(ranks):
        right, left = (rank + 1) % ranks, (rank - 1) % ranks
        recorded[rank] = {
            "events": [("Send", SEND, "world", right, 0, 8, 0, 0.001, 0.0011, 0.0011, "<mpi-cell-1>", 3),
                       ("Recv", RECV, "world", left, 0, 0, 8, 0.0011, 0.002, 0.002, "<mpi-cell-1>", 4)],
            "dropped": 0, "comms": {"world": list(range(ranks))} if rank == 0 else {},
            "began": 0.0, "ended": 0.003, "offset": 0.0,
        }
    size = statistics.mean(len(pickle.dumps(recorded[r])) for r in range(1, min(ranks, 50)))
    began = time.perf_counter()
    trace = Trace(recorded, world_size=ranks)
    matched = trace.messages()
    elapsed = (time.perf_counter() - began) * 1e3
    if len(matched) != ranks:
        raise RuntimeError(f"matched {len(matched)} of {ranks} messages")
    return elapsed, size


def control_rows(sizes: tuple[int, ...] = (4, 16, 64)) -> list[tuple]:
    measured = {n: pool_costs(n) for n in sizes}
    rows: list[tuple] = []
    for n in sizes:
        f = measured[n]
        for what in ("empty", "print"):
            mine = f[f"{what}_notebook_ms"] + f[f"{what}_controller_ms"]
            theirs = f[f"ipp_{what}_notebook_ms"] + f[f"ipp_{what}_controller_ms"]
            rows.append((f"{n} ranks: {what} cell, notebook + controller CPU (ms)", mine,
                         "ipyparallel view.execute, same ranks", theirs, theirs / mine))
            rows.append((f"{n} ranks: {what} cell, rank 0 CPU (ms)", f[f"{what}_rank0_ms"],
                         "ipyparallel view.execute, same ranks", f[f"ipp_{what}_rank0_ms"],
                         f[f"ipp_{what}_rank0_ms"] / f[f"{what}_rank0_ms"]))
    per_rank = {}
    for key in ("start_controller_ms", "idle_controller_ms_per_s", "empty_notebook_ms", "empty_controller_ms",
                "empty_rank0_ms", "print_notebook_ms", "print_controller_ms", "print_rank0_ms",
                "ipp_empty_notebook_ms", "ipp_empty_controller_ms"):
        per_rank[key] = slope(list(sizes), [measured[n][key] for n in sizes])
    for key, (fixed, each) in per_rank.items():
        rows.append((f"per rank: {key} (fixed {fixed:.2f})", each, "model", float("nan"), float("nan")))
    for n in LIGHT_SIZES:
        rows.append((f"{n} light ranks: rank 0 relays an empty run (ms)", light_relay(n - 1), "model",
                     float("nan"), float("nan")))
        rows.append((f"{n} ranks: notebook collects the replies (ms)", light_collect(n), "model",
                     float("nan"), float("nan")))
        matching, size = light_trace(n)
        rows.append((f"{n} ranks: trace of a ring exchange, build + match (ms)", matching, "model",
                     float("nan"), float("nan")))
        rows.append((f"{n} ranks: trace bytes per rank for 2 calls", size, "model", float("nan"), float("nan")))
    return rows
