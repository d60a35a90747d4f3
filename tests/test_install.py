"""The lean install: `pip install mpinb` brings no MPI (the user's choice) and says how to get one;
`pip install 'mpinb[mpich]'` runs a pool, without JupyterLab or plotting."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
@pytest.mark.timeout(600)
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
