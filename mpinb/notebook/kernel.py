"""The MPI kernel: every cell runs on the pool.

It is an IPython kernel in which every cell runs on the pool (as if it began with ``%%mpi``),
``%%local`` runs a cell in the kernel's own process, and the ``%mpi`` magics manage the pool. The
pool starts with the kernel (``$MPINB_RANKS`` ranks, from the kernelspec) and stops with it. Tab
completion and Shift-Tab inspection look into rank 0's namespace.

Run as ``python -m mpinb.notebook.kernel -f CONNECTION_FILE`` (what the kernelspec in ``kernel/`` does).
"""

from __future__ import annotations

import sys

from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp
from IPython.utils.tokenutil import line_at_cursor, token_at_cursor

from .. import __version__, rank
from ..pool import Pool
from . import _session as session
from ._dap import RankDebugAdapter
from ._magics import runs_on_ranks, set_autompi

ANSWER_WITHIN_S = 2.0  # completion of a busy pool gives up rather than freeze the editor


class MPIKernel(IPythonKernel):
    implementation = "mpinb"
    implementation_version = __version__
    banner = "mpinb: every cell runs on the MPI ranks; %%local runs one here; %mpi manages the pool"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        assert self.shell is not None, "IPythonKernel makes its shell in __init__"
        self.shell.run_line_magic("load_ext", "mpinb")
        set_autompi(self.shell, True)
        # JupyterLab's debugger panel works on the ranks (see _dap.py), not on this process
        self.rank_debugger = RankDebugAdapter(self)
        session.attach_debugger(self.rank_debugger)
        try:
            session.start_pool(quiet=True)
        except Exception as err:  # noqa: BLE001 - the first cell retries and shows the full error
            print(f"mpinb: the pool did not start ({err}); the first cell will try again",
                  file=sys.__stderr__)

    @property
    def kernel_info(self) -> dict:
        info = super().kernel_info
        if "debugger" not in info["supported_features"]:  # ours needs no debugpy
            info["supported_features"].append("debugger")
        return info

    async def do_debug_request(self, msg: dict) -> dict:
        return self.rank_debugger.handle(msg)

    async def do_execute(self, code, *args, **kwargs):
        with session.running_cell(code):  # JupyterLab names the cell by its code (gutter breakpoints)
            return await super().do_execute(code, *args, **kwargs)

    def _pool_for(self, code: str) -> Pool | None:
        """The pool that answers completions and inspection for ``code``, if the ranks run it."""
        return session.current_pool() if runs_on_ranks(code) else None

    def do_complete(self, code, cursor_pos):
        if cursor_pos is None:
            cursor_pos = len(code)
        pool = self._pool_for(code)
        if pool is None:
            return super().do_complete(code, cursor_pos)
        line, offset = line_at_cursor(code, cursor_pos)
        try:
            text, matches = pool.call(rank.complete, line, cursor_pos - offset, timeout=ANSWER_WITHIN_S)
        except Exception:  # noqa: BLE001 - a busy or broken pool: no completions, not an error
            text, matches = "", []
        return {"matches": list(matches), "cursor_end": cursor_pos, "cursor_start": cursor_pos - len(text),
                "metadata": {}, "status": "ok"}

    def do_inspect(self, code, cursor_pos, detail_level=0, omit_sections=()):
        pool = self._pool_for(code)
        if pool is None:
            return super().do_inspect(code, cursor_pos, detail_level, omit_sections)
        name = token_at_cursor(code, cursor_pos)
        try:
            bundle = pool.call(rank.inspect_name, name, detail_level, timeout=ANSWER_WITHIN_S)
        except Exception:  # noqa: BLE001
            bundle = None
        if not bundle:
            return {"status": "ok", "found": False, "data": {}, "metadata": {}}
        if self.shell is not None and not self.shell.enable_html_pager:
            bundle.pop("text/html", None)
        return {"status": "ok", "found": True, "data": bundle, "metadata": {}}

    def do_shutdown(self, restart):
        session.stop_pool()
        return super().do_shutdown(restart)


def main() -> None:
    IPKernelApp.launch_instance(kernel_class=MPIKernel)


if __name__ == "__main__":
    main()
