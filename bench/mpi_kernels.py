"""MPI micro-benchmarks, run unchanged under plain mpiexec and inside a pool (via run_file).

Rank 0 prints one JSON line: ping-pong latency (1 byte, ranks 0 and 1), bandwidth (8 MB Send/Recv,
ranks 0 and 1) and 8 MB Allreduce time over all ranks.
"""

import json

from kernels import allreduce, pingpong, rank

figures = {
    "latency_us": pingpong(2000) * 1e6,
    "bandwidth_gbs": 8 * 2**20 / pingpong(10, 8 * 2**20) / 1e9,
    "allreduce_8mb_ms": allreduce(8 * 2**20, 5) * 1e3,
}
if rank == 0:
    print(json.dumps(figures))
