# Solution to the exercise of 09-pipeline-parallel: paste into a %%mpi cell, then run mpinb.check("pipeline_forward").
def pipeline_forward(micro_batches, count):
    outputs = []
    for i in range(count):
        x = micro_batches[i] if rank == 0 else comm.recv(source=rank - 1)
        y = x * (rank + 2)                       # this stage's layer
        if rank < size - 1:
            comm.send(y, dest=rank + 1)          # on to the next stage, while this one takes the next micro-batch
        else:
            outputs.append(y)
    return outputs if rank == size - 1 else None
