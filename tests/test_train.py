"""mpinb.train: the numpy MLP's gradients, the allreduces, tensor and pipeline parallelism, each
against a serial computation, on real ranks at sizes 1 and 4."""

from __future__ import annotations

import numpy as np
import pytest

from mpinb.train import (
    bubble_fraction,
    gpipe_schedule,
    init_mlp,
    interleaved_bubble,
    interleaved_schedule,
    load_digits_data,
    loss_and_grads,
    one_f_one_b_schedule,
    peak_activations,
)


@pytest.mark.unit
def test_backward_pass_matches_finite_differences():
    rng = np.random.default_rng(0)
    params = init_mlp([5, 4, 3], seed=1)
    X, y = rng.random((6, 5)), rng.integers(0, 3, 6)
    _, grads = loss_and_grads(params, X, y)
    for p, g in zip(params, grads):
        for index in np.ndindex(p.shape):
            saved = p[index]
            p[index] = saved + 1e-6
            up, _ = loss_and_grads(params, X, y)
            p[index] = saved - 1e-6
            down, _ = loss_and_grads(params, X, y)
            p[index] = saved
            assert abs((up - down) / 2e-6 - g[index]) < 1e-6


@pytest.mark.unit
def test_digits_are_bundled_and_scaled():
    X, y = load_digits_data()
    assert X.shape == (1797, 64) and X.dtype == np.float64 and 0 <= X.min() and X.max() == 1.0
    assert sorted(set(y.tolist())) == list(range(10))


@pytest.mark.unit
@pytest.mark.parametrize("schedule", [gpipe_schedule, one_f_one_b_schedule])
@pytest.mark.parametrize("stages,micro", [(1, 1), (4, 1), (4, 3), (4, 8), (3, 16)])
def test_schedules_run_every_micro_batch_once_forward_before_backward(schedule, stages, micro):
    for ops in schedule(stages, micro):
        assert sorted(ops) == sorted([("F", i) for i in range(micro)] + [("B", i) for i in range(micro)])
        assert all(ops.index(("F", i)) < ops.index(("B", i)) for i in range(micro))
    peaks = [peak_activations(ops) for ops in schedule(stages, micro)]
    if schedule is gpipe_schedule:
        assert peaks == [micro] * stages
    else:
        assert max(peaks) == min(stages, micro)
    assert bubble_fraction(stages, micro) == (stages - 1) / (micro + stages - 1)


@pytest.mark.unit
@pytest.mark.parametrize("stages,chunks,micro", [(4, 1, 4), (4, 2, 4), (4, 2, 8), (4, 4, 8), (2, 3, 6), (1, 2, 3)])
def test_the_interleaved_schedule_runs_each_chunk_once_and_shrinks_the_bubble(stages, chunks, micro):
    for ops in interleaved_schedule(stages, chunks, micro):
        expected = [(kind, c, i) for kind in "FB" for c in range(chunks) for i in range(micro)]
        assert sorted(ops) == sorted(expected)
        assert all(ops.index(("F", c, i)) < ops.index(("B", c, i)) for c in range(chunks) for i in range(micro))
    # the replay that measures it also proves it deadlock-free; Megatron's (p-1)/(v m + p - 1)
    assert interleaved_bubble(stages, chunks, micro) == pytest.approx((stages - 1) / (chunks * micro + stages - 1))
    if stages > 1 and chunks > 1:
        assert interleaved_bubble(stages, chunks, micro) < bubble_fraction(stages, micro)
    if chunks == 1:  # one chunk per rank is plain 1F1B
        plain = [[(kind, i) for kind, _, i in ops] for ops in interleaved_schedule(stages, 1, micro)]
        assert plain == one_f_one_b_schedule(stages, micro)


@pytest.mark.unit
def test_the_interleaved_schedule_says_what_it_needs():
    with pytest.raises(ValueError, match="6 is not a multiple of 4"):
        interleaved_schedule(4, 2, 6)


