"""The message-flow views of a trace: space-time diagram, communication matrix, per-rank summary.

Event columns travel to the browser as binary typed arrays (not JSON), so that 100,000 events
load in milliseconds; ``trace.js`` draws them on a canvas.
"""

from __future__ import annotations

import html
import os
import pathlib

import anywidget
import numpy as np
import traitlets as t

from .._colors import WIDGET_COLORS
from .._language import say
from ..common._events import KIND_NAMES
from ..trace import Trace
from ..trace._arrays import busy_until
from ..trace._svg import space_time_svg, summary_text
from ..trace._waits import WAIT_KINDS, explain
from ._fallback import StaticFallback

# What trace.js says, as templates (``{fields}`` filled in by the module): each view's words go
# to the browser in the notebook's language (``words``), as mpinb's other sentences do (say()).
VIEW_WORDS = (
    "Space-time", "Matrix", "Per rank", "Statistics", "compact", "expand",
    "{count} MPI calls", "{count} messages", "{count} one-sided or neighbourhood flows",
    "stopped with {count} calls unfinished", "{count} calls not recorded (buffer full)",
    "ranks", "op", "comm", "tag", "waits", "critical path", "all",
    "send", "recv", "collective", "wait", "rma", "epoch", "io",
    "computing", "waiting", "unfinished", "wheel: zoom, drag: pan, double-click: reset",
    "peer", "displacement", "offset", "at", "line {line}", "made in library code: {where}",
    "unfinished: still waiting when the run stopped", "{kind}: waited {time} for rank {peer}",
    "late sender", "late receiver", "wait at collective", "wait at barrier", "lock held", "late post",
    "show", "from \\ to", "messages", "bytes", "time",
    "point-to-point messages and one-sided transfers from each rank to each rank",
    "bytes sent point to point or one-sided from each rank to each rank",
    "seconds from each send's start to its receive's end, summed (a late sender's wait included)",
    "{count} messages, {bytes}, {time}",
    "Message sizes (messages sent, per operation)", "Call durations (calls, per operation)",
    "rank", "time in MPI vs computing", "wall", "in MPI", "msgs out", "msgs in", "bytes out", "bytes in",
)


def _column(values, dtype) -> bytes:
    return np.ascontiguousarray(values, dtype=dtype).tobytes()


def _columns(rows: list, **columns: tuple[str, str]) -> dict[str, bytes]:
    """Dicts (messages, flows...) as columns for trace.js: ``name=(key, dtype)`` each."""
    return {name: _column([row[key] for row in rows], dtype) for name, (key, dtype) in columns.items()}


