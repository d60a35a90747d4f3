"""From notebook to cluster: `mpinb export` (and `%mpi export`) write a notebook's program as one
plain mpi4py script that gives under `mpiexec` what the cells gave in the pool; `--slurm` adds a
batch job, which `mpinb submit` hands to a real Slurm (tests/test_slurm.py, test_multihost.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import nbformat
import pytest
from _processes import wait_until_gone

from mpinb.notebook._export import ExportError, export_cells
from mpinb.notebook._export_files import write
from mpinb.pool._launch import plain_mpiexec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")


def cells(*sources: str, tags: dict[int, list[str]] | None = None) -> list[tuple[str, list[str]]]:
    return [(source, (tags or {}).get(i, [])) for i, source in enumerate(sources)]


def notebook(path, sources: list[str], kernel: str = "python3") -> str:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    nbformat.write(nb, str(path))
    return str(path)


def mpinb(*args: str, cwd: str | None = None, timeout: float = 300,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    script = os.path.join(os.path.dirname(sys.executable), "mpinb")
    return subprocess.run([script, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, **(env or {})})


def under_mpiexec(n: int, script: str, cwd: str, timeout: float = 300) -> subprocess.CompletedProcess:
    command, env = plain_mpiexec(n, [sys.executable, script])
    # Unbuffered, a print is one write per argument, and ranks' words interleave mid-line.
    env.pop("PYTHONUNBUFFERED", None)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


# -- what the program says, without running it ------------------------------------------------------

@pytest.mark.unit
@pytest.mark.quick
def test_the_cells_become_one_program_in_their_order():
    exported = export_cells(cells(
        "%load_ext mpinb\nimport numpy as np",
        "base = np.arange(4.0)",
        "%mpi push base",
        "%%mpi -n 3\nx = base * rank\n# the sum, shown per rank\nx.sum()",
        "%%mpi --targets 0,2\ny = rank + 1",
        "vals = %mpi pull x",
        "%mpi trace",
        "pool = mpinb.current_pool()\nfirst = pool.pull('y', targets=[0])[0]\nboth = pool.pull('y', targets=[0, 2])",
        "total = sum(v.sum() for v in vals)\ntotal",
    ))
    script = exported.script
    assert exported.ranks == 3
    compile(script, "exported.py", "exec")  # valid Python
    order = [script.index(piece) for piece in (
        "comm = MPI.COMM_WORLD", "base = np.arange(4.0)", "base = comm.bcast(base if rank == 0 else None, root=0)",
        "x = base * rank", "# the sum, shown per rank\n_show(x.sum())", "if rank in {0, 2}:  # --targets 0,2",
        "pulled_x = comm.gather(x, root=0)", "vals = pulled_x", "comm.gather(y if rank in [0, 2]", "first = y",
        "both = [pulled_y_0[r] for r in sorted([0, 2])]", "_show(total)")]
    assert order == sorted(order), "each cell where the notebook has it"
    assert "if rank == 0:  # the notebook's own code" in script, "the notebook's code runs on rank 0"
    assert [str(item) for item in exported.left_out] == [
        "cell 7: %mpi trace (it shows the message-flow views of a run)"]
    assert "# left out (it shows the message-flow views of a run):\n#   %mpi trace" in script


@pytest.mark.unit
def test_the_notebooks_names_never_overwrite_the_ranks():
    """On rank 0 the notebook's code shares a namespace with the ranks' code: a notebook variable
    with a rank variable's name is spelt apart, and what the ranks pull is the ranks' own."""
    script = export_cells(cells(
        "%%mpi -n 2\ncounts = [rank] * 3\ndef helper():\n    return 1",
        "counts = %mpi pull counts\ncounts = [sum(c) for c in counts]\ndef helper():\n    return 2\nhelper()",
        "%%mpi\nprint(counts, helper())",
    )).script
    assert "nb_counts = pulled_counts" in script and "nb_counts = [sum(c) for c in nb_counts]" in script
    assert "def nb_helper():" in script and "_show(nb_helper())" in script
    assert script.rstrip().endswith("print(counts, helper())"), "the ranks' own names, untouched"


@pytest.mark.unit
def test_what_only_a_notebook_has_is_left_out_with_what_used_it():
    exported = export_cells(cells(
        "%%mpi -n 2\nx = rank",
        "t = mpinb.last_trace()\nn = len(t.events)\nprint(n)\nprint('kept')",
        "!ls\n%timeit sum(range(10))",
        "%%timeit\nsum(range(10))",
        "%%mpi\nraise ValueError('on purpose')",
        "mpinb.check('ring')",
        tags={4: ["raises-exception"]}))
    said = [(item.cell, item.why) for item in exported.left_out]
    assert said == [
        (2, "mpinb.last_trace() reads the last run's trace"), (2, "it uses t, left out in cell 2"),
        (2, "it uses n, left out in cell 2"), (3, "a shell command (!), which the script leaves to you"),
        (3, "IPython's %timeit, which a script cannot run"), (4, "an IPython cell magic, which a script cannot run"),
        (5, "tagged raises-exception: it shows an error on purpose"),
        (6, "mpinb.check() grades an exercise with the notebook's pool")]
    assert "    print('kept')" in exported.script
    compile(exported.script, "exported.py", "exec")


@pytest.mark.unit
def test_pools_of_different_sizes_cannot_be_one_program():
    with pytest.raises(ExportError, match=r"pools of different sizes \(cell 1: -n 2; cell 2: -n 4\)"):
        export_cells(cells("%%mpi -n 2\nx = 1", "%%mpi -n 4\ny = 2"))


@pytest.mark.unit
def test_the_mpi_kernel_and_autompi_send_plain_cells_to_the_ranks():
    kernel = export_cells(cells("x = rank", "%%local\nprint('here')", "%mpi start -n 3"), mpi_kernel=True)
    assert kernel.ranks == 3 and "\nx = rank\n" in kernel.script and "    print('here')" in kernel.script
    auto = export_cells(cells("%autompi", "y = rank * 2", "%autompi off", "z = 1"))
    assert "\ny = rank * 2\n" in auto.script and "    z = 1" in auto.script


def test_an_edited_export_is_never_overwritten(tmp_path):
    exported = export_cells(cells("%%mpi -n 2\nx = 1"))
    target = str(tmp_path / "job.py")
    write(exported, target)
    write(exported, target)  # an unedited export is replaced
    with open(target, "a") as handle:
        handle.write("# my change\n")
    with pytest.raises(FileExistsError, match="not an export nobody edited since"):
        write(exported, target)
    assert open(target).read().endswith("# my change\n")
    (tmp_path / "mine.py").write_text("print('mine')\n")
    done = mpinb("export", notebook(tmp_path / "nb.ipynb", ["%%mpi -n 2\nx = 1"]), "-o", str(tmp_path / "mine.py"))
    assert done.returncode == 2 and "is kept" in done.stderr
    assert (tmp_path / "mine.py").read_text() == "print('mine')\n"


@pytest.mark.unit
def test_an_export_never_writes_through_a_link(tmp_path):
    """A link where the script, its batch job or its data would go is refused, with --force too:
    one planted in a shared folder would otherwise carry the export onto any file of the user's."""
    from mpinb._confined import LinkRefused

    precious = tmp_path / "precious.txt"
    precious.write_text("mine")
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "job.sbatch").symlink_to(precious)
    exported = export_cells(cells("%%mpi -n 2\nx = 1"))
    for force in (False, True):
        with pytest.raises(LinkRefused, match="job.sbatch is a symbolic link"):
            write(exported, str(folder / "job.py"), slurm={}, force=force)
    assert precious.read_text() == "mine" and (folder / "job.sbatch").is_symlink()
    assert not (folder / "job.py").exists(), "nothing is written once a link is found"


