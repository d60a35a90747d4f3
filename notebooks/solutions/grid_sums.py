# Solution to the exercise of 04-communicators: paste into a %%mpi cell, then run mpinb.check("grid_sums").
def grid_sums(value, rows):
    cols = size // rows
    row, col = divmod(rank, cols)
    row_comm = comm.Split(color=row, key=col)
    col_comm = comm.Split(color=col, key=row)
    sums = (row_comm.allreduce(value), col_comm.allreduce(value))
    row_comm.Free()
    col_comm.Free()
    return sums
