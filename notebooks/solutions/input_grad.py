# Solution to the exercise of 08-tensor-parallel: paste into a %%mpi cell, then run mpinb.check("input_grad").
def input_grad(grad_h, W1):
    partial = grad_h @ W1.T                      # this rank's hidden units' share of dL/dX
    full = np.empty_like(partial)
    comm.Allreduce(partial, full, op=MPI.SUM)    # the backward pass's allreduce (Megatron's g)
    return full
