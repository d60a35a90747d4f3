# Solution to the exercise of 11-zero: paste into a %%mpi cell, then run mpinb.check("zero_step").
def zero_step(params, grad, lr):
    counts = [len(part) for part in np.array_split(np.empty(len(params)), size)]
    start = sum(counts[:rank])
    mine = np.empty(counts[rank])
    comm.Reduce_scatter(grad, mine, recvcounts=counts, op=MPI.SUM)   # the sum of my shard only
    shard = params[start:start + counts[rank]] - lr * mine              # update my shard
    new = np.empty_like(params)
    comm.Allgatherv(shard, [new, counts])                             # everybody's shards
    return new
