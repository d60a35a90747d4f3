"""Files written inside a folder a user named (mpinb/_confined.py): no link is followed, and what is
not a file is refused rather than read or replaced."""

from __future__ import annotations

import os
import stat

import pytest

from mpinb._confined import Confined, LinkRefused

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


def test_links_fifos_and_folders_where_a_file_goes_are_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("mine")
    (tmp_path / "elsewhere").mkdir()
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "link").symlink_to(outside)
    (folder / "sub").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    os.mkfifo(folder / "fifo")  # a read would block forever
    (folder / "dir").mkdir()
    with Confined(folder) as confined:
        for name in ("link", "sub/file"):
            with pytest.raises(LinkRefused, match="is a symbolic link"):
                confined.read(name)
            with pytest.raises(LinkRefused):
                confined.write(name, b"theirs")
        for name in ("fifo", "dir"):
            with pytest.raises(PermissionError, match="is not a file"):
                confined.read(name)
        assert confined.read("missing") is None and confined.read("no/such/folder") is None
        with pytest.raises(ValueError, match="not a path inside"):
            confined.write("../escape", b"x")
    assert outside.read_text() == "mine" and not os.listdir(tmp_path / "elsewhere")


def test_a_replaced_file_keeps_its_permissions_and_new_folders_are_made(tmp_path):
    with Confined(tmp_path) as confined:
        script = confined.write("job.py", b"print(0)\n")
        os.chmod(script, 0o750)
        confined.write("job.py", b"print(1)\n")
        assert stat.S_IMODE(os.stat(script).st_mode) == 0o750 and script.read_text() == "print(1)\n"
        assert confined.write("a/b/c.txt", b"deep").read_bytes() == b"deep"
    assert sorted(os.listdir(tmp_path)) == ["a", "job.py"], "no temporary file left"
