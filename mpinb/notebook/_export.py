"""A notebook's MPI program translated into one plain mpi4py script.

``mpinb export`` and ``%mpi export`` use it.

The cells become one program that gives, under ``mpiexec -n N``, what they gave in the pool:

- ``%%mpi`` cells (and ``%mpi STATEMENT``, ``%autompi``'s cells, the MPI kernel's cells) run on
  every rank, after the names every rank of a pool starts with (``MPI``, ``comm``, ``rank``,
  ``size``, ``np``); ``--targets`` becomes a guard on ``rank``; a cell's last value, which the
  notebook showed, is printed by each rank.
- The notebook's own cells run on rank 0, the process that stands for the notebook: what they
  push (``%mpi push``, ``pool.push``) is broadcast from it, what they pull (``%mpi pull``,
  ``pool.pull``) is gathered to it first, and ``pool.run(CODE, targets=[0]).value[0]`` is CODE
  itself. Their names are renamed where a rank's name of the same spelling would be overwritten,
  since the notebook and the ranks have namespaces of their own.
- ``%mpi run script.py args`` runs that script as ``mpiexec`` would (``__main__``, ``sys.argv``);
  ``%%writefile`` writes its file on rank 0 before the others go on.

What has no meaning outside a notebook (the trace and debugging views, grading, widgets, other
IPython magics, cells tagged ``raises-exception``) is left out, each with the reason, in the
script's header and in :attr:`Exported.left_out`; so are the statements that use what it made.
Writing the files (and the batch job) is ``_export_files``'s.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from IPython.core.inputtransformer2 import TransformerManager

from .. import __version__
from ._grammar import STATEMENT_AFTER_WORD, SUBCOMMANDS, cell_parser, run_parser, start_parser

# What every rank of a pool starts with (see mpinb.rank._setup): the script's opening lines.
PRELUDE = """\
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()
"""
_RANK_NAMES = {"MPI", "np", "comm", "rank", "size"}
# ``%mpi`` subcommands that only manage or show the pool: nothing for a script to do.
_VIEWS = {"trace": "shows the message-flow views of a run", "compare": "compares two traced runs",
          "stacks": "shows the ranks' stacks", "inspect": "shows a value on every rank side by side",
          "debug": "opens the debugger", "status": "shows the pool's state", "export": "exports the notebook"}
_MANAGING = {"start", "stop", "restart"}
# The notebook's API for things only a notebook has: left out, and what they made with them.
_NOTEBOOK_ONLY = {"last_trace": "reads the last run's trace", "check": "grades an exercise with the notebook's pool",
                  "compare": "compares two traced runs", "breakpoint": "stops the ranks in the notebook's debugger",
                  "Pool": "starts a pool of its own", "set_language": "sets the language of the notebook's messages"}
_POOL_ONLY = {"run_file": "runs a script on the pool", "stacks": "reads the ranks' stacks",
              "inspect": "shows a value on every rank", "post_mortem": "opens the debugger",
              "last_result": "reads the last run's result", "status": "reads the pool's state",
              "restart": "restarts the pool", "stop": "stops the pool", "start": "starts the pool",
              "interrupt": "interrupts the ranks", "scatter": "scatters an array from the notebook",
              "gather": "gathers an array into the notebook"}


@dataclass
class LeftOut:
    """A cell, or a statement of one, that the script does not carry, and why."""

    cell: int  # as the notebook counts its cells, from 1
    what: str
    why: str

    def __str__(self) -> str:
        return f"cell {self.cell}: {self.what} ({self.why})"


@dataclass
class Exported:
    """The script and what goes with it: the number of ranks the notebook's pool had, how it was
    launched (``%mpi start``'s options), data files to write beside it, and what was left out."""

    script: str
    ranks: int | None
    name: str = "notebook"  # the notebook's file name
    launch: dict[str, str] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)  # file name (beside the script) -> numpy array
    left_out: list[LeftOut] = field(default_factory=list)


class ExportError(ValueError):
    """The notebook cannot be exported as one program (it uses pools of different sizes, say)."""


def export_cells(cells: Iterable[tuple[str, list[str] | None]], *, name: str = "notebook", mpi_kernel: bool = False,
                 values: Mapping[str, Any] | None = None, data_prefix: str = "", script: str = "script.py") -> Exported:
    """Export the code cells ``(source, tags)`` of a notebook, in order.

    ``mpi_kernel``: the notebook is the MPI kernel's (every cell runs on the ranks but ``%%local``
    ones). ``values``: the notebook's live variables (``%mpi export``): arrays it pushed are saved
    (``Exported.data``, files named ``data_prefix + NAME + '.npy'``) and loaded by every rank,
    instead of computed on rank 0 and broadcast. ``script``: the file's name, for its header.
    Cells with ``tags`` of ``None`` are not code (markdown) and are counted only."""
    return _Exporter(name, mpi_kernel, values or {}, data_prefix, script).run(list(cells))