class TraceView(StaticFallback, anywidget.AnyWidget):
    """Views of one :class:`~mpinb.trace.Trace`; ``expanded`` shows them full size."""

    _esm = pathlib.Path(__file__).with_name("trace.js")
    _css = pathlib.Path(__file__).with_name("trace.css")
    colors = t.Dict(WIDGET_COLORS).tag(sync=True)  # what trace.js draws with (mpinb._colors)
    kinds = t.List(t.Unicode(), list(KIND_NAMES)).tag(sync=True)  # the names of the events' kinds, by number
    wait_kinds = t.List(t.Unicode(), list(WAIT_KINDS)).tag(sync=True)  # the names of the waits' kinds
    words = t.Dict(value_trait=t.Unicode()).tag(sync=True)  # VIEW_WORDS in the notebook's language

    ranks = t.List(t.Int()).tag(sync=True)
    lane_names = t.List(t.Unicode()).tag(sync=True)  # per rank: "rank 2", or "child 1" (spawned in the run)
    ops = t.List(t.Unicode()).tag(sync=True)
    files = t.List(t.Unicode()).tag(sync=True)
    # "rank file-index line" -> the library line behind the calls that line made (Trace.via)
    library_lines = t.Dict(value_trait=t.Unicode()).tag(sync=True)
    comms = t.List(t.Unicode()).tag(sync=True)
    events = t.Dict().tag(sync=True)
    messages = t.Dict().tag(sync=True)
    # the arrows that are not point-to-point messages: one-sided (RMA) transfers, and each member's
    # data to each neighbour in a neighbourhood collective (source, dest, start, end, call)
    flows = t.Dict().tag(sync=True)
    locks = t.Dict().tag(sync=True)  # passive-target epochs: target, holder, start, end, exclusive (1/0)
    # a lane per file that ranks read or wrote (its name), below the ranks' lanes, and each read or
    # write between a rank and a file's lane: rank, file (lane index), start, end, write (1/0), call
    file_lanes = t.List(t.Unicode()).tag(sync=True)
    io = t.Dict().tag(sync=True)
    collectives = t.Dict().tag(sync=True)
    waits = t.Dict().tag(sync=True)  # wait states: rank, start, end, peer, kind (index in WAIT_KINDS)
    path = t.Dict().tag(sync=True)  # the critical path's steps: rank, start, end
    path_text = t.List(t.Unicode()).tag(sync=True)
    matrix_bytes = t.List(t.List(t.Int())).tag(sync=True)
    matrix_count = t.List(t.List(t.Int())).tag(sync=True)
    matrix_time = t.List(t.List(t.Float())).tag(sync=True)
    measure = t.Enum(["messages", "bytes", "time"], "messages").tag(sync=True)  # what the matrix shows
    histograms = t.Dict().tag(sync=True)
    summary = t.List(t.Dict()).tag(sync=True)
    losses = t.List(t.Unicode()).tag(sync=True)  # the biggest wait states, in plain words
    duration = t.Float(0.0).tag(sync=True)
    axis_end = t.Float(0.0).tag(sync=True)  # >0: the time axis ends here (runs compared side by side)
    dropped = t.Int(0).tag(sync=True)
    expanded = t.Bool(False).tag(sync=True)
    panel = t.Unicode("timeline").tag(sync=True)
    # What the space-time view shows: ranks ("0-3,6"), operation, communicator, tag ("" = all).
    show_ranks = t.Unicode("").tag(sync=True)
    show_op = t.Unicode("").tag(sync=True)
    show_comm = t.Unicode("").tag(sync=True)
    show_tag = t.Unicode("").tag(sync=True)
    show_waits = t.Bool(True).tag(sync=True)
    show_path = t.Bool(True).tag(sync=True)

    def __init__(self, trace: Trace, expanded: bool = False, **kwargs):
        events = trace.events
        ops = sorted(set(events["op"]))
        files = sorted(set(events["file"]))
        comms = sorted(set(events["comm"]))
        op_index = {op: i for i, op in enumerate(ops)}
        file_index = {name: i for i, name in enumerate(files)}
        comm_index = {name: i for i, name in enumerate(comms)}
        messages = trace.messages()
        flows = [*trace.transfers(), *trace.neighbor_exchanges()]
        locks = trace.lock_epochs()
        io = trace.io_calls()
        file_ids = sorted({call["file"] for call in io})
        io_rows = [{**call, "lane": file_ids.index(call["file"])} for call in io]
        collectives = trace.collectives()
        waits = trace.waits()
        path = trace.critical_path()
        super().__init__(
            ranks=list(trace.ranks),
            lane_names=trace.lane_names(),
            ops=ops,
            files=files,
            library_lines={f"{rank} {file_index[file]} {line}": f"{behind[0]}:{behind[1]}"
                           for rank, lines in trace.via.items() for (file, line), behind in lines.items()
                           if file in file_index},
            comms=comms,
            words={word: said for word in VIEW_WORDS if (said := say(word)) != word},
            events={
                "rank": _column(events["rank"], "<i4"),
                "kind": _column(events["kind"], "<i1"),
                "op": _column([op_index[o] for o in events["op"]], "<i2"),
                "comm": _column([comm_index[c] for c in events["comm"]], "<i2"),
                "start": _column(events["start"], "<f8"),
                "stop": _column(busy_until(events), "<f8"),
                "peer": _column(events["peer_world"], "<i4"),
                "tag": _column(events["tag"], "<i4"),
                "bytes": _column(np.maximum(events["sent"], events["received"]), "<f8"),
                "file": _column([file_index[f] for f in events["file"]], "<i2"),
                "line": _column(events["line"], "<i4"),
                "open": _column(events["open"], "<i1"),
            },
            messages=_columns(messages, source=("source", "<i4"), dest=("dest", "<i4"), start=("send_start", "<f8"),
                              end=("recv_end", "<f8"), send=("send_index", "<i4"), recv=("recv_index", "<i4")),
            flows=_columns(flows, source=("source", "<i4"), dest=("dest", "<i4"), start=("start", "<f8"),
                           end=("end", "<f8"), call=("index", "<i4")),
            locks=_columns(locks, target=("target", "<i4"), holder=("holder", "<i4"), start=("start", "<f8"),
                           end=("end", "<f8"), exclusive=("exclusive", "<i1")),
            file_lanes=[os.path.basename(trace.file_names.get(cid, "")) or cid for cid in file_ids],
            io=_columns(io_rows, rank=("rank", "<i4"), file=("lane", "<i2"), start=("start", "<f8"),
                        end=("end", "<f8"), write=("write", "<i1"), call=("index", "<i4")),
            collectives={
                "low": _column([min(c["ranks"]) for c in collectives], "<i4"),
                "high": _column([max(c["ranks"]) for c in collectives], "<i4"),
                "start": _column([c["start"] for c in collectives], "<f8"),
                "end": _column([c["end"] for c in collectives], "<f8"),
                "op": _column([op_index[c["op"]] for c in collectives], "<i2"),
                "comm": _column([comm_index[c["comm"]] for c in collectives], "<i2"),
            },
            waits={
                "rank": _column([w["rank"] for w in waits], "<i4"),
                "start": _column([w["start"] for w in waits], "<f8"),
                "end": _column([w["start"] + w["seconds"] for w in waits], "<f8"),
                "peer": _column([w["peer"] for w in waits], "<i4"),
                "kind": _column([WAIT_KINDS.index(w["kind"]) for w in waits], "<i1"),
            },
            path={
                "rank": _column([step["rank"] for step in path.steps], "<i4"),
                "start": _column([step["start"] for step in path.steps], "<f8"),
                "end": _column([step["end"] for step in path.steps], "<f8"),
            },
            path_text=path.text().splitlines(),
            matrix_bytes=trace.matrix("bytes").tolist(),
            matrix_count=trace.matrix("messages").tolist(),
            matrix_time=trace.matrix("time").tolist(),
            histograms=trace.histograms(),
            summary=trace.summary(),
            losses=explain(waits),
            duration=max((end for _, end in trace.span.values()), default=0.0),
            dropped=sum(trace.dropped.values()),
            expanded=expanded,
            **kwargs,
        )
        self._trace = trace

    def _fallback(self) -> tuple[str, str]:
        text = summary_text(self._trace)
        page = (f'<div class="mpinb-trace">{space_time_svg(self._trace)}'
                f"<pre>{html.escape(text)}</pre></div>")
        return text, page
