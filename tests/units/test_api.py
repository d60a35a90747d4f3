"""The package's exports (mpinb/__init__.py): every public name resolves, so a rename cannot break `import mpinb`."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


def test_every_public_name_is_exported_and_resolves():
    import mpinb

    assert sorted(mpinb.__all__) == sorted(mpinb._EXPORTS)
    for name in mpinb.__all__:
        assert getattr(mpinb, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'Poool'"):
        mpinb.Poool  # noqa: B018
