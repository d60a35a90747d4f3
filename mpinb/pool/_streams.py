"""Follows a run's output while it runs, so that the notebook can show each rank's lines live."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from ..common._protocol import PROGRESS_KEY

OutputKind = Literal["stdout", "stderr", "display", "reset-stdout", "reset-stderr", "progress", "hang"]
OutputCallback = Callable[[int, OutputKind, object], None]
"""``callback(rank, kind, data)``: kind is ``"stdout"``/``"stderr"`` (new text), ``"display"``
(one mime bundle), ``"reset-stdout"``/``"reset-stderr"`` (the whole text, when it no longer
continues what was sent: a carriage return rewrote it), ``"progress"`` (``{bar key: {rank: state}}``
of the :func:`mpinb.progress` loops that moved since the last call, ``rank`` being the run's first)
or ``"hang"`` (a diagnosis's text, from the run loop rather than from this tracker)."""

# Each text stream, and the kind that sends its whole text again
_TEXT_STREAMS: tuple[tuple[OutputKind, OutputKind], ...] = (("stdout", "reset-stdout"), ("stderr", "reset-stderr"))


class StreamTracker:
    """Turns ipyparallel's growing per-engine output into per-rank increments."""

    def __init__(self, async_result, ranks: list[int]):
        self._ar = async_result
        self._ranks = ranks
        self._seen = {(rank, kind): 0 for rank in ranks for kind in ("stdout", "stderr", "display")}
        self._text = {(rank, kind): "" for rank in ranks for kind in ("stdout", "stderr")}
        self._progress: dict[tuple[int, str], object] = {}  # the last state seen of each bar

    def poll(self, callback: OutputCallback | None) -> None:
        if callback is None:
            return
        for kind, reset in _TEXT_STREAMS:
            for rank, text in zip(self._ranks, getattr(self._ar, kind)):
                text = text or ""
                old = self._text[rank, kind]
                if text == old:
                    continue
                self._text[rank, kind] = text
                if text.startswith(old):
                    callback(rank, kind, text[len(old):])
                else:
                    callback(rank, reset, text)
        for rank, bundles in zip(self._ranks, self._ar.outputs):
            seen = self._seen[rank, "display"]
            for bundle in bundles[seen:]:
                callback(rank, "display", bundle)
            self._seen[rank, "display"] = len(bundles)
        self._poll_progress(callback)

    def _poll_progress(self, callback: OutputCallback) -> None:
        published = [{k: v for k, v in (data or {}).items() if k.startswith(PROGRESS_KEY)} for data in self._ar.data]
        self._report_progress(published, callback)

    def final_progress(self, replies: list, callback: OutputCallback) -> None:
        """The loops' last states from the replies: a status message can arrive after its reply."""
        self._report_progress([r.get("progress", {}) if isinstance(r, dict) else {} for r in replies], callback)

    def _report_progress(self, per_rank: list[dict], callback: OutputCallback) -> None:
        moved: dict[str, dict[int, object]] = {}
        for rank, states in zip(self._ranks, per_rank):
            for key, state in states.items():
                if self._progress.get((rank, key)) != state:
                    self._progress[rank, key] = state
                    moved.setdefault(key, {})[rank] = state
        if moved:
            callback(self._ranks[0], "progress", moved)
