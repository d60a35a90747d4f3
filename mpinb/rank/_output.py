"""Caps what one rank may print in one cell, and between cells.

The cap keeps a runaway loop from freezing the browser. It counts text printed from Python, text
written to the file descriptors (``os.write``, a C extension), and displays alike. It also keeps
output whole (text that cannot be encoded, a closed ``sys.stdout``)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO


class CappedStream:
    """Passes writes through until ``max_lines`` lines or ``max_chars`` characters, then counts them."""

    def __init__(self, stream: TextIO | Any, max_lines: int, max_chars: int):
        self._stream = stream
        self._lines_left = max_lines
        self._chars_left = max_chars
        self.dropped_lines = 0
        self.dropped_chars = 0
        self.dropped_displays = 0
        self.wrote = False
        self.closed = False
        self._lock = threading.Lock()  # the file descriptors' text comes from ipykernel's thread

    def write(self, text: str) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if not text.isascii():  # a lone surrogate would fail the whole batch when it is sent
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
        with self._lock:
            return self._write(text)

    def close(self) -> None:
        """Closed for the rest of this cell, as a file would be; the next cell prints again."""
        self.closed = True

    def _write(self, text: str) -> int:
        self.wrote = self.wrote or bool(text)
        if self.dropped_chars:
            self._drop(text)
            return len(text)
        lines = text.count("\n")
        # Text after the last allowed newline would begin one line too many.
        fits = lines < self._lines_left or (lines == self._lines_left and text.endswith("\n"))
        if fits and len(text) <= self._chars_left:
            self._lines_left -= lines
            self._chars_left -= len(text)
            return self._stream.write(text)
        keep = text[: self._chars_left]
        if keep.count("\n") >= self._lines_left:
            end = -1
            for _ in range(self._lines_left):
                end = keep.index("\n", end + 1)
            keep = keep[: end + 1]
        if keep:
            self._stream.write(keep)
        self._lines_left = self._chars_left = 0
        self._drop(text[len(keep):])
        return len(text)

    def take_display(self) -> bool:
        """Whether one more display fits (it counts as a line); counted as dropped if not."""
        with self._lock:
            if self._lines_left > 0 and not self.dropped_chars:
                self._lines_left -= 1
                return True
            self.dropped_displays += 1
            return False

    def _drop(self, text: str) -> None:
        self.dropped_chars += len(text)
        self.dropped_lines += text.count("\n")

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


# How many display messages (rich outputs, figures, clear_output) this rank has sent.
displays = 0
# The cell's caps while it runs (each display counts as a line of stdout's); between runs, the
# last run's caps afresh, on ipykernel's streams (see write_between_runs).
_capping: dict[str, CappedStream] = {}
_between: dict[str, CappedStream] = {}
_between_limits: tuple[int, int] | None = None  # the last run's (max_lines, max_chars)
_displays_between = {"left": 0, "dropped": 0}  # displays between runs: room left, and beyond it


def count_displays(display_pub) -> None:
    """Count what the rank's display publisher sends (a relayed run's notebook side then waits
    for it, as it does for printed text), and drop displays beyond the cell's cap."""
    for name in ("publish", "clear_output"):
        send = getattr(display_pub, name)

        def counted(*args, _send=send, **kwargs):
            global displays
            capped = _capping.get("stdout")
            if not (capped.take_display() if capped is not None else _display_between_runs()):
                return None
            displays += 1
            return _send(*args, **kwargs)

        setattr(display_pub, name, counted)


# ipykernel's streams whose file descriptor is watched (see mpinb/rank/_engine_main.py)
watched: list[Any] = []


def from_file_descriptor(stream: Any, text: str) -> None:
    """Text read from fd 1 or 2 (``os.write``, a C extension's printf): through the cell's cap
    while a cell runs, so that it counts and travels as printed text does."""
    capped = _capping.get(stream.name)
    if capped is not None and not capped.closed:
        capped.write(text)
    else:
        stream.write(text)


def drain_file_descriptors(timeout: float = 5.0) -> None:
    """Wait until ipykernel's reader threads have handled what the cell wrote to fds 1 and 2
    before now, so that the cell's output (and the rank log's copy) is complete when its reply
    goes. Only what was written before: a thread of the user's that writes on does not hold the
    reply. On a loaded machine the reader may wait its turn for a while: ``timeout`` bounds that."""
    deadline = time.monotonic() + timeout
    for stream in watched:
        written = _written_so_far(stream)
        reader = getattr(stream, "watch_fd_thread", None)
        while written is not None and stream._mpinb_handled < written and time.monotonic() < deadline \
                and (reader is None or reader.is_alive()):
            time.sleep(0.001)


