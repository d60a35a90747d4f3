"""mpinb.check grades the tutorials' exercises: solutions pass, typical mistakes get a specific hint."""

from __future__ import annotations

import os
import re
import string

import pytest

import mpinb
from mpinb._zh import ZH
from mpinb.teach import EXERCISES

SOLUTIONS = os.path.join(os.path.dirname(__file__), "..", "notebooks", "solutions")


def solution(name: str) -> str:
    with open(os.path.join(SOLUTIONS, f"{name}.py")) as handle:
        return handle.read()


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_the_solution_passes(any_pool, name):
    any_pool.run(solution(name))
    verdict = mpinb.check(name, pool=any_pool)
    if any_pool.settings.n == 1:
        assert not verdict and "needs" in verdict.hints[0] and "ranks" in verdict.hints[0]
    else:
        assert verdict, str(verdict)
        assert "correct" in str(verdict) and "✔" in verdict._repr_html_()


WRONG = {
    "parallel_sum": ("def parallel_sum(n):\n    return sum(range(n))", "no rank communicated"),
    "exchange": (
        "def exchange(data):\n    got = np.empty_like(data)\n"
        "    comm.Send(data, dest=rank ^ 1)\n    comm.Recv(got, source=rank ^ 1)\n    return got",
        "the exchange deadlocked",
    ),
    "ring_allreduce": ("def ring_allreduce(x):\n    return comm.allreduce(x)", "build the allreduce from Sendrecv"),
    "halo_exchange": (
        "def halo_exchange(u):\n    l, r = (rank - 1) % size, (rank + 1) % size\n"
        "    comm.Sendrecv(u[-2:-1], dest=r, recvbuf=u[0:1], source=l)\n"
        "    comm.Sendrecv(u[1:2], dest=l, recvbuf=u[-1:], source=r)\n    return u",
        "it uses Sendrecv",
    ),
    "grid_sums": (
        "def grid_sums(value, rows):\n    cols = size // rows\n    allv = comm.allgather(value)\n"
        "    return (sum(v for i, v in enumerate(allv) if i // cols == rank // cols),\n"
        "            sum(v for i, v in enumerate(allv) if i % cols == rank % cols))",
        "split COMM_WORLD",
    ),
    "parallel_pi": (
        "def parallel_pi(n):\n    x = (np.arange(n) + 0.5) / n\n    return float(np.sum(4 / (1 + x * x)) / n)",
        "no communication happened",
    ),
    "pingpong": ("def pingpong(nbytes, repeats):\n    return 0.0", "positive float"),
    "bucket_allreduce": (
        "def bucket_allreduce(arrays, limit):\n    return [comm.allreduce(a) for a in arrays]",
        "one Allreduce per array",
    ),
    "input_grad": (
        "def input_grad(grad_h, W1):\n    return np.hstack(comm.allgather(grad_h)) @ np.hstack(comm.allgather(W1)).T",
        "the slices were gathered",
    ),
    "pipeline_forward": (
        "def pipeline_forward(parts, count):\n    parts = comm.bcast(parts, root=0)\n"
        "    return [p * np.prod(np.arange(2, size + 2)) for p in parts] if rank == size - 1 else None",
        "no collective is needed",
    ),
    "stage_sum": (
        "def stage_sum(x, stages):\n    values = comm.allgather(x)\n"
        "    return sum(v for r, v in enumerate(values) if r % stages == rank % stages)",
        "comm.Split(color=stage)",
    ),
    "global_mean": (
        "def global_mean(local):\n    return comm.allreduce(float(local.mean())) / size",
        "the mean of the ranks' means",
    ),
    "zero_step": (
        "def zero_step(params, grad, lr):\n    total = np.empty_like(grad)\n"
        "    comm.Allreduce(grad, total)\n    return params - lr * total",
        "Reduce_scatter the gradient",
    ),
    "probe_receive": (
        "def probe_receive(count):\n    got, status = {}, MPI.Status()\n    for _ in range(count):\n"
        "        buffer = np.empty(100)\n        comm.Recv(buffer, source=MPI.ANY_SOURCE, tag=7, status=status)\n"
        "        got[status.Get_source()] = buffer\n    return got",
        "the received arrays have the wrong lengths",
    ),
    "urgent_first": (
        "def urgent_first():\n    return [comm.recv(source=1), comm.recv(source=1)]",
        "in the order they were sent",
    ),
    "gather_uneven": (
        "def gather_uneven(local):\n    parts = comm.gather(local, root=0)\n"
        "    return np.concatenate(parts) if rank == 0 else None",
        "comm.Gatherv",
    ),
    "my_offset": (
        "def my_offset(count):\n    return sum(comm.allgather(count)[:rank])",
        "comm.exscan(count)",
    ),
    "cart_neighbours": (
        "def cart_neighbours():\n    cols = size // 2\n    row, col = divmod(rank, cols)\n"
        "    return [((row - 1) % 2) * cols + col, ((row + 1) % 2) * cols + col,\n"
        "            row * cols + (col - 1) % cols, row * cols + (col + 1) % cols]",
        "comm.Create_cart",
    ),
    "split_reverse": (
        "def split_reverse(value):\n    group = comm.Split(color=rank % 2, key=rank)\n"
        "    return [group.Get_rank(), group.allreduce(value)]",
        "the new ranks follow the old order",
    ),
    "write_blocks": (
        "def write_blocks(path, local):\n    offset = sum(comm.allgather(local.nbytes)[:rank])\n"
        "    f = MPI.File.Open(comm, path, MPI.MODE_WRONLY | MPI.MODE_CREATE)\n"
        "    f.Write_at(offset, local)\n    f.Close()",
        "each rank wrote on its own",
    ),
    "threaded_exchange": (
        "def threaded_exchange():\n    left, right = (rank - 1) % size, (rank + 1) % size\n"
        "    return [comm.sendrecv(rank, dest=right, source=left), comm.sendrecv(rank, dest=left, source=right)]",
        "give each thread its own comm.Dup()",
    ),
    "gather_layer": (
        "def gather_layer(shard, counts):\n    start = sum(counts[:rank])\n    padded = np.zeros(sum(counts))\n"
        "    padded[start:start + counts[rank]] = shard\n    return comm.allreduce(padded)",
        "comm.Allgatherv(shard, [whole, counts])",
    ),
    "fetch_tickets": (
        "def fetch_tickets(window, tasks):\n"
        "    import time\n"
        "    taken, ticket = [], np.empty(1, dtype=np.int64)\n"
        "    while True:\n"
        "        window.Lock(0)\n"
        "        window.Get(ticket, 0)\n"
        "        window.Unlock(0)\n"
        "        if ticket[0] >= tasks:\n"
        "            return taken\n"
        "        taken.append(int(ticket[0]))\n"
        "        time.sleep(0.001)\n"
        "        window.Lock(0)\n"
        "        window.Put(ticket + 1, 0)\n"
        "        window.Unlock(0)",
        "were taken by more than one rank",
    ),
}


