"""What a run did that is likely a bug, found in its trace: the checks of MPI correctness.

On in every traced run (cheap): nonblocking calls that no wait or test saw complete. With
``verify`` (the ranks noted more, see :mod:`mpinb.rank.mpi._verify`): exchanges that finish only
because MPI buffered a message or let a collective end early (see :mod:`._synchronous`), a
message received into a buffer of another element type, the buffer of a nonblocking send
changed before the send completed, a nonblocking receive's buffer written after the message
arrived and before the receive completed (it no longer holds what was sent), two calls whose
buffers share memory while one of them is pending and either receives, collectives whose
members disagree (op, root, bytes, counts), and a receive from ``ANY_SOURCE`` whose match
depends on timing.

Silent under ``mpiexec``: the program may still give the right answer here, and lose a message,
read a buffer early or hang on another MPI or at another size.

Also on in every traced run: what a run left behind (:mod:`mpinb.rank.mpi._left_behind`): a message that
arrived and that no receive took, found by MPI's own probe (a message received by a form mpinb
does not trace is gone, so it is never told), and a communicator, window or derived datatype
dropped without ``Free``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .._language import language, say
from ..common._events import COLLECTIVE, RECV, REDUCTION_OPS, SEND
from ..common._ranges import format_ranks

if TYPE_CHECKING:
    from ._trace import Trace


@dataclass(frozen=True)
class Finding:
    """One thing a run did that works only by accident: ``check`` names the kind
    (``"never-completed"``, ``"unreceived"``, ``"communicator-dropped"``, ``"buffering"``,
    ``"type-mismatch"``, ``"buffer-touched"``, ``"receive-touched"``, ``"buffer-overlap"``,
    ``"collective-mismatch"``,
    ``"count-mismatch"``, ``"window-dropped"``, ``"datatype-dropped"``,
    ``"wildcard-race"``), ``text``
    says what and the fix; ``rank``, ``file`` and ``line`` are where it shows first."""

    check: str
    rank: int
    file: str
    line: int
    text: str

    def __str__(self) -> str:
        return self.text


def findings(trace: Trace) -> list[Finding]:
    """The run's findings, in the order of their calls; none for a run that was stopped or whose
    trace lost calls (what would have completed is not known)."""
    if not _complete(trace):
        return []
    events = trace.events
    found = []
    for i in np.flatnonzero(events["pending"]):
        event = events[i]
        found.append(_finding(event, "never-completed", say(
            "rank {rank}: {op} at line {line} was never completed (no wait or test saw it finish): until it is, "
            "its buffer belongs to MPI, and the run may end before the message moves. Wait for it "
            "(req.wait(), MPI.Request.Waitall) before the cell ends.",
            rank=int(event["rank"]), op=event["op"], line=int(event["line"]))))
    found += _left_behind(trace)
    if trace.verified:
        checks = events["checks"].tolist()
        groups, halves = trace.collective_groups(), trace.message_halves()
        found += (_collective_mismatches(events, checks, trace.comms, groups)
                  + _count_mismatches(events, checks, trace.comms, groups) + _buffering(trace)
                  + _type_mismatches(events, checks, halves) + _touched(events, checks)
                  + _receive_touched(events, checks, halves) + _overlaps(events, checks)
                  + _wildcard_races(events, checks, halves, groups))
    return found


def _collective_mismatches(events, checks: list, comms: dict[str, list[int]],
                           groups: dict[tuple, list[int]]) -> list[Finding]:
    """Collectives whose members gave different amounts of data or reduction ops (noted by a
    verified run's polled collectives, which do not agree first: see ``rank/mpi/_collectives.signature``)."""
    found = []
    seen: set[tuple] = set()
    for (comm, _), group in groups.items():
        noted = {i: _noted(checks[i], "signature") for i in group}
        signatures = {i: signature for i, signature in noted.items() if signature is not None}
        if len(signatures) != len(group) or len(group) != len(comms.get(comm, ())) \
                or len({str(events["op"][i]) for i in group}) != 1:
            continue
        differ = any(len({signature[field] for signature in signatures.values() if signature[field] >= 0}) > 1
                     for field in (0, 1))
        first = min(group, key=lambda i: int(events["rank"][i]))
        key = (str(events["op"][first]), int(events["line"][first]))
        if not differ or key in seen:
            continue
        seen.add(key)
        ways: dict[str, list[int]] = {}
        for i, (size, op) in sorted(signatures.items(), key=lambda item: int(events["rank"][item[0]])):
            way = " ".join(filter(None, (say("{size} bytes", size=size) if size >= 0 else "",
                                         say("with {op}", op=REDUCTION_OPS[op]) if op >= 0 else "")))
            ways.setdefault(way or "?", []).append(int(events["rank"][i]))
        gave = "; ".join(say("{who} gave {way}", who=_who(ranks), way=way) for way, ranks in ways.items())
        found.append(_finding(events[first], "collective-mismatch", say(
            "{op} at line {line}: {gave}. MPI requires the same amount of data and the same operation on every "
            "rank and does not check it: the result is wrong or the run hangs on another MPI. Give every rank "
            "the same count, type and op.", op=key[0], line=key[1], gave=gave)))
    return found


def _count_mismatches(events, checks: list, comms: dict[str, list[int]],
                      groups: dict[tuple, list[int]]) -> list[Finding]:
    """``Allgatherv``, ``Gatherv``, ``Scatterv`` whose counts (the root's, or every member's) do
    not say what each member gives (scattered: takes), and ``Alltoallv``, ``Alltoallw`` whose
    send counts do not say what the partners' receive counts expect, as a verified run noted them
    (``rank/mpi/_verify.counted``). MPI checks only that a message fits: fewer bytes leave the rest of
    the member's slot as it was, silently."""
    found = []
    seen: set[tuple] = set()
    for (comm, _), group in groups.items():
        members = comms.get(comm)
        if members and str(events["op"][group[0]]) in ("Alltoallv", "Alltoallw"):
            found += _exchange_mismatch(events, checks, group, members, seen)
            continue
        noted: dict[int, tuple] = {}
        for i in group:
            value = _noted(checks[i], "counts")  # (bytes given, bytes per member the counts say)
            if value is not None:
                noted[i] = value
        if not members or len(noted) != len(group):
            continue
        op = str(events["op"][group[0]])
        first = min(group, key=lambda i: int(events["rank"][i]))
        key = (op, int(events["line"][first]))
        if key in seen:
            continue
        if op == "Allgatherv":
            counted = [tuple(expected) for _, expected in noted.values() if expected]
        else:  # the root's counts are the ones that matter
            root = next((i for i in group if members.index(int(events["rank"][i])) == int(events["peer"][i])), None)
            counted = [tuple(noted[root][1])] if root is not None and noted[root][1] else []
        if not counted or len(counted[0]) != len(members):
            continue
        wrong = sorted((int(events["rank"][i]), own, counted[0][members.index(int(events["rank"][i]))])
                       for i, (own, _) in noted.items()
                       if own >= 0 and own != counted[0][members.index(int(events["rank"][i]))])
        disagree = len(set(counted)) > 1
        if not wrong and not disagree:
            continue
        seen.add(key)
        says = "; ".join(say("rank {rank} gives {own} bytes where the counts say {expected}", rank=rank, own=own,
                             expected=expected) for rank, own, expected in wrong)
        if disagree:
            says = "; ".join(filter(None, (says, say("the ranks' counts differ"))))
        found.append(_finding(events[first], "count-mismatch", say(
            "{op} at line {line}: {says} (counts in bytes: {counts}). MPI checks only that a message fits: fewer "
            "bytes leave the rest of a slot as it was, silently, and more fail. Make the counts say what each "
            "rank gives.", op=op, line=key[1], says=says, counts=", ".join(map(str, counted[0])))))
    return found


def _exchange_mismatch(events, checks: list, group: list[int], members: list[int], seen: set) -> list[Finding]:
    """An ``Alltoallv`` or ``Alltoallw`` where what one member sends another is not what that one
    expects from it."""
    noted: dict[int, tuple] = {}
    for i in group:
        value = _noted(checks[i], "exchange-counts")
        if value is None or len(value[0]) != len(members) or len(value[1]) != len(members):
            return []
        noted[int(events["rank"][i])] = value
    first = min(group, key=lambda i: int(events["rank"][i]))
    key = (str(events["op"][first]), int(events["line"][first]))
    if key in seen or len(noted) != len(members):
        return []
    wrong = [(sender, receiver, noted[sender][0][j], noted[receiver][1][i])
             for i, sender in enumerate(members) for j, receiver in enumerate(members)
             if noted[sender][0][j] != noted[receiver][1][i]]
    if not wrong:
        return []
    seen.add(key)
    says = "; ".join(say("rank {sender} sends {sent} bytes to rank {receiver}, which expects {expected}",
                         sender=sender, sent=sent, receiver=receiver, expected=expected)
                     for sender, receiver, sent, expected in wrong[:4])
    return [_finding(events[first], "count-mismatch", say(
        "{op} at line {line}: {says}. MPI checks only that a message fits: fewer bytes leave the rest of a "
        "slot as it was, silently, and more fail. Make each rank's send counts match its partners' receive "
        "counts.", op=key[0], line=key[1], says=says))]


def _who(ranks) -> str:
    return format_ranks(ranks, word=True) if language() != "zh" else "rank " + format_ranks(ranks)


def _calls_text(events, indices) -> str:
    """``"Send at line 3 on ranks 0-3, Recv at line 5 on rank 4"``: calls grouped by op and line."""
    where: dict[tuple[str, int], list[int]] = {}
    for i in indices:
        where.setdefault((str(events["op"][i]), int(events["line"][i])), []).append(int(events["rank"][i]))
    return ", ".join(say("{op} at line {line} on {who}", op=op, line=line, who=_who(ranks))
                     for (op, line), ranks in where.items())


def _buffering(trace: Trace) -> list[Finding]:
    events = trace.events
    stuck = trace.synchronous_stalls()
    if not stuck:
        return []
    calls = _calls_text(events, stuck)
    collective = any(events["kind"][i] == COLLECTIVE for i in stuck)
    if collective:
        text = say(
            "{calls}: this run finishes only because MPI let a collective end before every rank joined it, or "
            "buffered a message (a standard send may return before its receive starts). Under an MPI or a message "
            "size that does neither, these ranks deadlock there. Call the collectives in the same order, relative "
            "to the sends and receives, on every rank.", calls=calls)
    else:
        text = say(
            "{calls}: this exchange finishes only because MPI buffered a message (a standard send may return before "
            "its receive starts). Under an MPI or a message size that does not buffer, these ranks deadlock there. "
            "Order the calls so that every send meets a posted receive (even ranks send first, odd ranks receive "
            "first), or use sendrecv, or Isend/Irecv and then Waitall.", calls=calls)
    return [_finding(events[stuck[0]], "buffering", text)]


def _type_mismatches(events, checks: list, halves: dict[int, dict[str, int]]) -> list[Finding]:
    seen: dict[tuple, list[int]] = {}
    first: dict[tuple, tuple[int, int]] = {}
    for pair in halves.values():
        send, recv = pair["send"], pair["recv"]
        sent, received = _typecode(checks[send]), _typecode(checks[recv])
        if not sent or not received or _compatible(sent, received):
            continue
        key = (str(events["op"][send]), int(events["line"][send]), str(events["op"][recv]),
               int(events["line"][recv]), sent, received)
        seen.setdefault(key, []).append(int(events["rank"][recv]))
        first.setdefault(key, (send, recv))
    found = []
    for key, receivers in seen.items():
        send_op, send_line, recv_op, recv_line, sent, received = key
        send, recv = first[key]
        found.append(_finding(events[recv], "type-mismatch", say(
            "{who}: {recv_op} at line {recv_line} received {sent} values (sent by {send_op} at line {send_line} "
            "on rank {sender}) into a buffer of {received} values: MPI copies the bytes, so the values read are wrong. "
            "Receive into a buffer of the sender's type (np.empty(n, dtype=np.{sent})), or send {received}.",
            who=_who(receivers), recv_op=recv_op, recv_line=recv_line, sent=_type_name(sent),
            send_op=send_op, send_line=send_line, sender=int(events["rank"][send]),
            received=_type_name(received))))
    return found


def _typecode(checks: tuple | None) -> str:
    """The element type a call's buffer had (see ``mpinb.rank.mpi._verify.typed``), or ``""``."""
    noted = _noted(checks, "type")
    return noted[0] if noted else ""


def _noted(checks: tuple | None, check: str) -> tuple | None:
    """What a verified run noted of one kind for one call (``rank/mpi/_verify``), without its kind."""
    return next((what[1:] for what in checks or () if what[0] == check), None)


@functools.cache
def _compatible(sent: str, received: str) -> bool:
    """Same kind of number of the same size (int32 and uint32 pass: the bits are the same)."""
    a, b = np.dtype(sent), np.dtype(received)
    kinds = {"i": "i", "u": "i"}
    return a.itemsize == b.itemsize and kinds.get(a.kind, a.kind) == kinds.get(b.kind, b.kind)


def _type_name(code: str) -> str:
    return np.dtype(code).name


def _touched(events, checks: list) -> list[Finding]:
    seen: dict[tuple, list[int]] = {}
    first: dict[tuple, int] = {}
    for i, noted in enumerate(checks):
        for what in noted or ():
            if what[0] == "touched":
                key = (str(events["op"][i]), int(events["line"][i]), int(what[2]))
                seen.setdefault(key, []).append(int(events["rank"][i]))
                _keep_lowest_rank(first, key, i, events)
    return [_finding(events[first[key]], "buffer-touched", say(
        "{who}: the buffer of {op} at line {line} changed before the send completed (seen when line {done} "
        "completed it): MPI may send the old values, the new ones or a mix. Write to the buffer only after "
        "the request's Wait, or send a copy.", who=_who(sorted(set(ranks))), op=key[0], line=key[1], done=key[2]))
        for key, ranks in seen.items()]


def _receive_touched(events, checks: list, halves: dict[int, dict[str, int]]) -> list[Finding]:
    """Nonblocking receives whose buffer, when they completed, did not hold what the matched send
    sent (same bytes, same type, the send's own buffer unchanged): user code wrote to it after
    the message arrived. (A write before the message arrived is overwritten and not seen; a read
    of a pending buffer changes nothing that can be compared.)"""
    seen: dict[tuple, list[int]] = {}
    first: dict[tuple, tuple[int, int]] = {}
    for pair in halves.values():
        send, recv = pair["send"], pair["recv"]
        delivered, digest = _noted(checks[recv], "delivered"), _noted(checks[send], "digest")
        if delivered is None or digest is None or delivered[1] != digest[1] or delivered[0] == digest[0]:
            continue
        if _noted(checks[send], "touched") or _typecode(checks[send]) != _typecode(checks[recv]):
            continue  # (told as the send's own finding, or as a type mismatch)
        key = (str(events["op"][recv]), int(events["line"][recv]), int(delivered[3]))
        seen.setdefault(key, []).append(int(events["rank"][recv]))
        first.setdefault(key, (send, recv))
    found = []
    for key, receivers in seen.items():
        send, recv = first[key]
        found.append(_finding(events[recv], "receive-touched", say(
            "{who}: the buffer of {op} at line {line} was written while the receive was pending (line {done} "
            "completed it): it no longer holds what {send_op} at line {send_line} on rank {sender} sent. From the "
            "post until the wait completes, a receive buffer belongs to MPI: reading it gives old or partial "
            "values, writing it loses the message. Use the buffer only after the request's Wait.",
            who=_who(sorted(set(receivers))), op=key[0], line=key[1], done=key[2], send_op=str(events["op"][send]),
            send_line=int(events["line"][send]), sender=int(events["rank"][send]))))
    return found


def _keep_lowest_rank(first: dict, key: tuple, i: int, events) -> None:
    """A finding of many ranks is told at its lowest rank, whichever rank's call came first."""
    if key not in first or events["rank"][i] < events["rank"][first[key]]:
        first[key] = i


def _overlaps(events, checks: list) -> list[Finding]:
    """Calls whose buffer shares memory with a pending nonblocking call's, where either receives."""
    seen: dict[tuple, list[int]] = {}
    first: dict[tuple, int] = {}
    for i, noted in enumerate(checks):
        overlap = _noted(noted, "overlap")
        if overlap is not None:
            key = (str(events["op"][i]), int(events["line"][i]), int(events["kind"][i]) == RECV, *overlap)
            seen.setdefault(key, []).append(int(events["rank"][i]))
            _keep_lowest_rank(first, key, i, events)
    found = []
    for key, ranks in seen.items():
        op, line, receives, other_op, other_line, other_receives = key
        found.append(_finding(events[first[key]], "buffer-overlap", say(
            "{who}: {op} at line {line} {uses} memory that {other_op} at line {other_line}, still pending, "
            "{other_uses}: MPI may write one over the other while both are in flight (MPI forbids it). Give "
            "each pending call a buffer of its own, or wait for the first before the second starts.",
            who=_who(sorted(set(ranks))), op=op, line=line, other_op=other_op, other_line=other_line,
            uses=say("receives into") if receives else say("sends from"),
            other_uses=say("receives into too") if other_receives else say("sends from too"))))
    return found


_RACES_ANALYSED = 2_000  # wildcard receives looked at per run (each one is a walk of the run's order)


def _wildcard_races(events, checks: list, halves: dict[int, dict[str, int]],
                    groups: dict[tuple, list[int]]) -> list[Finding]:
    """Blocking receives from ``ANY_SOURCE`` that took one message while another sender's could
    have been taken instead: a send to the same rank, communicator and tag that no chain of
    messages or collectives orders after the receive (so on another run it may come first), and
    that was not taken before it. Which one each receive takes depends on timing, however this
    run went. A receive that reads its status (who sent what it took) handles any order by design,
    and is not named. (ISP and MUST call this a wildcard race.)"""
    # (the tag asked for, whether a status was given), of the receives that named no source
    wildcards = {i: noted for i in np.flatnonzero(events["kind"] == RECV).tolist()
                 if checks[i] and (noted := _noted(checks[i], "wildcard"))}
    if not wildcards:
        return []
    sender_of = {pair["recv"]: pair["send"] for pair in halves.values()}
    taken_by = {pair["send"]: pair["recv"] for pair in halves.values()}
    sends = np.flatnonzero(events["kind"] == SEND)
    causality: _Causality | None = None
    analysed = 0
    seen: dict[tuple, list[int]] = {}
    first: dict[tuple, tuple[int, int, int]] = {}
    for i, (tag, status_given) in wildcards.items():
        key = (str(events["op"][i]), int(events["line"][i]))
        if status_given or i not in sender_of or key in seen or analysed >= _RACES_ANALYSED:
            continue
        analysed += 1
        recv, took = events[i], sender_of[i]
        rank, source = int(recv["rank"]), int(events["rank"][took])
        candidates = sends[events["peer_world"][sends] == rank]
        candidates = candidates[(events["rank"][candidates] != source) & (events["comm"][candidates] == recv["comm"])
                                & ((events["tag"][candidates] == tag) if tag >= 0 else True)]
        rivals = [int(j) for j in candidates
                  if int(j) not in taken_by or events["start"][taken_by[int(j)]] > recv["start"]]
        if not rivals:
            continue
        causality = causality or _Causality(events, halves, groups)
        after = causality.reached_from(rank, float(recv["end"]))
        rivals = [j for j in rivals if events["start"][j] < after.get(int(events["rank"][j]), np.inf)]
        if rivals:
            seen.setdefault(key, []).append(rank)
            first.setdefault(key, (i, took, rivals[0]))
    found = []
    for (op, line), ranks in seen.items():
        i, took, rival = first[op, line]
        found.append(_finding(events[i], "wildcard-race", say(
            "{who}: {op} at line {line} receives from ANY_SOURCE: it took the message of rank {source} ({send} at "
            "line {send_line}) while rank {other}'s ({other_send} at line {other_line}) was on its way too. Which "
            "one it takes depends on timing, so the result may change from run to run. Name the source you "
            "expect, or pass a status and handle the messages in any order (status.Get_source()).",
            who=_who(sorted(set(ranks))), op=op, line=line, source=int(events["rank"][took]),
            send=events["op"][took], send_line=int(events["line"][took]), other=int(events["rank"][rival]),
            other_send=events["op"][rival], other_line=int(events["line"][rival]))))
    return found


class _Causality:
    """What happens after what in a run: program order on each rank, a message from its send to
    its receive, and a collective from each member's call to every member's return (taken as
    synchronizing, so that a race is never told where a collective may order the calls)."""

    def __init__(self, events, halves: dict[int, dict[str, int]], groups: dict[tuple, list[int]]):
        edges: dict[int, list[tuple[float, int, float]]] = {}  # rank -> (start, rank reached, when)
        for pair in halves.values():
            send, recv = events[pair["send"]], events[pair["recv"]]
            edges.setdefault(int(send["rank"]), []).append(
                (float(send["start"]), int(recv["rank"]), float(recv["end"])))
        joins: dict[int, list[tuple[float, int]]] = {}  # rank -> (start, collective) of its calls
        self.returns: list[list[tuple[int, float]]] = []  # per collective: (member, when it returned)
        for members in groups.values():
            for a in members:
                joins.setdefault(int(events["rank"][a]), []).append((float(events["start"][a]), len(self.returns)))
            self.returns.append([(int(events["rank"][b]), float(events["end"][b])) for b in members])
        self.edges = {rank: np.array(found, dtype=[("start", "f8"), ("rank", "i4"), ("when", "f8")])
                      for rank, found in edges.items()}
        self.joins = {rank: np.array(found, dtype=[("start", "f8"), ("collective", "i4")])
                      for rank, found in joins.items()}

    def reached_from(self, rank: int, when: float) -> dict[int, float]:
        """Per rank, the time from which its calls happen after ``rank``'s point ``when``
        (absent: none of them do). Ranks are settled earliest first, as in Dijkstra's method:
        whatever a rank reaches, it reaches later than it was reached itself."""
        reach, settled, spread = {rank: when}, set(), set()

        def reached(target: int, at: float) -> None:
            if at < reach.get(target, np.inf):  # (NaN, a call that never returned, reaches nothing)
                reach[target] = at

        while True:
            open_ranks = [r for r in reach if r not in settled]
            if not open_ranks:
                return reach
            current = min(open_ranks, key=reach.__getitem__)
            settled.add(current)
            edges = self.edges.get(current)
            if edges is not None:
                later = edges[edges["start"] >= reach[current]]
                for target in np.unique(later["rank"]):
                    reached(int(target), float(np.nanmin(later["when"][later["rank"] == target], initial=np.inf)))
            joins = self.joins.get(current)
            if joins is not None:
                # a member's return is the same whoever reaches the collective: spread each once
                for collective in joins["collective"][joins["start"] >= reach[current]].tolist():
                    if collective not in spread:
                        spread.add(collective)
                        for member, returned in self.returns[collective]:
                            reached(member, returned)


def _left_behind(trace: Trace) -> list[Finding]:
    """Messages waiting that no receive took, and communicators, windows and derived datatypes
    dropped unfreed (see ``rank/mpi/_left_behind``)."""
    if not any(trace.left.values()):  # (the usual run: the trace's messages are not even matched)
        return []
    events = trace.events
    received = {pair["send"] for pair in trace.message_halves().values()}
    files = set(events["file"].tolist())
    found: list[Finding] = []
    dropped: dict[tuple[str, str, str, int], list] = {}
    for rank, left in sorted(trace.left.items()):
        for what in left:
            if what[0] == "unreceived":
                found.append(_unreceived(trace, received, rank, *what[1:]))
            elif what[0] in _DROPPED:  # (each part of one Split is told once, by the line that made it)
                kind, op, file, line, so_far = what
                entry = dropped.setdefault((kind, op, file, line), [so_far, []])
                entry[0] = max(entry[0], so_far)
                entry[1].append(rank)
    for (kind, op, file, line), (so_far, ranks) in dropped.items():
        check, text = _DROPPED[kind]
        if not op:  # a datatype: where a traced call first used it
            where = say("line {line}", line=line) if file in files else \
                say("line {line} of an earlier cell", line=line)
        else:
            where = say("{op} at line {line}", op=op, line=line) if file in files else \
                say("{op} at line {line} of an earlier cell", op=op, line=line)
        found.append(Finding(check, min(ranks), file, line, say(
            text, who=_who(sorted(ranks)), where=where, count=so_far)))
    return found


_DROPPED = {
    "dropped-communicator": (
        "communicator-dropped",
        "{who}: a communicator made by {where} was dropped without Free() ({count} so far in this pool): "
        "MPI keeps it until the pool stops, and it has room for only a few thousand (MPICH: 2048), so a "
        "cell run again and again runs out. Call Free() on it when it is no longer needed."),
    "dropped-window": ("window-dropped",
                       "{who}: a window made by {where} was dropped without Free() ({count} so far in this pool): "
                       "MPI keeps it, and the memory it exposes, until the pool stops. Call Free() on it (on "
                       "every rank of its communicator: it is collective) when it is no longer needed."),
    "dropped-datatype": ("datatype-dropped",
                         "{who}: a derived datatype (first used at {where}) was dropped without Free() ({count} so "
                         "far in this pool): MPI keeps it until the pool stops. Call Free() on it when it is no "
                         "longer needed."),
}


def _unreceived(trace: Trace, received: set[int], rank: int, comm: str, source: int, tag: int,
                size: int) -> Finding:
    """A message from ``source`` waiting on ``rank``: the send of this run that no receive took, if any."""
    events = trace.events
    sends = [int(i) for i in np.flatnonzero((events["rank"] == source) & (events["kind"] == SEND)
                                            & (events["comm"] == comm) & (events["peer_world"] == rank)
                                            & (events["tag"] == tag))
             if int(i) not in received]
    fix = say("The next receive that matches it, perhaps in a later cell, takes it instead of the message it "
              "waits for: receive every message that is sent (or do not send it).")
    if sends:
        send = events[sends[-1]]
        return _finding(send, "unreceived", say(
            "rank {rank}: the message that {op} at line {line} on rank {source} sent (tag {tag}, {size} bytes) was "
            "never received. {fix}", rank=rank, op=send["op"], line=int(send["line"]), source=source, tag=tag,
            size=size, fix=fix))
    return Finding("unreceived", rank, "", 0, say(
        "rank {rank}: a message from rank {source} (tag {tag}, {size} bytes, sent in an earlier cell) waits "
        "on communicator {comm} and no receive took it. {fix}", rank=rank, source=source, tag=tag, size=size,
        comm=comm, fix=fix))


def _complete(trace: Trace) -> bool:
    """Whether every call of the run is in the trace: none dropped, none broken off."""
    return not trace.dropped and not bool(trace.events["open"].any())


def _finding(event, check: str, text: str) -> Finding:
    return Finding(check, int(event["rank"]), str(event["file"]), int(event["line"]), text)
