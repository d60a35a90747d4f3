"""Debugging from the notebook.

It covers ranks stopped at breakpoints during a run, post-mortem of a rank whose run failed, and
debugger commands routed to one rank, a group or every stopped rank.

The ranks run Python's own pdb (see ``mpinb.rank._debugger``); the notebook sends it commands on
the control channel and shows what it prints, grouped where ranks print the same. While any rank
is stopped the run's timeout does not run, and ranks that wait in MPI for a stopped rank are
shown as waiting for it, not as a deadlock.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._language import say
from ..common._protocol import DEBUG_KEY, WAIT_KEY, DebugState, WaitState
from ..common._ranges import format_ranks, parse_ranks
from . import _channel
from ._hang import describe_wait

if TYPE_CHECKING:
    from ._supervisor import Supervisor

COMMANDS_HELP = """\
Commands go to every stopped rank, or to the ranks before a colon: `2: p x`, `0-3: n`,
`@12: c` (the ranks stopped at line 12). They are pdb's: p EXPR, pp EXPR, n(ext), s(tep), c(ontinue),
r(eturn), unt(il), w(here), u(p), d(own), l(ist), a(rgs), any Python statement. Also:
  view        which ranks are stopped where, and which run
  stacks      every rank's stack, merged
  inspect E   the value of E on every stopped rank, side by side
  detach      continue, and let breakpoint() no longer stop in this run
  q           end the run (as the stop button does)"""
RESUMING = ("c", "cont", "continue", "n", "next", "s", "step", "r", "return", "unt", "until", "j", "jump", "detach")


def split_targets(line: str, size: int, stopped: dict[int, DebugState]) -> tuple[list[int] | None, str]:
    """``"0-3: p x"`` -> ``([0, 1, 2, 3], "p x")``; ``"@12: n"``: the ranks stopped at line 12;
    a line without a target -> ``(None, line)``."""
    head, colon, rest = line.partition(":")
    head = head.strip()
    if not colon or not head or " " in head or not (head[0].isdigit() or head[0] == "@"):
        return None, line.strip()
    if head.startswith("@"):
        if not head[1:].isdigit():
            raise ValueError(f"{head!r}: after @ comes a line number, as in @12: n")
        line_number = int(head[1:])
        ranks = [rank for rank, state in sorted(stopped.items()) if state["where"]["line"] == line_number]
        if not ranks:
            raise ValueError(f"no rank is stopped at line {line_number}")
        return ranks, rest.strip()
    return parse_ranks(head, size), rest.strip()


def grouped(outputs: dict[int, str]) -> str:
    """Each distinct output once, under the ranks that printed it."""
    groups: dict[str, list[int]] = {}
    for rank, text in sorted(outputs.items()):
        groups.setdefault(text.rstrip("\n"), []).append(rank)
    if len(groups) == 1:
        ((text, ranks),) = groups.items()
        return text if len(ranks) == 1 else f"[{format_ranks(ranks, word=True)}]\n{text}" if "\n" in text \
            else f"[{format_ranks(ranks, word=True)}] {text}"
    parts = []
    for text, ranks in groups.items():
        parts.append(f"[{format_ranks(ranks, word=True)}]" + ("\n" if "\n" in text else " ") + text)
    return "\n".join(parts)


class Breakpoints:
    """The ranks of a run in flight, as the debugger sees them: stopped where, or running (and
    waiting for whom). ``command`` sends a debugger command; ``view`` says where everyone is."""

    def __init__(self, supervisor: Supervisor, ranks: list[int], sources: dict[str, str]):
        self.supervisor = supervisor
        self.ranks = ranks
        self.sources = sources
        self.stopped: dict[int, DebugState] = {}
        self.waits: dict[int, WaitState] = {}
        self.done: set[int] = set()
        self.ever_stopped = False

    def update(self, published: list[dict], done: list[bool]) -> None:
        """Take what the ranks published on the status channel."""
        stopped, waits = {}, {}
        for rank, data, over in zip(self.ranks, published, done):
            if over:
                continue
            debug, wait = (data or {}).get(DEBUG_KEY), (data or {}).get(WAIT_KEY)
            if debug and debug.get("mode") == "stopped":
                stopped[rank] = debug
            elif wait:
                waits[rank] = wait
        self.stopped, self.waits = stopped, waits
        self.done = {rank for rank, over in zip(self.ranks, done) if over}
        self.ever_stopped = self.ever_stopped or bool(stopped)

    def command(self, line: str) -> str:
        """Send ``line`` (with its optional target, see :func:`split_targets`); what the ranks
        printed, grouped. Their new state arrives on the status channel."""
        ranks, command = split_targets(line, self.supervisor.settings.n, self.stopped)
        if ranks is None:
            ranks = sorted(self.stopped)
        running = [rank for rank in ranks if rank not in self.stopped]
        if running:
            raise ValueError(say("{ranks} not stopped at a breakpoint (running, waiting or done): debugger "
                                 "commands go to stopped ranks ({stopped})", ranks=format_ranks(running, word=True),
                                 stopped=format_ranks(sorted(self.stopped), word=True) or say("none")))
        if command == "detach":
            answers = _channel.ask(self.supervisor, ranks, "detach")
        else:
            answers = _channel.ask(self.supervisor, ranks, "command", {"line": command})
        outputs, problems = {}, []
        for rank, answer in answers.items():
            wrong = _channel.failure(answer)
            if wrong:
                problems.append(f"rank {rank}: {wrong}")
                continue
            outputs[rank] = answer.get("output", "")
            state = answer.get("state")
            if state and state.get("mode") == "stopped":
                self.stopped[rank] = state
            else:
                self.stopped.pop(rank, None)
        text = grouped({rank: out for rank, out in outputs.items() if out.strip()})
        return "\n".join(filter(None, [text, *problems]))

    def view(self) -> DebugView:
        """Where every rank of the run is now (asked on the control channel: what the ranks
        published may be a moment old)."""
        running = [rank for rank in self.ranks if rank not in self.done]
        for rank, answer in _channel.ask(self.supervisor, running, "state", timeout=1.0).items():
            state = answer.get("state")
            if not state:
                continue
            if state["mode"] == "stopped":
                self.stopped[rank] = state
                self.waits.pop(rank, None)
            elif state["mode"] == "idle":  # its part of the run is over
                self.done.add(rank)
                self.stopped.pop(rank, None)
                self.waits.pop(rank, None)
            else:
                self.stopped.pop(rank, None)
                if state["mode"] == "waiting" and "wait" in state:
                    self.waits[rank] = state["wait"]
                else:
                    self.waits.pop(rank, None)
        return DebugView(self.ranks, dict(self.stopped), dict(self.waits), sorted(self.done))


class DebugView:
    """Which ranks are stopped where (grouped by place), which wait in MPI (and for whom),
    which run, which are done."""

    def __init__(self, ranks: list[int], stopped: dict[int, DebugState], waits: dict[int, WaitState],
                 done: list[int]):
        self.ranks, self.stopped, self.waits, self.done = ranks, stopped, waits, done

    def lines(self) -> list[str]:
        places: dict[tuple, list[int]] = {}
        for rank, state in sorted(self.stopped.items()):
            where = state["where"]
            places.setdefault((where["file"], where["line"], where["function"], where["code"]), []).append(rank)
        lines = []
        for (file, line, function, code), ranks in places.items():
            place = say("line {line}", line=line) if file.startswith("<mpi-cell-") else f"{file}:{line}"
            if function not in ("<module>", ""):
                place += f" in {function}()"
            lines.append(say("{ranks} stopped at {place}: {code}", ranks=format_ranks(ranks, word=True),
                             place=place, code=code))
        stopped_at = {rank: state["where"]["line"] for rank, state in self.stopped.items()}
        for rank, wait in sorted(self.waits.items()):
            peer = wait.get("peer")
            text = describe_wait(wait)
            if peer in stopped_at:
                text += say(": waiting for rank {peer}, stopped at line {line}", peer=peer, line=stopped_at[peer])
            lines.append(f"rank {rank} {text}")
        running = [r for r in self.ranks if r not in self.stopped and r not in self.waits and r not in self.done]
        if running:
            lines.append(say("{ranks} running", ranks=format_ranks(running, word=True)))
        if self.done:
            lines.append(say("{ranks} done with this run", ranks=format_ranks(self.done, word=True)))
        return lines

    def __repr__(self) -> str:
        return "\n".join(self.lines())

    def _repr_html_(self) -> str:
        return "<pre class='mpinb-debug'>" + html.escape("\n".join(self.lines())) + "</pre>"


OnStop = Callable[[Breakpoints], None]


class Driver:
    """What the notebook does when ranks stop: the commands it was given first, then what the user
    types (``input()``, as pdb does); where nobody can type (a headless run), the ranks continue."""

    def __init__(self, debug: Sequence[str] | OnStop | None, ask: Callable[[str], str] = input,
                 show: Callable[[object], None] | None = None):
        self.callback = debug if callable(debug) else None
        self.script = [] if debug is None or callable(debug) else [str(line) for line in debug]
        self.ask, self.show = ask, show or shown
        self.shown: tuple | None = None

    def at_stop(self, breakpoints: Breakpoints, stacks: Callable[[], object], inspect: Callable[[str], object]) -> None:
        """Handle one moment at which some ranks are stopped: one command, or the callback."""
        if self.callback is not None:
            self.callback(breakpoints)
            return
        key = tuple(sorted((r, s["where"]["file"], s["where"]["line"]) for r, s in breakpoints.stopped.items()))
        if key != self.shown:
            self.show(breakpoints.view())
            self.shown = key
        if self.script:
            line = self.script.pop(0)
            self.show(f"(mpinb debug) {line}")
        else:
            try:
                line = self.ask("(mpinb debug) ")
            except KeyboardInterrupt:
                raise
            except Exception:  # noqa: BLE001 - no way to type here (StdinNotImplementedError, EOFError, OSError)
                self.show(say("{ranks} stopped at a breakpoint, but nobody can type commands here (a headless "
                              "run): they continue.", ranks=format_ranks(sorted(breakpoints.stopped), word=True)))
                line = "c"
        self.run(line.strip(), breakpoints, stacks, inspect)

    def run(self, line: str, breakpoints: Breakpoints, stacks: Callable[[], object],
            inspect: Callable[[str], object]) -> None:
        word = line.split(" ", 1)[0]
        if not line or word == "view":
            self.show(breakpoints.view())
        elif word in ("help", "h", "?") and line in ("help", "h", "?"):
            self.show(say(COMMANDS_HELP))
        elif word == "stacks":
            self.show(stacks())
        elif word == "inspect":
            expression = line[len("inspect"):].strip()
            self.show(inspect(expression) if expression else "inspect EXPR: an expression to evaluate")
        elif line in ("q", "quit", "exit"):
            raise KeyboardInterrupt(say("the run was ended from the debugger (q)"))
        else:
            try:
                said = breakpoints.command(line)
            except ValueError as err:
                said = str(err)
            if said:
                self.show(said)


class RankSession:
    """A debugger on one rank outside a run's breakpoints: post-mortem of the last run's failure,
    or the frames of a rank that is running (read only). ``command`` sends a pdb command."""

    def __init__(self, supervisor: Supervisor, rank: int):
        self.supervisor, self.rank = supervisor, rank
        answer = _channel.ask(supervisor, [rank], "command", {"line": ""})[rank]
        wrong = _channel.failure(answer)
        if wrong:
            raise LookupError(f"rank {rank}: {wrong}")
        self.kind = answer.get("session", "")
        self.opening = answer.get("output", "")

    def command(self, line: str) -> str:
        answer = _channel.ask(self.supervisor, [self.rank], "command", {"line": line})[self.rank]
        wrong = _channel.failure(answer)
        if wrong:
            raise RuntimeError(f"rank {self.rank}: {wrong}")
        return answer.get("output", "")

    def interact(self, ask: Callable[[str], str] = input, show: Callable[[object], None] = print,
                 commands: Sequence[str] = ()) -> None:
        """Type commands as in IPython's ``%debug`` (``q`` or ``c`` leaves)."""
        show(say("rank {rank}, {kind}:", rank=self.rank, kind=self.kind) + "\n" + self.opening.rstrip())
        script = list(commands)
        while True:
            if script:
                line = script.pop(0)
                show(f"(rank {self.rank} pdb) {line}")
            else:
                try:
                    line = ask(f"(rank {self.rank} pdb) ")
                except (EOFError, OSError):
                    return
                except Exception:  # noqa: BLE001 - a kernel that cannot ask (StdinNotImplementedError)
                    return
            said = self.command(line)
            if said.strip():
                show(said.rstrip())
            if line.strip() in ("q", "quit", "exit", "c", "cont", "continue"):
                return


def shown(what: object) -> None:
    """Print text; in IPython, display views (their HTML in a notebook)."""
    if not isinstance(what, str):
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            pass
        else:
            if get_ipython() is not None:
                display(what)
                return
    print(what)


def first_failing_rank(result: Any) -> int:
    """The rank a post-mortem opens by default: the first whose own code failed in the last run."""
    if result is None or not result.errors:
        raise LookupError(say("the last run did not fail on any rank: nothing to debug post-mortem "
                              "(name a rank to look into a running one)"))
    failed = result.failed_ranks() or sorted(result.errors)
    return failed[0]
