"""Caps what one rank may print in one cell, so that a runaway loop cannot freeze the browser."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


class CappedStream:
    """Passes writes through until ``max_lines`` lines or ``max_chars`` characters, then counts them."""

    def __init__(self, stream: TextIO, max_lines: int, max_chars: int):
        self._stream = stream
        self._lines_left = max_lines
        self._chars_left = max_chars
        self.dropped_lines = 0
        self.dropped_chars = 0
        self.wrote = False

    def write(self, text: str) -> int:
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


def count_displays(display_pub) -> None:
    """Count what the rank's display publisher sends (a relayed run's notebook side then waits
    for it, as it does for printed text)."""
    for name in ("publish", "clear_output"):
        send = getattr(display_pub, name)

        def counted(*args, _send=send, **kwargs):
            global displays
            displays += 1
            return _send(*args, **kwargs)

        setattr(display_pub, name, counted)


@contextmanager
def capped_output(max_lines: int, max_chars: int) -> Iterator[dict]:
    """Cap ``sys.stdout``/``sys.stderr`` for the duration; yields a dict of what was dropped
    (and, under ``"wrote"``, whether anything was written)."""
    dropped = {"lines": 0, "chars": 0, "wrote": 0}
    saved = sys.stdout, sys.stderr
    out = CappedStream(saved[0], max_lines, max_chars)
    err = CappedStream(saved[1], max_lines, max_chars)
    sys.stdout, sys.stderr = out, err
    try:
        yield dropped
    finally:
        sys.stdout, sys.stderr = saved
        dropped["wrote"] = int(out.wrote or err.wrote)
        for capped, stream in ((out, saved[0]), (err, saved[1])):
            if capped.dropped_chars:
                dropped["lines"] += capped.dropped_lines
                dropped["chars"] += capped.dropped_chars
                stream.write(
                    f"\n[mpinb] output cut: {capped.dropped_lines:,} more lines "
                    f"({capped.dropped_chars:,} characters) not shown. "
                    "Print less, or raise the cap with Pool(max_output_lines=...).\n"
                )
        # No flush here: the engine flushes after every request, and a flush costs a thread hop.
