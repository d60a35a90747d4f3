"""Why a run hangs: who waits for whom, on which line, and what usually fixes it.

Built in the notebook from what each blocked rank publishes on the status channel (see
``mpinb.rank.mpi._waiting``): a wait-for graph over the ranks, and a cycle in it if there is one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .._language import say
from ..common._events import place_of
from ..common._protocol import WAIT_KEY, WaitState
from ..common._ranges import format_ranks

SYNCHRONOUS_SENDS = ("Each rank sends before it receives, with a synchronous send (ssend), which waits for its "
                     "receive whatever the size: every send waits for a receive that its neighbour posts only "
                     "after its own send has completed. A standard send may do the same at any size.")
FIXES = {
    "send": ("Each rank sends before it receives. Small messages are buffered, so this often works; "
             "large ones are not, so every send waits for a receive that its neighbour posts only "
             "after its own send has completed."),
    "recv": "Each rank waits to receive before it sends, so no message is ever sent.",
    "collective": ("The ranks are not in the same collective call: every rank of a communicator must "
                   "call the same collectives, in the same order."),
}
WINDOW_FIXES = ("Every rank of a window's group must call Fence (and Win.Free) the same number of times, in "
                "the same order; a target's Win.Wait ends once each origin it posted to calls Win.Complete.")
USUAL_FIXES = ("Usual fixes: order by rank (even ranks send first, odd ranks receive first); "
               "use comm.sendrecv(...) for an exchange; or post comm.irecv(...) and comm.isend(...) "
               "and wait for both.")


@dataclass
class Diagnosis:
    """What each blocked rank waits in, and the wait-for cycle (``None`` if there is none)."""

    waits: dict[int, WaitState]
    finished: list[int] = field(default_factory=list)
    idle: list[int] = field(default_factory=list)
    cycle: list[int] | None = None

    @property
    def deadlock(self) -> bool:
        return self.cycle is not None or bool(self.stuck_on_absent())

    def waits_for(self, rank: int) -> set[int]:
        """The ranks whose action ``rank`` needs before its wait can end."""
        state = self.waits[rank]
        members = state["members"] or sorted(set(self.waits) | set(self.finished) | set(self.idle))
        kind, peer = state["kind"], state["peer"]
        if kind == "collective" or peer is None or state["any_source"]:
            same = {r for r, s in self.waits.items() if s["comm"] == state["comm"] and s["op"] == state["op"]}
            others = set(members) - {rank}
            return others - same if kind == "collective" else others
        return {peer}

    def stuck_on_absent(self) -> dict[int, list[int]]:
        """Ranks waiting only for ranks that finished the run or are not running it."""
        gone = set(self.finished) | set(self.idle)
        stuck = {}
        for rank in self.waits:
            needed = self.waits_for(rank)
            if needed and needed <= gone:
                stuck[rank] = sorted(needed)
        return stuck

    def text(self) -> str:
        lines = []
        if self.cycle is not None:
            lines.append(say("Deadlock: these ranks are blocked in MPI, each waiting for another."))
        else:
            lines.append(say("The ranks below are blocked in MPI and nothing they wait for is coming."))
        for ranks, offset in self._groups():
            if len(ranks) < GROUP_FROM:
                lines += [f"  rank {rank}: {describe_wait(self.waits[rank])}" for rank in ranks]
            else:
                lines.append(f"  {format_ranks(ranks, word=True)}: {self._describe_group(ranks, offset)}")
        if self.finished:
            lines.append(f"  {format_ranks(self.finished, word=True)}: " + say("finished the run"))
        if self.idle:
            lines.append(f"  {format_ranks(self.idle, word=True)}: " + say("not running this cell (see --targets)"))
        if self.cycle is not None:
            lines.append(say("Wait-for cycle: {cycle}", cycle=_cycle_text(self.cycle, self._size())))
            kinds = {self.waits[r]["kind"] for r in self.cycle}
            synchronous = all(self.waits[r]["op"].lower().lstrip("i") == "ssend" for r in self.cycle)
            if synchronous:
                lines.append(say(SYNCHRONOUS_SENDS))
            elif len(kinds) == 1 and kinds <= set(FIXES):
                lines.append(say(FIXES[kinds.pop()]))
        for rank, needed in sorted(self.stuck_on_absent().items()):
            lines.append(say("rank {rank} waits for {needed}, which will not take part.", rank=rank,
                             needed=format_ranks(needed, word=True)))
        slips = self.slips()
        lines += slips
        if not slips:
            on_windows = all(place_of(str(state["comm"])) == "window" for state in self.waits.values())
            lines.append(say(WINDOW_FIXES if on_windows else USUAL_FIXES))
        return "\n".join(lines)

    def slips(self) -> list[str]:
        """Receives that wait for a message that was sent, but under another tag, or on another
        communicator: the likely cause, said per rank with the fix."""
        said = []
        for rank, state in sorted(self.waits.items()):
            if state["kind"] != "recv":
                continue
            source = say("any rank") if state["any_source"] else f"rank {state['peer']}"
            if (other := state.get("unmatched")) is not None:
                said.append(say("rank {rank} waits for a message with tag {tag} from {source}, but the one that rank "
                                "{sender} sent has tag {other} ({size}): did you mean tag {other}?", rank=rank,
                                tag=state["tag"], source=source, sender=other["source"], other=other["tag"],
                                size=_size(other["bytes"])))
                continue
            for sender, sending in sorted(self.waits.items()):
                if (sending["kind"] == "send" and sending["peer"] == rank and sending["comm"] != state["comm"]
                        and (state["any_source"] or state["peer"] == sender)
                        and state["tag"] in (sending["tag"], ANY_TAG)):
                    said.append(say("rank {rank} receives on communicator {comm}, but rank {sender} sends to it on "
                                    "{other} (line {line}): a message is received only on the communicator it was "
                                    "sent on.", rank=rank, comm=repr(state["comm"]), sender=sender,
                                    other=repr(sending["comm"]), line=sending["line"]))
                    break
        return said

    def __str__(self) -> str:
        return self.text()

    def _size(self) -> int:
        return max([*self.waits, *self.finished, *self.idle]) + 1

    def _groups(self) -> list[tuple[list[int], int | None]]:
        """Ranks in the same wait, but for whom: the same call, line, tag and size, with the peer
        at the same distance (rank - 1, the left neighbour, for each of a ring). In rank order."""
        size = self._size()
        groups: dict[tuple, list[int]] = {}
        for rank in sorted(self.waits):
            state = self.waits[rank]
            peer = state["peer"]
            offset = None if peer is None or state["any_source"] else (peer - rank) % size
            key = (state["op"], state["kind"], state["comm"], state["root"], state["any_source"], state["tag"],
                   state["bytes"], state["line"], state["file"], offset)
            groups.setdefault(key, []).append(rank)
        return sorted(((ranks, key[-1]) for key, ranks in groups.items()), key=lambda group: group[0][0])

    def _describe_group(self, ranks: list[int], offset: int | None) -> str:
        """``each recv from its left neighbour at line 1, waiting 7.9-8.0 s``"""
        state = dict(self.waits[ranks[0]])
        waited = [self.waits[rank].get("waited") or 0.0 for rank in ranks]
        state["waited"] = None
        text = describe_wait(state)  # type: ignore[arg-type]
        if offset is not None:
            peer = f"rank {state['peer']}"
            text = text.replace(peer, _neighbour(offset, self._size()), 1)
        if max(waited):
            span = f"{min(waited):.1f}" if max(waited) - min(waited) < 0.05 else f"{min(waited):.1f}-{max(waited):.1f}"
            text += say(", waiting {seconds} s", seconds=span)
        return say("each {wait}", wait=text)


ANY_TAG = -1  # MPI.ANY_TAG, in mpi4py as in MPICH and Open MPI (this process does not load MPI)
GROUP_FROM = 8  # ranks in the same wait are told in one line from this many on (small rings stay per rank)


def _neighbour(offset: int, size: int) -> str:
    if offset == size - 1:
        return say("its left neighbour (rank - 1)")
    if offset == 1:
        return say("its right neighbour (rank + 1)")
    return f"rank + {offset}" if offset <= size // 2 else f"rank - {size - offset}"


def _cycle_text(cycle: list[int], size: int) -> str:
    """``0 -> 1 -> 0``; a long one shortened: ``0 -> 63 -> 62 -> ... -> 1 -> 0 (64 ranks)``."""
    closed = [*cycle, cycle[0]]
    if len(cycle) <= 8:
        return " -> ".join(map(str, closed))
    return " -> ".join(map(str, closed[:3])) + " -> ... -> " + " -> ".join(map(str, closed[-2:])) + (
        f" ({len(cycle)} ranks)")


def describe_wait(state: WaitState) -> str:
    """``send to rank 1 (tag 0, 4.0 MB) at line 2, waiting 2.1 s``"""
    op, kind = state["op"], state["kind"]
    if kind == "send":
        what = say("{op} to rank {peer}", op=op, peer=state["peer"])
    elif kind == "recv":
        source = say("any rank") if state["any_source"] else f"rank {state['peer']}"
        what = say("{op} from {source}", op=op, source=source)
    elif op == "Win.Wait" and state["members"]:  # (its members: the origins of the epoch it waits for)
        what = say("{op} on window {comm}, for {origins} to call Win.Complete", op=op,
                   comm=repr(state["comm"]), origins=format_ranks(state["members"] or [], word=True))
    elif place_of(str(state["comm"])) == "window":
        what = say("{op} on window {comm}", op=op, comm=repr(state["comm"]))
    elif place_of(str(state["comm"])) == "file":
        what = say("{op} on file {comm}", op=op, comm=repr(state["comm"]))
    else:
        what = say("{op} on communicator {comm}", op=op, comm=repr(state["comm"]))
        if state["root"] is not None:
            what += say(" (root {root})", root=state["root"])
    details = []
    if kind in ("send", "recv") and state["tag"] >= 0:
        details.append(f"tag {state['tag']}")
    if state["bytes"]:
        details.append(_size(state["bytes"]))
    if details:
        what += f" ({', '.join(details)})"
    where = say(" at line {line}", line=state["line"])
    if state["file"] and not state["file"].startswith("<mpi-cell"):
        where += say(" of {file}", file=state["file"])
    waited = state.get("waited")
    return what + where + (say(", waiting {seconds} s", seconds=f"{waited:.1f}") if waited else "")


def _size(count: int) -> str:
    if count >= 2**20:
        return f"{count / 2**20:.1f} MB"
    if count >= 1024:
        return f"{count / 1024:.1f} kB"
    return f"{count} bytes"


def diagnose(waits: dict[int, WaitState], finished: list[int], idle: list[int]) -> Diagnosis:
    """The diagnosis for ranks blocked in ``waits`` (rank -> published state)."""
    diagnosis = Diagnosis(waits=dict(waits), finished=sorted(finished), idle=sorted(idle))
    graph = {rank: sorted(diagnosis.waits_for(rank) & set(waits)) for rank in waits}
    diagnosis.cycle = _find_cycle(graph)
    return diagnosis


def _find_cycle(graph: dict[int, list[int]]) -> list[int] | None:
    """A cycle in a directed graph, as a list of nodes, or None (iterative DFS, smallest first)."""
    color = {node: 0 for node in graph}  # 0 new, 1 on the stack, 2 done
    for root in sorted(graph):
        if color[root]:
            continue
        stack, path = [(root, iter(graph[root]))], [root]
        color[root] = 1
        while stack:
            node, children = stack[-1]
            for child in children:
                if color.get(child) == 1:
                    return path[path.index(child):]
                if color.get(child) == 0:
                    color[child] = 1
                    stack.append((child, iter(graph[child])))
                    path.append(child)
                    break
            else:
                color[node] = 2
                stack.pop()
                path.pop()
    return None


class HangWatch:
    """Follows the status channel during a run; reports a diagnosis when every running rank is
    blocked in MPI, and again whenever the picture changes."""

    def __init__(self, ranks: list[int], idle: list[int]):
        self.ranks = ranks
        self.idle = idle
        self.diagnosis: Diagnosis | None = None
        self._shown: tuple | None = None

    def update(self, published: list[dict], done: list[bool]) -> Diagnosis | None:
        """The new diagnosis if the hang is new or different, else None."""
        waits: dict[int, WaitState] = {}
        for rank, data, over in zip(self.ranks, published, done):
            if over:
                continue
            state = (data or {}).get(WAIT_KEY)
            if not state:
                self.diagnosis = None  # someone still computes: not (yet) a hang
                return None
            if "since" in state:
                state = state.copy()
                state["waited"] = max(time.time() - state["since"], 0.0)
            waits[rank] = state
        if not waits:
            return None
        finished = [r for r, d in zip(self.ranks, done) if d]
        self.diagnosis = diagnose(waits, finished, self.idle)
        key = tuple((r, s["op"], s["peer"], s["line"]) for r, s in sorted(waits.items()))
        if key == self._shown:
            return None
        self._shown = key
        return self.diagnosis


_SIGNALS = {"6": "SIGABRT", "9": "SIGKILL (out of memory, or kill -9)", "11": "SIGSEGV (a crash)",
            "15": "SIGTERM", "7": "SIGBUS"}


def death_report(output: str, rank_of_pid: dict[int, int], dead: list[int],
                 host_of: dict[int, str] | None = None) -> str:
    """``"rank 2 died: killed by signal 9 (SIGKILL ...)"``, from what was seen and MPI's report.

    ``dead`` are the ranks seen gone first; the launcher's report (MPICH's "BAD TERMINATION",
    Open MPI's "exited on signal" or "Exit code") adds how, and which one, when it is about one of
    them. ``host_of`` names the ranks' hosts (for ranks on several hosts).
    """
    who = format_ranks(dead, word=True) if dead else "a rank"
    if len(dead) > 1:
        who = f"one of {who}"
    reported_rank, how = launcher_report(output, rank_of_pid)
    if reported_rank is None or (dead and reported_rank not in dead):
        how = ""
    elif len(dead) > 1 and (host_of or how.startswith("killed by signal 9 ")):
        # Across hosts the first ranks seen gone come from the controller, which hears of each
        # death from its host a moment apart: the launcher's report names whichever it cleaned up
        # first (MPICH ends the others with SIGKILL), not necessarily the cause. On one host too,
        # a SIGKILL named while several ranks are gone may be that clean-up (tests/test_faults.py
        # saw rank 1 named when rank 2 was killed).
        how = ""
    else:
        who = f"rank {reported_rank}"
        dead = [reported_rank]
    hosts = sorted({host_of[rank] for rank in dead if rank in host_of}) if host_of else []
    where = f" on {', '.join(hosts)}" if hosts else ""
    return f"{who}{where} died" + (f": {how}" if how else " (its process ended)")


def peer_loss_report(output: str, dead: list[int], host_of: dict[int, str]) -> str | None:
    """``"rank 2 on node1 died (its process ended: a rank on node2 saw its connection close)"``,
    when Open MPI says a rank's connection to a peer closed, and nothing about who died.

    Across hosts, a rank that dies in a collective closes its sockets, and the peer that notices
    first aborts the job: prterun then reports that peer ("calling abort"), not the rank that died.
    A closed connection is a process's end (a network failure closes none), and ranks on one host
    talk through shared memory: the rank that died is on another host than the one that noticed
    (the peer's host, when Open MPI names it), among the ranks seen gone first if any is there.
    """
    import re

    if lost := re.search(r"peer process has unexpectedly disconnected.*?Local host:\s+(\S+).*?Peer host:\s+(\S+)",
                         output, re.DOTALL):
        reporter, peer = lost.groups()
        elsewhere = {rank for rank, host in host_of.items() if host == peer}
    elif lost := re.search(r"\[([^:\]\s]+):\d+\] \*\*\* An error occurred in Socket closed", output):
        reporter = lost.group(1)
        elsewhere = {rank for rank, host in host_of.items() if host != reporter}
    else:
        return None
    suspects = [rank for rank in dead if rank in elsewhere] or sorted(elsewhere)
    if not suspects:
        return None
    who = format_ranks(suspects, word=True)
    hosts = ", ".join(sorted({host_of[rank] for rank in suspects}))
    return (f"{who if len(suspects) == 1 else 'one of ' + who} on {hosts} died "
            f"(its process ended: a rank on {reporter} saw its connection close)")


def launcher_report(output: str, rank_of_pid: dict[int, int]) -> tuple[int | None, str]:
    """Which rank the MPI launcher says ended the job, and how (``""`` if it does not say)."""
    import re

    rank: int | None = None
    signal = code = None
    if found := re.search(r"PID (\d+) RUNNING AT", output):  # MPICH (Hydra)
        rank = rank_of_pid.get(int(found.group(1)))
        signal = re.search(r"KILLED BY SIGNAL: (\d+)", output) or re.search(r"EXIT STRING: .*\(signal (\d+)\)", output)
        code = re.search(r"EXIT CODE: (\d+)", output)
    elif found := re.search(r"rank (\d+) with PID (\d+) on node \S+ exited on\s+signal (\d+)", output):  # Open MPI
        rank, signal = int(found.group(1)), re.search(r"exited on\s+signal (\d+)", output)
    elif found := re.search(r"Process name: \[[^\]]*,(\d+)\]\s+Exit code:\s+(\d+)", output):  # Open MPI
        rank, code = int(found.group(1)), re.search(r"Exit code:\s+(\d+)", output)
    if signal:
        return rank, f"killed by signal {signal.group(1)} ({_SIGNALS.get(signal.group(1), 'see man 7 signal')})"
    if code:
        value = int(code.group(1))
        if value > 128 and str(value - 128) in _SIGNALS:
            return rank, f"killed by signal {value - 128} ({_SIGNALS[str(value - 128)]})"
        return rank, f"its process exited with code {value}"
    return rank, ""