# -- what the program does: the notebook's results under mpiexec -----------------------------------

PROGRAM = [
    "%load_ext mpinb\nimport json\nimport numpy as np\nimport mpinb",
    "%mpi start -n 3",
    "data = np.arange(12.0)\nscale = 3",
    "%mpi push data scale",
    "%%mpi\npart = data[rank::size] * scale\ns = float(part.sum())\nprint('rank', rank, 'has', s)",
    "%%writefile helper.py\nfrom mpi4py import MPI\nimport sys\nc = MPI.COMM_WORLD\n"
    "print('helper', c.Get_rank(), sys.argv[1:])\n",
    "%mpi run helper.py a b",
    "sums = %mpi pull s\npool = mpinb.current_pool()\nbiggest = pool.run('max(part)', targets=[0]).value[0]",
    "%%mpi --targets 1\nonly_one = 'one'",
    "result = {'sums': sums, 'total': float(sum(sums)), 'biggest': float(biggest),\n"
    "          'one': pool.pull('only_one', targets=[1])}\n"
    "with open('result.json', 'w') as handle:\n    json.dump(result, handle)",
]


@pytest.mark.quick
@pytest.mark.timeout(300)
def test_the_program_gives_under_mpiexec_what_the_pool_gave(tmp_path, existing_pools):
    source = notebook(tmp_path / "program.ipynb", PROGRAM)
    ran = mpinb("run", source, cwd=str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    in_the_pool = json.loads((tmp_path / "result.json").read_text())
    (tmp_path / "result.json").unlink()
    (tmp_path / "helper.py").unlink()

    exported = mpinb("export", source, "-o", str(tmp_path / "program.py"))
    assert exported.returncode == 0, exported.stderr
    assert f"run it: mpiexec -n 3 {sys.executable} {tmp_path / 'program.py'}" in exported.stdout
    done = under_mpiexec(3, str(tmp_path / "program.py"), str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "result.json").read_text()) == in_the_pool == {
        "sums": [54.0, 66.0, 78.0], "total": 198.0, "biggest": 27.0, "one": ["one"]}
    lines = done.stdout.splitlines()
    assert {"rank 0 has 54.0", "rank 1 has 66.0", "rank 2 has 78.0"} <= set(lines)
    assert sorted(line for line in lines if line.startswith("helper")) == [
        "helper 0 ['a', 'b']", "helper 1 ['a', 'b']", "helper 2 ['a', 'b']"]
    assert not wait_until_gone(10, existing_pools)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("known", [False, True], ids=["cells-it-ran", "saved-notebook"])
