"""The lean install: `pip install mpinb` brings no MPI (the user's choice) and says how to get one;
`pip install 'mpinb[mpich]'` runs a pool, without JupyterLab or plotting."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_plain_install_runs_a_pool_and_brings_no_tutorial_dependencies(tmp_path, existing_pools):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")

    def pip_install(spec: str) -> None:
        done = subprocess.run([python, "-m", "pip", "install", "--quiet", spec], capture_output=True, text=True,
                              timeout=480)
        assert done.returncode == 0, done.stderr[-2000:]

    pip_install(ROOT)  # no MPI: a system MPI is the user's to bring
    bare = subprocess.run([python, "-c", "import mpinb; mpinb.Pool(2).start()"], capture_output=True, text=True,
                          timeout=120, cwd=str(tmp_path), env={**os.environ, "PATH": str(venv / "bin")})
    assert bare.returncode != 0 and "pip install 'mpinb[mpich]'" in bare.stderr, bare.stderr[-2000:]
    pip_install(f"{ROOT}[mpich]")
    check = textwrap.dedent("""
        import importlib.util, mpinb
        extra = [m for m in ("jupyterlab", "matplotlib", "sklearn") if importlib.util.find_spec(m)]
        with mpinb.Pool(2) as pool:
            total = pool.run("comm.allreduce(rank + 1)").value
            digits = pool.run("from mpinb.train import load_digits_data\\nload_digits_data()[0].shape").value
        print(extra, total, digits)
    """)
    done = subprocess.run([python, "-c", check], capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == "[] {0: 3, 1: 3} {0: (1797, 64), 1: (1797, 64)}"

    # The tutorials come with the package: copied out of it (no checkout in sight), then run there.
    away = tmp_path / "elsewhere"
    away.mkdir()
    mpinb = str(venv / "bin" / "mpinb")
    copied = subprocess.run([mpinb, "tutorials"], capture_output=True, text=True, timeout=60, cwd=str(away))
    assert copied.returncode == 0, copied.stderr[-2000:]
    folder = away / "mpinb-tutorials"
    for name in ("00-getting-started.ipynb", "zh/00-getting-started.ipynb", "zh/术语表.md", "solutions/exchange.py"):
        assert (folder / name).is_file(), f"mpinb tutorials did not copy {name}: {copied.stdout}"
    ran = subprocess.run([mpinb, "run", "00-getting-started.ipynb", "-o", "done.ipynb"], capture_output=True,
                         text=True, timeout=400, cwd=str(folder))
    assert ran.returncode == 0, ran.stdout[-1000:] + ran.stderr[-3000:]
    # it wrote a script beside itself and ran it with %mpi run: the copy is where it runs
    assert "sum of 10 x rank: 60" in (folder / "done.ipynb").read_text()
    lab = subprocess.run([mpinb, "lab"], capture_output=True, text=True, timeout=60, cwd=str(away))
    assert lab.returncode == 2 and "pip install 'mpinb[tutorials]'" in lab.stderr, "no JupyterLab: says what to do"
