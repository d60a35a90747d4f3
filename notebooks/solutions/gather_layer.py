# Solution to the exercise of 16-training-at-scale: paste into a %%mpi cell, then run mpinb.check("gather_layer").
def gather_layer(shard, counts):
    whole = np.empty(sum(counts))
    comm.Allgatherv(shard, [whole, counts])      # every piece where it belongs, in rank order
    return whole
