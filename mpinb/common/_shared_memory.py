"""Large arrays between the notebook and ranks on the same host, through shared memory.

ipyparallel sends a pushed value to each rank through the controller: one serialized copy per
rank, each crossing two sockets. Between processes on one host, a file in ``/dev/shm`` (memory,
not disk) carries it instead: written once, then copied by each reader into its own memory, so
that once the transfer has ended ``/dev/shm`` holds nothing of it. A reader that kept the file
mapped would keep its pages counted against ``/dev/shm``, which MPI's own shared memory and other
programs need: with a small ``/dev/shm`` they would then die of SIGBUS. Used by both sides; the
notebook removes every file it or a rank wrote once the transfer has ended.
"""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING, TypedDict, TypeGuard

if TYPE_CHECKING:
    import numpy as np

SHARED_MEMORY = "/dev/shm"
SMALLEST = 1 << 20  # smaller arrays go through ipyparallel, whose overhead is then the cost


class SharedArray(TypedDict):
    """Where an array waits in shared memory, and how to read it back."""

    path: str
    dtype: object  # numpy's description of the dtype (numpy.lib.format.dtype_to_descr)
    shape: list[int]


def worth_sharing(value: object) -> TypeGuard[np.ndarray]:
    """Whether ``value`` is a large plain array (objects and small arrays go through ipyparallel)."""
    import sys

    numpy = sys.modules.get("numpy")  # an array exists only if numpy was imported
    # exactly an ndarray: a subclass (masked, matrix, record array) travels pickled, type and all
    return (numpy is not None and isinstance(value, numpy.ndarray) and type(value) is numpy.ndarray
            and value.nbytes >= SMALLEST and value.ndim > 0 and not value.dtype.hasobject
            and os.path.isdir(SHARED_MEMORY))


def write(array: np.ndarray) -> SharedArray:
    """``array`` in a new file in shared memory; ``OSError`` if it does not fit (the caller then
    sends it the usual way)."""
    path = os.path.join(SHARED_MEMORY, f"mpinb-{os.getpid()}-{uuid.uuid4().hex}")
    try:  # readable by this user only: /dev/shm is every user's
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
            handle.write(_contiguous(array).reshape(-1).view("u1").data)
    except BaseException:
        remove(path)
        raise
    import numpy as np

    dtype = np.lib.format.dtype_to_descr(array.dtype)  # a structured dtype keeps its fields
    return {"path": path, "dtype": dtype, "shape": list(array.shape)}


def read(shared: SharedArray) -> np.ndarray:
    """The whole array, read into this process's own memory: nothing of ``/dev/shm`` stays held
    by it once the file is removed."""
    import numpy as np

    dtype = np.lib.format.descr_to_dtype(shared["dtype"])  # type: ignore[arg-type]  # a str too
    array = np.empty(shared["shape"], dtype=dtype)
    if array.size:  # an empty part (fewer rows than ranks) has nothing to read
        room = array.reshape(-1).view("u1").data
        with open(shared["path"], "rb", buffering=0) as handle:
            done = 0
            while done < len(room):  # one read(2) returns at most about 2 GB
                got = handle.readinto(room[done:])
                if not got:
                    raise OSError(f"{shared['path']} holds {done} bytes, not the {len(room)} of the array")
                done += got
    return array


def remove_written_by(pids: list[int]) -> None:
    """Every file that these processes wrote (see :func:`write`), after a transfer that failed."""
    import glob

    for pid in pids:
        for path in glob.glob(os.path.join(SHARED_MEMORY, f"mpinb-{pid}-*")):
            remove(path)


def remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _contiguous(array: np.ndarray) -> np.ndarray:
    import numpy as np

    return array if array.flags.c_contiguous else np.ascontiguousarray(array)
