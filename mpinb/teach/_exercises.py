"""The tutorials' exercises.

Each one states what it calls on the ranks, the right answer, and the communication pattern a good
solution has. :func:`mpinb.check` runs them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._language import say
from ..common._events import CART_DERIVING_CALLS
from ..trace import Trace

Hints = list[str]


def _no_pattern(trace: Trace, size: int) -> Hints:
    return []


@dataclass(frozen=True)
class Exercise:
    name: str
    function: str  # what the student defines on every rank
    call: str  # run on every rank; the value of its last expression is the rank's answer
    verify: Callable[[dict[int, object], int], Hints]  # answers by rank, size -> hints
    pattern: Callable[[Trace, int], Hints] = _no_pattern
    hang_hint: str = "the ranks deadlocked: each waits for a message or a collective another never starts."
    min_ranks: int = 2
    ranks_multiple: int = 1


def _compare(answers: dict[int, object], expected: Callable[[int], object], what: str) -> Hints:
    for rank in sorted(answers):
        got, want = answers[rank], expected(rank)
        if not _equal(got, want):
            return [say("rank {rank} returned {got} for {what}; expected {want}.", rank=rank, got=_short(got),
                        what=what, want=_short(want))]
    return []


def _equal(got: object, want: object) -> bool:
    """Numbers to 1e-10; anything else (strings, dicts of lists) exactly."""
    try:
        if got == want:
            return True
    except (TypeError, ValueError):  # arrays: an element-wise answer, compared as numbers below
        pass
    try:
        return bool(np.allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float),
                                rtol=1e-10, atol=1e-12))
    except (TypeError, ValueError):
        return False


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _collective_ops(trace: Trace) -> Counter:
    return Counter(str(c["op"]) for c in trace.collectives() if c["op"] not in CART_DERIVING_CALLS)


def _sent_by(trace: Trace) -> dict[int, list[dict]]:
    by_rank: dict[int, list[dict]] = {}
    for message in trace.messages():
        by_rank.setdefault(message["source"], []).append(message)
    return by_rank


# -- 00 getting started ------------------------------------------------------------------------

def _verify_parallel_sum(answers, size):
    return _compare(answers, lambda r: sum(range(10_000)), "parallel_sum(10_000)")


def _pattern_parallel_sum(trace, size):
    if _collective_ops(trace):
        return []
    if not trace.messages():
        return ["no rank communicated: each rank computed the whole sum alone. Let each rank sum its "
                "share (range(rank, n, size)) and combine the shares with comm.allreduce."]
    return ["the shares were combined with point-to-point messages; one comm.allreduce does it "
            "in a single call, and every rank gets the total."]


PARALLEL_SUM = Exercise(
    "parallel_sum", "parallel_sum", "parallel_sum(10_000)",
    _verify_parallel_sum, _pattern_parallel_sum)


# -- 01 point-to-point, 01b deadlocks and send modes ----------------------------------------

_EXCHANGE_N = 200_000  # 1.6 MB: far beyond the eager limit, so a send waits for its receive


def _verify_exchange(answers, size):
    partner = lambda r: r ^ 1
    return _compare(answers, lambda r: [float(partner(r)), _EXCHANGE_N],
                    "[first element, length] of what exchange() received")


def _pattern_exchange(trace, size):
    for message in trace.messages():
        if message["dest"] != message["source"] ^ 1:
            return [say("rank {source} sent to rank {dest}; each rank should talk only to its partner rank ^ 1.",
                        source=message["source"], dest=message["dest"])]
    counts = Counter(m["source"] for m in trace.messages())
    extra = {r: c for r, c in counts.items() if c != 1}
    if extra:
        rank, count = next(iter(extra.items()))
        return [say("rank {rank} sent {count} messages; one message per rank is enough.", rank=rank, count=count)]
    return []


EXCHANGE = Exercise(
    "exchange", "exchange",
    f"_got = exchange(np.full({_EXCHANGE_N}, float(rank)))\n[float(_got[0]), len(_got)]",
    _verify_exchange, _pattern_exchange,
    hang_hint="the exchange deadlocked: both partners send first, and a large send waits for its "
              "receive. Let even ranks send first and odd ranks receive first, or use comm.Sendrecv, "
              "or Isend/Irecv and then wait.",
    ranks_multiple=2)


def _ops_in(trace: Trace) -> set[str]:
    return {str(op) for op in trace.events["op"]}


def _verify_probe_receive(answers, size):
    got = answers.get(0)
    want = {r: [float(x) for x in np.arange(3.0 * r + 1)] for r in range(1, size)}
    if got != want and isinstance(got, dict) and sorted(got) == sorted(want) \
            and any(len(got[r]) != len(want[r]) for r in want):
        return ["the received arrays have the wrong lengths: size each buffer from the probed Status "
                "(np.empty(status.Get_count(MPI.DOUBLE))) before the Recv."]
    return _compare({0: got}, lambda r: want, "probe_receive(size - 1)")


def _pattern_probe_receive(trace, size):
    if not any("probe" in op.lower() for op in _ops_in(trace)):
        return ["rank 0 cannot know each message's size in advance: Probe it first (comm.Probe(source=MPI.ANY_SOURCE, "
                "tag=7, status=status)), then size the buffer from status.Get_count(MPI.DOUBLE)."]
    return []


PROBE_RECEIVE = Exercise(
    "probe_receive", "probe_receive",
    "if rank:\n"
    "    comm.Send(np.arange(3.0 * rank + 1), dest=0, tag=7)\n"
    "_got = probe_receive(size - 1) if rank == 0 else None\n"
    "None if _got is None else {int(k): [float(x) for x in np.asarray(v)] for k, v in dict(_got).items()}",
    _verify_probe_receive, _pattern_probe_receive)


def _verify_urgent_first(answers, size):
    if answers.get(0) == ["routine", "urgent"]:
        return ["rank 0 took the messages in the order they were sent: a receive picks its message by source "
                "and tag, so receive tag=2 first, then tag=1."]
    return _compare({0: answers.get(0)}, lambda r: ["urgent", "routine"], "urgent_first()")


URGENT_FIRST = Exercise(
    "urgent_first", "urgent_first",
    "if rank == 1:\n"
    "    MPI.Request.waitall([comm.isend('routine', dest=0, tag=1), comm.isend('urgent', dest=0, tag=2)])\n"
    "(list(urgent_first()) if rank == 0 else None)",
    _verify_urgent_first)


# -- 02 collectives ------------------------------------------------------------------------------

_RING_CHUNK = 1000


def _verify_ring(answers, size):
    total = size * (size + 1) / 2
    return _compare(answers, lambda r: np.arange(_RING_CHUNK * size, dtype=float) * total,
                    "ring_allreduce(x)")


def _pattern_ring(trace, size):
    ops = _collective_ops(trace)
    if ops:
        return [say("it calls {ops}: build the allreduce from Sendrecv between neighbours, not from a collective.",
                    ops=", ".join(sorted(ops)))]
    sent = _sent_by(trace)
    for rank in range(size):
        mine = sent.get(rank, [])
        wrong_peer = [m for m in mine if m["dest"] != (rank + 1) % size]
        if wrong_peer:
            return [say("rank {rank} sent to rank {dest}; in a ring each rank sends only to its right neighbour "
                        "({right}).", rank=rank, dest=wrong_peer[0]["dest"], right=(rank + 1) % size)]
        if len(mine) != 2 * (size - 1):
            return [say("rank {rank} sent {count} messages; a ring allreduce sends 2(p-1) = {expected}: p-1 steps "
                        "of reduce-scatter, then p-1 of all-gather.", rank=rank, count=len(mine),
                        expected=2 * (size - 1))]
        chunk = _RING_CHUNK * 8
        big = [m for m in mine if m["bytes"] > 2 * chunk]
        if big:
            return [say("rank {rank} sent {nbytes} bytes in one message; each step should carry one chunk of n/p "
                        "elements ({chunk} bytes), which is what makes the ring cheap.", rank=rank,
                        nbytes=big[0]["bytes"], chunk=chunk)]
    return []


RING_ALLREDUCE = Exercise(
    "ring_allreduce", "ring_allreduce",
    f"_x = np.arange({_RING_CHUNK} * size, dtype=float) * (rank + 1)\nring_allreduce(_x).tolist()",
    _verify_ring, _pattern_ring,
    hang_hint="the ring deadlocked: use comm.Sendrecv (send right, receive from the left in one call) "
              "at every step, so that no rank waits for a neighbour that is also waiting.")


def _uneven_whole(size):
    return [float(r) for r in range(size) for _ in range(r + 1)]


def _verify_gather_uneven(answers, size):
    return _compare({0: answers.get(0)}, lambda r: _uneven_whole(size), "gather_uneven(local)")


def _pattern_gather_uneven(trace, size):
    ops = _collective_ops(trace)
    if "Gatherv" not in ops:
        return ["move the arrays as buffers with comm.Gatherv: gather the counts first (comm.gather(len(local), "
                "root=0)), then Gatherv(local, [whole, counts]) on the root into one array."]
    return []


GATHER_UNEVEN = Exercise(
    "gather_uneven", "gather_uneven",
    "_got = gather_uneven(np.full(rank + 1, float(rank)))\n"
    "[float(x) for x in np.asarray(_got)] if rank == 0 else None",
    _verify_gather_uneven, _pattern_gather_uneven)


def _verify_my_offset(answers, size):
    return _compare(answers, lambda r: sum(3 * k + 1 for k in range(r)), "my_offset(3 * rank + 1)")


def _pattern_my_offset(trace, size):
    ops = {op.lower() for op in _collective_ops(trace)}
    if "exscan" not in ops and "scan" not in ops:
        return ["every rank received more than its own offset; comm.exscan(count) gives each rank the sum "
                "of the counts before it (None on rank 0, which starts at 0)."]
    return []


MY_OFFSET = Exercise(
    "my_offset", "my_offset", "my_offset(3 * rank + 1)", _verify_my_offset, _pattern_my_offset)


# -- 03 nonblocking ------------------------------------------------------------------------------

def _halo_expected(rank, size):
    left, right = (rank - 1) % size, (rank + 1) % size
    return [left * 10 + 3, rank * 10, rank * 10 + 1, rank * 10 + 2, rank * 10 + 3, right * 10]


def _verify_halo(answers, size):
    return _compare(answers, lambda r: _halo_expected(r, size), "halo_exchange(u)")


def _pattern_halo(trace, size):
    events = trace.events
    blocking = sorted({str(op) for op in events["op"]} & {"Send", "Recv", "send", "recv", "Sendrecv", "sendrecv"})
    if blocking:
        return [say("it uses {ops}; post Irecv and Isend for both neighbours first, then wait for all four "
                    "requests with MPI.Request.Waitall.", ops=", ".join(blocking))]
    for rank, mine in _sent_by(trace).items():
        peers = sorted({m["dest"] for m in mine})
        if peers != sorted({(rank - 1) % size, (rank + 1) % size}) or len(mine) != 2:
            return [say("rank {rank} sent {count} messages to ranks {peers}; each rank sends one value to each of "
                        "its two neighbours.", rank=rank, count=len(mine), peers=peers)]
    return []


HALO_EXCHANGE = Exercise(
    "halo_exchange", "halo_exchange",
    "_u = np.zeros(6)\n_u[1:-1] = rank * 10 + np.arange(4)\nhalo_exchange(_u).tolist()",
    _verify_halo, _pattern_halo,
    hang_hint="the halo exchange deadlocked: with nonblocking calls, post all receives and sends "
              "first and wait afterwards.",
    min_ranks=3)


# -- 04 communicators ----------------------------------------------------------------------------

def _grid_expected(rank, size):
    cols = size // 2
    row, col = divmod(rank, cols)
    row_sum = sum(r + 1 for r in range(size) if r // cols == row)
    col_sum = sum(r + 1 for r in range(size) if r % cols == col)
    return [row_sum, col_sum]


def _verify_grid(answers, size):
    return _compare(answers, lambda r: _grid_expected(r, size), "grid_sums(rank + 1, rows=2)")


def _pattern_grid(trace, size):
    sub = [c for c in trace.collectives()
           if c["op"] not in CART_DERIVING_CALLS and len(trace.comms.get(c["comm"], range(size))) < size]
    if len(sub) < 2:
        return ["split COMM_WORLD twice (color = row, then color = column) and reduce once on each "
                "of the two smaller communicators."]
    if trace.messages():
        return ["point-to-point messages were sent; one allreduce on the row communicator and one on "
                "the column communicator are all it takes."]
    return []


GRID_SUMS = Exercise(
    "grid_sums", "grid_sums", "list(grid_sums(rank + 1, rows=2))",
    _verify_grid, _pattern_grid, min_ranks=4, ranks_multiple=2)


def _cart_expected(rank, size):
    cols = size // 2
    row, col = divmod(rank, cols)
    return [((row - 1) % 2) * cols + col, ((row + 1) % 2) * cols + col,
            row * cols + (col - 1) % cols, row * cols + (col + 1) % cols]


def _verify_cart_neighbours(answers, size):
    return _compare(answers, lambda r: _cart_expected(r, size), "cart_neighbours()")


def _pattern_cart_neighbours(trace, size):
    if "Create_cart" not in _ops_in(trace):
        return ["let MPI arrange the grid: cart = comm.Create_cart(dims=[2, size // 2], periods=[True, True]), "
                "then cart.Shift(0, 1) gives (up, down) and cart.Shift(1, 1) gives (left, right)."]
    return []


CART_NEIGHBOURS = Exercise(
    "cart_neighbours", "cart_neighbours", "[int(n) for n in cart_neighbours()]",
    _verify_cart_neighbours, _pattern_cart_neighbours, min_ranks=4, ranks_multiple=2)


def _verify_split_reverse(answers, size):
    def group(rank):
        return [r for r in range(size) if r % 2 == rank % 2]

    def expected(rank):
        return [group(rank)[::-1].index(rank), sum(10 * (r + 1) for r in group(rank))]

    hints = _compare(answers, expected, "split_reverse(10 * (rank + 1))")
    in_old_order = all(isinstance(a, list) and a[:1] == [group(r).index(r)] for r, a in answers.items())
    if hints and in_old_order:
        return ["the new ranks follow the old order: key orders the ranks inside a color, so key=-rank "
                "(or size - rank) puts the highest old rank first."]
    return hints


def _pattern_split_reverse(trace, size):
    if "Split" not in _ops_in(trace):
        return ["make the two groups with comm.Split(color=rank % 2, key=-rank), then reduce on the new "
                "communicator."]
    return []


SPLIT_REVERSE = Exercise(
    "split_reverse", "split_reverse", "[int(x) for x in split_reverse(10 * (rank + 1))]",
    _verify_split_reverse, _pattern_split_reverse, min_ranks=2)


# -- 05 parallel algorithms ----------------------------------------------------------------------

_PI_N = 100_000


def _pi_serial(n):
    x = (np.arange(n) + 0.5) / n
    return float(np.sum(4.0 / (1.0 + x * x)) / n)


def _verify_pi(answers, size):
    return _compare(answers, lambda r: _pi_serial(_PI_N), f"parallel_pi({_PI_N})")


def _pattern_pi(trace, size):
    if trace.messages():
        return ["the parts were combined with point-to-point messages; comm.allreduce combines them "
                "in one call (in log p steps) and gives every rank the result."]
    if not _collective_ops(trace):
        return ["no communication happened: every rank computed all n intervals. Give each rank "
                "every size-th interval, starting at its rank."]
    return []


PARALLEL_PI = Exercise(
    "parallel_pi", "parallel_pi", f"parallel_pi({_PI_N})", _verify_pi, _pattern_pi)


# -- 06 performance ------------------------------------------------------------------------------

def _verify_pingpong(answers, size):
    for rank in (0, 1):
        value = answers.get(rank)
        if not isinstance(value, float) or not 0 < value < 1:
            return [say("rank {rank} returned {value}; pingpong should return the one-way time of one message in "
                        "seconds (a positive float, well under a second).", rank=rank, value=_short(value))]
    return []


def _pattern_pingpong(trace, size):
    messages = trace.messages()
    strangers = [m for m in messages if {m["source"], m["dest"]} != {0, 1}]
    if strangers:
        return [say("rank {source} sent to rank {dest}; only ranks 0 and 1 take part in a ping-pong.",
                    source=strangers[0]["source"], dest=strangers[0]["dest"])]
    if len(messages) != 2 * 50:
        return [say("{count} messages were sent; pingpong(1024, 50) makes 50 round trips: 100.",
                    count=len(messages))]
    sizes = {m["bytes"] for m in messages}
    if sizes != {1024}:
        return [say("messages of {sizes} bytes were sent; send a buffer of exactly nbytes bytes "
                    "(np.zeros(nbytes, dtype=np.uint8) with Send/Recv).", sizes=sorted(sizes))]
    return []


PINGPONG = Exercise(
    "pingpong", "pingpong", "pingpong(1024, 50)", _verify_pingpong, _pattern_pingpong)


# -- 07 data parallel ----------------------------------------------------------------------------

_BUCKET_SIZES = (1000, 10, 10, 3000, 5)  # doubles; with a limit of 8,800 bytes: 3 buckets
_BUCKET_LIMIT = 8 * 1100


def _verify_buckets(answers, size):
    total = size * (size + 1) / 2
    return _compare(answers, lambda r: [n * total for n in _BUCKET_SIZES] + list(_BUCKET_SIZES),
                    "the sums and lengths of bucket_allreduce's arrays")


def _reductions(trace: Trace) -> int:
    return sum(n for op, n in _collective_ops(trace).items() if op.lower() in ("allreduce", "iallreduce"))


def _pattern_buckets(trace, size):
    others = {op for op in _collective_ops(trace) if op.lower() not in ("allreduce", "iallreduce")}
    if trace.messages() or others:
        return ["sum the buckets with Allreduce, one call per bucket, and nothing else."]
    calls = _reductions(trace)
    if calls == len(_BUCKET_SIZES):
        return ["one Allreduce per array: pack consecutive arrays into one flat buffer (np.concatenate) "
                "while they fit under limit bytes, and sum each buffer with one Allreduce."]
    if calls < 3:
        return [say("{calls} Allreduce for all five arrays: a bucket holds at most limit bytes (an array larger "
                    "than limit goes alone), so these arrays need 3 buckets.", calls=calls)]
    if calls != 3:
        return [say("{calls} Allreduce calls; consecutive arrays packed greedily under {limit} bytes make 3 "
                    "buckets: [1000, 10, 10], [3000], [5] doubles.", calls=calls, limit=_BUCKET_LIMIT)]
    return []


BUCKETS = Exercise(
    "bucket_allreduce", "bucket_allreduce",
    f"_got = bucket_allreduce([np.full(n, rank + 1.0) for n in {_BUCKET_SIZES!r}], {_BUCKET_LIMIT})\n"
    "[float(a.sum()) for a in _got] + [len(a) for a in _got]",
    _verify_buckets, _pattern_buckets)


# -- 08 tensor parallel --------------------------------------------------------------------------

_TP_COLUMNS = 8  # hidden units per rank


def _tp_matrices(size: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return rng.standard_normal((6, _TP_COLUMNS * size)), rng.standard_normal((5, _TP_COLUMNS * size))


def _verify_input_grad(answers, size):
    grad_h, W1 = _tp_matrices(size)
    return _compare(answers, lambda r: grad_h @ W1.T, "input_grad(grad_h slice, W1 slice)")


def _pattern_input_grad(trace, size):
    ops = _collective_ops(trace)
    if any(op.lower().startswith("allgather") or op.lower().startswith("gather") for op in ops):
        return ["the slices were gathered: that moves whole matrices, which tensor parallelism exists "
                "to avoid. Each rank multiplies its own slices (a partial sum over its hidden units) "
                "and one Allreduce adds the partial sums."]
    if trace.messages() or _reductions(trace) != 1 or len(ops) != 1:
        return ["one Allreduce of the partial products grad_h_r @ W1_r.T is all it takes."]
    return []


INPUT_GRAD = Exercise(
    "input_grad", "input_grad",
    "_rng = np.random.default_rng(7)\n"
    f"_G, _W = _rng.standard_normal((6, {_TP_COLUMNS} * size)), _rng.standard_normal((5, {_TP_COLUMNS} * size))\n"
    f"_mine = slice({_TP_COLUMNS} * rank, {_TP_COLUMNS} * (rank + 1))\n"
    "np.asarray(input_grad(_G[:, _mine], _W[:, _mine])).tolist()",
    _verify_input_grad, _pattern_input_grad)


# -- 09 pipeline parallel ------------------------------------------------------------------------

_MICRO = 4


def _verify_pipeline(answers, size):
    last = size - 1
    for rank in sorted(answers):
        if rank != last and answers[rank] is not None:
            return [say("rank {rank} returned {value}; only the last stage (rank {last}) returns the outputs, the "
                        "other stages return None.", rank=rank, value=_short(answers[rank]), last=last)]
    factor = float(np.prod([r + 2 for r in range(size)]))
    return _compare({last: answers[last]}, lambda r: [i * factor for i in range(_MICRO)],
                    "the first element of each output micro-batch")


def _pattern_pipeline(trace, size):
    if _collective_ops(trace):
        return ["a pipeline passes each micro-batch from one stage to the next with send and recv; "
                "no collective is needed."]
    for message in trace.messages():
        if message["dest"] != message["source"] + 1:
            return [say("rank {source} sent to rank {dest}; each stage sends only to the next one (rank + 1).",
                        source=message["source"], dest=message["dest"])]
    if len(trace.messages()) != _MICRO * (size - 1):
        return [say("{count} messages; {micro} micro-batches through {size} stages make {expected} (one per "
                    "micro-batch per link).", count=len(trace.messages()), micro=_MICRO, size=size,
                    expected=_MICRO * (size - 1))]
    return []


PIPELINE = Exercise(
    "pipeline_forward", "pipeline_forward",
    f"_parts = [np.full(3, float(i)) for i in range({_MICRO})] if rank == 0 else None\n"
    f"_out = pipeline_forward(_parts, {_MICRO})\n"
    "None if rank != size - 1 else [float(np.asarray(x)[0]) for x in _out]",
    _verify_pipeline, _pattern_pipeline)


# -- 10 hybrid parallel --------------------------------------------------------------------------

def _verify_stage_sum(answers, size):
    return _compare(answers, lambda r: sum(q + 1 for q in range(size) if q % 2 == r % 2),
                    "stage_sum(rank + 1, stages=2)")


def _pattern_stage_sum(trace, size):
    sub = [c for c in trace.collectives()
           if c["op"] not in CART_DERIVING_CALLS and len(trace.comms.get(c["comm"], range(size))) < size]
    if not sub:
        return ["make the communicator of one stage's replicas with comm.Split(color=stage) and sum "
                "over it with one allreduce: every rank of the world is not a replica of your stage."]
    if trace.messages():
        return ["point-to-point messages were sent; one allreduce on the stage's communicator is enough."]
    return []


STAGE_SUM = Exercise(
    "stage_sum", "stage_sum", "float(stage_sum(float(rank + 1), stages=2))",
    _verify_stage_sum, _pattern_stage_sum, min_ranks=4, ranks_multiple=2)


# -- 11 ZeRO -------------------------------------------------------------------------------------

def _zero_expected(size: int) -> np.ndarray:
    n = 10 * size + 3
    total = size * (size + 1) / 2
    return np.linspace(0, 1, n) - 0.01 * np.arange(n, dtype=float) * total


def _verify_zero(answers, size):
    return _compare(answers, lambda r: _zero_expected(size), "zero_step(params, grad, 0.01)")


def _pattern_zero(trace, size):
    ops = {op.lower() for op in _collective_ops(trace)}
    if ops & {"allreduce", "iallreduce"}:
        return ["an Allreduce gives every rank the whole summed gradient, which ZeRO avoids: "
                "Reduce_scatter the gradient (each rank gets the sum of its own shard), update that "
                "shard, then Allgather(v) the parameters."]
    if not any(op.startswith("reduce_scatter") for op in ops):
        return ["sum the gradients with Reduce_scatter, so that each rank receives only its shard's sum."]
    if not any(op.startswith("allgather") for op in ops):
        return ["after updating its shard, each rank needs everybody's: Allgather(v) the parameters."]
    if trace.messages():
        return ["point-to-point messages were sent; Reduce_scatter and Allgatherv are all it takes."]
    return []


ZERO_STEP = Exercise(
    "zero_step", "zero_step",
    "_n = 10 * size + 3\n"
    "np.asarray(zero_step(np.linspace(0, 1, _n), np.arange(_n, dtype=float) * (rank + 1), 0.01)).tolist()",
    _verify_zero, _pattern_zero)


# -- 12 debugging ---------------------------------------------------------------------------------

def _mean_blocks(size: int) -> list[np.ndarray]:
    """Blocks of 7, 8, 9, ... items: uneven on purpose, as the remainder of a decomposition is."""
    start, blocks = 0, []
    for rank in range(size):
        blocks.append(np.arange(start, start + 7 + rank, dtype=float) ** 2)
        start += 7 + rank
    return blocks


def _verify_global_mean(answers, size):
    blocks = _mean_blocks(size)
    hints = _compare(answers, lambda r: float(np.concatenate(blocks).mean()), "global_mean(local)")
    if hints and all(_equal(answer, float(np.mean([b.mean() for b in blocks]))) for answer in answers.values()):
        return [say("every rank returned the mean of the ranks' means: the blocks differ in size, so each "
                    "rank's mean must weigh as many items as it has. Add up the sums and the counts, then "
                    "divide.")]
    return hints


def _pattern_global_mean(trace, size):
    ops = _collective_ops(trace)
    if any(op.lower().lstrip("i").startswith(("allgather", "gather")) for op in ops):
        return ["the ranks gathered each other's values: one comm.allreduce of a (sum, count) pair gives every "
                "rank both totals at once."]
    if not ops and trace.messages():
        return ["point-to-point messages were sent; one comm.allreduce of (sum, count) gives every rank the "
                "total."]
    if sum(ops.values()) > 1:
        return [say("it calls {count} collectives ({ops}); one allreduce of a (sum, count) pair is enough.",
                    count=sum(ops.values()), ops=", ".join(sorted(ops)))]
    return []


GLOBAL_MEAN = Exercise(
    "global_mean", "global_mean",
    "_start = sum(7 + r for r in range(rank))\n"
    "float(global_mean(np.arange(_start, _start + 7 + rank, dtype=float) ** 2))",
    _verify_global_mean, _pattern_global_mean)


# -- 13 one-sided -------------------------------------------------------------------------------

TICKETS = 30


def _verify_fetch_tickets(answers, size):
    taken: list[int] = []
    for rank in sorted(answers):
        got = answers[rank]
        if not isinstance(got, list) or not all(isinstance(t, int) for t in got):
            return [say("rank {rank} returned {got}; fetch_tickets should return the list of ticket numbers "
                        "(ints) it took.", rank=rank, got=_short(got))]
        taken += got
    twice = sorted({t for t in taken if taken.count(t) > 1})
    if twice:
        return [say("tickets {tickets} were taken by more than one rank: reading the counter and writing it back "
                    "are two steps, and another rank can come in between. Fetch_and_op reads and adds in one "
                    "atomic step.", tickets=_short(twice))]
    if sorted(taken) != list(range(TICKETS)):
        missing = sorted(set(range(TICKETS)) - set(taken))
        extra = sorted(set(taken) - set(range(TICKETS)))
        return [say("the ranks took tickets {taken}; together they should take each of 0..{last} once "
                    "(missing: {missing}, beyond the tasks: {extra}). Keep fetching until a ticket is "
                    "tasks or more, and do not keep that one.", taken=_short(sorted(taken)),
                    last=TICKETS - 1, missing=_short(missing), extra=_short(extra))]
    return []


def _pattern_fetch_tickets(trace, size):
    ops = {str(t["op"]) for t in trace.transfers()}
    if trace.messages():
        return ["point-to-point messages were sent; a counter in a window needs none: each rank updates it "
                "with Fetch_and_op, and rank 0 calls nothing."]
    if "Fetch_and_op" not in ops and "Get_accumulate" not in ops:
        return ["take each ticket with Fetch_and_op (inside Lock and Unlock of rank 0's window): it returns "
                "the counter and adds one to it in one atomic step."]
    return []


FETCH_TICKETS = Exercise(
    "fetch_tickets", "fetch_tickets",
    "_counter = np.zeros(1, dtype=np.int64)\n"
    "_window = MPI.Win.Create(_counter, comm=comm)\n"
    "try:\n"
    f"    _taken = fetch_tickets(_window, {TICKETS})\n"
    "finally:\n"
    "    _window.Free()\n"
    "[int(t) for t in _taken] if isinstance(_taken, (list, tuple)) else _taken",
    _verify_fetch_tickets, _pattern_fetch_tickets)

# -- 14 data layout and I/O ------------------------------------------------------------------------

def _verify_write_blocks(answers, size):
    got = answers.get(0)
    if got == _uneven_whole(size):
        return []
    return [say("the file held {got}; expected every rank's block in rank order: {want}.", got=_short(got),
                want=_short(_uneven_whole(size)))]


def _pattern_write_blocks(trace, size):
    ops = _ops_in(trace)
    if not any(op.startswith("Write") and op.endswith(("_all", "_ordered")) for op in ops):
        return ["each rank wrote on its own: one collective Write_at_all (every rank at its byte offset) lets MPI "
                "combine the pieces into large writes."]
    if {"Allgather", "allgather", "Gather", "gather"} & set(_collective_ops(trace)):
        return ["gathering every size works but moves more than needed: comm.exscan(local.nbytes) gives each "
                "rank its own byte offset."]
    return []


WRITE_BLOCKS = Exercise(
    "write_blocks", "write_blocks",
    "import os as _os\n"
    "_path = '_mpinb_exercise_blocks.bin'\n"
    "try:\n"
    "    write_blocks(_path, np.full(rank + 1, float(rank)))\n"
    "    comm.Barrier()\n"
    "    _got = [float(x) for x in np.fromfile(_path)] if rank == 0 else None\n"
    "    comm.Barrier()\n"
    "finally:\n"
    "    if rank == 0 and _os.path.exists(_path):\n"
    "        _os.remove(_path)\n"
    "_got",
    _verify_write_blocks, _pattern_write_blocks)


# -- 15 threads ------------------------------------------------------------------------------------

def _verify_threaded_exchange(answers, size):
    return _compare(answers, lambda r: [(r - 1) % size, (r + 1) % size], "threaded_exchange()")


def _pattern_threaded_exchange(trace, size):
    channels = {m["comm"] for m in trace.messages()}
    if len(channels) < 2:
        return ["both exchanges ran on one communicator, where a thread's receive can take the message meant for "
                "the other thread: give each thread its own comm.Dup()."]
    return []


THREADED_EXCHANGE = Exercise(
    "threaded_exchange", "threaded_exchange", "[int(x) for x in threaded_exchange()]",
    _verify_threaded_exchange, _pattern_threaded_exchange)


# -- 16 training at scale --------------------------------------------------------------------------

def _layer_counts(size):
    return [5 + (r % 3) for r in range(size)]


def _verify_gather_layer(answers, size):
    whole = [float(x) for x in np.arange(sum(_layer_counts(size))) * 0.5]
    return _compare(answers, lambda r: whole, "gather_layer(shard, counts)")


def _pattern_gather_layer(trace, size):
    ops = _collective_ops(trace)
    if "Allgatherv" not in ops:
        return ["move each rank's piece once, as a buffer: comm.Allgatherv(shard, [whole, counts]) puts every piece "
                "where it belongs in one call."]
    if sum(ops.values()) > 1:
        return [say("it calls {count} collectives ({ops}); one Allgatherv is enough.", count=sum(ops.values()),
                    ops=", ".join(sorted(ops)))]
    return []


GATHER_LAYER = Exercise(
    "gather_layer", "gather_layer",
    "_counts = [5 + (r % 3) for r in range(size)]\n"
    "_start = sum(_counts[:rank])\n"
    "[float(x) for x in np.asarray(gather_layer(np.arange(_start, _start + _counts[rank]) * 0.5, _counts))]",
    _verify_gather_layer, _pattern_gather_layer)


EXERCISES: dict[str, Exercise] = {e.name: e for e in (
    PARALLEL_SUM, EXCHANGE, RING_ALLREDUCE, HALO_EXCHANGE, GRID_SUMS, PARALLEL_PI, PINGPONG,
    BUCKETS, INPUT_GRAD, PIPELINE, STAGE_SUM, ZERO_STEP, GLOBAL_MEAN, FETCH_TICKETS, PROBE_RECEIVE,
    URGENT_FIRST, GATHER_UNEVEN, MY_OFFSET, CART_NEIGHBOURS, SPLIT_REVERSE, WRITE_BLOCKS,
    THREADED_EXCHANGE, GATHER_LAYER)}