def export_notebook(path: str | os.PathLike, values: Mapping[str, Any] | None = None,
                    data_prefix: str = "", script: str = "script.py") -> Exported:
    """Export the notebook saved at ``path`` (see :func:`export_cells`)."""
    import nbformat

    try:
        notebook = nbformat.read(os.fspath(path), as_version=4)
    except FileNotFoundError:
        raise FileNotFoundError(f"no notebook at {path}") from None
    except Exception as err:  # noqa: BLE001 - nbformat's own errors vary: say the file is not a notebook
        raise ExportError(f"{path} is not a notebook nbformat can read: {err}") from None
    kernel = (notebook.metadata.get("kernelspec") or {}).get("name", "")
    cells = [(cell.source, list(cell.metadata.get("tags", [])) if cell.cell_type == "code" else None)
             for cell in notebook.cells]
    return _Exporter(os.path.basename(os.fspath(path)), kernel == "mpinb", values or {}, data_prefix,
                     script).run(cells)


@dataclass
class _Block:
    cell: int
    title: str
    lines: list[str]


@dataclass
class _Code:
    """A cell's code: its statements, each with its own text as the cell has it (the comments
    above it included), and the text after the last one."""

    tree: ast.Module
    texts: list[str]
    rest: str

    @classmethod
    def parse(cls, source: str) -> _Code:
        python = TransformerManager().transform_cell(source)
        tree = ast.parse(python)
        # IPython writes each line magic as a call on the same line: a statement's lines are the
        # cell's own (a shell escape or help query may change the count: then the code is rewritten).
        own = source.splitlines() if len(source.splitlines()) == len(python.splitlines()) else None
        lines = own if own is not None else python.splitlines()
        texts, previous = [], 0
        for index, node in enumerate(tree.body):
            end = node.end_lineno or node.lineno
            shares = index and node.lineno <= (tree.body[index - 1].end_lineno or 0)
            if own is None or shares:  # `a = 1; b = 2`: each statement in Python's own spelling
                texts.append(ast.unparse(node))
                if shares and own is not None:  # the line is split: its first statement's too
                    comments = _leading(texts[index - 1])[0]
                    texts[index - 1] = "\n".join([*([comments] if comments else []), ast.unparse(tree.body[index - 1])])
            else:
                texts.append("\n".join(lines[previous:end]).rstrip("\n"))
            previous = end
        if texts:
            texts[0] = texts[0].lstrip("\n")
        rest = "\n".join(lines[previous:]).strip("\n") if own is not None else ""
        return cls(tree, texts, rest)


def _gather(name: str, said: str, before: list[str]) -> str:
    """A pull of every rank's ``name``: gathered to rank 0 first (once per cell); the list's name."""
    gathered = f"pulled_{name}"
    line = f"{gathered} = comm.gather({name}, root=0)  # {said}"
    if line not in before:
        before.append(line)
    return gathered


def _leading(text: str) -> tuple[str, str]:
    """A statement's text split into the comment lines above it and the statement itself."""
    lines = text.split("\n")
    cut = 0
    while cut < len(lines) - 1 and (not lines[cut].strip() or lines[cut].lstrip().startswith("#")):
        cut += 1
    return "\n".join(lines[:cut]), "\n".join(lines[cut:])


def _commented(text: str, why: str) -> list[str]:
    return [f"# left out ({why}):", *(f"#   {line}" for line in text.split("\n") if line.strip())]


