"""``mpinb.progress``: a loop wrapper (like tqdm) whose bars the notebook gathers across ranks.

On the ranks of a pool each rank publishes its count a few times a second on the status channel
(ipyparallel's data messages, as waits are); the notebook draws one widget for the loop. Elsewhere
(a script under plain ``mpiexec``, a plain Python process) rank 0 prints a text bar to stderr.
Checking the clock is all an iteration costs in between.
"""

from __future__ import annotations

import operator
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar, cast

from ._protocol import PROGRESS_KEY, Progress

T = TypeVar("T")

EVERY = 0.2  # seconds between one rank's updates, in pools of up to FULL_RATE_RANKS ranks
FULL_RATE_RANKS = 4  # beyond, each rank updates less often: the notebook gets ~20 updates/s in all
CHECK_EVERY = 0.01  # seconds between reads of the clock, about
TEXT_EVERY_TTY = 0.2  # a text bar on a terminal is redrawn in place this often
TEXT_EVERY_LOG = 5.0  # and written as a new line this often into a file or a pipe

# Set on the ranks of a pool (publish_through): how to reach the notebook, and how many ranks share it.
publisher: Callable[[dict], None] | None = None
world_size = 1
_bars = 0  # progress() loops begun in the current run
last_states: dict[str, Progress] = {}  # each bar's last published state in this run, sent with the reply


def _count(total: object) -> int:
    """``total`` as a count of iterations: any whole number (numpy's too), not a bool or a float."""
    try:
        count = operator.index(total)  # type: ignore[arg-type]
    except TypeError:
        count = -1
    if isinstance(total, bool) or count < 0:
        raise ValueError(f"progress(total=...) must be a whole number of iterations >= 0, not {total!r}")
    return count


def publish_through(send: Callable[[dict], None], ranks: int) -> None:
    """On a rank of a pool: send each bar's state with ``send``, at a rate for ``ranks`` ranks in all."""
    global publisher, world_size
    publisher, world_size = send, ranks


def new_run() -> None:
    """Each run numbers its loops from 0, so that the k-th loop of every rank is one bar."""
    global _bars
    _bars = 0
    last_states.clear()


def progress(iterable: Iterable[T], total: int | None = None, desc: str | None = None) -> Iterator[T]:
    """Iterate over ``iterable``, showing progress across the ranks.

    In a pool: one bar in the notebook with a small bar per rank, its rate, the time left and the
    ranks that lag. Under plain ``mpiexec``: a text bar from rank 0. The k-th loop of every rank
    is one bar, so each rank calls it in the same order.

    :param iterable: what to iterate over; its items are yielded unchanged.
    :param total: how many items to expect; default ``len(iterable)`` when it has one (without
        one, the bar counts and shows no time left).
    :param desc: the bar's label.
    :raises ValueError: ``total`` is not a whole number of at least 0.
    """
    global _bars
    if total is None:
        try:
            total = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            total = None
    if total is not None:
        total = _count(total)
    if desc is not None and not isinstance(desc, str):
        raise TypeError(f"progress(desc=...) must be a str, not {type(desc).__name__}")
    bar, _bars = _bars, _bars + 1
    show: _Published | _TextBar
    if publisher is not None:
        show = _Published(publisher, bar, total, desc, EVERY * max(1.0, world_size / FULL_RATE_RANKS))
    else:
        show = _TextBar(total, desc, visible=_script_rank() == 0)
    return _iterate(iter(iterable), show)


def _iterate(items: Iterator[T], show: _Published | _TextBar) -> Iterator[T]:
    """Yield the items, counting them; the clock is read only every ``stride`` items, a stride
    that keeps the reads about CHECK_EVERY apart (a tight loop pays a count and a comparison)."""
    clock = time.perf_counter
    n, stride, check_at = 0, 1, 1
    next_at = show.begin()
    last_check = clock()
    done = False
    try:
        for item in items:
            yield item
            n += 1
            if n >= check_at:
                now = clock()
                if now >= next_at:
                    next_at = show.update(n)
                spent = now - last_check
                stride = max(1, min(stride * 2, int(stride * CHECK_EVERY / spent) if spent > 0 else stride * 2))
                check_at, last_check = n + stride, now
        done = True
    finally:  # also when the loop breaks early, raises, or is interrupted
        show.end(n, done)


