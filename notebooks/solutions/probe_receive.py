# Solution to an exercise of 01-point-to-point: paste into a %%mpi cell, then run mpinb.check("probe_receive").
def probe_receive(count):
    status, received = MPI.Status(), {}
    for _ in range(count):
        comm.Probe(source=MPI.ANY_SOURCE, tag=7, status=status)     # who sent, and how much
        buffer = np.empty(status.Get_count(MPI.DOUBLE))
        comm.Recv(buffer, source=status.Get_source(), tag=7)
        received[status.Get_source()] = buffer
    return received
