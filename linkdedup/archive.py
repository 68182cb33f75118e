"""Member names of a GNU thin archive (``ar T``), such as the kernel's vmlinux.a.

An archive is ``!<arch>\\n`` or, thin, ``!<thin>\\n``, then members, each a
60-byte header (name[16], date[12], uid[6], gid[6], mode[8], size[10],
"`\\n") and, 2-aligned, its data.  Special members: ``/`` and ``/SYM64/``
(the symbol table) and ``//`` (the long names, each ended by "/\\n").  A
member name is ``NAME/`` or ``/OFFSET`` into the long names.  A thin archive
stores no member data, only the path of each member relative to the
archive's directory; ld reads the members from there.  A regular archive
stores base names only, which cannot say which object a member was.
"""
from __future__ import annotations

import os
import re

from objbtf.errors import ObjbtfError

THIN_MAGIC = b'!<thin>\n'
REGULAR_MAGIC = b'!<arch>\n'
_HEADER = 60
_LONG_NAMES = b'//'
_SPECIAL = (b'/', b'/SYM64/', _LONG_NAMES)        # symbol tables, long names


class ArchiveError(ObjbtfError):
    """Not an archive objbtf can read member paths from; the message says why."""


def is_archive(head: bytes) -> bool:
    return head.startswith((THIN_MAGIC, REGULAR_MAGIC))


def thin_member_paths(data: bytes, archive_path: str) -> list[str]:
    """The paths of a thin archive's members, as ld finds them: relative
    to the directory ``archive_path`` is in (absolute ones as they are)."""
    if data.startswith(REGULAR_MAGIC):
        raise ArchiveError('a regular archive names its members by base name only, which '
                           'cannot tell which object each was: give a thin archive (ar T) '
                           'or a text list')
    if not data.startswith(THIN_MAGIC):
        raise ArchiveError('not an ar archive')
    where = os.path.dirname(archive_path)
    return [os.path.normpath(os.path.join(where, name)) for name in _member_names(data)]


def _member_names(data: bytes) -> list[str]:
    names: list[str] = []
    long_names = b''
    pos = len(THIN_MAGIC)
    while pos < len(data):
        if data[pos:pos + 1] == b'\n':             # padding after odd-sized data
            pos += 1
            continue
        header = data[pos:pos + _HEADER]
        if len(header) < _HEADER or header[58:60] != b'`\n':
            raise ArchiveError(f'bad member header at offset {pos}')
        raw = header[:16].rstrip(b' ')
        try:
            size = int(header[48:58])
        except ValueError:
            raise ArchiveError(f'bad member size at offset {pos}') from None
        body = pos + _HEADER
        if raw in _SPECIAL:                           # they keep their data
            if raw == _LONG_NAMES:
                long_names = data[body:body + size]
            pos = body + size + size % 2
            continue
        names.append(os.fsdecode(_member_name(raw, long_names, pos)))
        pos = body                                    # thin: no member data
    return names


def _member_name(raw: bytes, long_names: bytes, pos: int) -> bytes:
    if raw.startswith(b'/'):
        return _long_name(raw, long_names, pos)
    if not raw.endswith(b'/'):
        raise ArchiveError(f'bad member name {raw!r} at offset {pos}')
    return raw[:-1]


def _long_name(raw: bytes, long_names: bytes, pos: int) -> bytes:
    """``/OFFSET`` (GNU ar may pad it with spaces and end the field with a
    '/'); ``/OFFSET:ORIGIN`` is a member of an archive nested in the thin one."""
    digits = re.match(rb'/(\d+)(:?)', raw)
    if digits is None:
        raise ArchiveError(f'bad member name {raw!r} at offset {pos}')
    if digits.group(2):
        raise ArchiveError(f'the member at offset {pos} is inside a nested archive, '
                           'which names no object file')
    start = int(digits.group(1))
    end = long_names.find(b'/\n', start)
    if start >= len(long_names) or end < 0:
        raise ArchiveError(f'member name {raw.decode(errors="replace")} at offset {pos} '
                           'points outside the long-name table')
    return long_names[start:end]