class _Published:
    def __init__(self, send: Callable[[dict], None], bar: int, total: int | None, desc: str | None,
                 every: float):
        self.send, self.every = send, every
        self.key = f"{PROGRESS_KEY}:{bar}"
        self.state: Progress = {"bar": bar, "desc": desc, "n": 0, "total": total, "elapsed": 0.0, "done": False,
                                "ended": False}

    def begin(self) -> float:
        """The first update comes after ``every``: a loop shorter than that sends only its end."""
        self.began = time.perf_counter()
        return self.began + self.every

    def update(self, n: int) -> float:
        self._publish(n)
        return time.perf_counter() + self.every

    def end(self, n: int, done: bool) -> None:
        self._publish(n, done=done, ended=True)

    def _publish(self, n: int, done: bool = False, ended: bool = False) -> None:
        state = cast(Progress, dict(self.state, n=n, elapsed=time.perf_counter() - self.began, done=done,
                                    ended=ended))
        last_states[self.key] = state  # the status channel may lag the reply: the reply has it too
        try:
            self.send({self.key: state})
        except Exception:  # noqa: BLE001 - progress must never break the loop it shows
            pass


def _script_rank() -> int:
    """This process's rank in MPI_COMM_WORLD if the script uses MPI (never initialises it)."""
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            return mpi.COMM_WORLD.Get_rank()
    except Exception:  # noqa: BLE001 - any doubt: behave as a single process
        pass
    return 0


class _TextBar:
    """``desc: 45%|#####      | 450/1000 [3.1 s < 3.8 s, 145 it/s]`` on stderr, from rank 0: redrawn
    in place on a terminal, a new line now and then into a file or a pipe."""

    WIDTH = 24

    def __init__(self, total: int | None, desc: str | None, visible: bool):
        self.total, self.desc, self.visible = total, desc, visible
        self.stream = sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = TEXT_EVERY_TTY if self.tty else TEXT_EVERY_LOG

    def begin(self) -> float:
        self.began = time.perf_counter()
        return self.began + self.every if self.visible else float("inf")

    def update(self, n: int) -> float:
        self._write(n, final=False)
        return time.perf_counter() + self.every

    def end(self, n: int, done: bool) -> None:
        if self.visible:
            self._write(n, final=True, note="" if done else " (left early)")

    def _write(self, n: int, final: bool, note: str = "") -> None:
        elapsed = time.perf_counter() - self.began
        rate = n / elapsed if elapsed > 0 else 0.0
        line = text_bar(self.desc, n, self.total, elapsed, rate, self.WIDTH) + note
        try:
            self.stream.write(("\r" if self.tty else "") + line + ("\n" if final or not self.tty else ""))
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream
            self.visible = False


def text_bar(desc: str | None, n: int, total: int | None, elapsed: float, rate: float, width: int = 24,
             left: float | None = None) -> str:
    """One line of progress, the same in a terminal and in a notebook's text fallback; ``left``
    (seconds) defaults to what ``rate`` needs for the rest."""
    head = f"{desc}: " if desc else ""
    speed = f"{rate:,.3g} it/s"
    if not total:
        return f"{head}{n:,} [{seconds_text(elapsed)}, {speed}]"
    share = min(n / total, 1.0)
    filled = int(share * width)
    if left is None:
        left = (total - n) / rate if rate > 0 else float("inf")
    return (f"{head}{share:4.0%}|{'#' * filled}{' ' * (width - filled)}| {n:,}/{total:,} "
            f"[{seconds_text(elapsed)} < {seconds_text(left)}, {speed}]")


def seconds_text(value: float) -> str:
    if value == float("inf"):
        return "?"
    if value >= 3600:
        return f"{int(value // 3600)}:{int(value % 3600 // 60):02d}:{int(value % 60):02d}"
    if value >= 60:
        return f"{int(value // 60)}:{int(value % 60):02d}"
    return f"{value:.1f} s"
