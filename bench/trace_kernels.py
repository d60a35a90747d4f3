"""Kernels for the cost of tracing: run in a pool with tracing on and off, compared in one run.

Rank 0 prints one JSON line: 1-byte ping-pong half round trip (uppercase and lowercase calls),
8 MB Send/Recv bandwidth (ranks 0 and 1), 1 MB and 16 kB Allreduce times over all ranks, and 1 MB
Put bandwidth in Fence epochs (every rank to the next); with the argument ``crowd``, the 16 kB
Allreduce alone.
"""

import json
import sys

from kernels import crowd_figures, rank, tracing_figures

# ``crowd``: only the 16 kB Allreduce, for pools with more ranks than cores
figures = crowd_figures() if sys.argv[1:] == ["crowd"] else tracing_figures()
if rank == 0:
    print(json.dumps(figures))
