"""Reading files that someone else may have made: never blocked by a FIFO, never unbounded.

``open()`` of a FIFO waits for a writer, forever if none comes; reading ``/dev/zero`` never
ends. Files orch reads that a job (or a user's typo) may have replaced -- a job's ``started``
marker, a sweep file, ``orch sql --file`` -- are opened with ``O_NONBLOCK`` (a FIFO opens at
once, without a writer) and read only when ``fstat`` says they are regular files, up to a
bound.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path


class RefusedFile(OSError):
    """A file that is not read: not a regular file, a symbolic link where none may be, too
    large, or linked under another name. ``str()`` says which, without the path."""

    def __init__(self, reason: str) -> None:
        super().__init__(errno.EINVAL, reason)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


def open_regular(path: Path | str, *, follow: bool = True, private_dirs: int = 0, single_link: bool = False) -> int:
    """A read-only descriptor of the regular file ``path`` (the caller closes it).

    ``follow=False`` refuses a symbolic link as the file itself. ``private_dirs=N`` also opens
    the N folders above the file without following a symbolic link (each relative to the one
    above it, so nothing can be swapped in between): the folders orch made for a run, which a
    job could replace by a link to another run's. ``single_link`` refuses a file with more than
    one name (a hard link shows another file's contents under this name). Raises
    FileNotFoundError, RefusedFile or another OSError."""
    parts = Path(path).parts
    private_dirs = min(private_dirs, len(parts) - 1)  # a short relative path: the folders it names
    nofollow = os.O_NOFOLLOW
    dir_fd: int | None = None
    try:
        if private_dirs:
            head = parts[:len(parts) - private_dirs - 1]
            top = os.path.join(*head) if head else "."
            dir_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the user's own: followed
            for part in parts[len(parts) - private_dirs - 1:-1]:
                try:
                    inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | nofollow | os.O_CLOEXEC, dir_fd=dir_fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(os.path.join(top, part)):
                        raise RefusedFile(f"folder {part!r} is a symbolic link (not followed)") from None
                    raise
                os.close(dir_fd)
                dir_fd = inner
                top = os.path.join(top, part)
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else nofollow)
        try:
            fd = os.open(parts[-1] if dir_fd is not None else path, flags, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP and not follow:
                raise RefusedFile("a symbolic link (not followed)") from None
            raise
    finally:
        if dir_fd is not None:
            os.close(dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RefusedFile("not a regular file (not read: a FIFO or device could block or never end)")
        if single_link and info.st_nlink != 1:
            raise RefusedFile(f"a file with {info.st_nlink} hard links (not read: it may be another run's)")
        # Reads must block normally from here on (a regular file never waits anyway).
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int, limit: int) -> bytes | None:
    """At most ``limit`` bytes from ``fd``; None when there is more (whatever ``st_size`` claimed)."""
    size_hint = os.fstat(fd).st_size
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, max(min(size_hint, limit) + 1 - size, 65536))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        return None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_regular(path: Path | str, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (symbolic links followed: a user's own file), at
    most ``limit`` of them; RefusedFile for a FIFO, a device, a folder or a larger file."""
    fd = open_regular(path)
    try:
        if os.fstat(fd).st_size > limit:
            raise RefusedFile(f"larger than {_size(limit)}")
        data = read_fd(fd, limit)
    finally:
        os.close(fd)
    if data is None:
        raise RefusedFile(f"larger than {_size(limit)}")
    return data


def _size(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"


def replace_file(path: Path | str, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` as the regular file ``path``, all or nothing: into a temporary file beside
    it made with exclusive creation (``mkstemp``: ``O_EXCL``, so never through a symbolic link a
    job or another user planted, whatever its name), then renamed over ``path``.

    An existing ``path`` that is not a regular file (a device such as ``/dev/full``, a FIFO, a
    folder) is written in place or refused, never replaced: orch deletes nothing it did not make."""
    target = Path(path)
    try:
        info = os.stat(target)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode):
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "a folder", str(target))
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO without reader: ENXIO
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        return
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    try:
        os.fchmod(fd, mode)
        _write_all(fd, data)
        os.close(fd)
        fd = -1
        os.replace(temporary, target)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temporary)  # ours: made above
        raise


def append_private(path: Path | str, mode: int = 0o600) -> int:
    """A descriptor appending to the regular file ``path`` (made when missing), never through a
    symbolic link (``O_NOFOLLOW``) and never a FIFO or device: a log orch writes in a folder that
    jobs can write too. Raises RefusedFile or another OSError."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RefusedFile("a symbolic link (not followed)") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RefusedFile("not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
