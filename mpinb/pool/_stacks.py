"""The Python stacks of the ranks, merged into one tree (the idea of LLNL's STAT).

Each rank answers on the control channel with its main thread's frames and what it is doing
(see ``mpinb.rank._debugger``). A rank that cannot answer (its main thread holds Python's lock
in a long C call) is read from outside its Python code: it writes its stack from a signal
handler (faulthandler) into a file of the pool's, which works inside any call and needs no
ptrace rights. Library frames are folded: a branch shows the user's frames and, at its end,
what the rank does there (waits in MPI for a rank, is stopped at a breakpoint, runs, is idle).
"""

from __future__ import annotations

import html
import linecache
import os
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._language import say
from ..common._events import place_of
from ..common._protocol import DebugState, Frame
from ..common._ranges import format_ranks
from . import _channel

if TYPE_CHECKING:
    from ._supervisor import Supervisor

_HEADER = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):$")
_FRAME = re.compile(r'^  File "(.*)", line (\d+) in (.*)$')
# Where a stack's frames are mpinb's, the engine's or a library's rather than the user's own.
_LIBRARY_MARKS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep,
                  os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
                  os.path.dirname(os.__file__) + os.sep)
_MPINB_RANK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rank", "")
CODE_WIDTH = 60


def is_users(frame: Frame) -> bool:
    """Whether a frame is the user's code: a cell, or a file outside every library."""
    name = frame["file"]
    return name.startswith("<mpi-cell-") or not (name.startswith("<") or any(mark in name for mark in _LIBRARY_MARKS))


def stack_file(folder: str, rank: int) -> str:
    return os.path.join(folder, f"{rank}.stack")


def read_stacks(folder: str, ranks: list[int], ask, timeout: float = 1.0) -> dict[int, list[Frame] | None]:
    """Each rank's main-thread stack as it writes it from a signal handler, innermost frame first;
    ``None`` where none could be read. ``ask(ranks)`` sends the ranks that signal."""
    sizes = {rank: _size(stack_file(folder, rank)) for rank in ranks}
    waiting = [rank for rank in ranks if sizes[rank] is not None]
    if waiting:
        ask(waiting)
    stacks: dict[int, list[Frame] | None] = {rank: None for rank in ranks}
    deadline = time.monotonic() + timeout
    last_seen: dict[int, tuple[int, float]] = {}
    while waiting and time.monotonic() < deadline:
        time.sleep(0.02)
        for rank in list(waiting):
            now_size = _size(stack_file(folder, rank)) or 0
            grew = now_size > (sizes[rank] or 0)
            size_before, since = last_seen.get(rank, (-1, 0.0))
            if grew and now_size == size_before and time.monotonic() - since > 0.05:
                # A rank descheduled halfway through its dump (crowded cores) pauses too: only a
                # main thread's stack that reaches its outermost frame is the whole of it.
                frames, whole = _parse(stack_file(folder, rank), sizes[rank] or 0)
                if whole:
                    stacks[rank] = frames
                    waiting.remove(rank)
            elif now_size != size_before:
                last_seen[rank] = (now_size, time.monotonic())
    for rank in waiting:  # what was written by the deadline, if anything
        if (_size(stack_file(folder, rank)) or 0) > (sizes[rank] or 0):
            stacks[rank] = _parse(stack_file(folder, rank), sizes[rank] or 0)[0]
    return stacks


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _parse(path: str, offset: int) -> tuple[list[Frame] | None, bool]:
    """The main thread's frames of the dump written after ``offset``, and whether they are all
    there: faulthandler writes the outermost frame (the engine's ``<module>``) last, or ``...``
    where it cut a deep stack short."""
    try:
        with open(path, errors="replace") as handle:
            first = handle.readline()
            handle.seek(offset)
            text = handle.read()
    except OSError:
        return None, False
    main = first.split()[-1] if first.startswith("main thread ") else None
    frames: list[Frame] = []
    in_main = whole = False
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            if in_main:
                break
            in_main = main is not None and int(header.group(1), 16) == int(main, 16)
            continue
        frame = _FRAME.match(line)
        if in_main and frame:
            frames.append({"file": frame.group(1), "line": int(frame.group(2)), "function": frame.group(3),
                           "code": ""})
            whole = frame.group(3) == "<module>"
        elif in_main and line.strip() == "...":
            whole = True
    return frames or None, whole


