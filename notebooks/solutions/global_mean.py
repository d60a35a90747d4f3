# Solution to the exercise of 12-debugging: paste into a %%mpi cell, then run mpinb.check("global_mean").
def global_mean(local):
    total, count = comm.allreduce(np.array([local.sum(), len(local)]))   # the sums and the counts, at once
    return float(total / count)
