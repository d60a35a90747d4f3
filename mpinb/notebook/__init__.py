"""The IPython side: what runs in the notebook's kernel.

It has the ``%mpi``/``%%mpi`` magics, the session that holds the current pool, and the MPI kernel
(``python -m mpinb.notebook.kernel``)."""

from ._magics import load_ipython_extension, unload_ipython_extension
from ._session import current_pool, last_trace

__all__ = ["current_pool", "last_trace", "load_ipython_extension", "unload_ipython_extension"]
