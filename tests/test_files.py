"""MPI-IO on real pools: collective writes and reads recorded with their file and offset, as
mpi4py's own results, and a collective write that one rank skips diagnosed and interrupted."""

from __future__ import annotations

import pytest

import mpinb
from mpinb.common._events import COLLECTIVE, IO
from mpinb.trace._svg import space_time_svg

pytestmark = pytest.mark.every_mpi


def _cell(path) -> str:
    return (
        "import numpy as np\n"
        f"fh = MPI.File.Open(comm, {str(path)!r}, MPI.MODE_CREATE | MPI.MODE_RDWR)\n"
        "fh.Write_at_all(rank * 32, np.full(4, rank, dtype='i8'))\n"
        "back = np.zeros(4, dtype='i8')\n"
        "fh.Read_at_all(((rank + 1) % size) * 32, back)\n"
        "if rank == 0:\n"
        "    fh.Write_at(32 * size, np.ones(2))\n"
        "fh.Close()\n"
        "(back.tolist(), type(fh) == MPI.File, MPI.File.__name__)\n")


def test_a_collective_write_reads_back_equal_and_is_recorded(any_pool, tmp_path):
    size = any_pool.size
    res = any_pool.run(_cell(tmp_path / "traced.bin"))
    assert res.value == {r: ([(r + 1) % size] * 4, True, "File") for r in range(size)}
    assert any_pool.run(_cell(tmp_path / "untraced.bin"), trace=False).value == res.value
    assert (tmp_path / "traced.bin").read_bytes() == (tmp_path / "untraced.bin").read_bytes()
    events = res.trace.events
    writes = events[events["op"] == "Write_at_all"]
    assert len(writes) == size and set(writes["kind"]) == {COLLECTIVE}
    [file_id] = set(writes["comm"])
    assert file_id.startswith("file") and file_id.endswith("@world")
    assert sorted((int(w["rank"]), int(w["tag"]), int(w["sent"])) for w in writes) == [
        (r, 32 * r, 32) for r in range(size)], "each rank's offset and bytes"
    reads = events[events["op"] == "Read_at_all"]
    assert sorted((int(r["rank"]), int(r["received"])) for r in reads) == [(r, 32) for r in range(size)]
    [independent] = events[events["kind"] == IO]
    assert (independent["op"], independent["rank"], independent["tag"], independent["sent"]) == (
        "Write_at", 0, 32 * size, 16)
    groups = {op: len(events[events["op"] == op]) for op in ("File.Open", "File.Close")}
    assert groups == {"File.Open": size, "File.Close": size}
    io = res.trace.io_calls()
    assert {(c["file"], c["name"]) for c in io} == {(file_id, str(tmp_path / "traced.bin"))}
    assert sorted((c["rank"], c["op"], c["write"], c["bytes"]) for c in io) == sorted(
        [(r, "Write_at_all", True, 32) for r in range(size)] + [(r, "Read_at_all", False, 32) for r in range(size)]
        + [(0, "Write_at", True, 16)]), "each read and write between its rank and the file's lane"
    svg = space_time_svg(res.trace)
    assert ">traced.b</text>" in svg and svg.count('stroke-dasharray="2 2"') == 2 * size + 1, "the static view too"


@pytest.mark.timeout(60)
def test_a_collective_write_one_rank_skips_is_diagnosed_and_the_pool_survives(pool4, tmp_path):
    path = str(tmp_path / "skipped.bin")
    with pytest.raises(mpinb.DeadlockError) as info:
        pool4.run(f"fh = MPI.File.Open(comm, {path!r}, MPI.MODE_CREATE | MPI.MODE_RDWR)\n"
                  "if rank != 1:\n    fh.Write_at_all(0, np.zeros(1))\n", timeout=3)
    diagnosis = info.value.diagnosis
    assert sorted(diagnosis.waits) == [0, 2, 3] and diagnosis.finished == [1]
    text = str(info.value)
    assert "Write_at_all on file 'file" in text and "rank 0 waits for rank 1, which will not take part" in text
    assert pool4.run("comm.allreduce(1)").value == {r: 4 for r in range(4)}
    pool4.run("fh.Close()")