class _Exporter:
    def __init__(self, name: str, mpi_kernel: bool, values: Mapping[str, Any], data_prefix: str, script: str):
        self.name, self.mpi_kernel, self.values, self.data_prefix = name, mpi_kernel, values, data_prefix
        self.script_name = script
        self.blocks: list[_Block] = []
        self.left_out: list[LeftOut] = []
        self.data: dict[str, Any] = {}
        self.sizes: dict[int, int] = {}  # cell -> the -n it asked for
        self.launch: dict[str, str] = {}
        self.autompi = False
        self.helpers: set[str] = set()
        self.rank_names: set[str] = set(_RANK_NAMES)  # names the ranks' code binds
        self.local_names: set[str] = set()  # names the notebook's own code binds (not by importing)
        self.unavailable: dict[str, int] = {}  # notebook names that came from what was left out -> its cell
        self.pool_names: set[str] = set()  # notebook names that hold the pool (pool = mpinb.current_pool())
        self.imports_matplotlib = False
        self.parsed: dict[str, _Code | SyntaxError] = {}  # a cell's source -> its code

    # -- cells ------------------------------------------------------------------------------------

    def run(self, cells: list[tuple[str, list[str] | None]]) -> Exported:
        code_cells = [(number, source, tags) for number, (source, tags) in enumerate(cells, 1) if tags is not None]
        # First, what each side binds: a name the notebook's code binds that a rank's code binds
        # too is renamed in the notebook's code (its namespace is not the ranks').
        for _, source, _tags in code_cells:
            kind, body, _ = self._kind(source)
            code = self._code(body) if kind in ("ranks", "notebook") else None
            if code is None:
                continue
            tree = code.tree
            if kind == "ranks":
                self.rank_names.update(_bound(tree))
            else:
                self.local_names.update(_bound(tree, imports=False))
                self.autompi = _autompi_after(tree, self.autompi)
            self.imports_matplotlib |= _imports_matplotlib(tree)
        self.autompi = False
        for number, source, tags in code_cells:
            if not source.strip():
                continue
            if "raises-exception" in tags:
                self._leave(number, _first_line(source), "tagged raises-exception: it shows an error on purpose")
                continue
            kind, body, options = self._kind(source)
            self.CELL_KINDS[kind](self, number, body, options)
        sizes = set(self.sizes.values())
        if len(sizes) > 1:
            which = "; ".join(f"cell {cell}: -n {n}" for cell, n in sorted(self.sizes.items()))
            raise ExportError(f"the notebook runs pools of different sizes ({which}): one program has one "
                              "world; export a notebook whose cells ask for one size")
        ranks = sizes.pop() if sizes else None
        return Exported(self._script(ranks), ranks, self.name, self.launch, self.data, self.left_out)

    def _kind(self, source: str) -> tuple[str, str, str]:
        """What a cell is: ``ranks`` (runs on every rank), ``notebook``, ``writefile``, or
        ``magic`` (another cell magic); its body; its magic's options."""
        lines = source.splitlines()
        first = next((i for i, line in enumerate(lines) if line.strip()), None)
        if first is None:
            return "notebook", "", ""
        head = lines[first].strip()
        body = "\n".join(lines[first + 1:])
        if head.startswith("%%"):
            magic, _, options = head[2:].partition(" ")
            if magic == "mpi":
                return "ranks", body, options
            if magic == "local":
                return "notebook", body, ""
            if magic in ("writefile", "file"):
                return "writefile", body, options
            return "magic", body, magic
        if (self.mpi_kernel or self.autompi) and not head.startswith("%"):
            return "ranks", source, ""
        return "notebook", source, ""

    def _ranks_cell(self, number: int, body: str, options: str) -> None:
        try:
            args = cell_parser().parse_args(shlex.split(options))
        except Exception as err:  # noqa: BLE001 - UsageError or a quoting error: said, the cell left out
            self._leave(number, f"%%mpi {options}".strip(), f"its options do not parse: {err}")
            return
        if args.n is not None:
            self.sizes[number] = args.n
        code = self._code(body, number)
        if code is None:
            return
        lines = self._rank_code(number, code)
        if not lines:
            return
        if args.targets:
            lines = [f"if rank in {_rank_set(args.targets)}:  # --targets {args.targets}", *_indent(lines)]
        options_said = f" {options.strip()}" if options.strip() else ""
        self.blocks.append(_Block(number, f"%%mpi{options_said}", lines))

    def _rank_code(self, number: int, code: _Code) -> list[str]:
        """A rank cell's statements as the cell has them, with its last value printed as the
        notebook showed it."""
        lines: list[str] = []
        body = code.tree.body
        for index, (node, text) in enumerate(zip(body, code.texts)):
            why = _ipython_use(node)
            if why:
                self._leave(number, _leading(text)[1], why)
                lines += _commented(text, why)
                continue
            if any(isinstance(n, ast.Name) and n.id == "display" for n in ast.walk(node)):
                self.helpers.add("display")  # IPython's, which prints where there is no notebook
            if index == len(body) - 1 and _shown(node):
                comments, statement = _leading(text)
                self.helpers.add("show")
                lines += [*([comments] if comments else []), f"_show({statement})  # the value the notebook showed"]
            else:
                lines.append(text)
        if code.rest:
            lines.append(code.rest)
        return lines

    def _writefile_cell(self, number: int, body: str, options: str) -> None:
        words = shlex.split(options)
        append = "-a" in words or "--append" in words
        paths = [word for word in words if not word.startswith("-")]
        if len(paths) != 1:
            self._leave(number, f"%%writefile {options}", "it names no single file")
            return
        self.helpers.add("write_file")
        text = body + ("\n" if body and not body.endswith("\n") else "")
        self.blocks.append(_Block(number, f"%%writefile {options}",
                                  [f"_write_file({paths[0]!r}, {text!r}, append={append})"]))

    def _magic_cell(self, number: int, body: str, magic: str) -> None:
        self._leave(number, f"%%{magic}", "an IPython cell magic, which a script cannot run")

    def _notebook_cell(self, number: int, body: str, options: str) -> None:
        code = self._code(body, number)
        if code is None:
            return
        before: list[str] = []  # on every rank, before the notebook's code (gathers)
        mine: list[str] = []  # on rank 0
        after: list[str] = []  # on every rank, after it (broadcasts)
        for index, (node, text) in enumerate(zip(code.tree.body, code.texts)):
            last = index == len(code.tree.body) - 1
            self._notebook_statement(number, node, text, last, before, mine, after)
        if code.rest and mine:
            mine.append(code.rest)
        self._flush(number, before, mine, after)

    # What each kind of cell that _kind tells becomes
    CELL_KINDS = {"ranks": _ranks_cell, "writefile": _writefile_cell, "magic": _magic_cell, "notebook": _notebook_cell}

    def _notebook_statement(self, number: int, node: ast.stmt, text: str, last: bool, before: list[str],
                            mine: list[str], after: list[str]) -> bool:
        magic = _magic_call(node)
        if magic is not None:
            target, name, line = magic
            if name == "load_ext":
                return True
            if name == "autompi":
                self.autompi = line.strip().lower() != "off"
                return True
            if name == "matplotlib":
                return True  # the backend: a script draws off screen (see _script)
            if name == "mpi":
                self._mpi_line(number, target, line, before, mine, after)
                return True
            return self._left_out(number, text, f"IPython's %{name}, which a script cannot run", mine)
        why = _ipython_use(node)
        if why:
            return self._left_out(number, text, why, mine)
        if _is_pool(node):  # pool = mpinb.current_pool(): the script's ranks are the pool
            self.pool_names.update(_bound(node))
            return True
        why = self._notebook_only(node)
        if why:
            for name in _bound(node):
                self.unavailable[name] = number
            return self._left_out(number, text, why, mine)
        uses = _loaded(node) & set(self.unavailable)
        if uses:
            name = sorted(uses)[0]
            for bound in _bound(node):
                self.unavailable[bound] = number
            return self._left_out(number, text, f"it uses {name}, left out in cell {self.unavailable[name]}", mine)
        original = ast.dump(node)
        renamed = _Rename(self._renamed()).visit(node)  # (first: what replaces pool calls is the ranks')
        statement = self._pool_calls(renamed, before, after)
        if statement is None:
            return True
        comments, own = _leading(text)
        if ast.dump(statement) != original:  # rewritten: in Python's own spelling
            own = _source(statement)
        if _is_show_figure(statement):
            self.helpers.add("save_figures")
            own = f"_save_figures({number})  # plt.show() in the notebook"
        elif last and _shown(statement) and not _is_plot(statement.value):  # type: ignore[attr-defined]
            self.helpers.add("show")
            own = f"_show({own})  # the value the notebook showed"
        mine += [*([comments] if comments else []), own]
        return True

    def _left_out(self, number: int, text: str, why: str, mine: list[str]) -> bool:
        self._leave(number, _leading(text)[1], why)
        mine += _commented(text, why)
        return True

    def _renamed(self) -> dict[str, str]:
        """The notebook's names that would overwrite a rank's on rank 0, and their new spelling."""
        clash = (self.local_names & self.rank_names) - _RANK_NAMES - self.pool_names
        return {name: f"nb_{name}" for name in clash}

    def _notebook_only(self, node: ast.stmt) -> str | None:
        """Why this statement of the notebook's code cannot run in a script, if it cannot."""
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            func = call.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                owner, attribute = func.value.id, func.attr
                if owner == "mpinb" and attribute in _NOTEBOOK_ONLY:
                    return f"mpinb.{attribute}() {_NOTEBOOK_ONLY[attribute]}"
                if owner in self.pool_names and attribute in _POOL_ONLY:
                    return f"pool.{attribute}() {_POOL_ONLY[attribute]}"
                if owner in self.pool_names and attribute == "run" and _run_on_rank_0(call) is None:
                    return ("pool.run() runs code on the ranks from the notebook (of its forms, only "
                            "run(CODE, targets=[0]).value[0] has a script's equivalent)")
            if isinstance(func, ast.Name) and func.id in ("display",):
                return "display() shows a view in the notebook"
        for found in (n for n in ast.walk(node) if isinstance(n, ast.Attribute)):
            if found.attr == "trace" and _pool_method_call(found.value, self.pool_names, "run") is not None:
                return "pool.run(...).trace reads the notebook's record of a run"
            if isinstance(found.value, ast.Name) and found.value.id in ("widgets", "ipywidgets"):
                return "it builds a notebook widget"
        return None

    def _pool_calls(self, node: ast.stmt, before: list[str], after: list[str]) -> ast.stmt | None:
        """The notebook's statement with the pool's calls turned into what the ranks do: a pull
        gathers first (on every rank), a push broadcasts after, ``run(CODE, targets=[0])`` is CODE."""
        pool_names = self.pool_names

        class Calls(ast.NodeTransformer):
            def visit_Subscript(inner, node: ast.Subscript) -> Any:
                call = _pool_method_call(node.value, pool_names, "run", attribute="value")
                if call is not None and _literal(node.slice) == 0 and (code := _run_on_rank_0(call)) is not None:
                    return ast.parse(code, mode="eval").body  # rank 0's own value of CODE
                pull = _pool_method_call(node.value, pool_names, "pull")
                if pull is not None and _literal(node.slice) == 0 and _only_rank_0(pull):
                    return ast.parse(str(_literal(pull.args[0])), mode="eval").body  # rank 0's own variable
                inner.generic_visit(node)
                return node

            def visit_Call(inner, call: ast.Call) -> Any:
                inner.generic_visit(call)
                if _pool_method_call(call, pool_names, "pull") is not None:
                    return self._pull(call, before)
                return call

        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute) and isinstance(node.value.func.value, ast.Name)
                and node.value.func.value.id in pool_names and node.value.func.attr == "push"):
            self._push_dict(node.value, after)
            return None
        return ast.fix_missing_locations(Calls().visit(node))

    def _pull(self, call: ast.Call, before: list[str]) -> ast.expr:
        """A pull: on rank 0, the list of the ranks' values. Gathered first on every rank, asking
        only the ranks it names for their value (the others may not have the variable); rank 0's
        own value alone needs no message."""
        name = _literal(call.args[0]) if call.args else None
        targets = next((keyword.value for keyword in call.keywords if keyword.arg == "targets"),
                       call.args[1] if len(call.args) > 1 else None)
        if not isinstance(name, str) or not name.isidentifier():
            raise ExportError(f"pool.pull({_source(call.args[0]) if call.args else ''}): the exporter needs the "
                              "name as a string literal")
        if targets is None:
            return ast.parse(_gather(name, f"pool.pull({name!r}) in the notebook", before), mode="eval").body
        ranks = _rank_set_expr(targets)
        if ranks in ("[0]", "{0}"):
            return ast.parse(f"[{name}]", mode="eval").body  # rank 0 is where the notebook's code runs
        gathered = f"pulled_{name}_{len(before)}"
        before.append(f"{gathered} = comm.gather({name} if rank in {ranks} else None, root=0)"
                      f"  # pool.pull({name!r}, targets={_source(targets)}) in the notebook")
        return ast.parse(f"[{gathered}[r] for r in sorted({ranks})]", mode="eval").body

    def _push_dict(self, call: ast.Call, after: list[str]) -> None:
        pushed = call.args[0] if call.args else None
        if not isinstance(pushed, ast.Dict) or not all(isinstance(_literal(k), str) for k in pushed.keys):
            raise ExportError(f"{_source(call)}: the exporter needs a dict display with string keys, "
                              "such as pool.push({'x': x})")
        for key, value in zip(pushed.keys, pushed.values):  # (the values are renamed already)
            self._broadcast(str(_literal(key)), _source(value), after)

    def _broadcast(self, name: str, expression: str, after: list[str]) -> None:
        value = self.values.get(name)
        if value is not None and type(value).__module__ == "numpy" and hasattr(value, "dtype") \
                and value.dtype != object:
            filename = f"{self.data_prefix}{name}.npy"
            self.data[filename] = value
            self.helpers.add("data")
            after.append(f"{name} = np.load(_data({filename!r}))  # pushed from the notebook, saved beside")
            return
        after.append(f"{name} = comm.bcast({expression} if rank == 0 else None, root=0)  # pushed from the notebook")

    def _mpi_line(self, number: int, target: str | None, line: str, before: list[str], mine: list[str],
                  after: list[str]) -> None:
        word, _, rest = line.strip().partition(" ")
        if word not in SUBCOMMANDS or STATEMENT_AFTER_WORD.match(rest):  # a statement for the ranks
            code = self._code(line, number)
            if code is not None:
                self._flush(number, before, mine, after)
                self.blocks.append(_Block(number, f"%mpi {line.strip()}", self._rank_code(number, code)))
            return
        if word == "push":
            renamed = self._renamed()
            for name in rest.split():
                self._broadcast(name, renamed.get(name, name), after)
            self._flush(number, before, mine, after)
        elif word == "pull":
            name = rest.strip()
            gathered = _gather(name, f"%mpi pull {name}", before)
            if target is not None:
                mine.append(f"{self._renamed().get(target, target)} = {gathered}")
        elif word == "run":
            self._flush(number, before, mine, after)
            self._run_line(number, rest)
        elif word in _MANAGING:
            self._start_line(number, word, rest)
        else:
            why = f"it {_VIEWS.get(word, 'is the notebook’s')}"
            self._leave(number, f"%mpi {line.strip()}", why)
            mine += _commented(f"%mpi {line.strip()}", why)

    def _flush(self, number: int, before: list[str], mine: list[str], after: list[str]) -> None:
        """Close the notebook's code so far (ranks' code follows within the same cell)."""
        lines = before[:]
        if any(line.strip() and not line.lstrip().startswith("#") for text in mine for line in text.split("\n")):
            lines += ["if rank == 0:  # the notebook's own code", *_indent(mine)]
        else:
            lines += mine  # (only what was left out, as comments)
        lines += after
        if lines:
            self.blocks.append(_Block(number, "the notebook", lines))
        for done in (before, mine, after):
            done.clear()

    def _run_line(self, number: int, rest: str) -> None:
        try:
            args = run_parser().parse_args(shlex.split(rest))
        except Exception as err:  # noqa: BLE001 - said, the line left out
            self._leave(number, f"%mpi run {rest}", f"its options do not parse: {err}")
            return
        if os.path.basename(args.script) == self.script_name:
            why = "it runs this very script (the notebook ran the export of itself)"
            self._leave(number, f"%mpi run {rest.strip()}", why)
            self.blocks.append(_Block(number, "the notebook", _commented(f"%mpi run {rest.strip()}", why)))
            return
        self.helpers.add("run_script")
        call = f"_run_script({args.script!r}, {args.args!r}" + (f", stdin={args.stdin!r})" if args.stdin else ")")
        lines = [call]
        if args.targets:
            lines = [f"if rank in {_rank_set(args.targets)}:  # --targets {args.targets}", *_indent(lines)]
        self.blocks.append(_Block(number, f"%mpi run {rest.strip()}", lines))

    def _start_line(self, number: int, word: str, rest: str) -> None:
        argv = shlex.split(rest)
        if "--" in argv:
            argv = argv[:argv.index("--")]
        try:
            args = start_parser(word).parse_args(argv)
        except Exception as err:  # noqa: BLE001 - said, the line left out
            self._leave(number, f"%mpi {word} {rest}", f"its options do not parse: {err}")
            return
        if getattr(args, "n", None):
            self.sizes[number] = args.n
        for option in ("launcher", "hosts", "hostfile", "partition", "time", "account", "mpiexec"):
            value = getattr(args, option, None)
            if value:
                self.launch[option] = value

    # -- helpers ----------------------------------------------------------------------------------

    def _code(self, source: str, number: int | None = None) -> _Code | None:
        """The cell's code as Python (IPython's syntax turned into calls, as IPython runs it);
        parsed once, though both passes of :meth:`run` read it."""
        if source not in self.parsed:
            try:
                self.parsed[source] = _Code.parse(source)
            except SyntaxError as err:
                self.parsed[source] = err
        code = self.parsed[source]
        if isinstance(code, SyntaxError):
            if number is not None:
                self._leave(number, _first_line(source), f"it is not valid Python (line {code.lineno}: {code.msg})")
            return None
        return code

    def _leave(self, cell: int, what: str, why: str) -> None:
        self.left_out.append(LeftOut(cell, _shorten(what), why))

    def _script(self, ranks: int | None) -> str:
        run = f"mpiexec -n {ranks or 'N'} python {self.script_name}"
        header = [f'"""{self.name}, exported by mpinb {__version__} as a plain mpi4py program.', "",
                  f"Run it as the notebook's pool ran it: {run}", ""]
        if self.left_out:
            header.append("Left out (they have no meaning outside a notebook; each is a comment where it was):")
            header += textwrap.wrap(" ".join(f"cell {item.cell}: {item.what} ({item.why});" for item in self.left_out),
                                    width=96, initial_indent="  ", subsequent_indent="  ")
        else:
            header.append("Every cell is here.")
        header.append('"""')
        body = [*header, "", PRELUDE.rstrip("\n")]
        if self.imports_matplotlib:
            body += ["import matplotlib", 'matplotlib.use("Agg")  # no screen: figures are drawn off screen']
        for helper in sorted(self.helpers):
            body += ["", "", _HELPERS[helper].rstrip("\n")]
        for block in self.blocks:
            body += ["", "", f"# -- cell {block.cell}: {block.title} " + "-" * max(0, 70 - len(block.title)),
                     *block.lines]
        return "\n".join(body) + "\n"


