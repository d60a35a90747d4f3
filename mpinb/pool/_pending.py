"""A run in flight, seen per rank: sent to each rank directly, or relayed by rank 0.

Both kinds answer the same questions (which ranks finished, whether one failed, what each printed,
published and replied), so that :mod:`._run` follows a run without knowing how it was sent.
:func:`send` chooses the route (see :class:`Route`).
"""

from __future__ import annotations

import itertools
import pickle
import time
from collections.abc import Callable
from typing import Any, Protocol

from .. import rank as _rank
from ..common._protocol import DONE_KEY, KEPT_REPLY, Reply

RankReply = Reply | BaseException | None  # an exception for a failed request, None if still running
KEPT_FETCH_TIMEOUT = 60.0  # a large reply left on its rank comes within this (hundreds of MB)


class Route:
    """How the pool's runs go: through rank 0's relay (one message, which rank 0 passes on to the
    others: see ``mpinb.rank._relay``) once it is open, or to each rank directly."""

    def __init__(self) -> None:
        self.relaying = False  # whether rank 0's relay is open
        self.last_relayed = 0  # the number of the last relayed run (what a recovery asks about)
        self._numbers = itertools.count(1)
        self._rank0_request: Any = None  # the last run that rank 0 took part in

    def can_relay(self, ranks: list[int]) -> bool:
        """Relay a run when it goes to several ranks and rank 0 is free to relay (a run that rank 0
        is still busy with would hold the new one back)."""
        if not self.relaying or len(ranks) < 2:
            return False
        return 0 in ranks or not self._rank0_busy()

    def _rank0_busy(self) -> bool:
        request = self._rank0_request
        return request is not None and not request.ready()

    def next_relayed(self) -> int:
        self.last_relayed = next(self._numbers)
        return self.last_relayed

    def running(self, pending: Pending) -> None:
        """Note the run just sent: one that rank 0 relays or takes part in keeps it busy."""
        if isinstance(pending, Relayed) or 0 in pending.ranks:
            self._rank0_request = pending.request


class Ranks(Protocol):
    """What a run in flight needs of the pool's supervisor: its client, its ranks' engines, its route."""

    client: Any  # ipyparallel.Client
    engine_of: dict[int, int]
    route: Route

    def view(self, ranks: list[int]) -> Any: ...  # an ipyparallel DirectView


def send(supervisor: Ranks, call: Callable[..., Reply], args: tuple, ranks: list[int]) -> Pending:
    """Start ``call(*args)`` on ``ranks``, relayed through rank 0 if the route allows."""
    pending: Pending
    if supervisor.route.can_relay(ranks):
        pending = Relayed(supervisor, call.__name__, args, ranks)
    else:
        pending = Direct(supervisor, call, args, ranks)
    supervisor.route.running(pending)
    return pending


class _Sent:
    """What both kinds share: one ipyparallel request (per rank, or to rank 0) to wait for."""

    request: Any  # ipyparallel.AsyncResult

    def ready(self) -> bool:
        return self.request.ready()

    def wait(self, timeout: float) -> None:
        self.request.wait(timeout)


class Direct(_Sent):
    """One ipyparallel request per rank (a single rank, or when rank 0 cannot relay)."""

    def __init__(self, supervisor: Ranks, call: Callable[..., Reply], args: tuple, ranks: list[int]):
        self.client = supervisor.client
        self.ranks = ranks
        self.request = supervisor.view(ranks).apply_async(call, *args)
        self.msg_ids: list[str] = self.request.msg_ids
        self._checked: set[str] = set()

    @property
    def stdout(self) -> list[str]:
        return self.request.stdout

    @property
    def stderr(self) -> list[str]:
        return self.request.stderr

    @property
    def outputs(self) -> list[list[dict]]:
        return self.request.outputs

    @property
    def data(self) -> list[dict]:
        return self.request.data

    def finished(self) -> list[bool]:
        return [msg_id not in self.client.outstanding for msg_id in self.msg_ids]

    def failure_seen(self) -> bool:
        """Whether a finished rank's reply carries an error (each reply fetched once)."""
        if self.request.ready():  # all in: the request holds the replies (see fetch_reply)
            return any(isinstance(reply, BaseException) or (isinstance(reply, dict) and reply.get("error"))
                       for reply in self.replies())
        for msg_id, over in zip(self.msg_ids, self.finished()):
            if not over or msg_id in self._checked:
                continue
            self._checked.add(msg_id)
            reply = fetch_reply(self.client, msg_id, timeout=1)
            if isinstance(reply, BaseException) or (isinstance(reply, dict) and reply.get("error")):
                return True
        return False

    def replies(self) -> list[RankReply]:
        """Our rank functions catch every error of user code, so the slow path (asking per message)
        only runs when a request itself failed (a rank died) or ranks are still busy."""
        if self.request.ready():
            try:
                return list(self.request.get())
            except Exception:  # noqa: BLE001 - a request failed: each rank's own reply, or its error
                # (ipyparallel keeps them on the request once all are in, and drops them elsewhere)
                raw = getattr(self.request, "_raw_results", None)
                if raw is not None and len(raw) == len(self.msg_ids):
                    return list(raw)
        return [fetch_reply(self.client, msg_id, timeout=5) if over else None
                for msg_id, over in zip(self.msg_ids, self.finished())]

    def wait_for_output(self, timeout: float) -> None:
        self.request.wait_for_output(timeout)

    def forget(self) -> None:
        """Nothing to clean: ipyparallel drops the metadata of its own requests."""


