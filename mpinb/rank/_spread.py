"""A large array pushed to ranks on several hosts.

It crosses the network to rank 0 once, then reaches the other ranks through MPI's broadcast on
mpinb's own communicator (a tree inside MPI, so the cost grows with log(ranks), where one copy per
rank through the controller grows with the ranks)."""

from __future__ import annotations

import pickle

from mpi4py import MPI


def spread(name: str, staged: str) -> None:
    """On every rank of the pool (collective): ``name`` becomes the array that rank 0 holds as
    ``staged`` (which is removed)."""
    import numpy as np
    from IPython import get_ipython

    from .mpi._tracing import complete_own
    from .mpi._world import housekeeping

    comm = housekeeping()
    namespace = get_ipython().user_ns
    array = np.ascontiguousarray(namespace.pop(staged)) if comm.Get_rank() == 0 else None
    layout = pickle.dumps((np.lib.format.dtype_to_descr(array.dtype), array.shape)) if array is not None else b""
    length = np.array([len(layout)], dtype=np.int64)
    complete_own(comm.Ibcast([length, MPI.INT64_T], root=0))
    received = bytearray(layout) if layout else bytearray(int(length[0]))
    complete_own(comm.Ibcast([received, MPI.BYTE], root=0))
    if array is None:
        descr, shape = pickle.loads(received)
        array = np.empty(shape, dtype=np.lib.format.descr_to_dtype(descr))
    complete_own(comm.Ibcast([array.reshape(-1).view("u1"), MPI.BYTE], root=0))
    namespace[name] = array
