"""Opening the files objbtf reads: regular files only, never blocking, bounded.

A FIFO given as an input would block ``open()`` until some writer appears,
and a device such as ``/dev/zero`` would be read without end; a directory
gives a confusing error later on.  Every input objbtf reads goes through
``open_regular``, which refuses all of these at once.
"""
from __future__ import annotations

import os
import stat

from .errors import ObjbtfError

#: The largest raw BTF read whole into memory (ELF inputs are mapped, not
#: read).  A vmlinux's BTF is a few MB; the kernel itself loads at most 16 MB.
MAX_READ = 1 << 30


class NotRegularFile(ObjbtfError):
    """An input that is not a regular file (or too big to read); str() says
    what it is, ``filename`` which file it is."""

    def __init__(self, filename: str, message: str):
        super().__init__(message)
        self.filename = filename


def _what(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, 'a directory'), (stat.S_ISFIFO, 'a FIFO'),
                       (stat.S_ISCHR, 'a character device'), (stat.S_ISBLK, 'a block device'),
                       (stat.S_ISSOCK, 'a socket')):
        if test(mode):
            return name
    return 'not a regular file'


def open_regular(path: str) -> tuple[int, os.stat_result]:
    """(fd, stat) of ``path`` opened read-only; NotRegularFile for anything
    but a regular file.  O_NONBLOCK keeps a FIFO from blocking the open."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = _what(st.st_mode)
            raise NotRegularFile(path, f'is {what}, not a regular file'
                                 if what.startswith('a ') else what)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular(path: str, limit: int = MAX_READ) -> bytes:
    """The whole of the regular file ``path``, at most ``limit`` bytes."""
    fd, st = open_regular(path)
    with os.fdopen(fd, 'rb') as f:
        if st.st_size > limit:
            raise NotRegularFile(path, f'is {st.st_size} bytes, more than the {limit} '
                                 'objbtf reads')
        return f.read()


def error_text(err: BaseException) -> str:
    """What went wrong, without Python's decoration: an OSError's strerror
    (``No such file or directory``), else its message."""
    return getattr(err, 'strerror', None) or str(err)


def file_identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """What tells that a file was replaced or rewritten since ``st`` was taken."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