def _innermost(frames: list[Frame]) -> Frame:
    """The innermost frame worth naming: mpinb's own traced call stands for the MPI call the
    user made, which the user's line names (a blocking call that cannot be polled: Win.Lock)."""
    return next((frame for frame in frames if not frame["file"].startswith(_MPINB_RANK)), frames[0])


def where(frames: list[Frame] | None, sources: dict[str, str]) -> str:
    """Where a rank is, in words: the user's line and its code, and the library function it is in
    when that is not the user's own (``sources`` maps a cell's name to its code)."""
    if not frames:
        return say("its stack could not be read")
    inner = _innermost(frames)
    user = next((frame for frame in frames if is_users(frame)), None)
    if user is None:
        return say("in {function} of {file}", function=inner["function"], file=os.path.basename(inner["file"]))
    code = _source_line(user, sources)
    if code:
        text = say("in `{code}`, line {line}", code=code, line=user["line"])
    else:
        text = say("at line {line}", line=user["line"])
    if inner is not user:
        text += say(", inside {function} of {file}", function=inner["function"], file=os.path.basename(inner["file"]))
    return text


def _source_line(frame: Frame, sources: dict[str, str]) -> str:
    if frame.get("code"):
        return frame["code"]
    if frame["file"] in sources:
        lines = sources[frame["file"]].splitlines()
        return lines[frame["line"] - 1].strip() if 0 < frame["line"] <= len(lines) else ""
    return linecache.getline(frame["file"], frame["line"]).strip()


# -- every rank's stack, merged ---------------------------------------------------------------------


@dataclass
class RankStack:
    """One rank's stack (innermost frame first) and what it does; ``read`` says how it was read:
    ``"live"`` (it answered), ``"signal"`` (from outside its Python code) or ``""`` (not at all,
    ``why`` says why)."""

    rank: int
    frames: list[Frame]
    state: DebugState | None
    read: str
    why: str = ""
    still_for: float | None = None  # seconds at this place, over the samples taken so far
    taken_at: float = field(default_factory=time.time)

    @property
    def user_frame(self) -> Frame | None:
        """The innermost frame of the user's own code (a cell, a user's file), if any."""
        return next((frame for frame in self.frames if is_users(frame)), None)

    def position(self) -> tuple:
        inner = self.frames[0] if self.frames else None
        return ((inner["file"], inner["line"], inner["function"]) if inner else (), _mode(self.state))


def collect(supervisor: Supervisor, ranks: list[int], sources: dict[str, str]) -> dict[int, RankStack]:
    """Every rank's stack now: asked on the control channel, read from outside for those that
    do not answer."""
    answers = _channel.ask(supervisor, ranks, "stack", timeout=supervisor.answer_within())
    stacks: dict[int, RankStack] = {}
    silent = []
    for rank in ranks:
        answer = answers[rank]
        if answer.get("status") == "ok":
            stacks[rank] = RankStack(rank, answer["frames"], answer["state"], "live")
        else:
            silent.append(rank)
    if silent:
        read = (read_stacks(supervisor.stacks_folder, silent, supervisor.ask_for_stacks,
                            supervisor.answer_within(2.0))
                if supervisor.stacks_folder else dict.fromkeys(silent))
        for rank in silent:
            frames = read[rank]
            for frame in frames or []:
                frame["code"] = _source_line(frame, sources)
            why = "" if frames else say("it did not answer and its stack could not be read from outside")
            stacks[rank] = RankStack(rank, frames or [], None, "signal" if frames else "", why)
    return stacks


