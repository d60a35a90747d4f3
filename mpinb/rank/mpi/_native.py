"""The C tracer on this rank (``_tracer.c``): loading it, and the Python it hands slow waits to.

The traced communicators' hottest calls (``Send``, ``Recv``, ``send``, ``recv`` and the buffer
collectives) are C method descriptors when the C tracer loads; each keeps the Python tracer's
method as its ``fallback`` for every form of the call that the C path does not take. Where it
cannot load (no MPI compiler, ``MPINB_TRACER=python``), the Python tracer does everything and
:data:`reason` says why, for the notebook to tell the user.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from types import ModuleType

from mpi4py import MPI

from ...common import _tracer_build
from . import _objects, _p2p
from ._calls import LIBRARY_ROOTS, describer
from ._collectives import BLOCKING_AFTER_AGREEMENT, ROOTS_UPPER, agreed_code, agreement_channel, disagreed, rehearse
from ._recorder import RECORDER
from ._waiting import POLLS_BEFORE_YIELD, SPIN_SECONDS, abandon
from ._waiting import wait as _poll
from ._waiting import wait_request as _poll_request

tracer: ModuleType | None = None
reason = ""  # why the C tracer is not in use, when it is not


def load() -> ModuleType | None:
    """The C tracer for this rank's MPI, built on first use; ``None`` (and :data:`reason`) if not."""
    global tracer, reason
    if tracer is not None:
        return tracer
    if os.environ.get("MPINB_TRACER", "c").lower() == "python":
        reason = "MPINB_TRACER=python asks for the Python tracer"
        return None
    try:
        path = _tracer_build.build()
        loader = importlib.machinery.ExtensionFileLoader(_tracer_build.MODULE, path)
        spec = importlib.util.spec_from_file_location(_tracer_build.MODULE, path, loader=loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except (_tracer_build.BuildError, ImportError, OSError) as err:
        reason = str(err)
        return None
    vendor = MPI.get_vendor()[0]
    if module.MPI_VENDOR not in (vendor, "unknown"):
        reason = (f"the MPI compiler {_tracer_build.mpicc()} builds for {module.MPI_VENDOR}, but mpi4py runs "
                  f"{vendor}: set MPINB_MPICC to {vendor}'s mpicc")
        return None
    module.configure(exception=MPI.Exception, pickle=MPI.pickle, typedict=MPI._typedict, finish=finish,
                     receive_object=receive_object, spin=SPIN_SECONDS, polls_before_yield=POLLS_BEFORE_YIELD,
                     whole_on_arrival=_objects.WHOLE_ON_ARRIVAL, agreement=agreement_channel,
                     finish_round=finish_round, disagreed=disagreed, rehearse=rehearse,
                     library_roots=LIBRARY_ROOTS, via=RECORDER.via)
    tracer = module
    return module


def finish(request, status, held, comm, op: str, kind, peer: int, tag: int, size: int, file: str, line: int,
           cancel: int) -> None:
    """A C call's request still pending after its spin: the polled wait (interruptible, described
    to the notebook) from here; ``held`` keeps the buffer alive if the wait is broken off."""
    collective = kind == "collective"
    describe = describer(comm, op, kind, None if collective else peer, tag, size, (file, line),
                          root=peer if collective and peer >= 0 else None)
    _poll_request(request, status, describe, cancel=bool(cancel), keep=held)


def finish_round(receive, send, held, comm, op: str, root: int, file: str, line: int) -> None:
    """A round of a C agreement still pending after its spin: polled from here, as
    ``_collectives.agree`` polls its rounds; ``held`` keeps both messages if it is broken off."""
    pair = [receive, send]
    describe = describer(comm, op, "collective", None, -1, 0, (file, line), root=root if root >= 0 else None)
    try:
        _poll(lambda: MPI.Request.Testall(pair), describe)
    except BaseException:
        abandon(receive, True, held)
        abandon(send, False, held)
        raise


def receive_object(comm, op: str, source: int, tag: int, status, file: str, line: int):
    """A C ``recv`` whose message has not come within the spin: the Python tracer's polled
    receive from here (a matched probe, then that very message)."""
    describe = (_p2p._describe_receive, (comm, op, source, tag, None, (file, line)))
    return _p2p._receive_object(comm, None, source, tag, status, describe)


_POINT_TO_POINT = {"Send": "send", "Recv": "recv", "send": "send_object", "recv": "recv_object"}


def methods(python: dict) -> dict:
    """The C methods that stand in for ``python``'s (name -> the Python tracer's method), or {}."""
    module = load()
    if module is None:
        return {}
    made = {name: module.method(name, action, python[name]) for name, action in _POINT_TO_POINT.items()}
    for name, root_at in ROOTS_UPPER.items():
        if name == "Barrier":  # a barrier is the members' agreement itself, in Python
            continue
        polled = getattr(MPI.Intracomm, "I" + name[0].lower() + name[1:])
        blocking = name in BLOCKING_AFTER_AGREEMENT
        made[name] = module.method(name, "collective", python[name], polled=polled,
                                   root_at=-1 if root_at is None else root_at, bcast=name == "Bcast",
                                   blocking=getattr(MPI.Intracomm, name) if blocking else None,
                                   agreed_code=agreed_code(name) if blocking else -1,
                                   speculative=name == "Allreduce")
    return made

