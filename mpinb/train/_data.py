"""The digits data (shipped with mpinb: no download, see DIGITS.md) and how batches are cut."""

from __future__ import annotations

import gzip
import pathlib

import numpy as np

DIGITS = pathlib.Path(__file__).with_name("digits.csv.gz")


def load_digits_data() -> tuple[np.ndarray, np.ndarray]:
    """1,797 8x8 images as float64 rows in [0, 1], and their labels 0-9."""
    with gzip.open(DIGITS, "rt") as handle:
        table = np.loadtxt(handle, delimiter=",", dtype=np.int64)
    return table[:, :-1].astype(np.float64) / 16.0, table[:, -1]


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
