"""JupyterLab's debugger panel on the ranks, for the MPI kernel.

JupyterLab speaks the Debug Adapter Protocol to a kernel (``debug_request`` on the control
channel, ``debug_event`` on IOPub). ipykernel answers it with debugpy in the kernel's own
process; the MPI kernel answers it from the ranks' debugger (``mpinb.rank._debugger``): a
breakpoint set in a cell's gutter stops the ranks that reach it, each rank is a thread named
"rank N", and the call stack, variables, step and continue act on one rank.

JupyterLab shows the thread of the last ``stopped`` event (it has no thread picker): the adapter
announces each rank as it stops, and when one continues, the next one still stopped. In the
debug console, ``rank N`` shows rank N.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from typing import Any

from ..pool import _channel
from . import _session as session

FRAMES = 10_000  # a frame's id: rank * FRAMES + level + 1 (DAP ids are positive)
_SWITCH = re.compile(r"^\s*rank\s+(\d+)\s*$")
STEPS = {"continue": "c", "next": "n", "stepIn": "s", "stepOut": "r"}


class RankDebugAdapter:
    """The Debug Adapter Protocol, answered by the ranks; ``handle`` takes one request."""

    def __init__(self, kernel: Any):
        self.kernel = kernel
        self.started = False
        self.breakpoints: dict[str, list[int]] = {}  # a cell's dumped path -> its lines
        self.announced: list[int] = []  # stopped ranks JupyterLab was told of, the current one last
        self.references: dict[int, tuple[int, int, str]] = {}  # variablesReference -> (rank, level, scope)
        self._lock = threading.Lock()
        self._seq = 0

    # -- what the run asks ---------------------------------------------------------------------

    def cell(self, code: str) -> tuple[str, list[int]] | None:
        """The name the ranks should run ``code`` under and its gutter breakpoints, when the
        panel is on (JupyterLab names a cell by a hash of its code)."""
        if not self.started:
            return None
        from ipykernel.compiler import get_file_name

        path = get_file_name(code)
        return path, self.breakpoints.get(path, [])

    def on_stop(self, breakpoints: Any) -> None:
        """Called while ranks are stopped (in the notebook's main thread): tell JupyterLab which
        stopped and which continued."""
        stopped = sorted(breakpoints.stopped)
        with self._lock:
            for rank in [r for r in self.announced if r not in stopped]:
                self.announced.remove(rank)
                self._event("continued", {"threadId": rank + 1, "allThreadsContinued": False})
            for rank in stopped:
                if rank not in self.announced:
                    self.announced.append(rank)
                    self._event("stopped", {"reason": "breakpoint", "threadId": rank + 1, "allThreadsStopped": False})

    def run_ended(self) -> None:
        with self._lock:
            for rank in self.announced:
                self._event("continued", {"threadId": rank + 1, "allThreadsContinued": False})
            self.announced = []

    # -- the protocol --------------------------------------------------------------------------

    def handle(self, request: dict) -> dict:
        command = request.get("command", "")
        handler = self.REQUESTS.get(command)
        response = {"type": "response", "request_seq": request.get("seq", 0), "command": command, "success": True}
        if handler is None:
            return response | {"success": False, "message": f"mpinb's debugger of the ranks has no {command!r}"}
        try:
            response["body"] = handler(self, request.get("arguments") or {}) or {}
        except Exception as err:  # noqa: BLE001 - the panel shows the message
            response.update(success=False, message=str(err))
        return response

    def _initialize(self, arguments: dict) -> dict:
        self.started = True
        return {"supportsConfigurationDoneRequest": True, "supportsEvaluateForHovers": True,
                "supportsSetVariable": False, "supportsConditionalBreakpoints": False,
                "supportsStepBack": False, "exceptionBreakpointFilters": []}

    def _attach(self, arguments: dict) -> dict:
        return {}

    def _configurationDone(self, arguments: dict) -> dict:
        return {}

    def _disconnect(self, arguments: dict) -> dict:
        self.started = False
        self.breakpoints = {}
        with self._lock:
            ranks, self.announced = list(self.announced), []
        pool = session.current_pool()
        if ranks and pool is not None and pool.running:
            pool.ask_debuggers(ranks, "detach")
        return {}

    def _debugInfo(self, arguments: dict) -> dict:
        from ipykernel.compiler import get_tmp_directory, get_tmp_hash_seed

        return {"isStarted": self.started, "hashMethod": "Murmur2", "hashSeed": get_tmp_hash_seed(),
                "tmpFilePrefix": get_tmp_directory() + os.sep, "tmpFileSuffix": ".py",
                "breakpoints": [{"source": path, "breakpoints": [{"line": line} for line in lines]}
                                for path, lines in self.breakpoints.items()],
                # the current rank first: JupyterLab's buttons act on the first of these
                "stoppedThreads": [rank + 1 for rank in reversed(self.announced)], "richRendering": True,
                "exceptionPaths": [], "copyToGlobals": False}

    def _dumpCell(self, arguments: dict) -> dict:
        from ipykernel.compiler import get_file_name

        code = arguments["code"]
        path = get_file_name(code)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(code)
        return {"sourcePath": path}

    def _setBreakpoints(self, arguments: dict) -> dict:
        path = arguments["source"]["path"]
        lines = sorted({int(b["line"]) for b in arguments.get("breakpoints", [])})
        if lines:
            self.breakpoints[path] = lines
        else:
            self.breakpoints.pop(path, None)
        return {"breakpoints": [{"verified": True, "line": line, "source": {"path": path}} for line in lines]}

    def _setExceptionBreakpoints(self, arguments: dict) -> dict:
        return {}

    def _threads(self, arguments: dict) -> dict:
        pool = session.current_pool()
        size = pool.size if pool is not None else 0
        return {"threads": [{"id": rank + 1, "name": f"rank {rank}"} for rank in range(size)]}

    def _stackTrace(self, arguments: dict) -> dict:
        rank = int(arguments["threadId"]) - 1
        frames = self._ask(rank, "frames")["frames"]
        return {"stackFrames": [{"id": rank * FRAMES + level + 1, "name": f"rank {rank}: {frame['function']}",
                                 "line": frame["line"], "column": 1,
                                 "source": {"path": frame["file"], "name": os.path.basename(frame["file"])}}
                                for level, frame in enumerate(frames)],
                "totalFrames": len(frames)}

    def _scopes(self, arguments: dict) -> dict:
        rank, level = divmod(int(arguments["frameId"]) - 1, FRAMES)
        scopes = []
        for scope in ("locals", "globals"):
            reference = len(self.references) + 1
            self.references[reference] = (rank, level, scope)
            scopes.append({"name": scope.capitalize(), "variablesReference": reference, "expensive": False})
        return {"scopes": scopes}

    def _variables(self, arguments: dict) -> dict:
        rank, level, scope = self.references[int(arguments["variablesReference"])]
        rows = self._ask(rank, "variables", level=level, scope=scope)["variables"]
        return {"variables": [_variable(row) for row in rows]}

    def _inspectVariables(self, arguments: dict) -> dict:
        """The variables panel while no rank is stopped: rank 0's namespace."""
        pool = session.current_pool()
        if pool is None or not pool.running or pool.busy:
            return {"variables": []}
        rows = self._ask(0, "variables")["variables"]
        return {"variables": [_variable(row) for row in rows]}

    def _richInspectVariables(self, arguments: dict) -> dict:
        name = arguments.get("variableName", "")
        if not name.isidentifier():
            return {"data": {}, "metadata": {}}
        frame = arguments.get("frameId")
        rank, level = divmod(int(frame) - 1, FRAMES) if frame else (0, None)
        result = self._ask(rank, "evaluate", expression=name, level=level)
        return {"data": {"text/plain": result["result"]}, "metadata": {}}

    def _evaluate(self, arguments: dict) -> dict:
        expression = arguments.get("expression", "")
        switch = _SWITCH.match(expression)
        if switch:
            rank = int(switch.group(1))
            with self._lock:
                if rank not in self.announced:
                    raise ValueError(f"rank {rank} is not stopped (stopped: {self.announced or 'none'})")
                self.announced.remove(rank)
                self.announced.append(rank)
            self._event("stopped", {"reason": "pause", "threadId": rank + 1, "allThreadsStopped": False})
            return {"result": f"showing rank {rank}", "variablesReference": 0}
        frame = arguments.get("frameId")
        rank, level = divmod(int(frame) - 1, FRAMES) if frame else (self._current(), None)
        result = self._ask(rank, "evaluate", expression=expression, level=level)
        return {"result": result["result"], "type": result["type"], "variablesReference": 0}

    def _source(self, arguments: dict) -> dict:
        path = arguments["source"]["path"]
        with open(path, encoding="utf-8") as handle:
            return {"content": handle.read()}

    def _modules(self, arguments: dict) -> dict:
        return {"modules": [], "totalModules": 0}

    def _pause(self, arguments: dict) -> dict:
        raise ValueError("a rank stops at a gutter breakpoint or breakpoint(); `%mpi stacks` shows where every "
                         "rank is")

    def _step(self, command: str, arguments: dict) -> dict:
        rank = int(arguments["threadId"]) - 1
        with self._lock:
            if rank not in self.announced:
                raise ValueError(f"rank {rank} is not stopped (stopped: {self.announced or 'none'})")
        answer = self._ask(rank, "command", line=STEPS[command])
        state = answer.get("state") or {}
        with self._lock:
            if rank in self.announced:
                self.announced.remove(rank)
            self._event("continued", {"threadId": rank + 1, "allThreadsContinued": False})
            if state.get("mode") == "stopped":  # a step that ended at once: stopped again
                self.announced.append(rank)
                self._event("stopped", {"reason": "step", "threadId": rank + 1, "allThreadsStopped": False})
            elif self.announced:  # the panel moves on to a rank still stopped
                self._event("stopped", {"reason": "breakpoint", "threadId": self.announced[-1] + 1,
                                        "allThreadsStopped": False})
        return {"allThreadsContinued": False}

    def _continue(self, arguments: dict) -> dict:
        # JupyterLab (4.x) forgets the thread it shows before it asks, and names another (or 1):
        # continue the rank it shows, the last one announced.
        with self._lock:
            shown = self.announced[-1] if self.announced else int(arguments["threadId"]) - 1
        return self._step("continue", {"threadId": shown + 1})

    def _next(self, arguments: dict) -> dict:
        return self._step("next", arguments)

    def _stepIn(self, arguments: dict) -> dict:
        return self._step("stepIn", arguments)

    def _stepOut(self, arguments: dict) -> dict:
        return self._step("stepOut", arguments)

    # -- helpers -------------------------------------------------------------------------------

    def _current(self) -> int:
        with self._lock:
            return self.announced[-1] if self.announced else 0

    # The Debug Adapter Protocol's requests this adapter answers, by command
    REQUESTS: dict[str, Callable[[RankDebugAdapter, dict], dict]] = {
        "initialize": _initialize, "attach": _attach, "configurationDone": _configurationDone,
        "disconnect": _disconnect, "debugInfo": _debugInfo, "dumpCell": _dumpCell,
        "setBreakpoints": _setBreakpoints, "setExceptionBreakpoints": _setExceptionBreakpoints,
        "threads": _threads, "stackTrace": _stackTrace, "scopes": _scopes, "variables": _variables,
        "inspectVariables": _inspectVariables, "richInspectVariables": _richInspectVariables,
        "evaluate": _evaluate, "source": _source, "modules": _modules, "pause": _pause,
        "continue": _continue, "next": _next, "stepIn": _stepIn, "stepOut": _stepOut,
    }

    def _ask(self, rank: int, op: str, **args: Any) -> dict:
        pool = session.current_pool()
        if pool is None or not pool.running:
            raise RuntimeError("no pool is running")
        answer = pool.ask_debuggers([rank], op, args)[rank]
        wrong = _channel.failure(answer)
        if wrong:
            raise RuntimeError(f"rank {rank}: {wrong}")
        return answer

    def _event(self, event: str, body: dict) -> None:
        self._seq += 1
        self.kernel._publish_debug_event({"type": "event", "event": event, "body": body, "seq": self._seq})


def _variable(row: dict) -> dict:
    return {"name": row["name"], "value": row["value"], "type": row["type"], "evaluateName": row["name"],
            "variablesReference": 0}
