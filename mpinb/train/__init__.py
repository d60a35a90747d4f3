"""What the distributed-training tutorials share.

The package holds a numpy MLP with its own backward pass, the digits data, gradient allreduces
(ring, bucketed), tensor-parallel layers, pipeline schedules, and Adam on flat vectors with the
shards ZeRO cuts them into.

Plain numpy and mpi4py, float64 throughout, so that every parallel result can be compared with a
serial run to the last bits.
"""

from ._adam import adam_update, flatten, shard_counts, unflatten
from ._allreduce import bucketed_allreduce, per_tensor_allreduce, ring_allreduce
from ._data import global_batches, load_digits_data, shard
from ._mlp import (
    accuracy,
    init_mlp,
    layer_backward,
    layer_forward,
    loss_and_grads,
    loss_grad,
    sgd_step,
)
from ._pipeline import (
    bubble_fraction,
    gpipe_schedule,
    interleaved_bubble,
    interleaved_schedule,
    one_f_one_b_schedule,
    peak_activations,
    run_interleaved,
    run_pipeline,
)
from ._tensor import split_for_tensor_parallel, tensor_parallel_loss_and_grads

__all__ = [
    "accuracy",
    "adam_update",
    "bubble_fraction",
    "bucketed_allreduce",
    "flatten",
    "global_batches",
    "gpipe_schedule",
    "init_mlp",
    "interleaved_bubble",
    "interleaved_schedule",
    "layer_backward",
    "layer_forward",
    "load_digits_data",
    "loss_and_grads",
    "loss_grad",
    "one_f_one_b_schedule",
    "peak_activations",
    "per_tensor_allreduce",
    "ring_allreduce",
    "run_interleaved",
    "run_pipeline",
    "sgd_step",
    "shard",
    "shard_counts",
    "split_for_tensor_parallel",
    "tensor_parallel_loss_and_grads",
    "unflatten",
]
