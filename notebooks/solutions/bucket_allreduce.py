# Solution to the exercise of 07-data-parallel: paste into a %%mpi cell, then run mpinb.check("bucket_allreduce").
def bucket_allreduce(arrays, limit):
    buckets, current, filled = [], [], 0
    for i, array in enumerate(arrays):           # consecutive arrays, greedily, under limit bytes
        if current and filled + array.nbytes > limit:
            buckets.append(current)
            current, filled = [], 0
        current.append(i)
        filled += array.nbytes
    buckets.append(current)
    summed = [None] * len(arrays)
    for bucket in buckets:
        flat = np.concatenate([arrays[i].ravel() for i in bucket])
        comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
        offset = 0
        for i in bucket:
            summed[i] = flat[offset:offset + arrays[i].size].reshape(arrays[i].shape)
            offset += arrays[i].size
    return summed
