"""The Python stack of a rank, read from outside its Python code: the rank writes it from a signal
handler into a file of the pool's (see ``mpinb.rank._recovery``), which works also while the rank
is inside a call that never returns to Python. Used to say where a rank is stuck."""

from __future__ import annotations

import linecache
import os
import re
import time
from dataclasses import dataclass

from .._language import say

_HEADER = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):$")
_FRAME = re.compile(r'^  File "(.*)", line (\d+) in (.*)$')
# Where a stack's frames are mpinb's, the engine's or a library's rather than the user's own.
_LIBRARY_MARKS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep,
                  os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
                  os.path.dirname(os.__file__) + os.sep)


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str

    def is_users(self) -> bool:
        return self.file.startswith("<mpi-cell-") or not any(mark in self.file for mark in _LIBRARY_MARKS)


def stack_file(folder: str, rank: int) -> str:
    return os.path.join(folder, f"{rank}.stack")


def read_stacks(folder: str, ranks: list[int], ask, timeout: float = 1.0) -> dict[int, list[Frame] | None]:
    """Each rank's main-thread stack, innermost frame first; ``None`` where none could be read.
    ``ask(ranks)`` sends the ranks the signal that makes them write it."""
    sizes = {rank: _size(stack_file(folder, rank)) for rank in ranks}
    waiting = [rank for rank in ranks if sizes[rank] is not None]
    if waiting:
        ask(waiting)
    stacks: dict[int, list[Frame] | None] = {rank: None for rank in ranks}
    deadline = time.monotonic() + timeout
    last_seen: dict[int, tuple[int, float]] = {}
    while waiting and time.monotonic() < deadline:
        time.sleep(0.02)
        for rank in list(waiting):
            now_size = _size(stack_file(folder, rank)) or 0
            grew = now_size > (sizes[rank] or 0)
            size_before, since = last_seen.get(rank, (-1, 0.0))
            if grew and now_size == size_before and time.monotonic() - since > 0.05:
                stacks[rank] = _parse(stack_file(folder, rank), sizes[rank] or 0)
                waiting.remove(rank)
            elif now_size != size_before:
                last_seen[rank] = (now_size, time.monotonic())
    return stacks


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _parse(path: str, offset: int) -> list[Frame] | None:
    """The main thread's frames of the dump written after ``offset``."""
    try:
        with open(path, errors="replace") as handle:
            first = handle.readline()
            handle.seek(offset)
            text = handle.read()
    except OSError:
        return None
    main = first.split()[-1] if first.startswith("main thread ") else None
    frames: list[Frame] = []
    in_main = False
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            if in_main:
                break
            in_main = main is not None and int(header.group(1), 16) == int(main, 16)
            continue
        frame = _FRAME.match(line)
        if in_main and frame:
            frames.append(Frame(frame.group(1), int(frame.group(2)), frame.group(3)))
    return frames or None


def where(frames: list[Frame] | None, sources: dict[str, str]) -> str:
    """Where a rank is, in words: the user's line and its code, and the library function it is in
    when that is not the user's own (``sources`` maps a cell's name to its code)."""
    if not frames:
        return say("its stack could not be read")
    inner = frames[0]
    user = next((frame for frame in frames if frame.is_users()), None)
    if user is None:
        return say("in {function} of {file}", function=inner.function, file=os.path.basename(inner.file))
    code = _source_line(user, sources)
    if code:
        text = say("in `{code}`, line {line}", code=code, line=user.line)
    else:
        text = say("at line {line}", line=user.line)
    if inner is not user:
        text += say(", inside {function} of {file}", function=inner.function, file=os.path.basename(inner.file))
    return text


def _source_line(frame: Frame, sources: dict[str, str]) -> str:
    if frame.file in sources:
        lines = sources[frame.file].splitlines()
        return lines[frame.line - 1].strip() if 0 < frame.line <= len(lines) else ""
    return linecache.getline(frame.file, frame.line).strip()
