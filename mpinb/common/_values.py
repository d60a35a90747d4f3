"""How the value of a cell's last expression travels from a rank to the notebook.

Values are pickled on the rank and unpickled in the notebook, so that a value whose class exists
only on the ranks (defined in a ``%%mpi`` cell) or that cannot be pickled at all still arrives as
its repr instead of failing the whole cell.
"""

from __future__ import annotations

import io
import pickle
import sys

MAX_REPR = 2000


class ReprOnly:
    """Stands in for a value that could not be brought back; shows the rank's repr of it."""

    def __init__(self, text: str, why: str):
        self.text = text
        self.why = why

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReprOnly) and other.text == self.text


def short_repr(value: object) -> str:
    """A repr that is cheap and bounded, for tables of per-rank values."""
    try:
        text = repr(value)
    except Exception as err:  # noqa: BLE001 - a broken __repr__ must not lose the cell
        return f"<{type(value).__name__}: repr failed: {err!r}>"
    if len(text) > MAX_REPR:
        text = text[: MAX_REPR - 1] + "…"
    return text


def pack(value: object) -> tuple[bytes | None, str, str]:
    """``(pickled or None, repr, reason it could not be pickled)``."""
    text = short_repr(value)
    try:
        return pickle.dumps(value, protocol=5), text, ""
    except Exception as err:  # noqa: BLE001 - a value's __reduce__ may raise anything: the repr still comes
        return None, text, f"{type(err).__name__}: {err}"


# Modules whose import initializes MPI: never in the notebook's process (a singleton MPI_Init
# under Open MPI leaves a shared-memory file behind; inside a Slurm allocation it can hang).
_RANKS_ONLY = ("mpi4py.MPI", "mpinb.rank")


class _NotebookUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        if module.startswith(_RANKS_ONLY) and module not in sys.modules:
            raise pickle.UnpicklingError(f"{module}.{name} belongs to the ranks' MPI, which the notebook "
                                         "does not start")
        return super().find_class(module, name)


def unpack(data: bytes | None, text: str, why: str) -> object:
    """The value itself when the notebook can rebuild it, else a :class:`ReprOnly`."""
    if data is None:
        return ReprOnly(text, why or "not picklable")
    try:
        return _NotebookUnpickler(io.BytesIO(data)).load()
    except Exception as err:  # noqa: BLE001 - a class that exists only on the ranks, for one
        return ReprOnly(text, f"cannot rebuild in the notebook: {type(err).__name__}: {err}")