@dataclass
class Stacks:
    """Every rank's Python stack, merged: shared frames once, each branch labelled with its ranks.
    ``str()`` (and the notebook's display) is the tree; ``ranks`` holds each rank's stack."""

    ranks: dict[int, RankStack]
    sources: dict[str, str] = field(default_factory=dict, repr=False)
    samples: int = 1

    def tree(self) -> list[_Node]:
        """The merged tree: top-level nodes, each with its ranks and children."""
        roots: list[_Node] = []
        for rank in sorted(self.ranks):
            stack = self.ranks[rank]
            path = [_label(frame, self.sources) for frame in reversed(stack.frames) if is_users(frame)]
            level = roots
            for key in [*path, _leaf_key(stack)]:
                node = next((n for n in level if n.key == key), None)
                if node is None:
                    node = _Node(key)
                    level.append(node)
                node.ranks.append(rank)
                level = node.children
        return roots

    def text(self) -> str:
        lines = [self._summary()]
        for node in self.tree():
            lines += self._render(node, "", "")
        return "\n".join(lines)

    def _summary(self) -> str:
        counts: dict[str, int] = {}
        for stack in self.ranks.values():
            mode = _mode(stack.state) or ("read from outside" if stack.read == "signal" else "unknown")
            counts[mode] = counts.get(mode, 0) + 1
        parts = ", ".join(f"{count} {say(_MODES.get(mode, mode))}" for mode, count in counts.items())
        sampled = say(" (sampled {count} times)", count=self.samples) if self.samples > 1 else ""
        return say("{n} ranks: {parts}{sampled}", n=len(self.ranks), parts=parts, sampled=sampled)

    def _render(self, node: _Node, first: str, rest: str) -> list[str]:
        chain = [node]
        while len(chain[-1].children) == 1 and chain[-1].children[0].ranks == node.ranks:
            chain.append(chain[-1].children[0])
        labels = [self._text_of(n) for n in chain]
        lines = [f"{first}{format_ranks(node.ranks, word=True)}: {' → '.join(labels)}"]
        children = chain[-1].children
        for i, child in enumerate(children):
            last = i == len(children) - 1
            lines += self._render(child, rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "))
        return lines

    def _text_of(self, node: _Node) -> str:
        if node.key[0] != "leaf":
            return node.key[1]
        stacks = [self.ranks[rank] for rank in node.ranks]
        return _leaf_text(node.key, stacks)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        return f"<pre class='mpinb-stacks'>{html.escape(self.text())}</pre>"


_MODES = {"idle": "idle", "running": "running", "waiting": "waiting in MPI", "stopped": "stopped at a breakpoint",
          "read from outside": "read from outside", "unknown": "unknown"}


@dataclass
class _Node:
    key: tuple
    ranks: list[int] = field(default_factory=list)
    children: list[_Node] = field(default_factory=list)


def _label(frame: Frame, cells: dict[str, str]) -> tuple:
    """A frame as a branch of the tree says it; ``cells``: the names cells run under."""
    line = frame["line"]
    if frame["file"].startswith("<mpi-cell-") or frame["file"] in cells:
        text = (say("cell line {line}", line=line) if frame["function"] == "<module>"
                else say("{function}() line {line}", function=frame["function"], line=line))
    else:
        name = os.path.basename(frame["file"])
        text = (say("{file} line {line}", file=name, line=line) if frame["function"] == "<module>"
                else say("{function}() line {line} of {file}", function=frame["function"], line=line, file=name))
    code = re.sub(r"\s{2,}#.*$", "", frame.get("code", ""))  # a comment after the code is left out
    if code:
        text += f": {code if len(code) <= CODE_WIDTH else code[:CODE_WIDTH - 1] + '…'}"
    return ("frame", text)


def _mode(state: DebugState | None) -> str | None:
    return state["mode"] if state else None


def _leaf_key(stack: RankStack) -> tuple:
    state = stack.state
    mode = _mode(state)
    if state is not None and mode == "waiting" and "wait" in state:
        wait = state["wait"]
        return ("leaf", "waiting", wait["op"], wait["kind"])
    if mode in ("stopped", "idle"):
        return ("leaf", mode)
    inner = _innermost(stack.frames) if stack.frames else None
    library = "" if inner is None or is_users(inner) else f"{inner['function']} of {os.path.basename(inner['file'])}"
    if not stack.read:
        return ("leaf", "unread")
    return ("leaf", mode or "outside", library)


def _leaf_text(key: tuple, stacks: list[RankStack]) -> str:
    kind = key[1]
    if kind == "waiting":
        op, wait_kind = key[2], key[3]
        waits = [s.state["wait"] for s in stacks if s.state and "wait" in s.state]
        longest = max((s.taken_at - s.state["wait"]["since"] for s in stacks
                       if s.state and "wait" in s.state and "since" in s.state["wait"]), default=0.0)
        return say("waiting in {op} {peers}", op=op, peers=_peers(wait_kind, waits, [s.rank for s in stacks])) + (
            say(" for {seconds} s", seconds=f"{longest:.1f}") if longest >= 0.05 else "")
    if kind == "stopped":
        return say("stopped at a breakpoint")
    if kind == "idle":
        return say("idle")
    if kind == "unread":
        return stacks[0].why
    library = key[2]
    text = say("running") if kind == "running" else say("in a call that does not return to Python (read from outside)")
    if library:
        text += " " + say("in {place}", place=library)
    still = [s.still_for for s in stacks if s.still_for is not None]
    if still and len(still) == len(stacks):
        text += say(", has not moved for {seconds} s", seconds=f"{min(still):.1f}")
    elif still:
        text += say(", {ranks} have not moved", ranks=format_ranks([s.rank for s in stacks if s.still_for is not None],
                                                                    word=True))
    return text


def _peers(kind: str, waits: list, ranks: list[int]) -> str:
    """``from rank 3``; ``to rank r+1`` when every rank waits for its neighbour (a ring);
    ``from ranks 1, 5`` otherwise."""
    sending = kind == "send"
    peers = [w.get("peer") for w in waits]
    if kind not in ("send", "recv") or not peers or any(p is None for p in peers):
        if not waits:
            return ""
        on = {"window": "on window {comm}", "file": "on file {comm}"}.get(place_of(str(waits[0].get("comm"))),
                                                                            "on communicator {comm}")
        return say(on, comm=repr(waits[0].get("comm")))
    if len(set(peers)) == 1:
        return say("to rank {peer}" if sending else "from rank {peer}", peer=peers[0])
    members = waits[0].get("members") or []
    if members and len(ranks) == len(peers) > 2:
        size = len(members)
        offsets = {(peer - rank) % size for peer, rank in zip(peers, ranks)}
        if len(offsets) == 1:
            step = offsets.pop()
            step = step - size if step > size // 2 else step
            return say("to rank r{step}" if sending else "from rank r{step}", step=f"{step:+d}")
    return say("to {ranks}" if sending else "from {ranks}", ranks=format_ranks(sorted(set(peers)), word=True))


def sample(supervisor: Supervisor, ranks: list[int], sources: dict[str, str], samples: int = 1, interval: float = 0.5,
           history: dict[int, tuple[tuple, float]] | None = None) -> Stacks:
    """Stacks taken ``samples`` times, ``interval`` seconds apart: each rank's last, with how long
    it has been at that place (across calls too, through ``history``)."""
    history = {} if history is None else history
    stacks: dict[int, RankStack] = {}
    for i in range(samples):
        if i:
            time.sleep(interval)
        now = time.monotonic()
        stacks = collect(supervisor, ranks, sources)
        for rank, stack in stacks.items():
            position = stack.position()
            seen = history.get(rank)
            if seen is None or seen[0] != position:
                history[rank] = (position, now)
            elif _mode(stack.state) != "idle":
                stack.still_for = now - seen[1]
    return Stacks(stacks, sources, samples)