_HELPERS = {
    "show": '''\
def _show(value):
    """What the notebook showed as a cell's value (on each rank that ran it)."""
    if value is not None:
        print(repr(value))
''',
    "display": '''\
from IPython.display import display  # what a rank displayed: printed, with no notebook to show it
''',
    "write_file": '''\
def _write_file(path, text, append=False):
    """%%writefile: the file is written once, by rank 0, before any rank goes on."""
    if rank == 0:
        with open(path, "a" if append else "w") as handle:
            handle.write(text)
    comm.Barrier()
''',
    "run_script": '''\
def _run_script(path, args, stdin=None):
    """%mpi run: the script as mpiexec would run it (__main__, sys.argv, stdin on rank 0)."""
    import runpy
    import sys

    saved = sys.argv, sys.stdin
    sys.argv = [path, *args]
    if stdin is not None and rank == 0:
        sys.stdin = open(stdin)
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exit:
        if exit.code not in (None, 0):
            raise
    finally:
        if sys.stdin is not saved[1]:
            sys.stdin.close()
        sys.argv, sys.stdin = saved
''',
    "save_figures": '''\
def _save_figures(cell):
    """plt.show() in the notebook: each open figure saved beside this script, then closed."""
    import os

    import matplotlib.pyplot as plt

    stem = os.path.splitext(os.path.abspath(__file__))[0]
    for number in plt.get_fignums():
        plt.figure(number).savefig(f"{stem}-cell{cell}-{number}.png")
    plt.close("all")
''',
    "data": '''\
def _data(name):
    """A file the export saved beside this script (what the notebook pushed)."""
    import os

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
''',
}


