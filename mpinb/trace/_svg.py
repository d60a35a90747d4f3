"""A static space-time diagram as SVG.

It is what saved notebooks and nbconvert output keep. It is drawn on a light page: a static picture
cannot follow the notebook's theme."""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .._colors import KIND_COLORS, PATH_COLOR, WAIT_COLOR
from .._language import say
from ..common._events import COLLECTIVE, IO, KIND_NAMES, RECV, SEND, WAIT
from ..common._ranges import format_ranks
from ._arrays import busy_until
from ._waits import explain

if TYPE_CHECKING:
    from ._trace import Trace

MAX_ARROWS = 1000
_LEFT, _RIGHT, _TOP = 60, 10, 18
_LANE_COLOR = "#f3f3f3"
_TEXT_COLOR = "#333"


@dataclass
class _Frame:
    """Where things go: a lane per rank, time from 0 to ``t_end`` across the width."""

    width: int
    lane: int
    t_end: float
    y_of: dict[int, float]

    def x(self, t: float) -> float:
        return _LEFT + t * (self.width - _LEFT - _RIGHT) / self.t_end

    def middle(self, rank: int) -> float:
        return self.y_of[rank] + self.lane / 2


def space_time_svg(trace: Trace, width: int = 800, lane: int = 22, t_end: float | None = None) -> str:
    """Lanes per rank, MPI calls as boxes (merged below one pixel), an arrow per message; the time
    axis ends at ``t_end`` (runs compared side by side share one) or at the run's end. Drawn in
    layers, bottom to top, as trace.js draws its canvas."""
    ranks = trace.ranks
    io = trace.io_calls()
    files = sorted({call["file"] for call in io})
    height = _TOP + lane * (len(ranks) + len(files)) + 24
    t_end = t_end or max((end for _, end in trace.span.values()), default=0.0) or 1e-9
    frame = _Frame(width, lane, t_end, {rank: _TOP + i * lane for i, rank in enumerate(ranks)})
    messages = trace.messages()
    layers = [_lanes(frame, trace.lane_names()), _calls(frame, trace), _waits(frame, trace), _unfinished(frame, trace),
              _path(frame, trace), _arrows(frame, messages), _flows(frame, trace),
              _files(frame, trace, io, files), _legend(frame, height, len(trace.events), messages)]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="sans-serif" font-size="11">{"".join(part for layer in layers for part in layer)}</svg>')


def _lanes(frame: _Frame, names: list[str]) -> list[str]:
    parts = []
    for (_, y), name in zip(frame.y_of.items(), names):
        parts.append(f'<rect x="{_LEFT}" y="{y + 3}" width="{frame.width - _LEFT - _RIGHT}" height="{frame.lane - 6}" '
                     f'fill="{_LANE_COLOR}"/>')
        parts.append(f'<text x="4" y="{y + frame.lane / 2 + 4}" fill="{_TEXT_COLOR}">{name}</text>')
    return parts


def _calls(frame: _Frame, trace: Trace) -> list[str]:
    """A box per call, those narrower than a pixel merged into that pixel; broken-off calls open."""
    events = trace.events
    stops = busy_until(events)
    parts = []
    for rank, y in frame.y_of.items():
        last_pixel = -1
        for i in np.nonzero(events["rank"] == rank)[0]:
            x0, x1 = frame.x(events["start"][i]), frame.x(stops[i])
            if x1 - x0 < 1:
                if int(x0) == last_pixel:
                    continue
                last_pixel = int(x0)
            color = KIND_COLORS[int(events["kind"][i])]
            fill = f'fill="none" stroke="{color}" stroke-dasharray="4 3"' if events["open"][i] else f'fill="{color}"'
            parts.append(f'<rect x="{x0:.1f}" y="{y + 3}" width="{max(x1 - x0, 1):.1f}" height="{frame.lane - 6}" '
                         f"{fill}/>")
    return parts


def _waits(frame: _Frame, trace: Trace) -> list[str]:
    """The waiting part of each call that waited: a band along the bottom of its box."""
    return [f'<rect x="{frame.x(wait["start"]):.1f}" y="{frame.y_of[wait["rank"]] + frame.lane - 7}" '
            f'width="{max(frame.x(wait["start"] + wait["seconds"]) - frame.x(wait["start"]), 1):.1f}" height="4" '
            f'fill="{WAIT_COLOR}"/>'
            for wait in trace.waits() if wait["rank"] in frame.y_of]


def _unfinished(frame: _Frame, trace: Trace) -> list[str]:
    """A dashed line from each call a stopped run broke off towards the rank it waited for."""
    parts = []
    for row in trace.unfinished():
        rank, peer = int(row["rank"]), int(row["peer_world"])
        if peer in frame.y_of and peer != rank:
            x = frame.x(row["end"])
            parts.append(f'<line x1="{x:.1f}" y1="{frame.middle(rank)}" x2="{x - 28:.1f}" y2="{frame.middle(peer)}" '
                         f'stroke="{WAIT_COLOR}" stroke-dasharray="4 3" stroke-width="1.5"/>')
    return parts


def _path(frame: _Frame, trace: Trace) -> list[str]:
    """The critical path: a thick line through the lanes."""
    points = []
    for step in trace.critical_path().steps:
        middle = frame.middle(step["rank"])
        points += [f"{frame.x(step['start']):.1f},{middle}", f"{frame.x(step['end']):.1f},{middle}"]
    if not points:
        return []
    return [f'<polyline points="{" ".join(points)}" fill="none" stroke="{PATH_COLOR}" stroke-width="2.5"/>']


