"""``mpinb tutorials``: the tutorials, copied where the user may run and edit them.

The wheel carries the tutorials (``notebooks/`` of the source, in English and Chinese, with the
exercises' solutions and the glossary) as ``mpinb/tutorials``; a checkout has them in
``notebooks/``. They are run from a copy: a notebook writes files beside itself (``%%writefile``)
and a learner edits the cells. A copy is never overwritten where the learner changed it: the
copy's ``.mpinb-tutorials.json`` records what was copied, so that a newer mpinb updates only the
files still as they came.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

from .._confined import Confined, LinkRefused

_SOURCE_ROOT = Path(__file__).resolve().parent.parent.parent
MANIFEST = ".mpinb-tutorials.json"
DEFAULT_FOLDER = "mpinb-tutorials"
# What a tutorial folder holds: notebooks, the glossary, the solutions, the figures (and nothing a run leaves).
_KINDS = (".ipynb", ".md", ".py", ".svg")


def source() -> Traversable | None:
    """Where this mpinb's tutorials are: the checkout's ``notebooks/``, else the installed
    package's ``tutorials``; ``None`` if neither has them."""
    checkout = _SOURCE_ROOT / "notebooks"
    if (checkout / "00-getting-started.ipynb").is_file():
        return checkout
    packaged = resources.files("mpinb") / "tutorials"
    return packaged if packaged.joinpath("00-getting-started.ipynb").is_file() else None


def checkout_notebooks() -> Path | None:
    """The checkout's own tutorials (``make lab`` opens them in place), if this is a checkout."""
    checkout = _SOURCE_ROOT / "notebooks"
    return checkout if (checkout / "00-getting-started.ipynb").is_file() and (_SOURCE_ROOT / ".git").exists() else None


@dataclass
class Copied:
    """What ``copy_tutorials`` did, file by file (paths relative to the folder)."""

    folder: Path
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # edited by the learner: left as they are
    same: list[str] = field(default_factory=list)
    links: set[str] = field(default_factory=set)  # links where tutorials go: never followed

    def text(self) -> str:
        lines = [f"mpinb tutorials: {self.folder}"]
        if self.added:
            lines.append(f"  copied {len(self.added)} files")
        if self.updated:
            lines.append(f"  updated {len(self.updated)} files you had not changed: {', '.join(self.updated)}")
        if self.same:
            lines.append(f"  {len(self.same)} files already up to date")
        if self.kept:
            lines.append(f"  kept your edits in {', '.join(self.kept)}: to get this mpinb's version of one, "
                         "move it away and run `mpinb tutorials` again")
        if self.links:
            lines.append(f"  wrote nothing through {', '.join(sorted(self.links))}: a symbolic link, which mpinb "
                         "never follows (one in a shared folder could point at any of your files); remove it "
                         "and run `mpinb tutorials` again")
        return "\n".join(lines)


def copy_tutorials(folder: str | os.PathLike | None = None) -> Copied:
    """Copy the tutorials into ``folder`` (default ``./mpinb-tutorials``), never over a file the
    learner changed, and never through a link in the folder (see :mod:`mpinb._confined`)."""
    tutorials = source()
    if tutorials is None:
        raise FileNotFoundError("this mpinb has no tutorials: it was installed without them (a wheel of "
                                "mpinb 0.x before they were packaged, or a trimmed build); `pip install -U mpinb`")
    target = Path(folder if folder is not None else DEFAULT_FOLDER).expanduser().resolve()
    if target.exists() and not target.is_dir():
        raise FileNotFoundError(f"{target} is a file, not a folder: name a folder for the tutorials")
    _check_writable(target)
    with Confined(target) as confined:
        recorded = _read_manifest(confined.read(MANIFEST))  # a link there is refused before any file is written
        done = Copied(target)
        for relative, content in _files(tutorials):
            digest = _digest(content)
            try:
                present = confined.read(relative)
                if present is None:
                    confined.write(relative, content)
                    done.added.append(relative)
                elif _digest(present) == digest:
                    done.same.append(relative)
                elif _digest(present) == recorded.get(relative):  # as we copied it: the learner did not touch it
                    confined.write(relative, content)
                    done.updated.append(relative)
                else:
                    done.kept.append(relative)
                    continue  # the record keeps what we copied then, so that a later run still tells
            except LinkRefused as link:
                done.links.add(str(link.path.relative_to(target)))
                continue
            recorded[relative] = digest
        confined.write(MANIFEST, (json.dumps(recorded, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode())
    return done


def _files(root: Traversable, prefix: str = "") -> list[tuple[str, bytes]]:
    """Every tutorial file under ``root``: (path relative to it, content), in a stable order."""
    found: list[tuple[str, bytes]] = []
    for entry in sorted(root.iterdir(), key=lambda item: item.name):
        name = f"{prefix}{entry.name}"
        if entry.is_dir():
            if not entry.name.startswith((".", "__")):
                found += _files(entry, f"{name}/")
        elif entry.name.endswith(_KINDS) and not entry.name.startswith("."):
            found.append((name, entry.read_bytes()))
    return found


def _digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _read_manifest(content: bytes | None) -> dict[str, str]:
    if content is None:
        return {}
    try:
        recorded = json.loads(content)
    except ValueError:
        return {}  # unreadable: every file that differs counts as the learner's
    return {str(k): str(v) for k, v in recorded.items()} if isinstance(recorded, dict) else {}


def _check_writable(target: Path) -> None:
    """Raise a clear error where the tutorials cannot be written, before any file is."""
    probe = target
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot write the tutorials into {target}: {probe} is not writable by you; "
                              "name another folder (mpinb tutorials DIR)")
