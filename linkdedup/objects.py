"""Which objects the link has BTF from: the names in their ``.BTF.objbtf``
chunks, checked for a format and hashing this objbtf can merge, and against
the list of objects that went into the output (``objbtf link --objects``).

The link only sees what ld concatenated: an object compiled without
``objbtf encode`` has no .BTF and no chunk, and would silently contribute
nothing.  Every object that went through objbtf has a chunk naming it, also
one without types (-g0); so a listed object without a chunk is one
objbtf never saw.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from objbtf.btf.chunk import SECTION as CHUNK_SECTION
from objbtf.btf.chunk import VERSION, Chunk
from objbtf.btf.hashing import HASH_SCHEME
from objbtf.errors import ObjbtfError
from objbtf.regular_files import read_regular

from .archive import ArchiveError, is_archive, thin_member_paths

#: How many names an error or warning lists before "and N more".
SHOWN = 10


class ObjectsError(ObjbtfError):
    """The objects cannot be linked as they are; the message says which and why."""


def name_some(names: Sequence[str], limit: int = SHOWN) -> str:
    """'a, b, c' or 'a, b and 7 more'."""
    if len(names) <= limit:
        return ', '.join(names)
    return ', '.join(names[:limit]) + f' and {len(names) - limit} more'


def refuse_foreign(chunks: Sequence[Chunk]) -> None:
    """ObjectsError naming the objects whose chunks another objbtf wrote
    (another chunk format or hash scheme): their hashes cannot be merged
    with the others', and merging without them would mix two encoders."""
    foreign = [c for c in chunks if not c.usable]
    if not foreign:
        return
    were = 'was' if len(foreign) == 1 else 'were'
    raise ObjectsError(
        f'{len(foreign)} of {len(chunks)} objects {were} encoded by another objbtf '
        f'({CHUNK_SECTION} format {VERSION}, hash scheme {HASH_SCHEME} here): '
        f'{name_some([_describe(c) for c in foreign])}; rebuild them (make, or objbtf encode '
        'each) so that every object is encoded by this objbtf')


def _describe(chunk: Chunk) -> str:
    if chunk.name is None:
        return (f'an object of format {chunk.version}, which records no name '
                f'(chunk at offset {chunk.position} of {CHUNK_SECTION})')
    if chunk.version != VERSION:
        return f'{chunk.label} (format {chunk.version})'
    return f'{chunk.label} (hash scheme {chunk.scheme})'


class ObjectList:
    """The objects ``objbtf link --objects`` names, and whether some may lack BTF."""

    def __init__(self, path: str, allow_missing: bool = False):
        self.path = path
        self.names = read_object_list(path)
        self.allow_missing = allow_missing

    def check(self, chunks: Sequence[Chunk]) -> str | None:
        """ObjectsError naming the listed objects that have no BTF; when they
        are allowed to miss, the warning to give instead (None: none miss)."""
        missing = missing_objects(self.names, chunks)
        if not missing:
            return None
        message = missing_message(missing, self.names, self.path)
        if not self.allow_missing:
            raise ObjectsError(f'{message}; --allow-missing links without them')
        return f'{message}; linked without them'


def read_object_list(path: str) -> list[str]:
    """The objects ``path`` lists: a thin archive's members (relative to the
    archive's directory), or a text file's lines, one path each (relative
    to the current directory, as in Kbuild's .mod files)."""
    data = read_regular(path)
    if is_archive(data):
        try:
            names = thin_member_paths(data, path)
        except ArchiveError as err:
            raise ObjectsError(f'{path}: {err}') from None
    else:
        names = _text_lines(data, path)
    if not names:
        raise ObjectsError(f'{path}: lists no objects')
    return list(dict.fromkeys(names))


def _text_lines(data: bytes, path: str) -> list[str]:
    if b'\0' in data:
        raise ObjectsError(f'{path}: neither an ar archive nor a text list of objects '
                           '(one path per line)')
    return [os.path.normpath(line) for line in
            (raw.strip() for raw in os.fsdecode(data).splitlines()) if line]


def missing_objects(listed: Iterable[str], chunks: Iterable[Chunk]) -> list[str]:
    """The listed objects no chunk names.  Paths are compared as files:
    relative ones from the current directory, where the objects were
    encoded (Kbuild runs both from the top of the build tree)."""
    seen = {os.path.abspath(c.name) for c in chunks if c.name}
    return [name for name in listed if os.path.abspath(name) not in seen]


def missing_message(missing: Sequence[str], listed: Sequence[str], list_path: str) -> str:
    """What to say about objects of ``list_path`` that have no BTF."""
    one = len(missing) == 1
    message = (f'{len(missing)} of the {len(listed)} objects in {list_path} '
               f'{"has" if one else "have"} no BTF: {name_some(missing)}')
    if len(missing) == len(listed):
        return message + ('; no object is named as the list names it: run the link from '
                          'the directory the objects were encoded in (names are paths)')
    return message + (f'; {"it was" if one else "they were"} built without objbtf encode '
                      '(or objbtf cc)')
