"""The messages between the ranks and the notebook, defined once for both sides.

Each rank answers the pool's requests with plain dicts (they pickle cheaply and need no mpinb class
to unpickle); these ``TypedDict`` types name their keys, and the functions at the end build the
ones that more than one place makes or that carry many keys (``reply``, ``failure``, ``hello``,
``wait_state``). Like :mod:`mpinb.common._events`, importing this module imports nothing else.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Literal, TypedDict

if TYPE_CHECKING:  # only named in annotations, which are never evaluated here (Python 3.10 too)
    if sys.version_info >= (3, 11):
        from typing import NotRequired
    else:
        from typing_extensions import NotRequired

# The environment variable that gives each local rank the address of the pool's death watch.
DEATHWATCH_ENVIRONMENT = "MPINB_DEATHWATCH"
# The environment variable naming the host where a local pool's ranks must run (the notebook's):
# a rank that finds itself elsewhere exits at once, saying so (see mpinb/rank/_engine_main.py).
EXPECTED_HOST_ENVIRONMENT = "MPINB_EXPECTED_HOST"
# The key under which a blocked rank publishes its wait on ipyparallel's data channel.
WAIT_KEY = "mpinb_wait"
# What a rank sends through the relay in place of a reply too large for it (a pickle never
# looks like this): the notebook then fetches the reply from the rank (see mpinb.rank._relay).
KEPT_REPLY = b"mpinb: kept on its rank"
# The key under which a rank of a relayed run says that its part is over (see mpinb.rank._relay).
DONE_KEY = "mpinb_done"

# The environment variable naming the folder where each rank writes its Python stack when it gets
# STACK_SIGNAL (see mpinb.rank._after_abort): read when a rank does not return from a call.
STACKS_ENVIRONMENT = "MPINB_STACKS"
STACK_SIGNAL = "SIGUSR2"

# The key under which a rank publishes that it stopped at a breakpoint, or runs on (see
# mpinb.rank._debugger), and the control-channel messages of the debugger.
DEBUG_KEY = "mpinb_debug"
DEBUG_REQUEST = "mpinb_debug_request"
DEBUG_REPLY = "mpinb_debug_reply"
DEBUG_ANSWER_WITHIN = 3.0  # the notebook's wait for a rank's debugger to answer
DEBUG_COMPUTE_WITHIN = 60.0  # and for one that answers to compute (a digest of a large array)

# The key prefix under which a rank publishes the state of one progress bar ("mpinb_progress:0").
PROGRESS_KEY = "mpinb_progress"

WaitKind = Literal["send", "recv", "collective", "wait"]


class RelayKeys(TypedDict):
    """The CurveZMQ keys (Z85) of an encrypted relay of runs: rank 0's pair, and one pair for
    every other rank, the only one that rank 0 lets in. Each side gets the secret of its own pair
    only (``b""`` in place of the other's), through ipyparallel's encrypted channel."""

    hub_public: bytes
    hub_secret: bytes
    member_public: bytes
    member_secret: bytes


def relay_keys() -> tuple[RelayKeys, RelayKeys]:
    """New keys of an encrypted relay: what rank 0 gets, what the other ranks get."""
    import zmq

    hub_public, hub_secret = zmq.curve_keypair()
    member_public, member_secret = zmq.curve_keypair()
    return (RelayKeys(hub_public=hub_public, hub_secret=hub_secret, member_public=member_public, member_secret=b""),
            RelayKeys(hub_public=hub_public, hub_secret=b"", member_public=member_public, member_secret=member_secret))


class Limits(TypedDict):
    """What the pool asks of one run: output caps, tracing, and breakpoints set from outside the
    code (JupyterLab's gutter: file -> lines)."""

    max_lines: int
    max_chars: int
    trace: bool
    trace_capacity: int
    verify: NotRequired[bool]  # correctness checks beyond the cheap ones (see mpinb.rank.mpi._verify)
    breakpoints: NotRequired[dict[str, list[int]]]


class WaitState(TypedDict):
    """What a rank blocked in MPI waits for; published while it waits, kept with an interrupt."""

    op: str
    kind: WaitKind
    comm: str | None
    members: list[int] | None  # the communicator's world ranks, when known
    peer: int | None  # world rank
    any_source: bool
    tag: int
    bytes: int
    root: int | None  # world rank
    file: str
    line: int
    via: NotRequired[str]  # "wait": the wait on a request, not the call that started it
    # a receive's: the first message waiting for it from its source (any source: from any rank)
    # under another tag, which it will never match: {"source": world rank, "tag", "bytes"}
    unmatched: NotRequired[dict[str, int]]
    since: NotRequired[float]  # time.time() when the wait began
    waited: NotRequired[float]  # seconds, added by the notebook


class Failure(TypedDict):
    """An exception raised by user code on one rank (becomes a :class:`mpinb.RankFailure`)."""

    type: str
    message: str
    traceback: str
    line: int | None
    file: str
    waiting: NotRequired[WaitState | None]


class Recording(TypedDict):
    """One rank's recorded MPI calls (see :mod:`mpinb.common._events` for each event's fields)."""

    events: list[tuple]
    dropped: int
    comms: dict[str, list[int]]
    began: float
    ended: float
    offset: float
    checks: NotRequired[list[tuple]]  # a --verify run's notes: (start, kind, check, *what)
    left: NotRequired[list[tuple]]  # what a run that ended without error left (see mpinb.rank.mpi._left_behind)
    via: NotRequired[dict[tuple[str, int], tuple[str, int]]]  # a user's line -> the library line behind its call
    neighbors: NotRequired[dict[str, list[int]]]  # a topology's id -> this rank's out-neighbours (world ranks)
    remote: NotRequired[dict[str, list[int]]]  # an intercommunicator's id -> its remote group (world ranks)
    files: NotRequired[dict[str, str]]  # a file's id -> its name as opened
    # on a spawn's root: its children's recordings, by provisional lane (see mpinb.rank.mpi._spawn)
    spawned: NotRequired[dict[int, Recording]]
    spawned_running: NotRequired[int]  # its children still connected when the run ended: not recorded


class Reply(TypedDict):
    """A rank's answer to ``run_cell``/``run_file``."""

    has_value: bool
    value: bytes | None  # see mpinb.common._values.pack
    repr: str
    why: str
    error: Failure | None
    trace: Recording | None
    dropped_lines: int
    elapsed: float
    wrote: bool  # sent output to the notebook's output channel (the notebook then waits for it)
    stdout: NotRequired[str]  # a relayed rank's output of a quick part, held back and sent here
    stderr: NotRequired[str]
    progress: NotRequired[dict[str, Progress]]  # each mpinb.progress loop's last state
    held: NotRequired[int]  # MPI requests that interrupts left pending, whose buffers stay (rank.mpi._waiting.abandon)


class Progress(TypedDict):
    """One rank's state of one :func:`mpinb.progress` loop, published a few times a second."""

    bar: int  # the loop's number within the run: the k-th progress() of every rank is one bar
    desc: str | None
    n: int  # iterations done
    total: int | None
    elapsed: float  # seconds since the loop began
    done: bool  # the loop went through all its items
    ended: bool  # the loop is over: done, or left early (break, an exception, an interrupt)


class Frame(TypedDict):
    """One frame of a rank's Python stack."""

    file: str
    line: int
    function: str
    code: str  # the source line, when the rank has it


DebugMode = Literal["idle", "running", "waiting", "stopped"]


class DebugState(TypedDict):
    """What a rank is doing, for the debugger: idle between runs (``failure``: it keeps the last
    run's traceback for post-mortem), running user code, waiting in a traced MPI call (``wait``),
    or stopped at a breakpoint (``where``: the frame it stopped in)."""

    mode: DebugMode
    failure: NotRequired[bool]
    wait: NotRequired[WaitState]
    where: NotRequired[Frame]
    since: NotRequired[float]  # time.time() when it stopped


class Done(TypedDict):
    """Published by a rank of a relayed run when its part is over and the notebook must know
    before the whole run's reply: it failed, it wrote output, or the others are still busy."""

    error: bool


class Settled(TypedDict):
    """A rank's answer, once idle, after an aborted run: what the pool needs to know to agree on a
    fresh world with every rank (see :mod:`mpinb.pool._recover`)."""

    generation: int  # the fresh worlds this rank has moved to
    own_started: int  # mpinb's own collectives started and completed on its copy of the world
    own_completed: int
    held: int  # MPI requests that interrupts left pending, whose buffers stay (rank.mpi._waiting.abandon)


class Hello(TypedDict):
    """A rank's answer when the pool starts: who it is, and whether it initialised."""

    ready: bool
    failure: str | None
    rank: int
    size: int
    host: str
    pid: int
    mpi: str
    tracer: str  # "C", or why traced calls run in Python on this rank ("python: ...")


def failure(type: str, message: str, traceback: str, *, line: int | None = None, file: str = "") -> Failure:
    """The one constructor of :class:`Failure`: ``type`` is the exception's qualified name."""
    return {"type": type, "message": message, "traceback": traceback, "line": line, "file": file}


def reply(error: Failure | None = None) -> Reply:
    """The one constructor of :class:`Reply`: a run that returned no value and recorded nothing,
    failed with ``error`` if given; a run fills in the rest as it goes."""
    return {"value": None, "repr": "", "why": "", "has_value": False, "error": error, "trace": None,
            "dropped_lines": 0, "elapsed": 0.0, "wrote": False}


def hello(*, ready: bool, failure: str | None, rank: int, size: int, host: str, pid: int, mpi: str,
          tracer: str) -> Hello:
    """The one constructor of :class:`Hello`."""
    return {"ready": ready, "failure": failure, "rank": rank, "size": size, "host": host, "pid": pid, "mpi": mpi,
            "tracer": tracer}


def wait_state(op: str, kind: WaitKind, where: tuple[str, int], *, comm: str | None = None,
               members: list[int] | None = None, peer: int | None = None, any_source: bool = False,
               tag: int = -1, nbytes: int = 0, root: int | None = None,
               unmatched: dict[str, int] | None = None) -> WaitState:
    """The one constructor of :class:`WaitState`; ``where`` is the user's (file, line)."""
    state: WaitState = {"op": op, "kind": kind, "comm": comm, "members": members, "peer": peer,
                        "any_source": any_source, "tag": tag, "bytes": nbytes, "root": root,
                        "file": where[0], "line": where[1]}
    if unmatched is not None:
        state["unmatched"] = unmatched
    return state
