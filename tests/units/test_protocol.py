"""Pool-rank messages (mpinb/common/_protocol.py): constructors give every required key, so no side reads a gap."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


def test_the_protocols_constructors_give_every_key_their_type_requires():
    from mpinb.common import _protocol

    def required(kind: type) -> set[str]:
        return {key for key, note in kind.__annotations__.items() if "NotRequired" not in str(note)}

    failed = _protocol.failure("ValueError", "bad", "Traceback ...")
    assert set(failed) == required(_protocol.Failure) and failed["line"] is None
    assert set(_protocol.reply()) == required(_protocol.Reply)
    assert _protocol.reply(failed)["error"] is failed and not _protocol.reply()["has_value"]
    hello = _protocol.hello(ready=True, failure=None, rank=0, size=1, host="h", pid=1, mpi="MPICH", tracer="C")
    assert set(hello) == required(_protocol.Hello)
