"""The modules both sides import: the notebook's process and the ranks'.

They hold what the two must agree on (the messages between them, the event schema, the rank ranges
they print), and import neither side, nor ``mpi4py.MPI``, so that the notebook never initializes MPI.
Importing this package imports nothing else.
"""
