"""Live per-rank output of a run: a merged view and a tab per rank (``output.js`` draws it)."""

from __future__ import annotations

import html
import pathlib
import time

import anywidget
import traitlets as t

from .._colors import ORANGE, PALETTE, WIDGET_COLORS, text_color
from ..common._ranges import format_ranks
from ..pool import _render
from ..pool._result import RunResult
from ._fallback import StaticFallback

# Richest first: the one kind of each display bundle that the widget keeps.
_MIMES = ("image/png", "image/svg+xml", "text/html", "text/plain")
_SYNC_INTERVAL = 0.25


class RankOutput(StaticFallback, anywidget.AnyWidget):
    """Per-rank stdout/stderr/display data, streamed while a run goes on.

    ``mode`` is ``"tabs"`` (merged view plus a tab per rank), ``"merged"`` or ``"rank0"``.
    Outside a live notebook (nbclient, nbconvert) the same output is kept as text and HTML.
    """

    _esm = pathlib.Path(__file__).with_name("output.js")
    _css = pathlib.Path(__file__).with_name("output.css")
    colors = t.Dict(WIDGET_COLORS).tag(sync=True)  # what output.js draws with (mpinb._colors)
    palette = t.List(t.Unicode(), list(PALETTE)).tag(sync=True)  # the ranks' colours, in turn

    ranks = t.List(t.Int()).tag(sync=True)
    stdout = t.List(t.Unicode()).tag(sync=True)
    stderr = t.List(t.Unicode()).tag(sync=True)
    displays = t.List(t.List(t.Dict())).tag(sync=True)
    merged = t.List(t.List()).tag(sync=True)
    state = t.List(t.Unicode()).tag(sync=True)
    values = t.List(t.Unicode()).tag(sync=True)
    mode = t.Enum(["tabs", "merged", "rank0"], "tabs").tag(sync=True)
    summary = t.Unicode("").tag(sync=True)
    notice = t.Unicode("").tag(sync=True)  # a live hang diagnosis, for instance

    def __init__(self, ranks: list[int], mode: str = "tabs", **kwargs):
        count = len(ranks)
        super().__init__(
            ranks=list(ranks),
            stdout=[""] * count,
            stderr=[""] * count,
            displays=[[] for _ in ranks],
            state=["running"] * count,
            values=[""] * count,
            mode=mode,
            summary=f"{format_ranks(ranks, word=True)} running",
            **kwargs,
        )
        self._index = {rank: i for i, rank in enumerate(ranks)}
        self._text: dict[str, list[str]] = {"stdout": [""] * count, "stderr": [""] * count}
        self._displays: list[list[dict]] = [[] for _ in ranks]
        self._merged: list[list] = []  # [index, stream, text] chunks in arrival order
        self._news: list[list] = []  # what the views have not been sent yet
        self._outputs: dict[int, list[dict]] = {rank: [] for rank in ranks}
        self._last_sync = 0.0
        self._started = time.perf_counter()
        self.on_msg(self._on_view_message)

    def append(self, rank: int, kind: str, data: object) -> None:
        """Take one increment from the pool (see ``mpinb.pool._streams``); views get what is new,
        at most 4 times a second."""
        i = self._index[rank]
        if kind in ("stdout", "stderr"):
            assert isinstance(data, str)
            self._text[kind][i] += data
            merged = self._merged
            if merged and merged[-1][0] == i and merged[-1][1] == kind:
                merged[-1] = [i, kind, merged[-1][2] + data]
            else:
                merged.append([i, kind, data])
            self._news.append(["text", i, kind, data])
        elif kind.startswith("reset-"):
            assert isinstance(data, str)
            self._text[kind[6:]][i] = data
            self._news.append(["reset", i, kind[6:], data])
        elif kind == "hang":
            assert isinstance(data, str)
            self.notice = data
        elif kind == "display":
            assert isinstance(data, dict)
            self._outputs[rank].append(data)
            item = _displayable(data)
            self._displays[i].append(item)
            self._news.append(["display", i, item])
        now = time.perf_counter()
        if now - self._last_sync >= _SYNC_INTERVAL:
            self._send_news(now)

    def _send_news(self, now: float) -> None:
        if self._news:
            self.send({"type": "news", "items": self._news})
            self._news = []
        self.summary = f"{format_ranks(self.ranks, word=True)} running · {now - self._started:.1f} s"
        self._last_sync = now

    def _sync_everything(self) -> None:
        """The whole output as state (for a view that opens late, and for the end of the run)."""
        self._news = []
        with self.hold_sync():
            self.stdout = list(self._text["stdout"])
            self.stderr = list(self._text["stderr"])
            self.displays = [list(d) for d in self._displays]
            self.merged = [list(m) for m in self._merged]

    def _on_view_message(self, _widget: object, content: dict, _buffers: object) -> None:
        if content.get("type") == "snapshot":  # a view opened while the run goes on
            self._sync_everything()

    def finish(self, result: RunResult | None, how: str = "") -> None:
        """Show the final state: per-rank marks, values, and a one-line summary."""
        if result is not None:
            self._text["stdout"] = [result.stdout.get(r, "") for r in self.ranks]
            self._text["stderr"] = [result.stderr.get(r, "") for r in self.ranks]
            self._outputs = {r: result.outputs.get(r, []) for r in self.ranks}
        self._sync_everything()
        with self.hold_sync():
            if result is not None:
                self.values = [result.value_repr.get(r, "") for r in self.ranks]
            failed = result.failed_ranks() if result is not None else []
            stopped = "interrupted" if how else "ok"
            self.state = ["error" if r in failed else stopped for r in self.ranks]
            elapsed = result.elapsed if result is not None else time.perf_counter() - self._started
            words = [format_ranks(self.ranks, word=True)]
            if failed:
                words.append(f"failed on {format_ranks(failed, word=True)}")
            words.append(how or "done")
            words.append(f"{elapsed:.2f} s")
            self.summary = " · ".join(words)

    # What notebooks keep where the widget cannot be drawn.
    def _fallback(self) -> tuple[str, str]:
        ranks = self.ranks
        stdout = dict(zip(ranks, self.stdout))
        stderr = dict(zip(ranks, self.stderr))
        values = dict(zip(ranks, self.values))
        if self.mode == "rank0":
            ranks = [r for r in ranks if r == 0]
        text = _render.as_text(ranks, stdout, stderr, self._outputs, values)
        page = _render.as_html(ranks, stdout, stderr, self._outputs, values)
        if self.notice:
            text = f"{self.notice}\n{text}"
            page = f'<pre style="color:{text_color(ORANGE, 80)}">{html.escape(self.notice)}</pre>{page}'
        return text or self.summary, page


def _displayable(bundle: dict) -> dict:
    data = bundle.get("data", {})
    for mime in _MIMES:
        if mime in data:
            value = data[mime]
            return {"mime": mime, "data": value if isinstance(value, str) else str(value)}
    return {"mime": "text/plain", "data": "<" + ", ".join(sorted(data)) + ">"}
