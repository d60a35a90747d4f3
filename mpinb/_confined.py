"""Files written inside a folder a user named, and nowhere else.

A folder may be shared (a course's folder on a class's hub) and hold links that somebody else
planted: a link where mpinb would write a file, or a link in place of a subfolder, would carry the
write to any file of the user's. So every name below the folder is opened relative to the folder's
own descriptor with ``O_NOFOLLOW``: a link met on the way is refused, never followed, out of the
folder or within it. A file is replaced by renaming a new one over it, which replaces a link rather
than writing through it. The folder the user named may itself be a link: that one they chose.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LinkRefused(PermissionError):
    """A symbolic link where mpinb would read or write inside a user's folder; ``path`` is the link."""

    def __init__(self, path: Path, folder: Path):
        super().__init__(f"{path} is a symbolic link: mpinb writes only inside {folder}, never through a link "
                         "(one planted in a shared folder could point at any of your files); remove it, or "
                         "name another folder")
        self.path = path


class Confined:
    """A folder, written and read only inside: ``Confined(path)`` makes it if needed and holds it
    open, so that every name is looked up in this folder even if its path is swapped meanwhile.
    Use it in a ``with`` block (or :meth:`close` it)."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder).expanduser().resolve()
        self.folder.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def __enter__(self) -> Confined:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def read(self, relative: str) -> bytes | None:
        """The file at ``relative``, or ``None`` when there is none; a link, or anything but a
        file (a FIFO would block the read forever), is refused."""
        try:
            parent, name = self._parent(relative, create=False)
        except FileNotFoundError:
            return None
        try:
            handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
        except FileNotFoundError:
            return None
        except OSError as err:
            self._raise_if_link(parent, name, relative, err)
            raise
        finally:
            os.close(parent)
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            os.close(handle)
            raise PermissionError(f"{self.folder / relative} is not a file (a folder, a FIFO...): mpinb writes only "
                                  "files there; move it away, or name another folder")
        with os.fdopen(handle, "rb") as file:
            return file.read()

    def refuse_links(self, relative: str) -> None:
        """Raise :class:`LinkRefused` if ``relative``, or a folder on its way, is a link."""
        try:
            parent, name = self._parent(relative, create=False)
        except FileNotFoundError:
            return
        try:
            self._raise_if_link(parent, name, relative, None)
        finally:
            os.close(parent)

    def write(self, relative: str, content: bytes) -> Path:
        """Write ``content`` at ``relative`` (its subfolders made as needed), replacing what is
        there and keeping its permissions; a link there, or on the way, is refused. Returns the
        file's path."""
        parent, name = self._parent(relative, create=True)
        try:
            try:
                present = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                present = None
            if present is not None and stat.S_ISLNK(present.st_mode):
                raise LinkRefused(self.folder / relative, self.folder)
            temporary = f".{name}.{secrets.token_hex(8)}.tmp"
            handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                             dir_fd=parent)
            try:
                with os.fdopen(handle, "wb") as file:
                    if present is not None and stat.S_ISREG(present.st_mode):
                        os.fchmod(file.fileno(), stat.S_IMODE(present.st_mode))  # (a script's +x stays)
                    file.write(content)
                os.replace(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                os.unlink(temporary, dir_fd=parent)
                raise
        finally:
            os.close(parent)
        return self.folder / relative

    def _parent(self, relative: str, create: bool) -> tuple[int, str]:
        """An open descriptor of ``relative``'s folder, reached without following a link, and the
        file's name in it."""
        parts = Path(relative).parts
        if not parts or Path(relative).is_absolute() or ".." in parts:
            raise ValueError(f"{relative!r} is not a path inside {self.folder}")
        if self._fd < 0:
            raise ValueError(f"{self.folder} was closed")
        current = os.dup(self._fd)
        try:
            for depth, part in enumerate(parts[:-1]):
                try:
                    following = os.open(part, _DIRECTORY, dir_fd=current)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):  # (made meanwhile: opened as any other)
                        os.mkdir(part, 0o777, dir_fd=current)
                    try:
                        following = os.open(part, _DIRECTORY, dir_fd=current)
                    except OSError as err:
                        self._raise_if_link(current, part, os.path.join(*parts[:depth + 1]), err)
                        raise
                except OSError as err:
                    self._raise_if_link(current, part, os.path.join(*parts[:depth + 1]), err)
                    raise
                os.close(current)
                current = following
        except BaseException:
            os.close(current)
            raise
        return current, parts[-1]

    def _raise_if_link(self, parent: int, name: str, relative: str, err: OSError | None) -> None:
        try:
            link = stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
        except OSError:
            return
        if link:
            raise LinkRefused(self.folder / relative, self.folder) from err
