"""The tutorials' data (mpinb/train/): the shipped digits are the UCI test set, so tutorials need no download."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


def test_the_shipped_digits_are_the_uci_test_set():
    from mpinb.train import load_digits_data

    X, y = load_digits_data()
    assert X.shape == (1797, 64) and X.dtype == np.float64 and 0 <= X.min() and X.max() == 1.0
    assert np.bincount(y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert X.sum() == 35107.375, "the same pixels as scikit-learn's copy (checked against load_digits)"