# -- pieces of code ---------------------------------------------------------------------------------

def _source(node: ast.AST) -> str:
    return ast.unparse(node)


def _first_line(source: str) -> str:
    return next((line.strip() for line in source.splitlines() if line.strip()), "")


def _shorten(text: str, width: int = 72) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line if line else line for line in "\n".join(lines).split("\n")]


def _rank_set(targets: str) -> str:
    from ..common._ranges import parse_ranks

    ranks = parse_ranks(targets, 1 << 30)
    return "{" + ", ".join(map(str, ranks)) + "}" if len(ranks) <= 16 else f"range({ranks[0]}, {ranks[-1] + 1})"


def _rank_set_expr(node: ast.expr) -> str:
    value = _literal(node)
    if isinstance(value, int):
        return f"[{value}]"
    if isinstance(value, str):
        return _rank_set(value)
    return _source(node)


def _literal(node: ast.AST | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _bound(node: ast.AST, imports: bool = True) -> set[str]:
    """The names a piece of code binds in its own namespace (assignments, loops, ``with``,
    ``def``, ``class``, and, unless ``imports`` is false, imports): not those of the functions,
    classes, lambdas and comprehensions it defines, which have namespaces of their own."""
    names: set[str] = set()

    def visit(child: ast.AST) -> None:
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            names.add(child.id)
        elif isinstance(child, ast.Import | ast.ImportFrom):
            if imports:
                names.update((alias.asname or alias.name).split(".")[0] for alias in child.names)
            return
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(child.name)
            return
        elif isinstance(child, ast.Lambda | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            return
        for grandchild in ast.iter_child_nodes(child):
            visit(grandchild)

    visit(node)
    return names


def _loaded(node: ast.AST) -> set[str]:
    return {child.id for child in ast.walk(node) if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load)}


def _get_ipython_calls(node: ast.AST) -> list[ast.Call]:
    return [child for child in ast.walk(node) if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute)
            and isinstance(child.func.value, ast.Call) and isinstance(child.func.value.func, ast.Name)
            and child.func.value.func.id == "get_ipython"]


