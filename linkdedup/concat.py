"""Pass 1, read: the per-object BTF blobs that ld concatenated into one section.

ld concatenates the input ``.BTF`` sections into the output one, each blob
starting on a 4-byte boundary (the sections' alignment), with zero padding
in between.
"""
from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b

from objbtf.btf.errors import BtfError
from objbtf.btf.kinds import Kind
from objbtf.btf.header import BtfHeader
from objbtf.btf.types import Btf, BtfType


class Blob:
    """One object's BTF inside the concatenation."""
    __slots__ = ('count', 'data', 'header', 'index', 'name', 'offset', 'order')

    def __init__(self, index: int, offset: int, data: memoryview, header: BtfHeader,
                 name: str | None = None):
        self.index = index
        self.offset = offset      # where the blob starts in the section
        self.data = data
        self.header = header
        self.order = index        # its place in the order the link merges blobs in
        self.count = 0
        self.name = name          # the object's, from its .BTF.objbtf chunk

    @property
    def label(self) -> str:
        """The blob in an error message: its object's name when known."""
        return blob_label(self.index, self.offset, self.name)


def blob_label(index: int, offset: int, name: str | None) -> str:
    where = f'blob {index + 1} at offset {offset}'
    return f'the BTF of {name} ({where})' if name else f'BTF {where}'


def split_blobs(section: bytes | memoryview, names: Sequence[str | None] = ()) -> list[Blob]:
    """The blobs of a concatenated .BTF section, in link order (views into
    ``section``, not copies: a vmlinux has tens of megabytes of them);
    ``names[i]`` is the object of blob i, when known."""
    view = memoryview(section)
    blobs: list[Blob] = []
    pos = 0
    end = len(section)
    while pos < end:
        if section[pos:pos + 4] == b'\0\0\0\0':
            pos += 4 - pos % 4 if pos % 4 else 4
            continue
        name = names[len(blobs)] if len(blobs) < len(names) else None
        try:
            header = BtfHeader.read(view[pos:])
        except BtfError as err:
            raise BtfError(f'{blob_label(len(blobs), pos, name)}: {err}') from None
        size = header.size
        blobs.append(Blob(len(blobs), pos, view[pos:pos + size], header, name))
        pos += size
        pos += -pos % 4
    return blobs


def canonical_order(blobs: list[Blob], chunks: list) -> list[Blob]:
    """The blobs in an order that does not depend on the order the objects
    were linked in, so neither does the final BTF.

    The key is a digest of the blob's type hashes (its ``.BTF.objbtf``
    chunk), which describe its types without the offsets the link relocated,
    and without reading the blob itself.  Blobs with the same hashes keep
    their link order.
    """
    def key(b: Blob) -> tuple:
        return blake2b(chunks[b.index].hashes, digest_size=16).digest(), b.index

    return sorted(blobs, key=key)


def datasecs(btf: Btf) -> list[tuple[int, BtfType]]:
    """Every DATASEC of ``btf``'s own, with its id."""
    datasec = Kind.DATASEC        # (the enum's attribute, looked up once)
    return [(i, t) for i, t in btf.own() if t.kind is datasec]
