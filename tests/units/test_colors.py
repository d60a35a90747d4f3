"""The palette (mpinb/_colors.py): one set of colours, so Python's drawings and the widgets agree."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


def test_one_palette_for_python_and_the_widgets():
    from mpinb import _colors
    from mpinb.common._events import KIND_NAMES

    assert len(_colors.KIND_COLORS) == len(KIND_NAMES)
    assert [_colors.WIDGET_COLORS[f"kind-{name}"] for name in KIND_NAMES] == list(_colors.KIND_COLORS)
    assert _colors.rank_color(11) == _colors.PALETTE[1]
    assert _colors.tint("#4e79a7", 0.5) == "rgba(78,121,167,0.5)"
