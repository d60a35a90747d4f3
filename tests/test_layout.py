"""The house rules of the tree, checked: folders are processes, the shared modules belong to
neither side, ipyparallel's and ipykernel's internals that mpinb patches are still there, and the
guide's map (docs/guide/design.md) names every module. Pure reading of files and classes:
milliseconds, no MPI."""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mpinb"
# What both sides share, in mpinb/common/ (standard library and numpy only, plus each other); the rank
# side may use these and nothing else of mpinb. _tracer_build builds the C tracer: `make install`
# runs it in the notebook's environment, a rank runs it at first use.
COMMON = PACKAGE / "common"
# What else a shared module may import at module level (mpi4py only inside functions: its import
# initializes MPI, which the notebook must never do).
THIRD_PARTY_IN_SHARED = {"numpy"}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


@functools.cache
def _tree(path: Path) -> ast.Module:
    """``path`` parsed, once for all the rules that read it."""
    return ast.parse(path.read_text(), str(path))


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, for_types: bool = True) -> list[tuple[str, bool]]:
    """Every mpinb module (dotted) that ``path`` imports, and whether at module level (not inside a
    function: a function's import runs only when it is called, on the side that calls it).
    ``for_types=False`` leaves out what ``if TYPE_CHECKING:`` imports (never at run time)."""
    tree = _tree(path)
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if not for_types and isinstance(child, ast.If) and ast.unparse(child.test) == "TYPE_CHECKING":
                continue
            inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, inner) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                module = _source_of(path, child)
                # `from ..rank import _introspect` imports a module: the module is what counts
                found.extend((f"{module}.{alias.name}" if _is_module(f"{module}.{alias.name}") else module, inner)
                             for alias in child.names)
            visit(child, inner)

    visit(tree, True)
    return [(name, top) for name, top in found if name == "mpinb" or name.startswith("mpinb.")]