def _template_of(line: str, templates) -> str:
    """The template that ``line`` was made from: of those it fits (``{fields}`` matching anything),
    the one with the most fixed text ("{ranks}: {why}" fits nearly every line)."""
    def parts(template: str) -> list[tuple[str, str | None]]:
        return [(text, field) for text, field, _, _ in string.Formatter().parse(template)]

    def fits(template: str) -> bool:
        pattern = "".join(re.escape(text) + (".*?" if field is not None else "") for text, field in parts(template))
        return re.fullmatch(pattern, line, re.DOTALL) is not None

    fixed = {t: sum(len(text) for text, _ in parts(t)) for t in templates if fits(t)}
    most = max(fixed.values(), default=0)
    made_from = [t for t, n in fixed.items() if n == most]
    assert len(made_from) == 1, f"{line!r} fits {made_from or 'no template'}"
    return made_from[0]


def _translated(line: str) -> str:
    return ZH[_template_of(line, ZH)]


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_typical_mistake_gets_a_specific_hint(pool4, name):
    """The same hint in English and in Chinese: each Chinese line translates its English line's template."""
    code, hint = WRONG[name]
    pool4.run(code)
    verdict = mpinb.check(name, pool=pool4, timeout=3)
    assert not verdict
    assert hint in str(verdict), str(verdict)
    mpinb.set_language("zh")
    try:
        chinese = mpinb.check(name, pool=pool4, timeout=3)
        said = str(chinese)
    finally:
        mpinb.set_language(None)
    assert not chinese and said.startswith(f"✘ {name}：还没有通过。"), said
    assert [_translated(line) for line in verdict.hints] == [_template_of(line, ZH.values()) for line in chinese.hints]
    assert pool4.run("comm.allreduce(1)").value == {r: 4 for r in range(4)}, "the pool survives the check"


