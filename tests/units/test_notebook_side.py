"""The notebook side: the pool size a notebook asks for, read before it runs (_prestart.py); what each
%mpi word and each debugger request calls (_magics.py, _dap.py)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


def test_the_background_start_reads_the_size_the_notebooks_first_pool_cell_asks_for(tmp_path, monkeypatch):
    import nbformat

    from mpinb.notebook._prestart import planned_size
    from mpinb.pool._pool import default_size

    def notebook(*cells: str) -> str:
        path = tmp_path / f"nb{len(list(tmp_path.iterdir()))}.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
        return str(path)

    monkeypatch.delenv("MPINB_RANKS", raising=False)
    assert planned_size(notebook("%load_ext mpinb", "x = 1", "%%mpi -n 6\nprint(rank)", "%%mpi -n 2\npass")) == 6
    assert planned_size(notebook("%load_ext mpinb", "%mpi start -n 8 --hosts a,b")) == 8
    assert planned_size(notebook("%%mpi --timeout 3 -n4\npass")) == 4
    assert planned_size(notebook("%%mpi --no-trace\npass")) == default_size()  # the default, asked for
    assert planned_size(notebook("%load_ext mpinb", "print('no pool here')")) is None
    assert planned_size(str(tmp_path / "missing.ipynb")) is None
    (tmp_path / "broken.ipynb").write_text("{not json")
    assert planned_size(str(tmp_path / "broken.ipynb")) is None
    monkeypatch.setenv("MPINB_RANKS", "5")  # a default set on purpose (the MPI kernel's spec)
    assert planned_size(str(tmp_path / "missing.ipynb")) == 5


def test_each_mpi_word_calls_its_handler_and_nothing_else_does():
    """`%mpi WORD` dispatches through a table: every subcommand of the grammar (inspect, whose
    expression is not split, is read apart) has a handler, and no other word reaches one."""
    from mpinb.notebook._grammar import SUBCOMMANDS
    from mpinb.notebook._magics import MPIMagics

    assert set(MPIMagics.HANDLERS) == set(SUBCOMMANDS) - {"inspect"}
    assert MPIMagics.HANDLERS["restart"] is MPIMagics.HANDLERS["start"]


def test_the_usage_text_names_every_subcommand_and_the_cells_options():
    """``%mpi`` alone prints LINE_USAGE: every word it takes is there, and every option of
    ``%%mpi`` a user may give."""
    import re

    from mpinb.notebook._grammar import LINE_USAGE, SUBCOMMANDS, cell_parser

    named = set(re.findall(r"%mpi (\w+)", LINE_USAGE)) | set(re.findall(r"\| (\w+)", LINE_USAGE))
    assert set(SUBCOMMANDS) <= named, f"LINE_USAGE leaves out {sorted(set(SUBCOMMANDS) - named)}"
    options = {option for action in cell_parser()._actions if action.help != "==SUPPRESS=="
               for option in action.option_strings if option.startswith("--") and option != "--help"}
    cell_usage = LINE_USAGE.split("%%mpi", 1)[1]
    assert options and not {option for option in options if option not in cell_usage}, \
        f"%%mpi's options that LINE_USAGE does not show: {sorted(o for o in options if o not in cell_usage)}"


def test_the_debug_adapter_answers_the_protocols_requests_and_refuses_its_own_helpers():
    """JupyterLab's debugger panel reaches only the requests in the adapter's table; a command
    named like one of its helpers (``_ask``, ``_step``, ``_event``) is refused, not called."""
    from mpinb.notebook._dap import RankDebugAdapter

    adapter = RankDebugAdapter(kernel=None)
    assert set(RankDebugAdapter.REQUESTS) == {  # what JupyterLab's debugger panel sends
        "initialize", "attach", "configurationDone", "disconnect", "debugInfo", "dumpCell", "setBreakpoints",
        "setExceptionBreakpoints", "threads", "stackTrace", "scopes", "variables", "inspectVariables",
        "richInspectVariables", "evaluate", "source", "modules", "pause", "continue", "next", "stepIn", "stepOut"}
    assert all(handler.__name__ == f"_{command}" for command, handler in RankDebugAdapter.REQUESTS.items())
    reply = adapter.handle({"seq": 7, "command": "initialize", "arguments": {}})
    assert reply["success"] and reply["request_seq"] == 7 and adapter.started
    assert reply["body"]["supportsConfigurationDoneRequest"]
    for helper in ("ask", "step", "event", "lock", "no such request"):
        refused = adapter.handle({"seq": 8, "command": helper})
        assert refused["success"] is False and repr(helper) in refused["message"], refused


def test_a_timeout_that_never_ends_is_a_usage_error_before_anything_starts():
    """``--timeout nan`` or ``1e999`` would never end a run: the grammar refuses them, so the magic
    raises its usage error before it starts a pool (parsing comes first)."""
    from IPython.core.error import UsageError

    from mpinb.notebook._grammar import cell_parser, start_parser

    for value in ("nan", "inf", "1e999", "-inf"):
        with pytest.raises(UsageError, match="a finite number"):
            cell_parser().parse_args(["-n", "2", f"--timeout={value}"])
        with pytest.raises(UsageError, match="a finite number"):
            start_parser("start").parse_args([f"--start-timeout={value}"])
    assert cell_parser().parse_args(["--timeout", "2.5"]).timeout == 2.5
