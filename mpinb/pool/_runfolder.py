"""Each local pool's private folder: the Unix sockets of its controller, relay and death watch.

On a shared login node, a TCP port on loopback can be reached by every user of the host, and
ipyparallel's HMAC signature authenticates its messages but hides none of them (a stranger may
subscribe to every rank's output). A Unix socket in a folder that only its owner may enter
cannot be reached by anyone else at all, so a pool whose ranks all run on this host listens
only there. The folder lives in ``$XDG_RUNTIME_DIR`` (the user's own, 0700 by definition) or in
the temporary folder, under ``mpinb-<uid>``; a folder of that name that another user made first,
or that others may enter, is never used.
"""

from __future__ import annotations

import os
import stat
import tempfile

from ..errors import PoolStartError

# Linux's limit for a Unix socket's path is 107 bytes; ipyparallel appends "-<port>" (at most 6)
# to its prefixes and ZeroMQ needs the rest, so the pool's folder may take this many.
LONGEST_FOLDER = 80


def candidates() -> list[str]:
    """Where a user's pool folders may live, best first."""
    places = [os.environ.get("XDG_RUNTIME_DIR", ""), tempfile.gettempdir(), "/tmp"]
    seen: list[str] = []
    for place in places:
        if place and os.path.isdir(place) and place not in seen:
            seen.append(place)
    return seen


def own_folder(path: str) -> bool:
    """Whether ``path`` is a real folder (no link) of this user that nobody else may enter,
    made so if it does not exist yet."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    info = os.lstat(path)
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
            and stat.S_IMODE(info.st_mode) & 0o077 == 0)


def make_run_folder() -> str:
    """A new folder for one pool's sockets, readable by this user only; a ``PoolStartError``
    saying what to change when no place fits."""
    refused = []
    for place in candidates():
        user_folder = os.path.join(place, f"mpinb-{os.getuid()}")
        if len(user_folder) + 9 > LONGEST_FOLDER:
            refused.append(f"{place} (its path is too long for a socket)")
            continue
        for _attempt in range(3):  # (a cleaner of old temporary folders may remove an empty one meanwhile)
            if not own_folder(user_folder):
                refused.append(f"{user_folder} (not a folder of yours that only you may enter)")
                break
            try:
                return tempfile.mkdtemp(dir=user_folder, prefix="")
            except FileNotFoundError:
                continue
        else:
            refused.append(f"{user_folder} (removed again each time it was made)")
    raise PoolStartError(
        "no private folder for the pool's sockets: " + "; ".join(refused) +
        ". Set $TMPDIR (or $XDG_RUNTIME_DIR) to a short path of a folder of yours, such as /tmp."
    )
