"""Pipeline parallelism: one stage (layer) per rank, micro-batches flowing through.

A schedule is, per stage, the order of its operations: ``("F", i)`` runs micro-batch i forward,
``("B", i)`` backward. GPipe runs every forward, then every backward; 1F1B (PipeDream-flush)
starts backwards as soon as it can, so a stage never holds more than p micro-batches' activations.
"""

from __future__ import annotations

import time

import numpy as np

from ._mlp import layer_backward, layer_forward, loss_grad

Schedule = list[list[tuple[str, int]]]  # per stage: ("F" | "B", micro-batch)

_GRAD_TAG = 1 << 20


def gpipe_schedule(stages: int, micro: int) -> Schedule:
    return [[("F", i) for i in range(micro)] + [("B", i) for i in reversed(range(micro))]
            for _ in range(stages)]


def one_f_one_b_schedule(stages: int, micro: int) -> Schedule:
    schedule = []
    for stage in range(stages):
        warmup = min(stages - stage - 1, micro)
        ops = [("F", i) for i in range(warmup)]
        forward, backward = warmup, 0
        while forward < micro:
            ops += [("F", forward), ("B", backward)]
            forward, backward = forward + 1, backward + 1
        ops += [("B", i) for i in range(backward, micro)]
        schedule.append(ops)
    return schedule


def bubble_fraction(stages: int, micro: int) -> float:
    """The idle share of an ideal pipeline: (p-1)/(m+p-1)."""
    return (stages - 1) / (micro + stages - 1)


def peak_activations(ops: list[tuple[str, int]]) -> int:
    """The most micro-batches whose forward is done and backward is not, at any moment."""
    held = peak = 0
    for kind, _ in ops:
        held += 1 if kind == "F" else -1
        peak = max(peak, held)
    return peak


def run_pipeline(comm, ops: list[tuple[str, int]], W: np.ndarray, b: np.ndarray,
                 inputs: list[np.ndarray] | None, labels: list[np.ndarray] | None,
                 widths: list[int], micro_sizes: list[int], pad_s: float = 0.0):
    """Run this rank's stage of the pipeline: its ``ops`` in order, for layer ``W, b``.

    Stage 0 reads ``inputs[i]``; the last stage computes the loss with ``labels[i]``; the others
    receive activations from the stage before and gradients from the stage after (``widths[s]`` is
    the width of stage s's input). ``pad_s`` sleeps after each operation to stand in for a real
    stage's compute time. Returns ``(summed loss or None, dW, db, timeline, peak held)`` with
    timeline entries ``(kind, i, start, end)`` on ``time.perf_counter``'s clock.
    """
    from mpi4py import MPI

    stage, stages = comm.Get_rank(), comm.Get_size()
    first, last = stage == 0, stage == stages - 1
    dW, db = np.zeros_like(W), np.zeros_like(b)
    caches: dict[int, tuple] = {}
    loss_grads: dict[int, np.ndarray] = {}
    total_loss = 0.0
    sends, timeline, peak = [], [], 0
    for kind, i in ops:
        if kind == "F":
            if first:
                assert inputs is not None, "stage 0 reads the inputs"
                x = inputs[i]
            else:
                x = np.empty((micro_sizes[i], widths[stage]))
                comm.Recv(x, source=stage - 1, tag=i)
            start = time.perf_counter()
            out, caches[i] = layer_forward(W, b, x, last)
            if last:
                assert labels is not None, "the last stage computes the loss"
                loss, loss_grads[i] = loss_grad(out, labels[i])
                total_loss += loss
            time.sleep(pad_s)
            timeline.append(("F", i, start, time.perf_counter()))
            peak = max(peak, len(caches))
            if not last:
                sends.append(comm.Isend(out, dest=stage + 1, tag=i))
        else:
            if last:
                grad = loss_grads.pop(i)
            else:
                grad = np.empty((micro_sizes[i], W.shape[1]))
                comm.Recv(grad, source=stage + 1, tag=_GRAD_TAG + i)
            start = time.perf_counter()
            dx, dWi, dbi = layer_backward(W, caches.pop(i), grad, last)
            dW += dWi
            db += dbi
            time.sleep(pad_s)
            timeline.append(("B", i, start, time.perf_counter()))
            if not first:
                sends.append(comm.Isend(dx, dest=stage - 1, tag=_GRAD_TAG + i))
    MPI.Request.Waitall(sends)
    return (total_loss if last else None), dW, db, timeline, peak