def _written_so_far(stream: Any) -> int | None:
    """The bytes written to the stream's pipe so far (read by its reader, and waiting in the
    pipe), or None if the pipe cannot tell."""
    import fcntl
    import termios

    fid = getattr(stream, "_fid", None)
    if fid is None:
        return None
    for _ in range(100):  # (read twice around the pipe's count: the reader must not move between)
        read = stream._mpinb_read
        pending = bytearray(4)
        try:
            fcntl.ioctl(fid, termios.FIONREAD, pending)
        except OSError:
            return None
        if stream._mpinb_read == read:
            break
    return read + int.from_bytes(pending, sys.byteorder)


@contextmanager
def capped_output(max_lines: int, max_chars: int) -> Iterator[dict]:
    """Cap ``sys.stdout``/``sys.stderr`` for the duration; yields a dict of what was dropped
    (and, under ``"wrote"``, whether anything was written). After it, until the next run, the
    streams stay capped as much (see :func:`write_between_runs`); the next run begins by saying
    what was dropped meanwhile."""
    dropped = {"lines": 0, "chars": 0, "wrote": 0}
    saved = sys.stdout, sys.stderr
    out = CappedStream(saved[0], max_lines, max_chars)
    err = CappedStream(saved[1], max_lines, max_chars)
    _capping.update(stdout=out, stderr=err)
    sys.stdout, sys.stderr = out, err
    meanwhile = dict(_between)
    _between.clear()
    if _displays_between["dropped"]:
        meanwhile.setdefault("stdout", CappedStream(saved[0], 0, 0)).dropped_displays = _displays_between["dropped"]
    _displays_between.update(left=0, dropped=0)
    for name, capped in meanwhile.items():
        if capped.dropped_chars or capped.dropped_displays:
            _capping[name].write(f"[mpinb] after the last run ended, this rank printed {_what_was_cut(capped)} "
                                 "beyond its cap (a thread that outlived its cell?): not shown.\n")
    try:
        yield dropped
    finally:
        drain_file_descriptors()
        sys.stdout, sys.stderr = saved
        dropped["wrote"] = int(out.wrote or err.wrote)
        for capped, stream in ((out, saved[0]), (err, saved[1])):
            if capped.dropped_chars or capped.dropped_displays:
                dropped["lines"] += capped.dropped_lines + capped.dropped_displays
                dropped["chars"] += capped.dropped_chars
                # (still the run's: the cap between runs, from here on, does not take it)
                stream.write(f"\n[mpinb] output cut: {_what_was_cut(capped)} not shown. "
                             "Print less, or raise the cap with Pool(max_output_lines=...).\n")
        global _between_limits
        _between_limits = (max_lines, max_chars)
        _displays_between.update(left=max_lines, dropped=0)
        _capping.clear()
        # No flush here: the engine flushes after every request, and a flush costs a thread hop.


def _display_between_runs() -> bool:
    """Whether one more display fits between runs (the last run's line count, afresh)."""
    if _between_limits is None:
        return True
    if _displays_between["left"] > 0:
        _displays_between["left"] -= 1
        return True
    _displays_between["dropped"] += 1
    return False


def write_between_runs(stream: Any, text: str, write: Callable[[Any, str], int | None]) -> int | None:
    """One of ipykernel's streams being written to (``write`` is its own method): between runs,
    through the last run's cap counted afresh from the run's end. A thread of the user's may print
    on after its cell ended; uncapped, the rank and the notebook would keep all of it."""
    if _capping or _between_limits is None:  # a run (its own cap) or none yet
        return write(stream, text)
    capped = _between.get(stream.name)
    if capped is None:
        capped = _between[stream.name] = CappedStream(_Writer(stream, write), *_between_limits)
    return capped.write(text)


class _Writer:
    """What a cap between runs writes through: the stream's own ``write``."""

    def __init__(self, stream: Any, write: Callable[[Any, str], int | None]):
        self._stream, self._write = stream, write

    def write(self, text: str) -> int | None:
        return self._write(self._stream, text)


def _what_was_cut(capped: CappedStream) -> str:
    parts = [f"{capped.dropped_lines:,} more lines ({capped.dropped_chars:,} characters)"]
    if capped.dropped_displays:
        parts = [*parts[:bool(capped.dropped_chars)], f"{capped.dropped_displays:,} displays"]
    return " and ".join(parts)
