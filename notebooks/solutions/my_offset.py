# Solution to an exercise of 02-collectives: paste into a %%mpi cell, then run mpinb.check("my_offset").
def my_offset(count):
    before = comm.exscan(count)              # the sum of the counts of the ranks before this one
    return 0 if before is None else before   # (None on rank 0)