def test_mpi_run_of_the_export_in_the_same_notebook_gives_the_cells_values(tmp_path, existing_pools, known):
    """The round trip: `%mpi export` in a notebook, then `%mpi run` of what it wrote, in the same
    pool. The notebook is the saved file where Jupyter names it to the kernel, else the cells the
    kernel ran."""
    source = notebook(tmp_path / "trip.ipynb", [
        *PROGRAM,
        "cells = json.load(open('result.json'))",
        "%mpi export -o trip.py",
        "%mpi run trip.py",
        "assert json.load(open('result.json')) == cells, (json.load(open('result.json')), cells)\nprint('same')",
    ])
    session = {"JPY_SESSION_NAME": source} if known else {"JPY_SESSION_NAME": ""}
    ran = mpinb("run", source, "-o", str(tmp_path / "ran.ipynb"), cwd=str(tmp_path), env=session)
    assert ran.returncode == 0, ran.stderr
    executed = nbformat.read(str(tmp_path / "ran.ipynb"), as_version=4)
    said = "".join(out.get("text", "") for cell in executed.cells for out in cell.get("outputs", []))
    origin = "trip.ipynb" if known else "the cells this kernel ran"
    assert f"mpinb export: {origin} -> " in said and "same" in said, said
    assert (tmp_path / "trip.data.npy").exists(), "the pushed array, saved beside with its value"
    assert "data = np.load(_data('trip.data.npy'))" in (tmp_path / "trip.py").read_text()
    assert "scale = comm.bcast(scale if rank == 0 else None, root=0)" in (tmp_path / "trip.py").read_text()
    assert not wait_until_gone(10, existing_pools)


# -- the tutorials' parallel parts --------------------------------------------------------------------