def _magic_call(node: ast.stmt) -> tuple[str | None, str, str] | None:
    """``(target, magic, line)`` for a statement that is a line magic (``%x line``) or assigns one
    (``y = %x line``); None otherwise."""
    value, target = None, None
    if isinstance(node, ast.Expr):
        value = node.value
    elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        value, target = node.value, node.targets[0].id
    calls = _get_ipython_calls(node)
    if value is None or len(calls) != 1 or calls[0] is not value:
        return None
    call = calls[0]
    if not isinstance(call.func, ast.Attribute) or call.func.attr != "run_line_magic" or len(call.args) < 2:
        return None
    name, line = _literal(call.args[0]), _literal(call.args[1])
    if not isinstance(name, str) or not isinstance(line, str):
        return None
    return target, name, line


def _ipython_use(node: ast.stmt) -> str | None:
    """Why a statement cannot run in a script because of IPython syntax in it (a magic inside an
    expression, a shell command), if so."""
    for call in _get_ipython_calls(node):
        kind = call.func.attr  # type: ignore[attr-defined]
        name = _literal(call.args[0]) if call.args else None
        if kind == "system" or kind == "getoutput":
            return "a shell command (!), which the script leaves to you"
        return f"IPython's %{name}, which a script cannot run" if name else "IPython syntax a script cannot run"
    if any(isinstance(child, ast.Name) and child.id == "get_ipython" for child in ast.walk(node)):
        return "it uses IPython's get_ipython()"
    return None


