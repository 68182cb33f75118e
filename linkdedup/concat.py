"""Pass 1, concatenate: the per-object BTF blobs of a linked file, as one table.

ld concatenates the input ``.BTF`` sections into the output one, each blob
starting on a 4-byte boundary (the sections' alignment), with zero padding
in between.
"""
from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b

from objbtf.btf.errors import BtfError
from objbtf.btf.kinds import Kind, extra_len
from objbtf.btf.reader import blob_size, read_header
from objbtf.btf.types import Btf, BtfType


class Blob:
    """One object's BTF inside the concatenation."""
    __slots__ = ('index', 'offset', 'data', 'order', 'count', 'name')

    def __init__(self, index: int, offset: int, data: memoryview, name: str | None = None):
        self.index = index
        self.offset = offset      # where the blob starts in the section
        self.data = data
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


def split_blobs(section: bytes, names: Sequence[str | None] = ()) -> list[Blob]:
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
            size = blob_size(section, pos)
        except BtfError as err:
            raise BtfError(f'{blob_label(len(blobs), pos, name)}: {err}') from None
        blobs.append(Blob(len(blobs), pos, view[pos:pos + size], name))
        pos += size
        pos += -pos % 4
    return blobs


def canonical_order(blobs: list[Blob], sidecars: list | None) -> list[Blob]:
    """The blobs in an order that does not depend on the order the objects
    were linked in, so neither does the final BTF.

    The key is a digest of the blob's type hashes (its ``.BTF.objbtf``
    chunk), which describe its types without the offsets the link relocated,
    and without reading the blob itself; failing that, of its bytes.
    """
    def key(b: Blob) -> tuple:
        if sidecars is not None:
            content = sidecars[b.index].hashes.tobytes()
        else:
            content = b.data
        return blake2b(content, digest_size=16).digest(), b.index

    return sorted(blobs, key=key)


def secinfo_offsets(blob: Blob) -> dict[tuple[int, int], int]:
    """Byte offset, within the blob, of each DATASEC entry's ``offset`` field,
    keyed by (the DATASEC's id in the blob, entry index)."""
    _, hdr_len, type_off, type_len, _, _ = read_header(blob.data)
    order = 'little' if blob.data[:2] == b'\x9f\xeb' else 'big'
    out = {}
    pos = hdr_len + type_off
    end = pos + type_len
    type_id = 1
    while pos < end:
        info = int.from_bytes(blob.data[pos + 4:pos + 8], order)
        kind, vlen = (info >> 24) & 0x1f, info & 0xffff
        if kind == Kind.DATASEC:
            for j in range(vlen):
                out[type_id, j] = pos + 12 + 12 * j + 4
        pos += 12 + extra_len(Kind(kind), vlen)
        type_id += 1
    return out


def datasecs(btf: Btf) -> list[tuple[int, BtfType]]:
    return [(i, t) for i, t in btf.own() if t.kind is Kind.DATASEC]
