"""The traced MPI layer: twins of mpi4py's communicators and requests.

The twins record each call and wait in ways the notebook can interrupt and explain.

It runs in every traced process, whether or not an engine holds it: a pool's engines, and the
children a spawn starts (``_spawned``), which have none. So it stands below the rank's runtime
(``mpinb.rank``): the runtime imports it, it never imports the runtime, and where it must tell the
runtime something (an ``Abort`` about to happen) the runtime hands it a callable. Importing this
package imports nothing else.
"""
