"""The start of a Python program spawned from a traced run (see ``_spawn``).

It traces the program, then runs it as ``python`` would have.

    python [options] -m mpinb.rank.mpi._spawned SPEC -- script [args] | -m module [args] | -c code [args]

``SPEC`` (JSON, from the spawn's root) names the spawn, its provisional lanes, the parents' world
ranks and the folder for the recording. The program finds ``MPI.Comm.Get_parent()`` traced, and
its recording is left when it disconnects from its parents or, failing that, when it ends.
"""

from __future__ import annotations

import atexit
import builtins
import json
import os
import runpy
import sys
import types
from typing import Any


class _GetParent:
    """``MPI.Comm.Get_parent``, answered with the traced twin of the parent intercommunicator."""

    def __init__(self, twin: Any):
        self.twin = twin

    def __get__(self, obj, owner=None):
        return lambda: self.twin


def _stand_in_comm(twin: Any) -> type:
    from mpi4py import MPI

    from ._calls import StandIn

    return StandIn("Comm", (MPI.Comm,), {
        "_mpinb_stands_in": True, "_mpinb_plain": MPI.Comm, "Get_parent": _GetParent(twin),
        "__module__": "mpi4py.MPI", "__doc__": MPI.Comm.__doc__,
    })


def start(spec: dict) -> None:
    """Trace this process (collective with its parents: they wait for the private copy)."""
    # Imported here, not at the top: importing them starts MPI and loads the C tracer, which only
    # a spawned program's start should do (``run`` is used without them).
    from mpi4py import MPI

    from . import _calls

    _calls.count_lanes_from(spec["base"])  # before any of mpinb's code counts world ranks
    from . import _intercomms, _spawn, _tracing

    parent = _tracing.install_spawned(spec)
    rank = MPI.COMM_WORLD.Get_rank()

    def leave() -> None:
        _spawn.leave_recording(spec["folder"], rank)

    _intercomms.before_disconnect[parent._mpinb_id] = leave
    atexit.register(leave)  # after the program, before mpi4py finalizes MPI (registered earlier)
    MPI.Comm = _stand_in_comm(parent)  # type: ignore[misc,assignment]  # on purpose, as for MPI.Request


def run(program: list[str]) -> None:
    """Run ``program`` (what followed Python's options) as ``python`` runs it: in a ``__main__``
    module of its own, which stays after it (as for atexit handlers and pickles of its classes)."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    if program[0] == "-m":
        sys.argv = [program[1], *program[2:]]
        sys.path[0] = os.getcwd()
        runpy._run_module_as_main(program[1], alter_argv=True)  # type: ignore[attr-defined]  # python -m's own
    elif program[0] == "-c":
        sys.argv = ["-c", *program[2:]]
        sys.path[0] = ""
        exec(compile(program[1], "<string>", "exec"), main.__dict__)  # what python -c does
    else:
        path = program[0]
        try:
            with open(path, "rb") as file:
                source = file.read()
        except OSError as err:  # as python says it
            print(f"{sys.executable}: can't open file {os.path.abspath(path)!r}: [Errno {err.errno}] "
                  f"{err.strerror}", file=sys.stderr)
            raise SystemExit(2) from None
        sys.argv = list(program)
        sys.path[0] = os.path.dirname(os.path.abspath(path))
        main.__file__ = path
        exec(compile(source, path, "exec"), main.__dict__)


def main(argv: list[str]) -> None:
    spec = json.loads(argv[0])
    if argv[1:2] != ["--"] or not argv[2:]:
        raise SystemExit(f"usage: python -m {__spec__.name if __spec__ else 'mpinb.rank.mpi._spawned'} SPEC -- program")
    start(spec)
    run(argv[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