def _is_pool(node: ast.stmt) -> bool:
    """``pool = mpinb.current_pool()`` (or the session's): the name stands for the ranks."""
    if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
        return False
    func = node.value.func
    return (isinstance(func, ast.Attribute) and func.attr == "current_pool") or (
        isinstance(func, ast.Name) and func.id == "current_pool")


def _run_on_rank_0(call: ast.Call) -> str | None:
    """CODE, for ``pool.run(CODE, targets=[0])`` (whose ``.value[0]`` the caller takes): rank 0 runs
    the notebook's code in the script, so its value is CODE's."""
    code = _literal(call.args[0]) if call.args else None
    targets = next((keyword.value for keyword in call.keywords if keyword.arg == "targets"), None)
    if not isinstance(code, str) or _literal(targets) not in ([0], (0,), 0, "0"):
        return None
    try:
        ast.parse(code, mode="eval")
    except SyntaxError:
        return None
    return code


# mpi4py's methods that return nothing: a cell that ends with one shows no value.
_RETURN_NOTHING = re.compile(r"^(I?(All)?[Rr]educe(_scatter(_block)?)?|(All)?[Gg]ather[vw]?|[Ss]catter[vw]?|"
                             r"(All|Neighbor_all)to(all[vw]?)|[Bb]cast|Barrier|[Ss]end(recv)?(_replace)?|[Rr]ecv|"
                             r"[BRS]?send|Wait(all|any|some)?|Start(all)?|Free|Fence|Put|Get|Accumulate|"
                             r"Lock(_all)?|Unlock(_all)?|Flush\w*|Scan|Exscan|Abort)$")


