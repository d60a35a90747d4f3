"""The notebook side (mpinb/notebook/_prestart.py): the pool size a notebook asks for, read before it runs."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


def test_the_background_start_reads_the_size_the_notebooks_first_pool_cell_asks_for(tmp_path, monkeypatch):
    import nbformat

    from mpinb.notebook._prestart import planned_size
    from mpinb.pool._pool import default_size

    def notebook(*cells: str) -> str:
        path = tmp_path / f"nb{len(list(tmp_path.iterdir()))}.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
        return str(path)

    monkeypatch.delenv("MPINB_RANKS", raising=False)
    assert planned_size(notebook("%load_ext mpinb", "x = 1", "%%mpi -n 6\nprint(rank)", "%%mpi -n 2\npass")) == 6
    assert planned_size(notebook("%load_ext mpinb", "%mpi start -n 8 --hosts a,b")) == 8
    assert planned_size(notebook("%%mpi --timeout 3 -n4\npass")) == 4
    assert planned_size(notebook("%%mpi --no-trace\npass")) == default_size()  # the default, asked for
    assert planned_size(notebook("%load_ext mpinb", "print('no pool here')")) is None
    assert planned_size(str(tmp_path / "missing.ipynb")) is None
    (tmp_path / "broken.ipynb").write_text("{not json")
    assert planned_size(str(tmp_path / "broken.ipynb")) is None
    monkeypatch.setenv("MPINB_RANKS", "5")  # a default set on purpose (the MPI kernel's spec)
    assert planned_size(str(tmp_path / "missing.ipynb")) == 5
