"""Values from the ranks (mpinb/common/_values.py): pickled when they can be, else their repr, so none is lost."""

from __future__ import annotations

import numpy as np
import pytest

from mpinb.common._values import ReprOnly, pack, unpack

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


def test_values_travel_pickled_or_as_their_repr():
    data, text, why = pack({"a": np.arange(3)})
    assert data is not None and text.startswith("{'a': array") and why == ""
    assert unpack(data, text, why)["a"].tolist() == [0, 1, 2]
    data, text, why = pack(lambda: 1)
    assert data is None and "PicklingError" in why or "AttributeError" in why
    assert isinstance(unpack(data, text, why), ReprOnly)
    assert unpack(b"not a pickle", "x", "") == ReprOnly("x", "")


def test_a_broken_repr_does_not_lose_the_value():
    class Broken:
        def __repr__(self):
            raise RuntimeError("no")

    _, text, _ = pack(Broken())
    assert "repr failed" in text
