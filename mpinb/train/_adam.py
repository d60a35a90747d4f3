"""Adam on flat vectors, and the shards ZeRO splits them into."""

from __future__ import annotations

import numpy as np

Params = list[np.ndarray]


def flatten(arrays: Params) -> np.ndarray:
    """Every array, one after the other, as one vector (what buckets and shards are cut from)."""
    return np.concatenate([a.ravel() for a in arrays])


def unflatten(vector: np.ndarray, like: Params) -> Params:
    """The inverse of :func:`flatten`: arrays shaped as ``like``."""
    out, offset = [], 0
    for a in like:
        out.append(vector[offset:offset + a.size].reshape(a.shape))
        offset += a.size
    return out


def shard_counts(n: int, size: int) -> list[int]:
    """How many of ``n`` elements each of ``size`` ranks owns (``np.array_split``'s rule: the
    first ``n % size`` ranks own one more)."""
    return [n // size + (1 if r < n % size else 0) for r in range(size)]


def adam_update(param: np.ndarray, grad: np.ndarray, m: np.ndarray, v: np.ndarray, step: int, lr: float,
                betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> tuple[np.ndarray, ...]:
    """One Adam step (Kingma and Ba, with bias correction) on any slice of the parameters:
    elementwise, so a shard updated alone equals the same elements of a full update.
    ``step`` counts from 1. Returns the new ``(param, m, v)``."""
    beta1, beta2 = betas
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    m_hat = m / (1 - beta1 ** step)
    v_hat = v / (1 - beta2 ** step)
    return param - lr * m_hat / (np.sqrt(v_hat) + eps), m, v
