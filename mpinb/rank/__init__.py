"""Code that runs inside each MPI rank of the pool (an ipyparallel engine).

The notebook names these functions (ipyparallel sends them by reference) but never runs them, and
importing this package imports nothing else: mpi4py's import initializes MPI, which the notebook
process must never do (a singleton MPI_Init inside a Slurm allocation, or under Open MPI, hangs or
leaves daemons behind).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..common._protocol import Hello, Limits, RelayKeys, Reply, Settled
    from ..common._shared_memory import SharedArray

__all__ = ["complete", "fresh_world", "hello", "hub_ready", "init", "inspect_name", "join", "offer", "open_hub",
           "relay", "release_blocked", "run_cell", "run_file", "settle", "spread", "take", "take_kept"]


def init() -> None:
    """Set up this rank when the pool starts (see :func:`._setup.init`)."""
    from ._setup import init

    init()


def hello() -> Hello:
    """Who this rank is (see :func:`._setup.hello`)."""
    from ._setup import hello

    return hello()


def settle(skip_through: int) -> Settled:
    """After an aborted run: this rank's state, once it is idle (see :func:`._after_abort.settle`)."""
    from ._after_abort import settle

    return settle(skip_through)


def release_blocked() -> int:
    """After an aborted run, on a rank that is idle: release members blocked in a call that it
    never made (see :func:`._after_abort.release_blocked`)."""
    from ._after_abort import release_blocked

    return release_blocked()


def fresh_world(generation: int, timeout: float) -> str | None:
    """After an aborted run: move to a fresh world with every rank (see :func:`._after_abort.fresh_world`)."""
    from ._after_abort import fresh_world

    return fresh_world(generation, timeout)


def run_cell(source: str, filename: str, limits: Limits) -> Reply:
    """Run a cell on this rank (see :func:`._execute.run_cell`)."""
    from ._execute import run_cell

    return run_cell(source, filename, limits)


def run_file(path: str, args: list[str], stdin: str | None, cwd: str, limits: Limits) -> Reply:
    """Run a script on this rank as mpiexec would (see :func:`._execute.run_file`)."""
    from ._execute import run_file

    return run_file(path, args, stdin, cwd, limits)


def open_hub(where: str, key: bytes | None = None, curve: RelayKeys | None = None) -> tuple[str, str]:
    """On rank 0: open the relay of runs (see :mod:`._relay`)."""
    from ._relay import open_hub

    return open_hub(where, key, curve)


def join(addresses: tuple[str, str], key: bytes | None = None, curve: RelayKeys | None = None) -> None:
    """On the other ranks: follow rank 0's relay (see :mod:`._relay`)."""
    from ._relay import join

    join(addresses, key, curve)


def take_kept(cell: int) -> bytes:
    """A rank's reply that was too large to relay (see :func:`._relay.take_kept`)."""
    from ._relay import take_kept

    return take_kept(cell)


def hub_ready(ranks: list[int], timeout: float) -> list[int]:
    """On rank 0: the ranks that follow the relay, once all do or ``timeout`` passed."""
    from ._relay import hub_ready

    return hub_ready(ranks, timeout)


def relay(call: str, args: tuple, ranks: list[int], cell: int) -> list[Reply | bytes | None]:
    """On rank 0: run ``call`` on ``ranks`` through the relay (see :func:`._relay.relay`)."""
    from ._relay import relay

    return relay(call, args, ranks, cell)


def spread(name: str, staged: str) -> None:
    """Every rank gets rank 0's ``staged`` array as ``name``, through MPI (see :mod:`._spread`)."""
    from ._spread import spread

    spread(name, staged)


def take(name: str, shared: SharedArray) -> None:
    """Set ``name`` to an array the notebook put in shared memory (see :mod:`mpinb.common._shared_memory`)."""
    from IPython import get_ipython

    from ..common._shared_memory import read

    get_ipython().user_ns[name] = read(shared)


def offer(name: str, share: bool = True) -> tuple[str, object]:
    """``("shared", where)`` for a large array, put in shared memory for the notebook to read
    (when ``share``: the notebook runs on this host); ``("value", value)`` for anything else,
    sent the usual way; ``("absent", None)`` when this rank has no variable ``name``."""
    from IPython import get_ipython

    from ..common._shared_memory import worth_sharing, write

    namespace = get_ipython().user_ns
    if name not in namespace:
        return "absent", None
    value = namespace[name]
    if share and worth_sharing(value):
        try:
            return "shared", write(value)
        except OSError:  # shared memory full: the usual way
            pass
    return "value", value


def complete(line: str, cursor: int) -> tuple[str, list[str]]:
    """The MPI kernel's Tab on this rank's namespace (see :func:`._introspect.complete`)."""
    from ._introspect import complete

    return complete(line, cursor)


def inspect_name(name: str, detail_level: int) -> dict | None:
    """The MPI kernel's Shift-Tab on this rank's namespace (see :func:`._introspect.inspect`)."""
    from ._introspect import inspect

    return inspect(name, detail_level)
