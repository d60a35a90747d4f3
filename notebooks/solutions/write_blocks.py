# Solution to the exercise of 14-data-layout-io: paste into a %%mpi cell, then run mpinb.check("write_blocks").
def write_blocks(path, local):
    offset = comm.exscan(local.nbytes) or 0            # the bytes of the ranks before this one (None on rank 0)
    handle = MPI.File.Open(comm, path, MPI.MODE_WRONLY | MPI.MODE_CREATE)
    handle.Write_at_all(offset, local)                 # every rank at once, each at its offset
    handle.Close()
