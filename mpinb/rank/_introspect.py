"""Completion and inspection against a rank's namespace, for the MPI kernel's Tab and Shift-Tab."""

from __future__ import annotations


def complete(line: str, cursor: int) -> tuple[str, list[str]]:
    """IPython's own matchers on this rank's namespace. Jedi is left out: in an engine it
    found nothing for names the user had just defined (its static analysis sees no cell source)."""
    from IPython import get_ipython

    completer = get_ipython().Completer
    use_jedi, completer.use_jedi = completer.use_jedi, False
    try:
        return completer.complete(line_buffer=line, cursor_pos=cursor)
    finally:
        completer.use_jedi = use_jedi


def inspect(name: str, detail_level: int) -> dict | None:
    """The mime bundle IPython would show for ``name`` (``None`` if there is no such name)."""
    from IPython import get_ipython

    try:
        return get_ipython().object_inspect_mime(name, detail_level=detail_level)
    except KeyError:
        return None