RING = """
from mpinb.train import ring_allreduce, bucketed_allreduce, per_tensor_allreduce
rng = np.random.default_rng(rank)
x = rng.random(n)
ring = ring_allreduce(comm, x)
arrays = [rng.random((3, 5)), rng.random(7), rng.random((2, 2))]
fused = bucketed_allreduce(comm, arrays, bucket_bytes=130)
single = per_tensor_allreduce(comm, arrays)
"""


@pytest.mark.parametrize("n", [1, 10, 1001])
def test_ring_and_bucketed_allreduce_equal_the_serial_sum(any_pool, n):
    size = any_pool.settings.n
    any_pool.push({"n": n})
    any_pool.run(RING)
    want = sum(np.random.default_rng(r).random(n) for r in range(size))
    for ring in any_pool.pull("ring"):
        np.testing.assert_allclose(ring, want, rtol=1e-13)
    rngs = [np.random.default_rng(r) for r in range(size)]
    for g in rngs:
        g.random(n)
    arrays = [[g.random((3, 5)), g.random(7), g.random((2, 2))] for g in rngs]
    wanted = [sum(a[i] for a in arrays) for i in range(3)]
    for fused, single in zip(any_pool.pull("fused"), any_pool.pull("single")):
        for f, s, w in zip(fused, single, wanted):
            np.testing.assert_allclose(f, w, rtol=1e-13)
            np.testing.assert_allclose(s, w, rtol=1e-13)


def test_ring_allreduce_sends_2_p_minus_1_chunks_to_the_right(pool4):
    result = pool4.run("from mpinb.train import ring_allreduce\nring_allreduce(comm, np.ones(4000))")
    messages = result.trace.messages()
    assert {(m["source"], m["dest"]) for m in messages} == {(r, (r + 1) % 4) for r in range(4)}
    assert len(messages) == 4 * 2 * 3 and {m["bytes"] for m in messages} == {8000}


def test_tensor_parallel_equals_the_unsplit_model(pool4):
    code = """
from mpinb.train import init_mlp, split_for_tensor_parallel, tensor_parallel_loss_and_grads
X = np.random.default_rng(5).random((12, 8)); y = np.arange(12) % 3
shards = split_for_tensor_parallel(init_mlp([8, 10, 3], seed=2), rank, size)
tp_loss, tp_grads = tensor_parallel_loss_and_grads(comm, shards, X, y)
"""
    pool4.run(code)
    X, y = np.random.default_rng(5).random((12, 8)), np.arange(12) % 3
    loss, grads = loss_and_grads(init_mlp([8, 10, 3], seed=2), X, y)
    shards = pool4.pull("tp_grads")
    assert np.allclose(pool4.pull("tp_loss"), loss, rtol=1e-12)
    np.testing.assert_allclose(np.hstack([s[0] for s in shards]), grads[0], rtol=1e-12)
    np.testing.assert_allclose(np.concatenate([s[1] for s in shards]), grads[1], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.vstack([s[2] for s in shards]), grads[2], rtol=1e-12)
    np.testing.assert_allclose(sum(s[3] for s in shards), grads[3], rtol=1e-12)


