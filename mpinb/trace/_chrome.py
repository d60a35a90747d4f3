"""Export to the Chrome trace event format, which Perfetto and chrome://tracing open."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..common._events import KIND_NAMES
from ._arrays import busy_until

if TYPE_CHECKING:
    from ._trace import Trace


def chrome_trace(trace: Trace) -> dict:
    """One thread (track) per rank with a slice per MPI call; flow arrows for matched messages."""
    events = []
    for rank in trace.ranks:
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": rank,
                       "args": {"name": f"rank {rank}"}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": rank,
                       "args": {"sort_index": rank}})
    stops = busy_until(trace.events)
    for i, event in enumerate(trace.events):
        start_us = float(event["start"]) * 1e6
        duration = max(float(stops[i]) * 1e6 - start_us, 0.001)
        args = {"kind": KIND_NAMES[event["kind"]], "comm": event["comm"], "peer": int(event["peer_world"]),
                "tag": int(event["tag"]), "sent": int(event["sent"]), "received": int(event["received"]),
                "line": f"{event['file']}:{event['line']}"}
        behind = trace.via.get(int(event["rank"]), {}).get((str(event["file"]), int(event["line"])))
        if behind is not None:  # made in library code that this line called
            args["library line"] = f"{behind[0]}:{behind[1]}"
        if event["open"]:
            args["unfinished"] = True  # broken off when the run stopped
        events.append({"ph": "X", "name": event["op"], "cat": KIND_NAMES[event["kind"]], "pid": 0,
                       "tid": int(event["rank"]), "ts": start_us, "dur": duration, "args": args})
    for wait in trace.waits():  # nested in the call that waited: same track, inside its slice
        events.append({"ph": "X", "name": wait["kind"], "cat": "wait state", "pid": 0, "tid": wait["rank"],
                       "ts": wait["start"] * 1e6, "dur": max(wait["seconds"] * 1e6, 0.001),
                       "args": {"waited for rank": wait["peer"], "in": f"{wait['op']} (line {wait['line']})",
                                "peer call": f"{wait['peer_op']} (line {wait['peer_line']})"}})
    for message in trace.messages():
        flow = {"name": "message", "cat": "message", "id": message["msg"], "pid": 0}
        # The arrow leaves the send slice at its start and lands at the end of the receive slice.
        events.append({**flow, "ph": "s", "tid": message["source"], "ts": message["send_start"] * 1e6})
        events.append({**flow, "ph": "f", "bp": "e", "tid": message["dest"],
                       "ts": max(message["recv_end"] * 1e6 - 0.0005, message["recv_start"] * 1e6)})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": "mpinb", "dropped": {str(k): v for k, v in trace.dropped.items()}}}
