"""The layout of one traced MPI call.

The ranks (which record) and the notebook (which reads) share it.

Ranks record plain tuples (cheap to make, cheap to pickle); :mod:`mpinb.trace` turns them into a
numpy structured array.
"""

from __future__ import annotations

from collections.abc import Sequence

# kind: RMA is a one-sided data call (Put, Get, Accumulate...), EPOCH a window's synchronisation
# other than Fence (Lock, Unlock, Flush, Win.Start...; Fence is a COLLECTIVE over the window's group)
# and IO an independent read or write of an MPI-IO file (collective ones are COLLECTIVEs over its group)
SEND, RECV, COLLECTIVE, WAIT, PROBE, RMA, EPOCH, IO = range(8)

# Calls that make a new communicator: recorded as collectives, but they move no user data.
DERIVING_CALLS = ("Dup", "Dup_with_info", "Clone", "Split", "Split_type", "Create", "Create_group",
                  "Create_cart", "Create_graph", "Create_dist_graph", "Create_dist_graph_adjacent")
LOCAL_DERIVING_CALLS = ("Create_group",)  # collective over the new group only, not the parent
CART_DERIVING_CALLS = (*DERIVING_CALLS, "Sub")
KIND_NAMES = ("send", "recv", "collective", "wait", "probe", "rma", "epoch", "io")
# the file collectives, whose members agree first (see rank/mpi/_files)
FILE_COLLECTIVES = ("File.Open", "File.Close", "File.Set_view", "File.Set_size", "File.Preallocate", "File.Sync",
                    "File.Set_atomicity", "File.Write_ordered", "File.Read_ordered", "File.Seek_shared",
                    "File.Write_all", "File.Read_all", "File.Write_at_all", "File.Read_at_all")
# the neighbourhood collectives whose members agree first where their blocking form is made (see
# rank/mpi/_neighbors)
NEIGHBORHOOD_COLLECTIVES = ("Neighbor_allgather", "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv",
                            "Neighbor_alltoallw", "neighbor_allgather", "neighbor_alltoall")
# the window collectives that every member agrees on first (see rank/mpi/_windows)
WINDOW_COLLECTIVES = ("Fence", "Win.Free", "Win.Create", "Win.Allocate", "Win.Allocate_shared", "Win.Create_dynamic")
# MPI's predefined reduction operations, as a verified run numbers them (see rank/mpi/_collectives.signature)
REDUCTION_OPS = ("SUM", "PROD", "MAX", "MIN", "LAND", "BAND", "LOR", "BOR", "LXOR", "BXOR", "MAXLOC", "MINLOC",
                 "REPLACE", "NO_OP")

# Lanes of spawned processes until the trace numbers them after the pool's ranks: the k-th spawn
# rooted at world rank r counts from PROVISIONAL * (r + 1) + PER_SPAWN * k (see mpinb.rank.mpi._spawn,
# mpinb.trace._spawned).
PROVISIONAL, PER_SPAWN = 10**6, 10**3

FIELDS = (
    "op",        # mpi4py method name: "send", "Recv", "allreduce", "Wait", ...
    "kind",      # one of the constants above
    "comm",      # communicator, window or file id, the same on every member ("world", "world.0@0",
                 # "win0@world", "file0@world")
    "peer",      # comm-local peer rank (destination, actual source, root, RMA target); -1 if none
    "tag",       # message tag (the actual one for receives); RMA: the target displacement; Lock:
                 # 1 exclusive, 0 shared; file I/O: the explicit offset; -1 if none
    "sent",      # bytes this rank sent (pickled size for lowercase calls)
    "received",  # bytes this rank received
    "start",     # when the call began (seconds, this rank's clock)
    "end",       # when the operation completed (for nonblocking calls: when a wait/test saw it)
    "returned",  # when the call returned control (== end for blocking calls)
    "file",      # the user's source file ("<mpi-cell-3>", a script path)
    "line",      # and line
)
INDEX = {name: i for i, name in enumerate(FIELDS)}


def world_rank(members: Sequence[int] | None, rank: object) -> int:
    """``rank`` of a communicator whose world ranks are ``members``, as a world rank; -1 when it
    names no member (``ANY_SOURCE``, ``PROC_NULL``) or the members are not known."""
    if members is not None and isinstance(rank, int) and 0 <= rank < len(members):
        return members[rank]
    return -1


def place_of(cid: str) -> str:
    """What an id names: ``"window"`` (``win0@world``), ``"file"`` (``file0@world``) or ``"communicator"``."""
    if cid.startswith("win") and "@" in cid:
        return "window"
    if cid.startswith("file") and "@" in cid:
        return "file"
    return "communicator"
