"""Summing gradients across ranks, three ways.

The three are a ring allreduce written with Sendrecv, one Allreduce per tensor, and bucketed (fused)
Allreduces, the idea behind Horovod's tensor fusion and DDP buckets."""

from __future__ import annotations

import numpy as np


def ring_allreduce(comm, x: np.ndarray) -> np.ndarray:
    """The sum of ``x`` over ``comm``, by reduce-scatter then all-gather around a ring.

    Each rank sends 2(p-1) messages of about n/p elements: 2(p-1)/p of the data, whatever p is.
    """
    p, r = comm.Get_size(), comm.Get_rank()
    chunks = [c.copy() for c in np.array_split(np.asarray(x, dtype=np.float64).ravel(), p)]
    if p == 1:
        return np.concatenate(chunks).reshape(np.shape(x))
    right, left = (r + 1) % p, (r - 1) % p
    for step in range(p - 1):  # reduce-scatter: rank r ends with the total of chunk (r + 1) % p
        send, recv = (r - step) % p, (r - step - 1) % p
        incoming = np.empty_like(chunks[recv])
        comm.Sendrecv(chunks[send], dest=right, recvbuf=incoming, source=left)
        chunks[recv] += incoming
    for step in range(p - 1):  # all-gather: the totals travel once around the ring
        send, recv = (r + 1 - step) % p, (r - step) % p
        comm.Sendrecv(chunks[send], dest=right, recvbuf=chunks[recv], source=left)
    return np.concatenate(chunks).reshape(np.shape(x))


def per_tensor_allreduce(comm, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """One ``Allreduce`` per array (per layer's weight and bias): many small messages."""
    from mpi4py import MPI

    summed = []
    for array in arrays:
        out = np.empty_like(array)
        comm.Allreduce(array, out, op=MPI.SUM)
        summed.append(out)
    return summed


def bucketed_allreduce(comm, arrays: list[np.ndarray], bucket_bytes: int) -> list[np.ndarray]:
    """Arrays packed into flat buffers of at most ``bucket_bytes`` (at least one array each), one
    ``Allreduce`` per buffer: fewer, larger messages pay the per-message latency fewer times."""
    from mpi4py import MPI

    summed: list[np.ndarray] = [np.empty(0)] * len(arrays)
    for bucket in _buckets([a.nbytes for a in arrays], bucket_bytes):
        flat = np.concatenate([arrays[i].ravel() for i in bucket])
        comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
        offset = 0
        for i in bucket:
            summed[i] = flat[offset:offset + arrays[i].size].reshape(arrays[i].shape)
            offset += arrays[i].size
    return summed


def _buckets(sizes: list[int], limit: int) -> list[list[int]]:
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for i, nbytes in enumerate(sizes):
        if current and filled + nbytes > limit:
            buckets.append(current)
            current, filled = [], 0
        current.append(i)
        filled += nbytes
    if current:
        buckets.append(current)
    return buckets
