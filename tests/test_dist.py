"""What a release carries: the sdist and the wheel that `make dist` builds pass `twine check
--strict` (metadata, the README renders as the long description), the wheel holds every file of
the package (widgets' ES modules, the C tracer's source, the digits data, the kernelspec, the
licence, the tutorials in both languages) and its metadata the one version and the bounded
dependencies. `make dist` runs this on what it built (``MPINB_DIST``); alone, the test builds into
a folder of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import mpinb

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    given = os.environ.get("MPINB_DIST")
    if given:
        return Path(given)
    folder = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(folder), str(ROOT)],
                           capture_output=True, text=True, timeout=240)
    assert built.returncode == 0, built.stderr[-3000:]
    return folder


def _tracked(*under: str) -> list[str]:
    """The project's files, as git knows them (names as they are: no quoting of non-ASCII)."""
    listed = subprocess.run(["git", "ls-files", "-z", *under], cwd=ROOT, capture_output=True, text=True, check=True)
    return [name for name in listed.stdout.split("\0") if name]


def _one(dist: Path, pattern: str) -> Path:
    found = sorted(dist.glob(pattern))
    assert len(found) == 1, f"{dist} holds {[p.name for p in found]} for {pattern}"
    return found[0]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_sdist_and_the_wheel_pass_twine_check(dist):
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dist.iterdir())],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_wheel_carries_every_file_of_the_package_and_one_version(dist):
    wheel = _one(dist, f"mpinb-{mpinb.__version__}-py3-none-any.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = _tracked("mpinb")
    missing = [path for path in tracked if path not in names]
    assert not missing, f"the wheel lacks {missing}"
    kernelspec = {"mpinb/kernelspec/" + path.name for path in (ROOT / "kernel").iterdir()}
    assert kernelspec <= names, f"the wheel lacks the kernelspec: {sorted(kernelspec - names)}"
    tutorials = {"mpinb/tutorials/" + path.removeprefix("notebooks/") for path in _tracked("notebooks")}
    assert tutorials <= names, f"the wheel lacks tutorials (mpinb tutorials copies them): {sorted(tutorials - names)}"
    assert "mpinb/tutorials/zh/术语表.md" in names and "mpinb/tutorials/solutions/zero_step.py" in names
    assert "mpinb/tutorials/zh/figures/ring-allreduce.svg" in names, "the diagrams travel with the notebooks"
    info = f"mpinb-{mpinb.__version__}.dist-info"
    assert f"{info}/licenses/LICENSE" in names, "the wheel carries no licence"
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert f"\nVersion: {mpinb.__version__}\n" in metadata
    assert "Requires-Dist: ipyparallel<10,>=9" in metadata, "ipyparallel is bounded (tests/test_layout.py)"
    assert "Description-Content-Type: text/markdown" in metadata


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_sdist_carries_the_sources_tests_and_tutorials(dist):
    sdist = _one(dist, f"mpinb-{mpinb.__version__}.tar.gz")
    top = f"mpinb-{mpinb.__version__}/"
    names = {name.removeprefix(top) for name in tarfile.open(sdist).getnames()}
    tracked = _tracked()
    missing = [path for path in tracked if path not in names]
    assert not missing, f"the sdist lacks {missing[:20]}"
    stray = [name for name in names if name.startswith((".venv", "test-artifacts", "build/", "dist/"))]
    assert not stray, f"the sdist carries what is not the project's: {stray[:10]}"