# Lines each tutorial prints that depend on no timing: the exported program must print them alike.
TUTORIALS = {
    "05-parallel-algorithms": ["pi is about", "every rank holds y = A @ x", "numbers per rank:",
                               "blocks on a 2 x 2 grid"],
    "07-data-parallel": ["loss: step 1", "all 30 steps match the serial run", "training accuracy after 30 steps",
                         "mean of per-rank means"],
}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(TUTORIALS))
def test_a_tutorials_program_runs_under_mpiexec_and_prints_what_the_notebook_printed(name, tmp_path):
    """Their own checks (against serial runs) run on rank 0 in the program: it ends well only if
    they hold. Against the notebook's own output where the docs build has run it (make test)."""
    from test_notebooks import executed_by_the_docs_build

    done = mpinb("export", os.path.join(NOTEBOOKS, f"{name}.ipynb"), "-o", str(tmp_path / "tutorial.py"))
    assert done.returncode == 0, done.stderr
    assert "mpinb.check() grades an exercise" in done.stdout, "the exercise is left out, and said"
    ran = under_mpiexec(4, str(tmp_path / "tutorial.py"), str(tmp_path), timeout=500)
    assert ran.returncode == 0, ran.stderr[-3000:]
    printed = _lines_with(ran.stdout, TUTORIALS[name])
    assert len(printed) == len(TUTORIALS[name]), printed
    assert list(tmp_path.glob("tutorial-cell*-1.png")), "plt.show() saved the figures beside the program"
    if name == "07-data-parallel":  # mpinb.progress is kept, and draws a text bar from rank 0
        assert re.search(r"training steps.*30/30", ran.stderr), ran.stderr[-3000:]
    executed = executed_by_the_docs_build(os.path.join(NOTEBOOKS, f"{name}.ipynb"))
    if executed is not None:
        notebook_said = "\n".join(out.get("text", "") or out.get("data", {}).get("text/plain", "")
                                  for cell in nbformat.read(executed, as_version=4).cells
                                  for out in cell.get("outputs", []))
        assert _lines_with(notebook_said, TUTORIALS[name]) == printed


def _lines_with(text: str, starts: list[str]) -> list[str]:
    """The first line holding each phrase, without the rank prefix the pool's output adds."""
    found = []
    lines = [re.sub(r"^\[[\d, -]+\] ", "", line) for line in text.splitlines()]
    for phrase in starts:
        found += [line for line in lines if phrase in line][:1]
    return found


# -- as a batch job (used by tests/test_slurm.py and tests/test_multihost.py, on their clusters) ----

def run_as_a_batch_job(folder, env: dict[str, str], start: str, ranks: int = 2,
                       expected_hosts: set[str] | None = None) -> None:
    """A notebook of ``ranks`` ranks (``start``: its `%mpi start` line), run in a pool, then
    exported with --slurm and submitted: the job writes the result the notebook wrote, and its
    output says where each rank ran."""
    import time

    from slurm_cluster import jobs

    source = notebook(folder / "batch.ipynb", [
        "%load_ext mpinb\nimport json, socket\nimport numpy as np",
        start,
        "%%mpi\nimport socket\nvalues = np.arange(6.0)[rank::size] ** 2\ntotal = comm.allreduce(float(values.sum()))\n"
        # one write per line: the job's ranks may write unbuffered, side by side
        "print(f'rank {rank} of {size} on {socket.gethostname()}\\n', end='')",
        "totals = %mpi pull total\nwith open('batch.json', 'w') as handle:\n    json.dump(totals, handle)",
    ])
    ran = mpinb("run", source, cwd=str(folder), timeout=240)
    assert ran.returncode == 0, ran.stderr
    in_the_pool = json.loads((folder / "batch.json").read_text())
    (folder / "batch.json").unlink()
    exported = mpinb("export", source, "--slurm", "--time", "0:05:00", cwd=str(folder))
    assert exported.returncode == 0, exported.stderr
    assert f"or as a Slurm job: mpinb submit {folder / 'batch'}.sbatch" in exported.stdout
    submitted = mpinb("submit", str(folder / "batch.sbatch"), cwd=str(folder))
    assert submitted.returncode == 0, submitted.stderr
    job = re.search(r"job (\d+) submitted; its output goes to (.+)\n", submitted.stdout)
    assert job and f"squeue -j {job.group(1)}" in submitted.stdout, submitted.stdout
    deadline = time.monotonic() + 120
    while jobs(env) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not jobs(env), "the job ended"
    output = open(job.group(2)).read()
    assert json.loads((folder / "batch.json").read_text()) == in_the_pool == [55.0] * ranks, output
    where = re.findall(rf"rank (\d) of {ranks} on (\S+)", output)
    assert sorted(int(rank) for rank, _ in where) == list(range(ranks)), output
    if expected_hosts is not None:
        assert {host for _, host in where} == expected_hosts, output


def test_submit_without_slurm_says_where_to_submit_from(tmp_path, monkeypatch):
    job = tmp_path / "job.sbatch"
    job.write_text("#!/bin/bash\n")
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))  # no sbatch there
    done = mpinb("submit", str(job))
    assert done.returncode == 2 and "sbatch is not on PATH" in done.stderr
    missing = mpinb("submit", str(tmp_path / "none.sbatch"))
    assert missing.returncode == 2 and "mpinb export NOTEBOOK --slurm" in missing.stderr
