"""What ``mpinb.progress`` costs a loop on the ranks, and what its updates cost the notebook.

A tight loop (an addition per iteration: the worst case, where the wrapper's own work shows) and a
loop of real work (a 100 kB numpy sum per iteration, about a second: loops worth a bar are long),
each with and without ``mpinb.progress``, alternated so that load bursts hit both alike; the loop's
time is measured on the ranks (``time.perf_counter`` around the loop, the slowest rank's), not the
run's round trip. The peer is the loop as people write it without us: plain, printing nothing.
Then the notebook's side over a 5-second loop (CPU is read in 10 ms ticks): the updates it
receives per rank and second (by design 1/EVERY), and its CPU time per second with the bars
against the same loop without them. Runs of one loop vary by about 3% here: read ratios near 1
as "no difference measured".
"""

from __future__ import annotations

import statistics
import time

import psutil

import mpinb
from mpinb.widgets.progress import ProgressBars

REPEATS = 5
TIGHT = 1_000_000
WORK = 200_000

LOOP = """
import time, mpinb
import numpy as np
data = np.ones(12_500)
began = time.perf_counter()
for i in {iterate}:
    {body}
time.perf_counter() - began
"""


def _loop_seconds(pool: mpinb.Pool, iterate: str, body: str) -> float:
    result = pool.run(LOOP.format(iterate=iterate, body=body), trace=False)
    return max(result.value.values())


def _pair(pool: mpinb.Pool, count: int, body: str) -> tuple[float, float]:
    plain, wrapped = [], []
    for _ in range(REPEATS):
        plain.append(_loop_seconds(pool, f"range({count})", body))
        wrapped.append(_loop_seconds(pool, f"mpinb.progress(range({count}))", body))
    return statistics.median(plain), statistics.median(wrapped)


def _notebook_side(pool: mpinb.Pool, wrapped: bool, seconds: float = 5.0) -> tuple[float, float]:
    """Updates received per rank and second, and notebook CPU ms per second, while every rank
    loops for ``seconds`` (through ``mpinb.progress`` or not), its state drawn as the notebook does."""
    bars = ProgressBars(pool.ranks())
    updates = 0

    def on_output(rank: int, kind: str, data: object) -> None:
        nonlocal updates
        if kind == "progress":
            updates += sum(len(states) for states in data.values())  # type: ignore[attr-defined]
            bars.update(data)  # type: ignore[arg-type]

    steps = "iter(lambda: time.perf_counter() < end, False)"
    me = psutil.Process()
    cpu = me.cpu_times()
    began = time.perf_counter()
    pool.run(f"import time, mpinb\nend = time.perf_counter() + {seconds}\n"
             f"for i in {f'mpinb.progress({steps})' if wrapped else steps}:\n    time.sleep(0.001)\n",
             on_output=on_output, trace=False)
    bars.finish()
    wall = time.perf_counter() - began
    after = me.cpu_times()
    return updates / wall / pool.size, (after.user + after.system - cpu.user - cpu.system) / wall * 1e3


def progress_rows() -> list[tuple]:
    from mpinb.common._progress import EVERY, FULL_RATE_RANKS

    rows = []
    for n in (4, 16):
        with mpinb.Pool(n) as pool:
            pool.run("import mpinb, numpy", trace=False)
            plain, wrapped = _pair(pool, TIGHT, "i + 1")
            rows.append((f"progress: tight loop, {n} ranks, added per iteration (ns)",
                         (wrapped - plain) / TIGHT * 1e9, "plain loop, ns per iteration", plain / TIGHT * 1e9,
                         plain / wrapped))
            plain, wrapped = _pair(pool, WORK, "data.sum()")
            rows.append((f"progress: 100 kB sum per step, {n} ranks (s per loop)", wrapped,
                         "plain loop", plain, plain / wrapped))
            _, quiet_cpu = _notebook_side(pool, wrapped=False)
            per_rank, cpu_ms = _notebook_side(pool, wrapped=True)
            design = 1 / (EVERY * max(1.0, n / FULL_RATE_RANKS))
            rows.append((f"progress: updates per rank per second, {n} ranks", per_rank,
                         "design (1/EVERY)", design, design / per_rank))
            rows.append((f"progress: notebook CPU during the loop, {n} ranks (ms per s)", cpu_ms,
                         "same loop without progress", quiet_cpu, quiet_cpu / max(cpu_ms, 1e-9)))
    return rows
