# Solution to the exercise of 13-one-sided: paste into a %%mpi cell, then run mpinb.check("fetch_tickets").
def fetch_tickets(window, tasks):
    one, ticket = np.ones(1, dtype=np.int64), np.empty(1, dtype=np.int64)
    taken = []
    while True:
        window.Lock(0, MPI.LOCK_SHARED)                    # Fetch_and_op is atomic: a shared lock is enough
        window.Fetch_and_op(one, ticket, target_rank=0, op=MPI.SUM)   # ticket = counter; counter += 1
        window.Unlock(0)                                   # the ticket is ours to read only now
        if ticket[0] >= tasks:
            return taken
        taken.append(int(ticket[0]))
