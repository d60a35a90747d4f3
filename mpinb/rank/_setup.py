"""What each rank does once, when the pool starts: its namespace and its MPI settings."""

from __future__ import annotations

import collections
import functools
import importlib.util
import operator
import os
import socket
import sys

from ..common._protocol import Hello
from ..common._protocol import hello as hello_message

_ready = False
_failure: str | None = None  # the traceback of a failed start-up, for the pool to show


def init() -> None:
    """Fill the user's namespace with ``MPI, comm, rank, size, np`` (run by the engine at start-up).

    A failure is kept for :func:`hello`: ipyparallel only logs a failed start-up command."""
    global _failure
    try:
        _init()
    except BaseException:
        import traceback

        _failure = traceback.format_exc()
        raise


def _init() -> None:
    global _ready
    from IPython import get_ipython
    from mpi4py import MPI

    from .mpi._tracing import install

    _mpi4py_first_among_modules()

    world = MPI.COMM_WORLD
    from ._deathwatch import report_abort, report_for_duty
    from .mpi._traced import announce_aborts_with

    report_for_duty(world.Get_rank())
    announce_aborts_with(report_abort)
    from ._after_abort import write_stack_on_request

    write_stack_on_request(world.Get_rank())
    shell = get_ipython()
    namespace = shell.user_ns
    from ._output import count_displays

    count_displays(shell.display_pub)
    namespace.update(MPI=MPI, comm=world, rank=world.Get_rank(), size=world.Get_size(), np=_lazy("numpy"))
    install(namespace)
    # The pool owns MPI's lifetime: a script's MPI.Finalize() must not break the next cell.
    MPI.Finalize = _finalize_is_owned_by_the_pool
    from ._execute import install_interrupt_handler

    install_interrupt_handler()
    # ipykernel puts Python's own handler in place around every request it handles, so that an
    # interrupt would break mpinb's requests (a fresh world, data moves) half-way on some ranks
    # only; ours raises in user code only, everywhere.
    kernel = shell.kernel
    kernel.pre_handler_hook, kernel.post_handler_hook = install_interrupt_handler, _nothing
    from ._debugger import install as serve_the_debugger

    serve_the_debugger(kernel)
    from ..common import _progress
    from .mpi._waiting import publish_data

    _progress.publish_through(publish_data, world.Get_size())
    _ready = True


def _mpi4py_first_among_modules() -> None:
    """Move mpi4py's modules to the front of ``sys.modules``, ahead of the engine's own.

    Pickle names the module of an object without ``__module__`` (a named datatype, ``MPI.INT``,
    pickles as ``'INT'``) by scanning ``sys.modules`` in order. A rank imports some 600 modules
    (IPython, ipyparallel, zmq) before mpi4py's, a script under mpiexec some 70: pickling four
    handles took 13 times as long in a pool, and test_datatype of mpi4py's suite 3 times.

    The engine's threads run meanwhile, and may import: the dict (the same object, which the
    import system holds) is refilled by C calls with no bytecode between them, where alone the
    interpreter switches threads or runs signal handlers, so no thread sees it part-filled and
    no module imported meanwhile is lost."""
    modules = sys.modules
    ordered = dict.fromkeys(name for name in list(modules) if name.partition(".")[0] == "mpi4py")
    steps = (functools.partial(ordered.update, modules), modules.clear, functools.partial(modules.update, ordered))
    collections.deque(map(operator.methodcaller("__call__"), steps), maxlen=0)


def _nothing() -> None:
    """After a request: our interrupt handler stays."""


def _lazy(name: str):
    """``name``'s module, loaded on first use: numpy's import would cost every rank 0.1 s of
    start-up, on cores that the other ranks are starting on too. Any `import numpy` loads it."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def _finalize_is_owned_by_the_pool() -> None:
    """MPI.Finalize() inside the pool: MPI ends when the pool stops, not before."""


def hello() -> Hello:
    """Who this rank is; the pool calls it once to check every rank came up with the right world."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    return hello_message(ready=_ready, failure=_failure, rank=world.Get_rank(), size=world.Get_size(),
                         host=socket.gethostname(), pid=os.getpid(),
                         mpi=MPI.Get_library_version().strip().splitlines()[0], tracer=_tracer_in_use())


def _tracer_in_use() -> str:
    from .mpi import _native

    return "C" if _native.tracer is not None else f"python: {_native.reason}"
