"""Entry point of the pool's ipyparallel controller.

It is ipyparallel's own, with a heartbeat that starts fast and then slows down, and Unix sockets
named as its clients and engines name them.

A rank counts as registered only after its heart has answered a ping, so the heartbeat period
bounds how long start-up waits (two beats: 6 s with ipyparallel's default). A fast beat costs CPU
for the whole session, though: at 16 ranks, beating every 25 ms kept a third of a core busy on an
idle pool. So the monitor beats every ``MPINB_FAST_BEAT_MS`` until the ``MPINB_EXPECTED_HEARTS``
ranks have registered (or ``FAST_PHASE_LIMIT_S`` has passed), then at the configured period. A
heart is declared dead after the same time without answers in both phases, not the same count.

Over ``ipc``, ipyparallel's controller binds ``<prefix>-<port>`` while its client and engines
connect to ``<prefix>:<port>`` (ipyparallel 9): the controller here spells it their way, so that a
local pool can listen on Unix sockets in its private folder only (see ``_runfolder``).

With CurveZMQ (``--IPController.enable_curve=True``), ipyparallel drops its HMAC key, which lets
anyone who learns the controller's public key (which CurveZMQ takes as public) send it
messages. The controller here keeps a key of its own making, so that every message is encrypted
and signed; the key goes to the connection files only (0600), never onto a command line.

Each unregistration notification also says whether the engine's heart stopped
(``heart_stopped``) or its process was seen to end (by its nanny): across hosts, the notebook
names the rank whose process ended first as the cause (with any that ended within moments of it:
the launcher then ends the others), and the ranks whose hearts stopped in the same beat together
(a host cut off, say). See ``Supervisor._first_gone``.

Run as a script: the heart monitor runs in a forked process that inherits the patched class.
"""

import math
import os
import secrets
import sys
import time

from ipyparallel.controller.app import IPController, main
from ipyparallel.controller.heartmonitor import HeartMonitor
from ipyparallel.controller.hub import Hub

FAST_PHASE_LIMIT_S = 120.0

_configured_start = HeartMonitor.start
_configured_beat = HeartMonitor.beat


def _start_fast(self: HeartMonitor) -> None:
    self._slow_period = self.period
    self._slow_misses = self.max_heartmonitor_misses
    self._expected_hearts = int(os.environ.get("MPINB_EXPECTED_HEARTS", "0"))
    fast = min(int(os.environ.get("MPINB_FAST_BEAT_MS", "10")), self.period)
    patience_ms = self._slow_period * self._slow_misses
    self.period = fast
    self.max_heartmonitor_misses = math.ceil(patience_ms / fast)
    self._fast_until = time.monotonic() + FAST_PHASE_LIMIT_S
    _configured_start(self)


def _beat_then_maybe_slow_down(self: HeartMonitor) -> None:
    _configured_beat(self)
    if self.period == self._slow_period:
        return
    if len(self.hearts) >= self._expected_hearts or time.monotonic() > self._fast_until:
        self.period = self._slow_period
        self.max_heartmonitor_misses = self._slow_misses
        self.on_probation = {}  # misses counted at the fast beat would be too many at the slow one
        self.caller.callback_time = self._slow_period


def _url_as_clients_spell_it(self: IPController, kind: str, channel: str, index: int | None = None) -> str:
    info = {"engine": self.engine_info, "client": self.client_info, "internal": self.internal_info}[kind]
    port = info[channel] if index is None else info[channel][index]
    return f"{info['interface']}:{port}"


_configured_stopped_heart = Hub.handle_stopped_heart
_configured_unregister = Hub.unregister_engine


def _stopped_heart_noted(self: Hub, heart: bytes) -> None:
    self._mpinb_heart_stopped = True
    try:
        _configured_stopped_heart(self, heart)
    finally:
        self._mpinb_heart_stopped = False


def _unregister_saying_why(self: Hub, ident: object, msg: dict) -> None:
    send = self.session.send
    stopped = getattr(self, "_mpinb_heart_stopped", False)

    def send_saying_why(stream: object, msg_type: object, content: object = None, *args: object,
                        **kwargs: object) -> object:
        if msg_type == "unregistration_notification" and isinstance(content, dict):
            content = {**content, "heart_stopped": stopped}
        return send(stream, msg_type, content, *args, **kwargs)

    self.session.send = send_saying_why
    try:
        _configured_unregister(self, ident, msg)
    finally:
        del self.session.send


IPController.construct_url = _url_as_clients_spell_it
HeartMonitor.start = _start_fast
HeartMonitor.beat = _beat_then_maybe_slow_down
Hub.handle_stopped_heart = _stopped_heart_noted
Hub.unregister_engine = _unregister_saying_why



def _signed_as_well_as_encrypted(argv: list[str]) -> None:
    curve = "--IPController.enable_curve=True" in argv or os.environ.get("IPP_ENABLE_CURVE") == "1"
    if curve and not any(arg.startswith("--Session.key") for arg in argv):
        argv.append(f"--Session.key={secrets.token_hex(32)}")  # sys.argv only: /proc shows the original


if __name__ == "__main__":
    _signed_as_well_as_encrypted(sys.argv)
    main()