def test_wrong_answers_and_wrong_patterns_are_told_apart(pool4):
    pool4.run("def parallel_sum(n):\n    return sum(range(rank, n, size))")
    assert "rank 0 returned" in str(mpinb.check("parallel_sum", pool=pool4))
    whole_array_ring = (
        "def ring_allreduce(x):\n    acc, cur = x.copy(), x.copy()\n    for _ in range(size - 1):\n"
        "        got = np.empty_like(cur)\n"
        "        comm.Sendrecv(cur, dest=(rank + 1) % size, recvbuf=got, source=(rank - 1) % size)\n"
        "        acc += got\n        cur = got\n    return acc"
    )
    pool4.run(whole_array_ring)
    assert "sent 3 messages; a ring allreduce sends 2(p-1) = 6" in str(mpinb.check("ring_allreduce", pool=pool4))


def test_unwritten_and_undefined_functions_and_unknown_names(pool4):
    pool4.run("def parallel_pi(n):\n    raise NotImplementedError")
    assert "not written yet" in str(mpinb.check("parallel_pi", pool=pool4))
    pool4.run("globals().pop('pingpong', None)")
    assert "`pingpong` is not defined on every rank" in str(mpinb.check("pingpong", pool=pool4))
    listed = "the exercises are: bucket_allreduce, cart_neighbours, exchange"
    with pytest.raises(ValueError, match=f"unknown exercise 'ring'; {listed}"):
        mpinb.check("ring", pool=pool4)


def test_verdicts_and_hints_follow_the_language(pool4):
    pool4.run(WRONG["exchange"][0])
    mpinb.set_language("zh")
    try:
        verdict = mpinb.check("exchange", pool=pool4, timeout=3)
        text = str(verdict)
        assert text.startswith("✘ exchange：还没有通过。") and "交换死锁了" in text and "死锁：" in text
        pool4.run(solution("exchange"))
        assert str(mpinb.check("exchange", pool=pool4)).startswith("✔ exchange：正确")
    finally:
        mpinb.set_language(None)
    assert str(mpinb.check("exchange", pool=pool4)).startswith("✔ exchange: correct"), "English again"


def test_an_answer_right_only_by_accident_is_not_yet_right(pool4):
    # a scratch buffer reused while its Isend may still read it: right here (a small message is
    # copied at once), wrong where MPI reads the buffer later
    pool4.run(
        "def halo_exchange(u):\n"
        "    left, right = (rank - 1) % size, (rank + 1) % size\n"
        "    scratch = np.array([u[1], u[-2]])\n"
        "    requests = [comm.Irecv(u[0:1], source=left, tag=0), comm.Irecv(u[-1:], source=right, tag=1),\n"
        "                comm.Isend(scratch[1:], dest=right, tag=0), comm.Isend(scratch[:1], dest=left, tag=1)]\n"
        "    scratch[:] = 0\n"
        "    MPI.Request.Waitall(requests)\n"
        "    return u")
    verdict = mpinb.check("halo_exchange", pool=pool4)
    assert not verdict
    assert "The answers are right, but only by accident: ranks 0-3: the buffer of Isend at line 5 changed " \
           "before the send completed (seen when line 7 completed it)" in str(verdict), str(verdict)


def test_what_earlier_cells_left_does_not_fail_a_right_answer(pool4):
    """A message an earlier cell sent and nobody took, a communicator it dropped: told under the
    runs, but not this answer's doing."""
    # (on a communicator of its own: on the world, the exercise's receive from ANY_TAG would take
    # it, and deadlock, which is why the message is told)
    left = pool4.run("side = comm.Dup()\nif rank == 0:\n    side.send('stale', dest=1, tag=99)\n"
                     "comm.Barrier()\ngone = comm.Dup()\ndel gone")
    assert {f.check for f in left.findings} == {"unreceived", "communicator-dropped"}, left.findings
    pool4.run(solution("exchange"))
    verdict = mpinb.check("exchange", pool=pool4)
    assert verdict, str(verdict)
    taken = pool4.run("got = side.recv(source=0, tag=99) if rank == 1 else None\nside.Free()\ngot")
    assert taken.value[1] == "stale" and taken.findings == []
