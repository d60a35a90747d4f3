"""Fetch mpi4py's own test suite for the installed mpi4py version (from its source distribution).

    python tests/mpi4py_suite/fetch.py CACHE_DIR

Prints the folder that holds ``main.py`` and the ``test_*.py`` modules. The wheel has no tests;
the source distribution on PyPI does. Its address comes from the package index's simple page,
and the download is checked against the sha256 the index gives. Cached: a second call is free.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import sys
import tarfile
import urllib.request
from importlib.metadata import version
from pathlib import Path

INDEX = "https://pypi.org/simple/mpi4py/"


def sdist_url(release: str) -> tuple[str, str]:
    with urllib.request.urlopen(INDEX, timeout=60) as page:
        html = page.read().decode()
    name = re.escape(f"mpi4py-{release}.tar.gz")
    found = re.search(rf'href="([^"#]*/{name})#sha256=([0-9a-f]{{64}})"', html)
    if not found:
        raise SystemExit(f"the package index lists no source distribution mpi4py-{release}.tar.gz")
    return found.group(1), found.group(2)


def fetch(cache: Path) -> Path:
    release = version("mpi4py")
    testdir = cache / f"mpi4py-{release}" / "test"
    if (testdir / "main.py").exists():
        return testdir
    url, sha256 = sdist_url(release)
    with urllib.request.urlopen(url, timeout=120) as response:
        data = response.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SystemExit(f"{url}: the download does not match the index's sha256")
    prefix = f"mpi4py-{release}/test/"
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(prefix) and m.isfile()]
        # (a folder of this process's own: `make test` runs test sessions side by side)
        partial = cache / f".mpi4py-{release}.partial-{os.getpid()}"
        archive.extractall(partial, members=members, filter="data")
    try:
        partial.joinpath(f"mpi4py-{release}").rename(cache / f"mpi4py-{release}")
    except OSError:
        if not (testdir / "main.py").exists():
            raise
        shutil.rmtree(partial)  # another session's fetch got there first: the same files
        return testdir
    partial.rmdir()
    return testdir


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else Path.home() / ".cache" / "mpinb").resolve()
    target.mkdir(parents=True, exist_ok=True)
    print(fetch(target))