def _flows(frame: _Frame, trace: Trace) -> list[str]:
    """A dashed line in its call's colour for each one-sided transfer and neighbour exchange (the
    first ``MAX_ARROWS``), as trace.js draws them."""
    kinds = trace.events["kind"]
    flows = [*trace.transfers(), *trace.neighbor_exchanges()][:MAX_ARROWS]
    return [f'<line x1="{frame.x(f["start"]):.1f}" y1="{frame.middle(f["source"])}" '
            f'x2="{frame.x(f["end"]):.1f}" y2="{frame.middle(f["dest"])}" '
            f'stroke="{KIND_COLORS[int(kinds[f["index"]])]}" stroke-width="1.2" stroke-dasharray="4 3"/>'
            for f in flows if f["source"] in frame.y_of and f["dest"] in frame.y_of]


def _files(frame: _Frame, trace: Trace, io: list, files: list[str]) -> list[str]:
    """A lane per file below the ranks', and a dotted line between a rank and the file for each
    read or write (the first ``MAX_ARROWS``), as trace.js draws them."""
    color = KIND_COLORS[IO]
    first = _TOP + len(frame.y_of) * frame.lane
    y_of = {cid: first + k * frame.lane for k, cid in enumerate(files)}
    parts = []
    for cid, y in y_of.items():
        name = os.path.basename(trace.file_names.get(cid, "")) or cid
        parts.append(f'<rect x="{_LEFT}" y="{y + 3}" width="{frame.width - _LEFT - _RIGHT}" height="{frame.lane - 6}" '
                     f'fill="{_LANE_COLOR}"/>')
        parts.append(f'<rect x="{_LEFT}" y="{y + frame.lane / 2 - 1}" width="{frame.width - _LEFT - _RIGHT}" '
                     f'height="2" fill="{color}"/>')
        parts.append(f'<text x="4" y="{y + frame.lane / 2 + 4}" fill="{_TEXT_COLOR}">{html.escape(name[:8])}</text>')
    for call in io[:MAX_ARROWS]:
        if call["rank"] not in frame.y_of:
            continue
        at_rank, at_file = frame.middle(call["rank"]), y_of[call["file"]] + frame.lane / 2
        y0, y1 = (at_rank, at_file) if call["write"] else (at_file, at_rank)
        parts.append(f'<line x1="{frame.x(call["start"]):.1f}" y1="{y0}" x2="{frame.x(call["end"]):.1f}" y2="{y1}" '
                     f'stroke="{color}" stroke-width="1.2" stroke-dasharray="2 2"/>')
    return parts


def _arrows(frame: _Frame, messages: list) -> list[str]:
    """A line from each send's start to its receive's end (the first ``MAX_ARROWS``)."""
    return [f'<line x1="{frame.x(m["send_start"]):.1f}" y1="{frame.middle(m["source"])}" '
            f'x2="{frame.x(m["recv_end"]):.1f}" y2="{frame.middle(m["dest"])}" stroke="{_TEXT_COLOR}" '
            'stroke-width="0.8" stroke-opacity="0.6"/>'
            for m in messages[:MAX_ARROWS] if m["source"] in frame.y_of and m["dest"] in frame.y_of]


def _legend(frame: _Frame, height: int, calls: int, messages: list) -> list[str]:
    y = height - 6
    parts = []
    for i, kind in enumerate((SEND, RECV, COLLECTIVE, WAIT)):
        x = _LEFT + 90 * i
        parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{KIND_COLORS[kind]}"/>')
        parts.append(f'<text x="{x + 14}" y="{y}" fill="{_TEXT_COLOR}">{html.escape(say(KIND_NAMES[kind]))}</text>')
    note = say("{ms} ms, {calls} calls, {messages} messages", ms=f"{frame.t_end * 1e3:.2f}", calls=calls,
               messages=len(messages))
    if len(messages) > MAX_ARROWS:
        note += say(" (first {count} arrows)", count=MAX_ARROWS)
    parts.append(f'<text x="{frame.width - _RIGHT}" y="{y}" text-anchor="end" fill="{_TEXT_COLOR}">'
                 f"{html.escape(note)}</text>")
    return parts


def summary_text(trace: Trace) -> str:
    rows = trace.summary()
    lines = [f"{say('rank'):>4}  {say('wall ms'):>9}  {say('in MPI'):>7}  {say('waiting ms'):>10}  "
             f"{say('msgs out'):>8}  {say('bytes out'):>11}  {say('bytes in'):>11}"]
    for row in rows:
        share = row["mpi"] / row["wall"] if row["wall"] else 0.0
        lines.append(f"{row['rank']:>4}  {row['wall'] * 1e3:9.2f}  {share:7.0%}  {row['waiting'] * 1e3:10.2f}"
                     f"  {row['messages_sent']:>8}  {row['bytes_sent']:>11,}  {row['bytes_received']:>11,}")
    lines += explain(trace.waits())
    unfinished = trace.unfinished()
    if len(unfinished):
        lines.append(say("stopped while {what}", what="; ".join(
            say("rank {rank} waited in {op} (line {line})", rank=row["rank"], op=row["op"], line=row["line"])
            + (say(" for rank {peer}", peer=row["peer_world"]) if row["peer_world"] >= 0 else "")
            for row in unfinished)))
    lines += trace.critical_path().text(top=3).splitlines()
    if trace.dropped:
        lines.append(say("({count} calls not recorded on {ranks}: each rank records a share of the pool's "
                         "trace_budget, at most trace_capacity calls; Pool(trace_budget=...) raises it)",
                         count=f"{sum(trace.dropped.values()):,}", ranks=format_ranks(trace.dropped, word=True)))
    return "\n".join(lines)
