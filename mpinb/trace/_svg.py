"""A static space-time diagram as SVG: what saved notebooks and nbconvert output keep."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import numpy as np

from .._events import COLLECTIVE, KIND_NAMES, RECV, SEND, WAIT
from .._ranges import format_ranks
from ._arrays import busy_until
from ._waits import explain

if TYPE_CHECKING:
    from ._trace import Trace

# The same colours as trace.js.
KIND_COLORS = {SEND: "#4e79a7", RECV: "#59a14f", COLLECTIVE: "#f28e2b", WAIT: "#9c755f", 4: "#bab0ac"}
WAIT_COLOR = "#d62728"
PATH_COLOR = "#b0151a"
MAX_ARROWS = 1000


def space_time_svg(trace: Trace, width: int = 800, lane: int = 22, t_end: float | None = None) -> str:
    """Lanes per rank, MPI calls as boxes (merged below one pixel), an arrow per message; the time
    axis ends at ``t_end`` (runs compared side by side share one) or at the run's end."""
    left, right, top = 60, 10, 18
    ranks = trace.ranks
    height = top + lane * len(ranks) + 24
    t_end = t_end or max((end for _, end in trace.span.values()), default=0.0) or 1e-9
    scale = (width - left - right) / t_end
    y_of = {rank: top + i * lane for i, rank in enumerate(ranks)}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">']
    for rank in ranks:
        y = y_of[rank]
        parts.append(f'<rect x="{left}" y="{y + 3}" width="{width - left - right}" height="{lane - 6}" '
                     'fill="#f3f3f3"/>')
        parts.append(f'<text x="4" y="{y + lane / 2 + 4}">rank {rank}</text>')
    events = trace.events
    stops = busy_until(events)
    for rank in ranks:
        mine = np.nonzero(events["rank"] == rank)[0]
        last_pixel = -1
        for i in mine:
            x0 = left + events["start"][i] * scale
            x1 = left + stops[i] * scale
            if x1 - x0 < 1:
                if int(x0) == last_pixel:
                    continue
                last_pixel = int(x0)
            color = KIND_COLORS.get(int(events["kind"][i]), "#999")
            fill = f'fill="none" stroke="{color}" stroke-dasharray="4 3"' if events["open"][i] else f'fill="{color}"'
            parts.append(f'<rect x="{x0:.1f}" y="{y_of[rank] + 3}" width="{max(x1 - x0, 1):.1f}" '
                         f'height="{lane - 6}" {fill}/>')
    for wait in trace.waits():
        if wait["rank"] in y_of:
            x0 = left + wait["start"] * scale
            parts.append(f'<rect x="{x0:.1f}" y="{y_of[wait["rank"]] + lane - 7}" '
                         f'width="{max(wait["seconds"] * scale, 1):.1f}" height="4" fill="{WAIT_COLOR}"/>')
    for row in trace.unfinished():  # a dashed line towards the rank it waits for
        if int(row["peer_world"]) in y_of and row["peer_world"] != row["rank"]:
            x = left + row["end"] * scale
            parts.append(f'<line x1="{x:.1f}" y1="{y_of[int(row["rank"])] + lane / 2}" x2="{x - 28:.1f}" '
                         f'y2="{y_of[int(row["peer_world"])] + lane / 2}" stroke="{WAIT_COLOR}" '
                         'stroke-dasharray="4 3" stroke-width="1.5"/>')
    points = []
    for step in trace.critical_path().steps:
        middle = y_of[step["rank"]] + lane / 2
        points += [f"{left + step['start'] * scale:.1f},{middle}", f"{left + step['end'] * scale:.1f},{middle}"]
    if points:
        parts.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="{PATH_COLOR}" stroke-width="2.5"/>')
    messages = trace.messages()
    for message in messages[:MAX_ARROWS]:
        if message["source"] not in y_of or message["dest"] not in y_of:
            continue
        x0, x1 = left + message["send_start"] * scale, left + message["recv_end"] * scale
        y0, y1 = y_of[message["source"]] + lane / 2, y_of[message["dest"]] + lane / 2
        parts.append(f'<line x1="{x0:.1f}" y1="{y0}" x2="{x1:.1f}" y2="{y1}" stroke="#333" '
                     'stroke-width="0.8" stroke-opacity="0.6"/>')
    legend_y = height - 6
    x = left
    for kind in (SEND, RECV, COLLECTIVE, WAIT):
        parts.append(f'<rect x="{x}" y="{legend_y - 9}" width="10" height="10" fill="{KIND_COLORS[kind]}"/>')
        parts.append(f'<text x="{x + 14}" y="{legend_y}">{KIND_NAMES[kind]}</text>')
        x += 90
    note = f"{t_end * 1e3:.2f} ms, {len(events)} calls, {len(messages)} messages"
    if len(messages) > MAX_ARROWS:
        note += f" (first {MAX_ARROWS} arrows)"
    parts.append(f'<text x="{width - right}" y="{legend_y}" text-anchor="end">{html.escape(note)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def summary_text(trace: Trace) -> str:
    rows = trace.summary()
    lines = [f"{'rank':>4}  {'wall ms':>9}  {'in MPI':>7}  {'waiting ms':>10}  {'msgs out':>8}  {'bytes out':>11}"
             f"  {'bytes in':>11}"]
    for row in rows:
        share = row["mpi"] / row["wall"] if row["wall"] else 0.0
        lines.append(f"{row['rank']:>4}  {row['wall'] * 1e3:9.2f}  {share:7.0%}  {row['waiting'] * 1e3:10.2f}"
                     f"  {row['messages_sent']:>8}  {row['bytes_sent']:>11,}  {row['bytes_received']:>11,}")
    lines += explain(trace.waits())
    unfinished = trace.unfinished()
    if len(unfinished):
        lines.append("stopped while " + "; ".join(
            f"rank {row['rank']} waited in {row['op']} (line {row['line']})"
            + (f" for rank {row['peer_world']}" if row["peer_world"] >= 0 else "") for row in unfinished))
    lines += trace.critical_path().text(top=3).splitlines()
    if trace.dropped:
        lines.append(f"({sum(trace.dropped.values()):,} calls not recorded on "
                     f"{format_ranks(trace.dropped, word=True)}: each rank records a share of the pool's "
                     "trace_budget, at most trace_capacity calls; Pool(trace_budget=...) raises it)")
    return "\n".join(lines)