@pytest.mark.parametrize("schedule", ["gpipe_schedule", "one_f_one_b_schedule"])
def test_pipeline_gradients_equal_the_serial_run(pool4, schedule):
    code = f"""
from mpinb.train import init_mlp, run_pipeline, {schedule}
sizes = [8, 6, 6, 5, 3]
params = init_mlp(sizes, seed=3)
X = np.random.default_rng(9).random((10, 8)); y = np.arange(10) % 3
parts = np.array_split(np.arange(10), 4)
pl_loss, pl_dW, pl_db, _, pl_peak = run_pipeline(
    comm, {schedule}(size, 4)[rank], params[2 * rank], params[2 * rank + 1],
    [X[p] for p in parts], [y[p] for p in parts], sizes, [len(p) for p in parts])
"""
    pool4.run(code)
    sizes = [8, 6, 6, 5, 3]
    loss, grads = loss_and_grads(init_mlp(sizes, seed=3), np.random.default_rng(9).random((10, 8)), np.arange(10) % 3)
    assert pool4.pull("pl_loss")[3] == pytest.approx(loss, rel=1e-12)
    for stage, (dW, db) in enumerate(zip(pool4.pull("pl_dW"), pool4.pull("pl_db"))):
        np.testing.assert_allclose(dW, grads[2 * stage], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(db, grads[2 * stage + 1], rtol=1e-12, atol=1e-14)
    peaks = pool4.pull("pl_peak")
    assert peaks == ([4] * 4 if schedule == "gpipe_schedule" else [4, 3, 2, 1])


@pytest.mark.parametrize("chunks", [1, 2])
def test_interleaved_pipeline_gradients_equal_the_serial_run(pool4, chunks):
    """8 layers on 4 ranks: two per rank, as one chunk of two layers or as two chunks of one."""
    code = f"""
from mpinb.train import init_mlp, interleaved_schedule, run_interleaved
sizes = [8, 7, 6, 6, 5, 5, 4, 4, 3]
params = init_mlp(sizes, seed=4)
layer = lambda k: (params[2 * k], params[2 * k + 1])
if {chunks} == 1:
    mine, widths = [[layer(2 * rank), layer(2 * rank + 1)]], [sizes[2 * s] for s in range(4)]
else:
    mine, widths = [[layer(c * size + rank)] for c in range(2)], sizes[:8]
X = np.random.default_rng(9).random((12, 8)); y = np.arange(12) % 3
parts = np.array_split(np.arange(12), 4)
il_loss, il_dW, il_db, _, il_peak = run_interleaved(
    comm, interleaved_schedule(size, {chunks}, 4)[rank], mine,
    [X[p] for p in parts], [y[p] for p in parts], widths, [len(p) for p in parts])
"""
    pool4.run(code)
    sizes = [8, 7, 6, 6, 5, 5, 4, 4, 3]
    loss, grads = loss_and_grads(init_mlp(sizes, seed=4), np.random.default_rng(9).random((12, 8)), np.arange(12) % 3)
    assert pool4.pull("il_loss")[3] == pytest.approx(loss, rel=1e-12)
    dW, db = pool4.pull("il_dW"), pool4.pull("il_db")
    for rank in range(4):
        for chunk in range(chunks):
            for k in range(2 // chunks):
                layer = 2 * rank + k if chunks == 1 else chunk * 4 + rank
                np.testing.assert_allclose(dW[rank][chunk][k], grads[2 * layer], rtol=1e-12, atol=1e-14)
                np.testing.assert_allclose(db[rank][chunk][k], grads[2 * layer + 1], rtol=1e-12, atol=1e-14)


@pytest.mark.unit
def test_adam_on_a_shard_equals_the_same_elements_of_a_full_step():
    from mpinb.train import adam_update, flatten, shard_counts, unflatten

    rng = np.random.default_rng(3)
    param, grad = rng.standard_normal(11), rng.standard_normal(11)
    m, v = rng.standard_normal(11) ** 2, rng.standard_normal(11) ** 2
    full = adam_update(param, grad, m, v, step=3, lr=0.01)
    counts = shard_counts(11, 4)
    assert counts == [3, 3, 3, 2] and [len(a) for a in np.array_split(param, 4)] == counts
    start = 0
    for count in counts:
        part = slice(start, start + count)
        shard = adam_update(param[part], grad[part], m[part], v[part], step=3, lr=0.01)
        for whole, piece in zip(full, shard):
            assert np.array_equal(whole[part], piece)
        start += count
    # the first step moves every parameter by lr against its gradient's sign (bias correction)
    first, _, _ = adam_update(np.zeros(3), np.array([2.0, -0.5, 1e-3]), np.zeros(3), np.zeros(3), step=1, lr=0.1)
    np.testing.assert_allclose(first, [-0.1, 0.1, -0.1], rtol=1e-4)
    like = [np.zeros((2, 3)), np.zeros(4)]
    vector = np.arange(10.0)
    assert [a.shape for a in unflatten(vector, like)] == [(2, 3), (4,)]
    assert np.array_equal(flatten(unflatten(vector, like)), vector)
