"""Pipeline parallelism: one stage (layer) per rank, micro-batches flowing through.

A schedule is, per stage, the order of its operations: ``("F", i)`` runs micro-batch i forward,
``("B", i)`` backward. GPipe runs every forward, then every backward; 1F1B (PipeDream-flush)
starts backwards as soon as it can, so a stage never holds more than p micro-batches' activations.
The interleaved 1F1B of Megatron-LM gives each rank several model chunks (virtual stages), which
shrinks the bubble by the number of chunks for more messages and more activations held.
"""

from __future__ import annotations

import time

import numpy as np

from ._mlp import layer_backward, layer_forward, loss_grad

Schedule = list[list[tuple[str, int]]]  # per stage: ("F" | "B", micro-batch)


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
    timeline entries ``(kind, i, start, end)`` on ``time.perf_counter``'s clock. (It is
    :func:`run_interleaved` with one chunk of one layer per rank.)
    """
    loss, dW, db, timeline, peak = run_interleaved(comm, [(kind, 0, i) for kind, i in ops], [[(W, b)]],
                                                   inputs, labels, widths, micro_sizes, pad_s)
    return loss, dW[0][0], db[0][0], [(kind, i, start, end) for kind, _, i, start, end in timeline], peak


# -- interleaved 1F1B: several model chunks per rank ---------------------------------------------

VirtualOp = tuple[str, int, int]  # ("F" | "B", chunk, micro-batch)


def interleaved_schedule(stages: int, chunks: int, micro: int) -> list[list[VirtualOp]]:
    """Megatron-LM's interleaved 1F1B (Narayanan et al., 2021): each of ``stages`` ranks holds
    ``chunks`` model chunks, chunk c of rank r being virtual stage ``c * stages + r``; per rank,
    its operations in order.

    Forwards go in micro-batch groups of ``stages``, each group through chunk 0, then chunk 1, ...;
    backwards through the chunks in reverse. A rank first runs ``(stages - rank - 1) * 2 +
    (chunks - 1) * stages`` forwards (its warm-up; ``stages - rank - 1`` with one chunk, which is
    plain 1F1B), then alternates one forward and one backward, then runs the backwards left.
    ``micro`` must be a multiple of ``stages``, as in Megatron."""
    if micro % stages:
        raise ValueError(f"the interleaved schedule needs micro-batches in groups of the {stages} stages: "
                         f"{micro} is not a multiple of {stages}")
    per_rank = chunks * micro
    # the k-th (chunk, micro-batch): groups of `stages` micro-batches, each group through every chunk
    group = stages * chunks
    order = [((k % group) // stages, (k // group) * stages + k % stages) for k in range(per_rank)]
    forwards = [("F", chunk, i) for chunk, i in order]
    backwards = [("B", chunks - 1 - chunk, i) for chunk, i in order]
    schedule = []
    for rank in range(stages):
        warmup = min(stages - rank - 1 if chunks == 1 else (stages - rank - 1) * 2 + (chunks - 1) * stages, per_rank)
        ops = forwards[:warmup]
        for k in range(per_rank - warmup):
            ops += [forwards[warmup + k], backwards[k]]
        ops += backwards[per_rank - warmup:]
        schedule.append(ops)
    return schedule


def interleaved_bubble(stages: int, chunks: int, micro: int) -> float:
    """The idle share of :func:`interleaved_schedule` replayed with operations (a chunk's forward or
    backward) of one time unit and instant messages; the replay also proves that the order cannot
    deadlock (each operation waits only for inputs that an earlier tick produced)."""
    schedule = interleaved_schedule(stages, chunks, micro)
    last = stages * chunks - 1
    done: dict[tuple[str, int, int], int] = {}  # (kind, virtual stage, micro-batch) -> its tick
    position, tick = [0] * stages, 0
    while any(position[rank] < len(ops) for rank, ops in enumerate(schedule)):
        ready = [rank for rank, ops in enumerate(schedule)
                 if position[rank] < len(ops) and _ready(ops[position[rank]], rank, stages, last, done, tick)]
        if not ready:
            raise RuntimeError(f"the interleaved schedule deadlocks at tick {tick}")
        for rank in ready:
            kind, chunk, i = schedule[rank][position[rank]]
            done[(kind, chunk * stages + rank, i)] = tick
            position[rank] += 1
        tick += 1
    return 1 - 2 * chunks * micro / tick


def _ready(op: VirtualOp, rank: int, stages: int, last: int, done: dict, tick: int) -> bool:
    kind, chunk, i = op
    virtual = chunk * stages + rank
    if kind == "F":
        need = ("F", virtual - 1, i) if virtual > 0 else None
    else:
        need = ("B", virtual + 1, i) if virtual < last else ("F", virtual, i)
    return need is None or done.get(need, tick) < tick


def _tag(kind: str, virtual: int, i: int) -> int:
    """A message's tag, unique per (what it feeds, micro-batch), within MPI's guaranteed 32,767."""
    assert i < 128 and virtual < 64, "at most 64 virtual stages and 128 micro-batches"
    return ((2 * virtual + (kind == "B")) << 7) | i


def run_interleaved(comm, ops: list[VirtualOp], chunks: list[list[tuple[np.ndarray, np.ndarray]]],
                    inputs: list[np.ndarray] | None, labels: list[np.ndarray] | None,
                    widths: list[int], micro_sizes: list[int], pad_s: float = 0.0):
    """Run this rank's part of a pipeline whose ranks hold one or more model chunks: ``ops`` in order
    (:func:`interleaved_schedule`), ``chunks[c]`` the layers ``(W, b)`` of its chunk c, which is
    virtual stage ``c * size + rank``; ``widths[s]`` is virtual stage s's input width. Each layer
    sleeps ``pad_s`` per forward and backward, standing in for a real layer's compute. As
    :func:`run_pipeline`, returns ``(summed loss or None, dW, db, timeline, peak held)``: the
    gradients per chunk and layer, timeline entries ``(kind, chunk, i, start, end)``, and the most
    chunks' activations held at once."""
    from mpi4py import MPI

    rank, stages = comm.Get_rank(), comm.Get_size()
    last = stages * len(chunks) - 1
    dW = [[np.zeros_like(W) for W, _ in layers] for layers in chunks]
    db = [[np.zeros_like(b) for _, b in layers] for layers in chunks]
    caches: dict[tuple[int, int], list[tuple]] = {}
    loss_grads: dict[int, np.ndarray] = {}
    total_loss, sends, timeline, peak = 0.0, [], [], 0
    for kind, chunk, i in ops:
        virtual, layers = chunk * stages + rank, chunks[chunk]
        ends_model = [virtual == last and k == len(layers) - 1 for k in range(len(layers))]
        if kind == "F":
            if virtual == 0:
                assert inputs is not None, "virtual stage 0 reads the inputs"
                h = inputs[i]
            else:
                h = np.empty((micro_sizes[i], widths[virtual]))
                comm.Recv(h, source=(virtual - 1) % stages, tag=_tag("F", virtual, i))
            start = time.perf_counter()
            caches[chunk, i] = []
            for (W, b), final in zip(layers, ends_model):
                h, cache = layer_forward(W, b, h, final)
                caches[chunk, i].append(cache)
                time.sleep(pad_s)
            if virtual == last:
                assert labels is not None, "the last virtual stage computes the loss"
                loss, loss_grads[i] = loss_grad(h, labels[i])
                total_loss += loss
            timeline.append(("F", chunk, i, start, time.perf_counter()))
            peak = max(peak, len(caches))
            if virtual < last:
                sends.append(comm.Isend(h, dest=(virtual + 1) % stages, tag=_tag("F", virtual + 1, i)))
        else:
            if virtual == last:
                grad = loss_grads.pop(i)
            else:
                grad = np.empty((micro_sizes[i], layers[-1][0].shape[1]))
                comm.Recv(grad, source=(virtual + 1) % stages, tag=_tag("B", virtual, i))
            start = time.perf_counter()
            saved = caches.pop((chunk, i))
            for k in reversed(range(len(layers))):
                grad, dWk, dbk = layer_backward(layers[k][0], saved[k], grad, ends_model[k])
                dW[chunk][k] += dWk
                db[chunk][k] += dbk
                time.sleep(pad_s)
            timeline.append(("B", chunk, i, start, time.perf_counter()))
            if virtual > 0:
                sends.append(comm.Isend(grad, dest=(virtual - 1) % stages, tag=_tag("B", virtual - 1, i)))
    MPI.Request.Waitall(sends)
    return (total_loss if rank == stages - 1 else None), dW, db, timeline, peak
