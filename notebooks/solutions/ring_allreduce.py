# Solution to the exercise of 02-collectives: paste into a %%mpi cell, then run mpinb.check("ring_allreduce").
def ring_allreduce(x):
    chunks = np.array_split(x.astype(float), size)
    right, left = (rank + 1) % size, (rank - 1) % size
    # Reduce-scatter: after p-1 steps, rank r holds the full sum of chunk (r + 1) % p.
    for step in range(size - 1):
        send_index, recv_index = (rank - step) % size, (rank - step - 1) % size
        incoming = np.empty_like(chunks[recv_index])
        comm.Sendrecv(chunks[send_index], dest=right, recvbuf=incoming, source=left)
        chunks[recv_index] = chunks[recv_index] + incoming
    # All-gather: pass the finished chunks around the ring.
    for step in range(size - 1):
        send_index, recv_index = (rank + 1 - step) % size, (rank - step) % size
        incoming = np.empty_like(chunks[recv_index])
        comm.Sendrecv(chunks[send_index], dest=right, recvbuf=incoming, source=left)
        chunks[recv_index] = incoming
    return np.concatenate(chunks)
