"""The digits data (scikit-learn's bundled copy: no download) and how batches are cut."""

from __future__ import annotations

import numpy as np


def load_digits_data() -> tuple[np.ndarray, np.ndarray]:
    """1,797 8x8 images as float64 rows in [0, 1], and their labels 0-9."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.data.astype(np.float64) / 16.0, digits.target.astype(np.int64)


def global_batches(n_samples: int, batch_size: int, steps: int, seed: int = 0) -> list[np.ndarray]:
    """The sample indices of each training step, the same on every rank (same seed): shuffled
    epochs cut into batches of ``batch_size`` (an epoch's last, shorter batch is kept)."""
    rng = np.random.default_rng(seed)
    batches: list[np.ndarray] = []
    while len(batches) < steps:
        order = rng.permutation(n_samples)
        batches.extend(order[i:i + batch_size] for i in range(0, n_samples, batch_size))
    return batches[:steps]


def shard(indices: np.ndarray, rank: int, size: int) -> np.ndarray:
    """This rank's part of a global batch: consecutive, sizes differing by at most one."""
    return np.array_split(indices, size)[rank]
