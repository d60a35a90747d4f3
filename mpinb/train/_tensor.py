"""Tensor (model) parallelism for a two-layer MLP, Megatron style.

The first weight is split by columns (each rank computes some hidden units, no communication), the
second by rows (each rank's hidden units give a partial sum of the logits); one ``Allreduce`` of
the logits combines them. Backward needs no communication at all: each rank's gradients are those
of its own slices, and the gradient wrt the input (not needed here) would take one more allreduce.
"""

from __future__ import annotations

import numpy as np

from ._mlp import Params, loss_grad


def split_for_tensor_parallel(params: Params, rank: int, size: int) -> Params:
    """This rank's slices of ``[W1, b1, W2, b2]``: columns of W1 and b1, rows of W2, and b2
    (added once, by rank 0's share of the logits)."""
    W1, b1, W2, b2 = params
    cols = np.array_split(np.arange(W1.shape[1]), size)[rank]
    return [W1[:, cols].copy(), b1[cols].copy(), W2[cols, :].copy(), (b2 if rank == 0 else np.zeros_like(b2)).copy()]


def tensor_parallel_loss_and_grads(comm, shard: Params, X: np.ndarray, y: np.ndarray) -> tuple[float, Params]:
    """Summed loss and the gradients of this rank's slices; every rank sees the whole batch."""
    from mpi4py import MPI

    W1, b1, W2, b2 = shard
    z = X @ W1 + b1
    h = np.maximum(z, 0.0)
    partial = h @ W2 + b2
    logits = np.empty_like(partial)
    comm.Allreduce(partial, logits, op=MPI.SUM)
    loss, dlogits = loss_grad(logits, y)
    dW2, db2 = h.T @ dlogits, dlogits.sum(axis=0)
    if comm.Get_rank() != 0:
        db2 = np.zeros_like(db2)
    dz = (dlogits @ W2.T) * (z > 0)
    return loss, [X.T @ dz, dz.sum(axis=0), dW2, db2]
