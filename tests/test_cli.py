"""The `mpinb` command: run (passing and failing notebooks, both kinds), doctor, kernel install,
help and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import nbformat
import pytest
from _processes import wait_until_gone

from mpinb.pool._launch import find_mpiexec, mpi_family


def mpinb(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    script = os.path.join(os.path.dirname(sys.executable), "mpinb")  # the installed entry point
    return subprocess.run([script, *args], capture_output=True, text=True, timeout=timeout)


def notebook(path, cells: list[str], kernel: str = "python3") -> str:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    nbformat.write(nb, str(path))
    return str(path)


def test_run_passes_a_magics_notebook_and_writes_the_output(tmp_path, existing_pools):
    source = notebook(tmp_path / "ok.ipynb",
                      ["%load_ext mpinb", "%%mpi\nx = rank + 1", "x = %mpi pull x\nassert x == [1, 2]"])
    done = mpinb("run", source, "-n", "2", "-o", str(tmp_path / "out.ipynb"))
    assert done.returncode == 0, done.stderr
    assert "all 3 code cells ran without error" in done.stdout
    executed = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
    assert all(cell.execution_count for cell in executed.cells)
    assert not wait_until_gone(10, existing_pools)


def test_run_stops_at_the_first_failing_cell_with_the_per_rank_error(tmp_path, existing_pools):
    source = notebook(tmp_path / "bad.ipynb", [
        "%load_ext mpinb", "%%mpi -n 3\nx = 1 / (rank - 1)", "print('never reached')"])
    done = mpinb("run", source)
    assert done.returncode == 1
    assert "cell 2 failed" in done.stderr and "ZeroDivisionError" in done.stderr and "rank 1" in done.stderr
    assert "never reached" not in done.stdout + done.stderr
    assert not wait_until_gone(10, existing_pools)


def test_run_names_the_cell_whose_magic_was_refused(tmp_path):
    """IPython prints a magic's UsageError instead of recording an error output: the cell and
    what it printed are still said."""
    source = notebook(tmp_path / "usage.ipynb", ["%load_ext mpinb", "x = 1", "%mpi pull x", "print('never')"])
    done = mpinb("run", source)
    assert done.returncode == 1
    assert "cell 3 failed" in done.stderr and "UsageError: no pool is running" in done.stderr, done.stderr


def test_run_prints_the_findings_and_verify_checks_every_run(tmp_path, existing_pools):
    ring = "comm.send(rank, dest=(rank + 1) % size)\ngot = comm.recv(source=(rank - 1) % size)"
    source = notebook(tmp_path / "ring.ipynb", [ring, "%%local\nprint('local')"], kernel="mpinb")
    done = mpinb("run", source, "-n", "2", "--verify")
    assert done.returncode == 0, done.stderr
    assert ("cell 1: MPI correctness: this run works only by accident (1):\n  - send at line 1 on ranks 0-1: "
            "this exchange finishes only because MPI buffered a message") in done.stdout, done.stdout
    done = mpinb("run", source, "-n", "2")
    assert done.returncode == 0 and "MPI correctness" not in done.stdout, done.stdout
    assert not wait_until_gone(10, existing_pools)


def test_run_executes_a_notebook_written_for_the_mpi_kernel(tmp_path, existing_pools):
    source = notebook(tmp_path / "kernel.ipynb", [
        "y = rank * rank", "%%local\nimport mpinb\nassert mpinb.current_pool().pull('y') == [0, 1, 4]"], kernel="mpinb")
    done = mpinb("run", source, "-n", "3")
    assert done.returncode == 0, done.stderr
    failing = notebook(tmp_path / "kernel-bad.ipynb", ["%%local\nassert False, 'checked here'"], kernel="mpinb")
    done = mpinb("run", failing, "-n", "2")
    assert done.returncode == 1 and "AssertionError: checked here" in done.stderr
    assert not wait_until_gone(10, existing_pools)


@pytest.mark.parametrize("args,message", [
    (["run", "missing.ipynb"], "no notebook at 'missing.ipynb'"),
    (["run", "x.ipynb", "-n", "0"], "the number of ranks must be a whole number, at least 1, not 0"),
    (["doctor", "-n", "two"], "must be a whole number, at least 1, not 'two'"),
    (["kernel"], "the following arguments are required: ACTION"),
    (["launch"], "invalid choice: 'launch'"),
])
def test_bad_arguments_exit_2_with_a_clear_message(args, message):
    done = mpinb(*args, timeout=60)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_bench_arguments_go_to_the_benchmarks():
    from mpinb.cli._main import _parser, main

    args, extra = _parser().parse_known_args(["bench", "--json", "out.json", "-n", "2"])
    assert args.command == "bench" and extra == ["--json", "out.json", "-n", "2"]
    with pytest.raises(SystemExit) as stop:
        main(["doctor", "--json", "x"])
    assert stop.value.code == 2
    done = mpinb("bench", "--repeats", "several", timeout=60)  # reaches python -m bench's own parser
    assert done.returncode == 2 and "argument --repeats: invalid int value: 'several'" in done.stderr


def test_help_for_every_command():
    for args in ([], ["run"], ["doctor"], ["lab"], ["bench"], ["kernel", "install"]):
        done = mpinb(*args, "--help", timeout=60)
        assert done.returncode == 0 and "usage: mpinb" in done.stdout


def test_doctor_checks_this_machine(existing_pools):
    done = mpinb("doctor", "-n", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    family = mpi_family(find_mpiexec())  # the MPI this environment installed, as mpi4py loads it
    assert family in ("MPICH", "Open MPI")
    for expected in ("mpi4py 4", f"on {family}", f"({family}, ", "mpiexec:", "ring test: 2 ranks passed",
                     "ping-pong (2 ranks): latency",
                     "mpinb pool: 2 ranks ready", "no problems found"):
        assert expected in done.stdout, done.stdout
    assert not wait_until_gone(10, existing_pools)


def test_doctor_names_a_broken_mpiexec_and_what_to_do(tmp_path):
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\necho 'mpiexec: cannot connect to the process manager' >&2\nexit 3\n")
    fake.chmod(0o755)
    env = {**os.environ, "MPINB_MPIEXEC": str(fake)}
    script = os.path.join(os.path.dirname(sys.executable), "mpinb")
    done = subprocess.run([script, "doctor", "-n", "2"], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 1
    assert "ring test failed: mpiexec: cannot connect to the process manager" in done.stdout
    assert "-> run `" in done.stdout and "problem(s) found" in done.stdout


def test_kernel_install_writes_a_spec_for_this_python(tmp_path):
    done = mpinb("kernel", "install", "--prefix", str(tmp_path), "-n", "6", timeout=60)
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "share" / "jupyter" / "kernels" / "mpinb"
    spec = json.loads((folder / "kernel.json").read_text())
    assert os.path.samefile(spec["argv"][0], sys.executable) and spec["argv"][1:3] == ["-m", "mpinb.notebook.kernel"]
    assert spec["display_name"] == "Python (MPI, mpinb)" and spec["env"]["MPINB_RANKS"] == "6"
    assert (folder / "logo-64x64.png").exists() and (folder / "logo-32x32.png").exists()


def test_version_is_written_once_and_named_by_the_changelog():
    from importlib.metadata import version

    import mpinb as package

    done = mpinb("--version", timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"mpinb {package.__version__}", done.stdout + done.stderr
    assert version("mpinb") == package.__version__, "pyproject.toml's version is not mpinb.__version__"
    changelog = open(os.path.join(os.path.dirname(__file__), "..", "CHANGELOG.md")).read()
    newest = next(line for line in changelog.splitlines() if line.startswith("## "))
    assert newest.startswith(f"## {package.__version__} "), f"CHANGELOG.md's newest entry is {newest!r}"


def test_tutorials_are_copied_and_a_learners_edits_are_never_overwritten(tmp_path):
    import hashlib

    from mpinb.cli import _tutorials

    folder = tmp_path / "learn"
    done = mpinb("tutorials", str(folder), timeout=60)
    assert done.returncode == 0, done.stderr
    source = _tutorials.source()
    expected = sorted(name for name, _ in _tutorials._files(source))
    copied = sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                    if p.is_file() and p.name != ".mpinb-tutorials.json")
    assert copied == expected and "zh/术语表.md" in copied and "solutions/parallel_pi.py" in copied
    assert "figures/split.svg" in copied and "zh/figures/split.svg" in copied, "the diagrams the notebooks show"
    assert f"copied {len(expected)} files" in done.stdout and f"mpinb lab {folder}" in done.stdout

    edited, untouched = folder / "01-point-to-point.ipynb", folder / "zh" / "02-collectives.ipynb"
    edited.write_text(edited.read_text().replace("point", "POINT", 1))
    # an older mpinb's copy of a file the learner never opened: the manifest says it is ours
    untouched.write_text("{}")
    manifest = json.loads((folder / ".mpinb-tutorials.json").read_text())
    manifest["zh/02-collectives.ipynb"] = hashlib.sha256(b"{}").hexdigest()
    (folder / ".mpinb-tutorials.json").write_text(json.dumps(manifest))
    again = mpinb("tutorials", str(folder), timeout=60)
    assert again.returncode == 0, again.stderr
    assert "POINT" in edited.read_text(), "the learner's edit is kept"
    assert "kept your edits in 01-point-to-point.ipynb" in again.stdout
    assert untouched.read_bytes() == (source / "zh" / "02-collectives.ipynb").read_bytes(), "brought up to date"
    assert "updated 1 files you had not changed: zh/02-collectives.ipynb" in again.stdout
    third = mpinb("tutorials", str(folder), timeout=60)
    assert "kept your edits in 01-point-to-point.ipynb" in third.stdout, "still told, run after run"

    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    refused = mpinb("tutorials", str(not_a_folder), timeout=60)
    assert refused.returncode == 2 and "is a file, not a folder" in refused.stderr


def test_tutorials_are_never_written_through_a_link_in_the_folder(tmp_path):
    """A course folder others can write to may hold planted links: mpinb tutorials follows none of
    them, out of the folder or in it, and says which it left alone."""
    outside = tmp_path / "victim"
    outside.mkdir()
    precious = outside / "notes.txt"
    precious.write_text("mine")
    folder = tmp_path / "course"
    folder.mkdir()
    (folder / "01-point-to-point.ipynb").symlink_to(precious)  # a tutorial's name, linked out
    (folder / "zh").symlink_to(outside, target_is_directory=True)  # a linked subfolder
    (folder / "02-collectives.ipynb").symlink_to(outside / "made.ipynb")  # a dangling link
    done = mpinb("tutorials", str(folder), timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert precious.read_text() == "mine" and sorted(p.name for p in outside.iterdir()) == ["notes.txt"]
    for link in ("01-point-to-point.ipynb", "02-collectives.ipynb", "zh"):
        assert (folder / link).is_symlink() and link in done.stdout, f"{link} left as it was, and named"
    assert "never follows" in done.stdout and (folder / "03-nonblocking.ipynb").is_file(), "the rest copied"

    manifest = folder / ".mpinb-tutorials.json"
    manifest.unlink()
    manifest.symlink_to(precious)  # the record of what was copied, linked out
    refused = mpinb("tutorials", str(folder), timeout=60)
    assert refused.returncode == 2 and ".mpinb-tutorials.json is a symbolic link" in refused.stderr
    assert precious.read_text() == "mine"


@pytest.mark.timeout(20)
def test_the_bench_starts():
    """``make test`` runs no benchmark: this keeps a rename in mpinb from breaking ``make bench``
    (``--help`` imports every module that the bench's runs use)."""
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    usage = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=root, capture_output=True, text=True,
                           timeout=60)
    assert usage.returncode == 0 and "--only" in usage.stdout, usage.stderr