def _shown(node: ast.stmt) -> bool:
    """Whether the notebook showed this statement's value (a cell's last expression; a call of
    print or of an mpi4py method that returns nothing shows none)."""
    if not isinstance(node, ast.Expr):
        return False
    value = node.value
    if _is_call_of_print(value):
        return False
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        return not _RETURN_NOTHING.match(value.func.attr)
    return True


def _is_show_figure(node: ast.stmt) -> bool:
    """``plt.show()``: a script saves the figures instead."""
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and not node.value.args
            and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "show"
            and isinstance(node.value.func.value, ast.Name) and node.value.func.value.id == "plt")


def _is_call_of_print(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"


def _is_plot(node: ast.expr) -> bool:
    """A call whose value is a picture (``plt.show()``, ``ax.plot(...)``): nothing to print."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
        isinstance(node.func.value, ast.Name) and node.func.value.id in ("plt", "ax", "fig", "axes"))


class _Rename(ast.NodeTransformer):
    """The notebook's names that would overwrite a rank's, spelt apart."""

    def __init__(self, renamed: dict[str, str]):
        self.renamed = renamed

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id in self.renamed:
            return ast.copy_location(ast.Name(self.renamed[node.id], node.ctx), node)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        if node.arg in self.renamed:
            node.arg = self.renamed[node.arg]
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        self.generic_visit(node)
        if node.name in self.renamed:
            node.name = self.renamed[node.name]
        return node


def _pool_method_call(node: ast.AST, pool_names: set[str], method: str,
                      attribute: str | None = None) -> ast.Call | None:
    """The call ``pool.METHOD(...)`` (``pool.METHOD(...).ATTRIBUTE`` if ``attribute``), for the
    notebook's names of the pool; None if ``node`` is not that."""
    if attribute is not None:
        if not (isinstance(node, ast.Attribute) and node.attr == attribute):
            return None
        node = node.value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method
            and isinstance(node.func.value, ast.Name) and node.func.value.id in pool_names):
        return node
    return None


def _only_rank_0(pull: ast.Call) -> bool:
    """``pool.pull(NAME, targets=[0])``: the value rank 0 holds, which the notebook's code (on rank
    0 in the script) reads as its own variable."""
    targets = next((keyword.value for keyword in pull.keywords if keyword.arg == "targets"),
                   pull.args[1] if len(pull.args) > 1 else None)
    name = _literal(pull.args[0]) if pull.args else None
    return isinstance(name, str) and name.isidentifier() and _literal(targets) in ([0], (0,), 0, "0")


def _autompi_after(tree: ast.Module, enabled: bool) -> bool:
    """Whether %autompi is on after a notebook cell (which may turn it on or off)."""
    for statement in tree.body:
        magic = _magic_call(statement)
        if magic is not None and magic[1] == "autompi":
            enabled = magic[2].strip().lower() != "off"
    return enabled


def _imports_matplotlib(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "matplotlib" for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "matplotlib":
            return True
    return False
