"""A Python command line, split as ``python`` reads it: its own options, then the program.

What a traced ``Spawn`` of ``sys.executable`` needs to start the program through mpinb's bootstrap
(``_spawned``) instead; pure, so that it is tested without MPI.
"""

from __future__ import annotations

# Python's options that take a value in the next argument; the others are letters after one "-"
_OPTIONS_WITH_VALUE = ("-W", "-X")
_OPTION_LETTERS = set("bBdEIOPqsRSuv")


def python_program(args: list[str]) -> tuple[list[str], list[str]] | None:
    """``args`` of a Python command line split into Python's own options and the program with
    its arguments (``script ...``, ``-m module ...``, ``-c code ...``); ``None`` for a command
    line mpinb cannot start through its bootstrap (stdin, ``-i``, unknown options)."""
    options: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-m", "-c"):
            return (options, args[i:]) if i + 1 < len(args) else None
        if not arg.startswith("-"):
            return options, args[i:]
        if arg in _OPTIONS_WITH_VALUE:
            options += args[i:i + 2]
            i += 2
            continue
        if arg.startswith(_OPTIONS_WITH_VALUE) or (len(arg) > 1 and set(arg[1:]) <= _OPTION_LETTERS):
            options.append(arg)
            i += 1
            continue
        return None
    return None
