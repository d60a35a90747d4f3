"""Kernels for the cost of tracing: run in a pool with tracing on and off, compared in one run.

Rank 0 prints one JSON line: 1-byte ping-pong half round trip (uppercase and lowercase calls),
8 MB Send/Recv bandwidth (ranks 0 and 1) and 1 MB and 16 kB Allreduce times over all ranks.
"""

import json

from kernels import allreduce, pingpong, rank

figures = {
    "latency_us": pingpong(1000) * 1e6,
    "latency_lowercase_us": pingpong(1000, lowercase=True) * 1e6,
    "bandwidth_8mb_gbs": 8 * 2**20 / pingpong(10, 8 * 2**20) / 1e9,
    "allreduce_1mb_ms": allreduce(2**20, 20) * 1e3,
    "allreduce_16kb_ms": allreduce(2**14, 50) * 1e3,
}
if rank == 0:
    print(json.dumps(figures))
