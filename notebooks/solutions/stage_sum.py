# Solution to the exercise of 10-hybrid-parallel: paste into a %%mpi cell, then run mpinb.check("stage_sum").
def stage_sum(x, stages):
    stage = rank % stages                        # rank = replica * stages + stage
    replicas = comm.Split(color=stage, key=rank)  # this stage's copy in every replica
    total = replicas.allreduce(x)
    replicas.Free()
    return total