def _source_of(path: Path, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` in ``path`` imports from, dotted, relative imports resolved."""
    if not node.level:
        return node.module or ""
    package = _dotted(path) if path.name == "__init__.py" else _dotted(path).rpartition(".")[0]
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _is_shared(name: str) -> bool:
    return name == "mpinb.common" or name.startswith("mpinb.common.")


def test_the_rank_side_imports_only_itself_and_the_shared_modules():
    wrong = [(_dotted(path), name) for path in (PACKAGE / "rank").rglob("*.py") for name, _ in _imports(path)
             if not (name.startswith("mpinb.rank") or _is_shared(name))]
    assert not wrong, f"rank-side modules import notebook-side ones (a rank must not load them): {wrong}"


def test_the_traced_mpi_layer_never_imports_the_ranks_runtime():
    """``rank/mpi/`` runs where no engine does (a spawn's children), so its arrows point one way:
    the runtime in ``rank/`` imports it, never the reverse."""
    layer = PACKAGE / "rank" / "mpi"
    wrong = [(_dotted(path), name) for path in layer.rglob("*.py") for name, _ in _imports(path)
             if not (name.startswith("mpinb.rank.mpi") or _is_shared(name))]
    assert not wrong, f"the traced-MPI layer imports the rank's runtime: {wrong}"
    runtime = [path.stem for path in (PACKAGE / "rank").glob("*.py")]
    assert "_execute" in runtime and "_traced" not in runtime, "the two folders are not where this rule looks"


def test_the_notebook_side_never_imports_the_rank_side_at_module_level():
    """The notebook names the functions of the package ``mpinb.rank`` (ipyparallel sends them by
    reference), whose import loads nothing else; loading rank's modules there could import
    mpi4py.MPI, which initializes MPI in the notebook."""
    wrong = [(_dotted(path), name) for path in _modules() if not _dotted(path).startswith("mpinb.rank")
             for name, top in _imports(path) if top and name.startswith("mpinb.rank.")]
    assert not wrong, f"notebook-side modules import rank-side ones at module level: {wrong}"


def test_the_shared_modules_belong_to_neither_side():
    for path in COMMON.glob("*.py"):
        wrong = [name for name, _ in _imports(path) if not _is_shared(name)]
        assert not wrong, f"{path.name} imports one side's modules: {wrong}"
        tree = _tree(path)
        top_level = {alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import)
                     for alias in node.names}
        top_level |= {(node.module or "").split(".")[0] for node in tree.body
                      if isinstance(node, ast.ImportFrom) and not node.level}
        outside = {name for name in top_level if name not in sys.stdlib_module_names}
        assert outside <= THIRD_PARTY_IN_SHARED, \
            f"{path.name} imports {sorted(outside)} at module level: shared modules take the standard library and numpy"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph`` (module -> modules it imports): each strongly connected set
    of more than one module, sorted (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                elif target in on_stack:
                    low[module] = min(low[module], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "a"}}) == [["a", "b"], ["c", "d"]]
    assert _cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_package_imports_without_a_cycle():
    """No import cycle among mpinb's modules, whether an import runs at module level or inside a
    function: a function-level import that only dodges a cycle hides it (those that remain are
    there for start-up cost, and say so). What ``if TYPE_CHECKING:`` imports never runs."""
    graph = {_dotted(path): {name for name, _ in _imports(path, for_types=False) if name != _dotted(path)}
             for path in _modules()}
    assert len(graph) > 100 and any(graph.values())
    cycles = _cycles(graph)
    assert not cycles, f"import cycles (move what both sides need into a module of its own): {cycles}"


def test_the_notebooks_session_is_an_object_not_module_globals():
    """What the magics share (the pool, the traces, the MPI kernel's debugger panel) is one
    ``Session``; no module of the notebook side rebinds a global of its own."""
    rebinding = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in (PACKAGE / "notebook").glob("*.py")
                 for node in ast.walk(_tree(path)) if isinstance(node, ast.Global)]
    assert not rebinding, f"global statements on the notebook side: {rebinding}"


def test_no_module_writes_another_modules_variables():
    """A module's variables have one writer, the module itself: another sets them through its
    functions (``_progress.publish_through``), never by ``other.name = ...``."""
    writes = []
    for path in _modules():
        tree = _tree(path)
        modules = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   for alias in node.names if _is_module(f"{_source_of(path, node)}.{alias.name}")}
        modules |= {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names if alias.name.startswith("mpinb")}
        writes += [f"{_dotted(path)}:{node.lineno} {ast.unparse(target)}" for node in ast.walk(tree)
                   for target in _assigned(node)
                   if isinstance(target, ast.Attribute) and _root_name(target) in modules]
    assert not writes, f"modules that write another module's variables: {writes}"


def _root_name(target: ast.Attribute) -> str | None:
    """``a`` of ``a.b.c``: the name an attribute chain starts from."""
    value: ast.expr = target
    while isinstance(value, ast.Attribute):
        value = value.value
    return value.id if isinstance(value, ast.Name) else None


def _assigned(node: ast.AST) -> list[ast.expr]:
    """What an assignment statement writes, a tuple's parts one by one."""
    targets = node.targets if isinstance(node, ast.Assign) else \
        [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
    return [part for target in targets for part in (target.elts if isinstance(target, ast.Tuple) else [target])]


def test_each_module_opens_with_one_line_that_says_what_it_is_for():
    """A module's docstring begins with one line of at most 100 characters, a sentence a reader
    takes in at a glance; the design notes follow it, after a blank line."""
    long = []
    for path in _modules():
        docstring = ast.get_docstring(_tree(path), clean=False) or ""
        first = docstring.split("\n\n", 1)[0]
        if not first or "\n" in first or len(first) > 100 or not first.endswith("."):
            long.append(f"{path.relative_to(ROOT)}: {first[:60]!r}")
    assert not long, f"modules whose docstring does not open with one short sentence: {long}"


# The modules that write into a folder a user names; each writes only through _confined.Confined.
WRITERS_INTO_USERS_FOLDERS = ("cli/_tutorials.py", "notebook/_export_files.py")


def test_files_go_into_a_users_folder_only_through_the_helper_that_follows_no_link():
    """``mpinb._confined`` refuses every link inside a folder a user named; a module that writes
    there with ``open``, ``os.open``, ``write_text``, ``write_bytes``, ``np.save`` or
    ``nbformat.write`` of its own would not."""
    for relative in WRITERS_INTO_USERS_FOLDERS:
        path = PACKAGE / relative
        assert "mpinb._confined" in {name for name, _ in _imports(path)}, f"{relative} does not use _confined"
        calls = [ast.unparse(node.func) for node in ast.walk(_tree(path)) if isinstance(node, ast.Call)]
        writers = (".open", ".write_text", ".write_bytes", "np.save", "nbformat.write")
        own = [call for call in calls if call == "open" or call.endswith(writers)]
        assert not own, f"{relative} writes files itself: {own}"


def test_handlers_are_found_in_tables_not_by_names_built_from_strings():
    """``getattr(self, f"_{word}")`` hides which methods are reachable from readers and tools, and
    reaches helpers nobody meant to expose: the magics, the exporter and the debug adapter keep
    tables (``HANDLERS``, ``CELL_KINDS``, ``REQUESTS``). (mpi4py's methods looked up by their MPI
    names, such as a call's nonblocking form, are another library's API, not handlers.)"""
    built = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in _modules()
             for node in ast.walk(_tree(path))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
             and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls")
             and isinstance(node.args[1], (ast.JoinedStr, ast.BinOp))]
    assert not built, f"attributes looked up by a name built from a string: {built}"


def test_the_trace_modules_share_their_helpers_through_a_leaf():
    """``Trace`` and its views (waits, critical path, SVG, Chrome trace) share their array helpers
    through the leaf ``_arrays``."""
    leaf = {name for name, _ in _imports(PACKAGE / "trace" / "_arrays.py")}
    assert leaf <= {"mpinb.common._events"}, f"trace/_arrays.py must stay a leaf; it imports {sorted(leaf)}"


def test_no_module_imports_another_ones_private_names():
    """A private module's API is its names without a leading underscore (as in mpi4py's
    ``src/mpi4py/``): ``from ._calls import _where`` would make a private helper part of it.
    Importing a private module (``from . import _objects``) is what private modules are for."""
    wrong = []
    for path in _modules():
        for node in ast.walk(_tree(path)):
            if not (isinstance(node, ast.ImportFrom) and node.level):
                continue
            base = path.parent.joinpath(*[".."] * (node.level - 1)).resolve()
            module = base.joinpath(*(node.module or "").split(".")) if node.module else base
            wrong += [f"{_dotted(path)}: {alias.name} from {node.module or '.'}" for alias in node.names
                      if alias.name.startswith("_") and not alias.name.startswith("__")
                      and not (module / f"{alias.name}.py").exists() and not (module / alias.name).is_dir()]
    assert not wrong, f"private names imported from another module: {wrong}"


# -- ipyparallel's and ipykernel's internals -------------------------------------------------------
# What mpinb replaces on their classes (module-level `Class.method = ...` in mpinb), with the
# parameters it expects, and the attributes its replacements read. A new release that renames one
# fails here, by name, rather than in a pool that hangs at start.
def _hooks() -> dict[str, tuple[object, dict[str, list[str]], list[str]]]:
    from ipykernel.iostream import OutStream
    from ipyparallel.controller.app import IPController
    from ipyparallel.controller.heartmonitor import HeartMonitor
    from ipyparallel.controller.hub import Hub
    from ipyparallel.engine.app import IPEngine

    return {
        "IPEngine": (IPEngine, {"init_engine": ["self"], "_signal_stop": ["self", "sig", "frame"],
                                "find_connection_file": ["self"]},
                     ["connection_info_env", "wait_for_url_file", "url_file"]),
        "OutStream": (OutStream, {"_watch_pipe_fd": ["self"], "write": ["self", "string"]},
                      ["_fid", "_should_watch", "_original_stdstream_copy", "_exc", "name", "watch_fd_thread"]),
        "IPController": (IPController, {"construct_url": ["self", "kind", "channel", "index"]},
                         ["engine_info", "client_info", "internal_info"]),
        "HeartMonitor": (HeartMonitor, {"start": ["self"], "beat": ["self"]},
                         ["hearts", "on_probation", "period", "max_heartmonitor_misses", "caller"]),
        "Hub": (Hub, {"handle_stopped_heart": ["self", "heart"], "unregister_engine": ["self", "ident", "msg"]},
                ["session"]),
    }


def _has_attribute(cls: type, name: str) -> bool:
    traits = getattr(cls, "class_traits", lambda: {})()
    return name in traits or hasattr(cls, name) or f"self.{name} =" in inspect.getsource(cls)


@pytest.mark.parametrize("name", ["IPEngine", "OutStream", "IPController", "HeartMonitor", "Hub"])
def test_each_patched_internal_is_still_there_as_mpinb_expects(name):
    cls, methods, attributes = _hooks()[name]
    for method, parameters in methods.items():
        assert callable(getattr(cls, method, None)), f"{name}.{method} is gone: mpinb replaces it"
        assert list(inspect.signature(getattr(cls, method)).parameters) == parameters, \
            f"{name}.{method} takes other parameters now: mpinb's replacement expects {parameters}"
    missing = [attribute for attribute in attributes if not _has_attribute(cls, attribute)]
    assert not missing, f"{name} no longer has {missing}, which mpinb's replacements read"


def test_every_method_mpinb_replaces_is_checked_above():
    """Every module-level ``Class.attribute = ...`` on a class mpinb did not define is a patch."""
    patched = set()
    for path in _modules():
        tree = _tree(path)
        own = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
        own |= {target.id for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                and node.value.id in own for target in node.targets if isinstance(target, ast.Name)}  # aliases
        for node in tree.body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id[:1].isupper() and target.value.id not in own):
                        patched.add((target.value.id, target.attr))
    hooks = _hooks()
    unchecked = sorted(f"{cls}.{attr}" for cls, attr in patched if attr not in hooks.get(cls, (None, {}, []))[1])
    assert patched and not unchecked, f"mpinb replaces {unchecked}: add them to _hooks() with the parameters it expects"


# Every other private name of another library that mpinb reads, writes, calls or overrides (those
# of the methods it replaces, and the attributes they read, are _hooks()'), by what it belongs to:
# a release that renames one fails here, by name, rather than in a rank. (mpi4py's are read from
# its type stubs: importing mpi4py.MPI would initialize MPI in the test process.)
_THEIR_PRIVATES = {
    "mpi4py.MPI": {"_addressof", "_handleof", "_sizeof", "_typedict", "_comm_lock"},
    "ipyparallel.Client": {"_build_targets", "_control_stream", "_send", "_notification_handlers"},
    "ipyparallel.AsyncResult": {"_metadata"},
    "ipykernel.ipkernel.IPythonKernel": {"_publish_debug_event"},
    "pdb.Pdb": {"_cmdloop"},
    "runpy": {"_run_module_as_main"},
    "sys": {"_getframe", "_current_frames"},
    "os": {"_exit"},
}


def _resolve(dotted: str) -> object:
    """The module, or the class inside one, that ``dotted`` names."""
    import importlib

    module, _, name = dotted.rpartition(".")
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError:
        return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("owner", sorted(_THEIR_PRIVATES))
def test_each_private_name_mpinb_relies_on_is_still_there(owner):
    names = _THEIR_PRIVATES[owner]
    if owner == "mpi4py.MPI":
        import mpi4py

        stub = (Path(mpi4py.__file__).parent / "MPI.pyi").read_text()
        missing = sorted(name for name in names if not re.search(rf"\b{name}\b", stub))
    else:
        found = _resolve(owner)
        missing = sorted(name for name in names
                         if not (hasattr(found, name) or (isinstance(found, type) and _has_attribute(found, name))))
    assert not missing, f"{owner} no longer has {missing}, which mpinb relies on"


def _our_attribute_names() -> set[str]:
    """What mpinb's own classes define: their methods and class attributes, and what their
    methods set on ``self`` or ``cls``."""
    ours: set[str] = set()
    for path in _modules():
        for cls in ast.walk(_tree(path)):
            if not isinstance(cls, ast.ClassDef):
                continue
            for node in cls.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    ours.add(node.name)
                elif isinstance(node, ast.Assign):
                    ours |= {target.id for target in node.targets if isinstance(target, ast.Name)}
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    ours.add(node.target.id)
            ours |= {node.attr for node in ast.walk(cls) if isinstance(node, ast.Attribute)
                     and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name)
                     and node.value.id in ("self", "cls")}
    return ours


def _is_private(name: str) -> bool:
    """``_name``: not a dunder, not a protocol's sunder (``_repr_mimebundle_``), not mpinb's mark."""
    return name.startswith("_") and not name.endswith("_") and not name.startswith("_mpinb")


def test_every_private_name_of_another_library_that_mpinb_uses_is_fenced():
    """An attribute ``x._name`` read, written or called on anything but ``self``, ``cls`` or one of
    mpinb's modules, whose name no class of mpinb defines, is another library's private name; a
    method of a class of mpinb that overrides a private one of its base (``RankPdb._cmdloop``) is
    too. Each must be in _THEIR_PRIVATES or _hooks(), which the tests above check against the library."""
    fenced = set().union(*_THEIR_PRIVATES.values(), *(
        {*methods, *attributes} for _, methods, attributes in _hooks().values()))
    ours = _our_attribute_names()
    unfenced: set[tuple[str, str]] = set()  # (where, name)
    overrides: set[tuple[str, str]] = set()
    for path in _modules():
        tree = _tree(path)
        modules_of_mpinb = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                            and (node.level or (node.module or "").startswith("mpinb")) for alias in node.names}
        external: dict[str, str] = {}  # a name this module imported from another library -> its dotted name
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                external |= {(alias.asname or alias.name): alias.name for alias in node.names
                             if not alias.name.startswith(("mpinb", "mpi4py"))}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module \
                    and not node.module.startswith(("mpinb", "mpi4py")):
                external |= {(alias.asname or alias.name): f"{node.module}.{alias.name}" for alias in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr) and node.attr not in ours:
                receiver = node.value
                if not (isinstance(receiver, ast.Name) and (receiver.id in ("self", "cls")
                                                              or receiver.id in modules_of_mpinb)):
                    unfenced.add((f"{_dotted(path)}:{node.lineno}: {ast.unparse(node)}", node.attr))
            if isinstance(node, ast.ClassDef):
                bases = [_resolve(external[first] + dot + rest) for first, dot, rest
                         in (ast.unparse(base).partition(".") for base in node.bases) if first in external]
                for member in node.body:
                    if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_private(member.name) \
                            and any(hasattr(base, member.name) for base in bases):
                        overrides.add((f"{_dotted(path)}.{node.name}.{member.name}", member.name))
    outside = sorted(where for where, name in unfenced if name not in fenced)
    assert not outside, f"another library's private names, not in _THEIR_PRIVATES: {outside}"
    assert ("mpinb.rank._debugger.RankPdb._cmdloop", "_cmdloop") in overrides, "the override finder found none"
    unfenced_overrides = sorted(where for where, name in overrides if name not in fenced)
    assert not unfenced_overrides, f"overrides of another library's private methods, not in _THEIR_PRIVATES: " \
                                   f"{unfenced_overrides}"


def test_the_dependencies_a_new_major_version_could_break_are_bounded():
    """mpinb patches ipyparallel's and ipykernel's internals: a new major version must be tried
    (and this file's checks pass) before users get it."""
    text = (ROOT / "pyproject.toml").read_text()
    for package in ("ipyparallel", "ipykernel"):
        spec = re.search(rf'"{package}([^"]*)"', text)
        assert spec and "<" in spec.group(1), f"pyproject.toml gives {package} no upper bound"


# -- the guide's map (docs/guide/design.md) and the README, a front page ----------------------------
GUIDE = ROOT / "docs" / "guide"


def _map() -> str:
    return (GUIDE / "design.md").read_text().split("```", 2)[1]


def test_the_map_names_every_module_and_folder():
    text = _map()
    named = set(re.findall(r"[\w.]+", text))
    missing = [str(path.relative_to(PACKAGE)) for path in _modules()
               if path.name != "__init__.py" and path.name not in named]
    folders = [path.name + "/" for path in PACKAGE.iterdir() if path.is_dir() and (path / "__init__.py").exists()]
    missing += [folder for folder in folders if folder not in text]
    tops = [name + "/" for name in ("notebooks", "bench", "kernel", "tests", "docs", "workloads", ".ci")
            if (ROOT / name).is_dir()]
    missing += [top for top in tops if top not in text]
    assert not missing, f"the guide's map (docs/guide/design.md) does not name {missing}"


def test_the_map_names_nothing_that_is_gone():
    names = set(re.findall(r"\b(_?\w+\.(?:py|js|c))\b", _map()))
    present = {path.name for folder in ("mpinb", "tests", "bench", "docs", "workloads", ".ci")
               for path in (ROOT / folder).rglob("*")
               if path.is_file()}
    gone = sorted(names - present)
    assert not gone, f"the guide's map names files that are not in the tree: {gone}"


def test_the_guides_table_of_tutorials_names_each_one_in_order():
    text = (GUIDE / "tutorials.md").read_text()
    listed = re.findall(r"^\| `(\d\d\w?-[\w-]+)` \|", text, re.MULTILINE)
    tutorials = sorted(path.stem for path in (ROOT / "notebooks").glob("*.ipynb"))
    assert listed == tutorials


def test_the_map_puts_exactly_the_shared_modules_under_common():
    lines = _map().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  common/"))
    block = itertools.takewhile(lambda line: line.startswith("    "), lines[start + 1:])
    listed = {match[1] for line in block if (match := re.match(r"    (_\w+)\.py", line))}
    present = {path.stem for path in COMMON.glob("_*.py")} - {"__init__"}
    assert listed == present, f"the map lists {sorted(listed)} under common/; the folder holds {sorted(present)}"


def test_the_readme_is_a_front_page_that_leads_to_every_page_of_the_guide():
    """The README says what mpinb is, how to start and where the guide is, in at most 150 lines;
    it links every page of the guide, and the docs site's table of contents lists each."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150, "the README is a front page: the guide is in docs/guide/"
    pages = sorted(path.name for path in GUIDE.glob("*.md"))
    unlinked = [page for page in pages if f"(docs/guide/{page})" not in readme]
    assert not unlinked, f"the README does not link these pages of the guide: {unlinked}"
    index = (ROOT / "docs" / "index.md").read_text()
    unlisted = [page for page in pages if f"guide/{page.removesuffix('.md')}\n" not in index]
    assert not unlisted, f"docs/index.md's table of contents does not list {unlisted}"
    assert "](CONTRIBUTING.md)" in readme and "/CONTRIBUTING\n" in index, \
        "the README and the site lead to CONTRIBUTING.md"
    includes = [page.name for page in GUIDE.glob("*.md") if "README.md" in page.read_text()]
    assert not includes, f"guide pages that still include the README: {includes}"


def test_the_api_page_documents_every_exported_name():
    import mpinb

    api = (ROOT / "docs" / "api.md").read_text()
    missing = [name for name in mpinb.__all__ if not re.search(rf"^\.\. auto\w+:: mpinb\.{name}$", api, re.MULTILINE)]
    assert not missing, f"docs/api.md documents no {missing}"


# -- the widgets: one ES module and one CSS file each, colours written once, state typed ---------------
WIDGETS = PACKAGE / "widgets"
# A colour written out: #rgb, #rrggbb, rgb(), rgba(), hsl().
_COLOR = re.compile(r"#[0-9a-fA-F]{3,8}\b|\b(?:rgba?|hsla?)\(")


def _widget_classes() -> list[type]:
    import anywidget

    import mpinb.widgets as widgets

    return [cls for cls in vars(widgets).values() if isinstance(cls, type) and issubclass(cls, anywidget.AnyWidget)]


def test_the_widgets_es_modules_hold_no_colour_and_no_css():
    """Colours come from mpinb/_colors.py (each widget's state) or the theme (its CSS file), so
    that a palette is never written twice and the views follow a dark theme."""
    for module in sorted(WIDGETS.glob("*.js")):
        code = re.sub(r"//.*|/\*.*?\*/", "", module.read_text(), flags=re.DOTALL)  # comments may name colours
        assert not _COLOR.findall(code), f"{module.name} writes a colour out: {_COLOR.findall(code)}"
        assert "<style" not in code and 'createElement("style")' not in code, f"{module.name} carries CSS"


def test_the_widgets_css_writes_colours_only_as_the_themes_fallbacks():
    for sheet in sorted(WIDGETS.glob("*.css")):
        text = re.sub(r"/\*.*?\*/", "", sheet.read_text(), flags=re.DOTALL)
        # what is left once every var(--jp-..., fallback) is taken out must name no colour
        bare = text
        fallback = re.compile(r"var\(--jp-[\w-]+,\s*[^()]*(?:\([^()]*\))?[^()]*\)")
        while (stripped := fallback.sub("var()", bare)) != bare:
            bare = stripped
        assert not _COLOR.findall(bare), f"{sheet.name} writes colours no theme can change: {_COLOR.findall(bare)}"


def test_each_widget_loads_its_own_module_and_css():
    """widgets/NAME.py's class draws with NAME.js and NAME.css (anywidget reads them into
    ``_esm`` and ``_css``)."""
    for cls in _widget_classes():
        stem = cls.__module__.rpartition(".")[2]
        assert str(cls._esm) == (WIDGETS / f"{stem}.js").read_text(), f"{cls.__name__} does not load {stem}.js"
        assert str(cls._css) == (WIDGETS / f"{stem}.css").read_text(), f"{cls.__name__} does not load {stem}.css"


_TS_TYPES = {"Unicode": "string", "Int": "number", "Float": "number", "Bool": "boolean", "List": "[]",
             "Dict": "Record|{|Colors", "Enum": '"'}


def test_the_state_each_es_module_reads_is_the_state_python_syncs():
    """state.d.ts, which tsc checks the modules against, names exactly each class's synced
    traits, each with a type of the same kind."""
    declared = {}
    for name, body in re.findall(r"export interface (\w+State) \{(.*?)\n\}", (WIDGETS / "state.d.ts").read_text(),
                                 re.DOTALL):
        declared[name] = dict(re.findall(r"^\s+(\w+): (.+);$", body, re.MULTILINE))
    interfaces = {"RankOutput": "OutputState", "ProgressView": "ProgressState", "TraceView": "TraceState"}
    for cls in _widget_classes():
        traits = {name: trait for name, trait in cls.class_traits(sync=True).items()
                  if not name.startswith("_") and name not in ("layout", "tabbable", "tooltip")}
        interface = declared[interfaces[cls.__name__]]
        assert set(interface) == set(traits), (f"{cls.__name__}: state.d.ts's {interfaces[cls.__name__]} names "
                                               f"{sorted(set(interface) ^ set(traits))} differently")
        for name, trait in traits.items():
            kinds = _TS_TYPES[type(trait).__name__].split("|")
            assert any(kind in interface[name] for kind in kinds), f"{cls.__name__}.{name}: {interface[name]}"
            if hasattr(trait, "values"):  # an Enum: the same choices
                assert set(re.findall(r'"(\w+)"', interface[name])) == set(trait.values), f"{cls.__name__}.{name}"


# -- the tiers and .ci/suite.py's stages select tests by marker ---------------------------------

def _suite():
    """.ci/suite.py, as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ci_suite", ROOT / ".ci" / "suite.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # (its dataclasses look it up)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def every_test(collected_tests) -> list[tuple[str, set[str]]]:
    """(file, marks) of every test of tests/, as this session collected them before `-m` chose."""
    items = collected_tests
    files = {item.nodeid.split("::")[0] for item in items}
    if not {f"tests/{path.relative_to(ROOT / 'tests')}" for path in (ROOT / "tests").rglob("test_*.py")} <= files:
        pytest.skip("needs every test file collected (pytest tests, with any -m)")
    return [(item.nodeid.split("::")[0], {mark.name for mark in item.iter_markers()}) for item in items]


def test_make_test_runs_each_test_once_on_each_mpi_it_is_for(every_test):
    """Every test once on MPICH; the every_mpi ones once on Open MPI and on Intel MPI too (except,
    on Intel MPI, those that make hosts: see RUNS_ON; a file that SKIP_ON_INTEL marks is collected
    there and skipped, saying why)."""
    from _pytest.mark.expression import Expression

    suite = _suite()
    stages = [stage for stage in suite.STAGES if stage.kind == "pytest"]
    wrong = []
    for file, marks in every_test:
        for mpi, runs_there in suite.RUNS_ON.items():
            runs = [stage.name for stage in stages if stage.mpi == mpi and stage.selects(marks)]
            expected = 1 if not runs_there or Expression.compile(runs_there).evaluate(marks.__contains__) else 0
            if len(runs) != expected:
                wrong.append(f"{file} {sorted(marks)} on {mpi}: {runs or 'no stage'}")
    assert not wrong, "tests that make test would not run exactly where they should:\n" + "\n".join(sorted(set(wrong)))


def test_the_stages_name_only_registered_marks_and_stages(pytestconfig):
    suite = _suite()
    registered = {line.split(":")[0] for line in pytestconfig.getini("markers")}
    names = {stage.name for stage in suite.STAGES}
    assert len(names) == len(suite.STAGES), "two stages of one name"
    for stage in suite.STAGES:
        used = set(re.findall(r"\w+", stage.select)) - {"and", "or", "not"}
        assert not stage.select or used <= registered, f"{stage.name} selects by unknown marks {used - registered}"
        assert set(stage.after) <= names, f"{stage.name} comes after a stage that is not there"


def test_each_stage_keeps_the_rules_of_what_it_runs(every_test):
    """Tests that read the site run after it is built; those that make hosts, one stage at a
    time; an MPI's tests after its install, and the other MPIs' with their settings."""
    suite = _suite()
    for stage in suite.STAGES:
        if stage.kind != "pytest":
            continue
        marks = set().union(*(marks for _, marks in every_test if stage.selects(marks)))
        assert marks, f"{stage.name} selects no test"
        assert "site" not in marks or "site" in stage.after, f"{stage.name} runs tests that read the site before it"
        assert "hosts" not in marks or stage.group == "hosts", f"{stage.name} makes hosts beside another such stage"
        if stage.mpi != "mpich":
            assert f"install-{stage.mpi}" in stage.after and stage.env == suite.OTHER_MPI, stage.name


def test_a_failed_stage_is_named_with_the_lines_that_say_what_failed():
    """The end of a run (all a CI page may show) names each failure: pytest's summary lines, the
    notebook a docs build failed on, the error; not the lines around them."""
    why_failed = _suite().why_failed
    pytest_log = ("tests/test_pool.py ..F.                                       [ 40%]\n"
                  "=========================== short test summary info ============================\n"
                  "FAILED tests/test_pool.py::test_a - AssertionError: 3 != 4\n"
                  "ERROR tests/test_hang.py::test_b - TimeoutError: pool did not start\n"
                  "==== 1 failed, 1 error, 30 passed in 12.00s ====\n")
    assert why_failed(pytest_log) == ["FAILED tests/test_pool.py::test_a - AssertionError: 3 != 4",
                                      "ERROR tests/test_hang.py::test_b - TimeoutError: pool did not start"]
    site_log = ("# 2026-12-07 14:03:39,781 INFO traitlets client.py:695 -- Executing notebook with kernel: python3\n"
                "# 2026-12-07 14:12:22,633 ERROR traitlets client.py:845 -- Timeout waiting for execute reply (600s).\n"
                "Sphinx parallel build error!\n"
                "myst_nb.core.execute.base.ExecutionError: /w/notebooks/zh/03-nonblocking.ipynb\n"
                "mpinb.errors.RunInterrupted: interrupted; ranks 0-1 wait in recv (line 4)\n") * 2
    assert why_failed(site_log) == [
        "# 2026-12-07 14:12:22,633 ERROR traitlets client.py:845 -- Timeout waiting for execute reply (600s).",
        "myst_nb.core.execute.base.ExecutionError: /w/notebooks/zh/03-nonblocking.ipynb",
                                    "mpinb.errors.RunInterrupted: interrupted; ranks 0-1 wait in recv (line 4)"]
    many = "".join(f"FAILED tests/test_x.py::test_{i} - {'x' * 400}\n" for i in range(25))
    shown = why_failed(many)
    assert len(shown) == 21 and shown[-1] == "... and 5 more such lines" and max(map(len, shown)) == 300
    assert why_failed("make: *** [Makefile:1: docs] Error 2\n") == [
        "(no line of its log names a failure: its end is above)"]


def test_each_test_that_makes_hosts_or_drives_a_browser_is_marked_so(every_test):
    """A test file that imports the hosts' makers (network namespaces, Slurm) is marked hosts (two
    such stages never run at once); one that imports the browser's launcher is marked browser."""
    makers = {"multihost_cluster": "hosts", "slurm_cluster": "hosts", "browser": "browser"}
    needs: dict[str, set[str]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        tree = _tree(path)
        top = {alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
        top |= {node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
        needs[f"tests/{path.relative_to(ROOT / 'tests')}"] = {mark for name, mark in makers.items() if name in top}
    assert any(needs.values()), "no test makes hosts or drives a browser any more: nothing to check"
    unmarked = sorted({f"{file}: {needs[file] - marks}" for file, marks in every_test if needs[file] - marks})
    assert not unmarked, unmarked


def test_make_test_quick_has_a_test_of_each_behaviour_a_change_most_often_breaks(every_test):
    quick = {file for file, marks in every_test if "quick" in marks}
    behaviours = {"tests/test_pool.py": "a pool starts and runs, per-rank output",
                  "tests/test_hang.py": "a deadlock diagnosed and interrupted, the pool intact; a death",
                  "tests/test_trace.py": "a trace", "tests/test_magics.py": "the magics and the views",
                  "tests/test_verify.py": "--verify finding", "tests/test_debug.py": "stacks and inspect",
                  "tests/test_export.py": "export", "tests/test_notebooks.py": "one tutorial executed",
                  "tests/test_run_file.py": "a script as mpiexec runs it"}
    missing = {file: what for file, what in behaviours.items() if file not in quick}
    assert not missing, f"make test-quick tests none of: {missing}"
    assert not [file for file, marks in every_test if {"quick", "hosts"} <= marks or {"quick", "slow"} <= marks], \
        "a quick test that makes hosts or is slow"


def test_the_unit_tests_folder_holds_only_unit_tests(every_test):
    unmarked = sorted({file for file, marks in every_test if file.startswith("tests/units/") and "unit" not in marks})
    assert not unmarked, f"mark these unit or move them out of tests/units: {unmarked}"


def test_the_tests_import_their_helpers_as_modules_and_never_the_benchmarks():
    """conftest.py holds fixtures (pytest imports it); the helpers are modules of their own; what
    the tests share with bench/ lives in workloads/, which imports neither."""
    offenders = []
    for path in [*(ROOT / "tests").rglob("*.py"), *(ROOT / "workloads").rglob("*.py")]:
        if path.parent.name == "scripts":  # (programs the tests run, one broken on purpose)
            continue
        for node in ast.walk(_tree(path)):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            bad = [name for name in names if name.split(".")[0] in ("conftest", "bench", "tests")]
            if bad:
                offenders.append(f"{path.relative_to(ROOT)}: {bad}")
    assert not offenders, offenders
