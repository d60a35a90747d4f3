"""Large arrays between the notebook and ranks on the same host, through shared memory.

ipyparallel sends a pushed value to each rank through the controller: one serialized copy per
rank, each crossing two sockets. Between processes on one host, a file in ``/dev/shm`` (memory,
not disk) carries it instead: written once, then mapped by each reader copy-on-write (no second
copy: readers share its pages until they write). Used by both sides; the notebook removes every
file it or a rank wrote once the transfer has ended (the mappings keep the memory alive).
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


def mapped(shared: SharedArray) -> np.ndarray:
    """The whole array without copying it: the file mapped copy-on-write, so its pages are shared
    with every other reader until one of them writes (then that page becomes the writer's own).
    The file may be removed at once; the memory lasts as long as the array."""
    import mmap

    import numpy as np

    dtype = np.lib.format.descr_to_dtype(shared["dtype"])  # type: ignore[arg-type]  # a str too
    if 0 in shared["shape"]:  # an empty part (fewer rows than ranks): nothing to map
        return np.empty(shared["shape"], dtype=dtype)
    with open(shared["path"], "rb") as handle:
        pages = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    return np.frombuffer(pages, dtype=dtype).reshape(shared["shape"])


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