def fetch_reply(client: Any, msg_id: str, timeout: float) -> RankReply:
    """The reply to ``msg_id``, or the error it raised, while the request it belongs to is not
    complete. Called once ``msg_id`` has left ``client.outstanding``: ipyparallel's io thread
    removes it there a moment before it stores the result, so the result is waited for, briefly.
    (Once the whole request is complete, ipyparallel hands the results over to the request and
    drops them here: read them from the request then.)"""
    deadline = time.monotonic() + timeout
    while msg_id not in client.results and time.monotonic() < deadline:
        time.sleep(0.001)
    try:
        return client.results[msg_id]
    except KeyError:
        return TimeoutError(f"no reply to {msg_id} within {timeout:g} s")


class Relayed(_Sent):
    """One request to rank 0, which relays the run to the other ranks (see ``mpinb.rank._relay``).

    Each rank's output and announcements arrive under its own id, ``<rank 0's msg_id>/<rank>``;
    rank 0's own under the request's id.
    """

    def __init__(self, supervisor: Ranks, call_name: str, args: tuple, ranks: list[int]):
        self.supervisor = supervisor
        self.client = client = supervisor.client
        self.ranks = ranks
        self.cell = supervisor.route.next_relayed()
        self.request = client[supervisor.engine_of[0]].apply_async(_rank.relay, call_name, args, ranks, self.cell)
        leader = self.request.msg_ids[0]
        self.msg_ids = [leader if rank == 0 else f"{leader}/{rank}" for rank in ranks]
        # Rank 0's entry is the request's own (ipyparallel drops it from client.metadata once the
        # output is complete); the others' are created here, so that status for them is kept too.
        self._metadata = [self.request._metadata[0] if rank == 0 else client.metadata[msg_id]
                          for rank, msg_id in zip(ranks, self.msg_ids)]
        self._replies: list[RankReply] | None = None

    @property
    def stdout(self) -> list[str]:
        return self._text("stdout")

    @property
    def stderr(self) -> list[str]:
        return self._text("stderr")

    def _text(self, stream: str) -> list[str]:
        """What each rank printed: sent live, or (a quick part's) held back and in its reply."""
        live = [md[stream] or "" for md in self._metadata]
        if not self.request.ready():
            return live
        return [reply.get(stream, "") + text if isinstance(reply, dict) else text  # type: ignore[operator]
                for reply, text in zip(self.replies(), live)]

    @property
    def outputs(self) -> list[list[dict]]:
        return [md["outputs"] for md in self._metadata]

    @property
    def data(self) -> list[dict]:
        return [md["data"] for md in self._metadata]

    def finished(self) -> list[bool]:
        if self.request.ready():
            return [reply is not None for reply in self.replies()]
        return [DONE_KEY in md["data"] for md in self._metadata]

    def failure_seen(self) -> bool:
        return any(md["data"].get(DONE_KEY, {}).get("error") for md in self._metadata)

    def replies(self) -> list[RankReply]:
        if not self.request.ready():
            return [None] * len(self.ranks)
        if self._replies is None:
            try:
                gathered = self.request.get()
            except Exception as err:  # noqa: BLE001 - rank 0's request failed: no rank's reply came
                self._replies = [err] * len(self.ranks)
            else:
                self._replies = [pickle.loads(reply) if isinstance(reply, bytes) else reply
                                 for reply in self._fetch_kept(gathered)]
        return self._replies

    def _fetch_kept(self, gathered: list) -> list:
        """The replies, with those too large to relay fetched from their ranks directly."""
        kept = [rank for rank, reply in zip(self.ranks, gathered) if reply == KEPT_REPLY]
        if not kept:
            return gathered
        request = self.supervisor.view(kept).apply_async(_rank.take_kept, self.cell)
        try:
            fetched: list = list(request.get(timeout=KEPT_FETCH_TIMEOUT))
        except Exception as err:  # noqa: BLE001 - a rank died or stalls: its reply is lost, and says why
            fetched = [RuntimeError(f"its reply was too large to relay and could not be fetched: {err}")] * len(kept)
        by_rank = dict(zip(kept, fetched))
        return [by_rank.get(rank, reply) for rank, reply in zip(self.ranks, gathered)]

    def wait_for_output(self, timeout: float) -> None:
        """Rank 0's output ends with its request; another rank that wrote says so when its output
        is sent (after it, on the same channel)."""
        deadline = time.monotonic() + timeout
        self.request.wait_for_output(timeout)
        writers = [md for md, reply in zip(self._metadata, self.replies())
                   if isinstance(reply, dict) and reply.get("wrote")]
        while any(DONE_KEY not in md["data"] for md in writers) and time.monotonic() < deadline:
            time.sleep(0.002)

    def forget(self) -> None:
        """Drop the per-rank entries that this run added to the client's metadata."""
        for rank, msg_id in zip(self.ranks, self.msg_ids):
            if rank != 0:
                self.client.metadata.pop(msg_id, None)


Pending = Direct | Relayed
