"""The notebook's view of one :func:`mpinb.progress` loop across the ranks of a run."""

from __future__ import annotations

import html
import pathlib
import statistics
import time

import anywidget
import traitlets as t
from IPython.display import display

from .._colors import WIDGET_COLORS
from ..common._progress import text_bar
from ..common._ranges import format_ranks
from ._fallback import StaticFallback

# A rank lags when its share done trails the ranks' median by this much (or, without a total,
# when its count is below this share of the median count).
LAG = 0.1


class ProgressView(StaticFallback, anywidget.AnyWidget):
    """An overall bar, a small bar per rank, the rate, the time left, the ranks that lag."""

    _esm = pathlib.Path(__file__).with_name("progress.js")
    _css = pathlib.Path(__file__).with_name("progress.css")
    colors = t.Dict(WIDGET_COLORS).tag(sync=True)  # what progress.js draws with (mpinb._colors)

    desc = t.Unicode("").tag(sync=True)
    total = t.Int(None, allow_none=True).tag(sync=True)
    ranks = t.List(t.Int()).tag(sync=True)
    counts = t.List(t.Int()).tag(sync=True)
    elapsed = t.List(t.Float()).tag(sync=True)
    done = t.List(t.Bool()).tag(sync=True)  # went through all its items
    ended = t.List(t.Bool()).tag(sync=True)  # over: done, or left early
    lagging = t.List(t.Int()).tag(sync=True)
    line = t.Unicode("").tag(sync=True)  # the overall state in words (text_bar)
    over = t.Bool(False).tag(sync=True)  # the run ended

    def __init__(self, ranks: list[int], **kwargs):
        n = len(ranks)
        super().__init__(ranks=list(ranks), counts=[0] * n, elapsed=[0.0] * n, done=[False] * n, ended=[False] * n,
                         **kwargs)
        self._index = {rank: i for i, rank in enumerate(ranks)}
        self._seen: set[int] = set()

    def update(self, states: dict[int, dict]) -> None:
        """Take the ranks' latest states (see :class:`mpinb.common._protocol.Progress`)."""
        counts, elapsed, done, ended = list(self.counts), list(self.elapsed), list(self.done), list(self.ended)
        desc, total = self.desc, self.total
        for rank, state in states.items():
            i = self._index.get(rank)
            if i is None:
                continue
            self._seen.add(rank)
            counts[i], elapsed[i] = int(state["n"]), float(state["elapsed"])
            done[i], ended[i] = bool(state["done"]), bool(state.get("ended", state["done"]))
            desc, total = state.get("desc") or desc, state.get("total")
        with self.hold_sync():  # one message to the browser per update
            self.desc, self.total = desc, total
            self.counts, self.elapsed, self.done, self.ended = counts, elapsed, done, ended
            self.lagging = self._lagging()
            self.line = self.text_line()

    def finish(self) -> None:
        with self.hold_sync():
            self.over = True
            self.lagging = []
            self.line = self.text_line()

    def _lagging(self) -> list[int]:
        seen = [i for i, rank in enumerate(self.ranks) if rank in self._seen]
        if len(seen) < 2:
            return []
        # Ranks report at different moments: each count is carried at its rank's own rate to the
        # latest moment reported, so that a rank whose last report is older is not taken as behind.
        latest = max(self.elapsed[i] for i in seen)
        counts = [self.counts[i] if self.ended[i] or self.elapsed[i] <= 0
                  else self.counts[i] * latest / self.elapsed[i] for i in seen]
        if self.total:
            shares = [min(count / self.total, 1.0) for count in counts]
            middle = statistics.median(shares)
            return [self.ranks[i] for i, share in zip(seen, shares)
                    if not self.ended[i] and middle >= 2 * LAG and share < middle - LAG]
        middle = statistics.median(counts)
        return [self.ranks[i] for i, count in zip(seen, counts) if not self.ended[i] and count < (1 - LAG) * middle]

    def text_line(self) -> str:
        """``train: 45%|###   | 1,800/4,000 [3.1 s < 3.8 s, 580 it/s] on 4 ranks``: the ranks'
        iterations together; the time left is the slowest rank's at its own rate."""
        n = sum(self.counts)
        longest = max(self.elapsed, default=0.0)
        rate = n / longest if longest > 0 else 0.0
        total = self.total * len(self.ranks) if self.total is not None else None
        left = None
        if self.total:
            each = [(self.total - c) * e / c if c else float("inf")
                    for c, e, d in zip(self.counts, self.elapsed, self.ended) if not d]
            left = max(each, default=0.0)
        return f"{text_bar(self.desc or None, n, total, longest, rate, left=left)} on {len(self.ranks)} ranks"

    def _fallback(self) -> tuple[str, str]:
        lines = [self.line or self.text_line()]
        if self.lagging:
            lines.append(f"lagging: {format_ranks(self.lagging, word=True)}")
        left = [rank for rank, done, ended in zip(self.ranks, self.done, self.ended) if ended and not done]
        if left:
            lines.append(f"left the loop early: {format_ranks(left, word=True)}")
        stopped = [rank for rank, ended in zip(self.ranks, self.ended)
                   if self.over and not ended and rank in self._seen]
        if stopped:
            lines.append(f"did not finish: {format_ranks(stopped, word=True)}")
        text = "\n".join(lines)
        return text, f"<pre class='mpinb-progress'>{html.escape(text)}</pre>"


class ProgressBars:
    """The progress views of one run: each loop's view is shown when its first update arrives,
    redrawn at most ``REDRAW_EVERY`` (the ranks' states gathered in between), and shown again
    with its final state (for saved notebooks) when the run ends."""

    REDRAW_EVERY = 0.25  # seconds; each redraw costs the notebook about a millisecond

    def __init__(self, ranks: list[int]):
        self.ranks = ranks
        self.views: dict[str, tuple[ProgressView, object]] = {}
        self._waiting: dict[str, dict[int, dict]] = {}
        self._drawn = 0.0

    def update(self, moved: dict[str, dict[int, dict]]) -> None:
        for key, states in moved.items():
            self._waiting.setdefault(key, {}).update(states)
        if time.monotonic() - self._drawn >= self.REDRAW_EVERY:
            self._redraw()

    def _redraw(self) -> None:
        for key, states in sorted(self._waiting.items()):
            if key not in self.views:
                view = ProgressView(self.ranks)
                self.views[key] = (view, display(view, display_id=True))
            self.views[key][0].update(states)
        self._waiting = {}
        self._drawn = time.monotonic()

    def finish(self) -> None:
        self._redraw()
        for view, handle in self.views.values():
            view.finish()
            if handle is not None:
                handle.update(view)  # type: ignore[attr-defined]
