"""Reports what a script sees of its surroundings, as under `mpiexec python program.py ARGS`."""
import os
import sys

from helper import ANSWER  # a module beside the script, importable as under plain python
from mpi4py import MPI

rank = MPI.COMM_WORLD.Get_rank()
line = sys.stdin.readline().strip()
print(f"rank={rank} name={__name__} file={os.path.basename(__file__)} argv={sys.argv[1:]} "
      f"cwd={os.getcwd()} stdin={line!r} answer={ANSWER}")
if rank == 0:
    total = int(input("number? "))
    print("doubled", 2 * total)
if "--fail" in sys.argv:
    sys.exit(3)
sys.exit(0)
