"""Questions to the ranks' debuggers on ipyparallel's control channel (see ``mpinb.rank._debugger``).

ipykernel serves the control channel in a thread of its own, so a rank answers while it is idle,
while it runs a cell, and while it is stopped at a breakpoint or blocked in MPI. Messages go
through the pool's controller, signed with the session key like every other message.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..common._protocol import DEBUG_ANSWER_WITHIN, DEBUG_COMPUTE_WITHIN, DEBUG_REQUEST

if TYPE_CHECKING:
    from ._supervisor import Supervisor

ANSWER_WITHIN = DEBUG_ANSWER_WITHIN
COMPUTE_WITHIN = DEBUG_COMPUTE_WITHIN  # what a rank that answers may take to compute (a digest of a large array)


def ask_computing(supervisor: Supervisor, ranks: list[int], op: str,
                  args: Mapping[str, object] | None = None) -> dict[int, dict]:
    """Each rank's answer to ``op``, which computes (``inspect`` digests a whole array): the
    ranks that answer a question that computes nothing within ``ANSWER_WITHIN`` are then given
    ``COMPUTE_WITHIN`` seconds. A crowded machine (ranks beside other work on few cores) may take
    longer than ANSWER_WITHIN to compute, and such a rank is working, not stuck in a C call."""
    alive = ask(supervisor, ranks, "state")
    answering = [rank for rank in ranks if alive[rank].get("status") != "timeout"]
    answers = ask(supervisor, answering, op, args, timeout=COMPUTE_WITHIN) if answering else {}
    return {rank: answers.get(rank, alive[rank]) for rank in ranks}


def ask(supervisor: Supervisor, ranks: list[int], op: str, args: Mapping[str, object] | None = None,
        timeout: float = ANSWER_WITHIN) -> dict[int, dict]:
    """Each rank's answer to ``op`` with ``args``; a rank that did not answer within ``timeout``
    seconds gets ``{"status": "timeout"}`` (its main thread holds Python's lock in a long C call, say)."""
    client = supervisor.client
    identities = client._build_targets(supervisor.engines(ranks))[0]
    request = {"op": op, "args": dict(args or {})}
    futures = [client._send(client._control_stream, DEBUG_REQUEST, content=request, ident=ident)
               for ident in identities]
    deadline = time.monotonic() + timeout
    answers: dict[int, dict] = {}
    for rank, future in zip(ranks, futures):
        try:
            answers[rank] = future.result(timeout=max(deadline - time.monotonic(), 0.0))["content"]
        except Exception:  # noqa: BLE001 - not answered in time (concurrent.futures.TimeoutError)
            answers[rank] = {"status": "timeout"}
    return answers


def failure(answer: dict) -> str | None:
    """What went wrong with one rank's answer, in words; ``None`` if it is fine."""
    if answer.get("status") == "ok":
        return None
    if answer.get("status") == "timeout":
        return "did not answer (busy in a call that holds Python's lock?)"
    return f"{answer.get('ename', 'error')}: {answer.get('evalue', '')}"
