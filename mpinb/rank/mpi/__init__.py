"""The traced MPI layer: twins of mpi4py's communicators and requests.

The twins record each call and wait in ways the notebook can interrupt and explain.

It runs in every rank process, whether or not an engine holds it: a pool's engines, the children a
spawn starts (``_spawned``), a script run as ``mpiexec`` runs it. So it stands below the rank's
runtime (``mpinb.rank``): the runtime imports it, it never imports the runtime, and what the runtime
must learn of it (an ``Abort`` about to happen) it hands over as a callable. Importing this package
imports nothing else.
"""
