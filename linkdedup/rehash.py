"""Chunks for blobs that came without one: the encoder's hashing, at link time.

A linked file without ``.BTF.objbtf`` (its objects' BTF came from another
tool, or the section was lost on the way) still has every object's blob.
Hashing each blob as ``objbtf encode`` would have done lets the link merge
by hash all the same, instead of handing a million types to dedup: the
work the per-object step does in parallel under ``make -j``, done here in
``-j`` workers.  The hashes leave out what ld relocated (DATASEC offsets),
so they are the encoder's, and so is the final BTF.
"""
from __future__ import annotations

from array import array

from objbtf.btf.hashing import HASH_SCHEME, UNMERGEABLE, type_hashes
from objbtf.btf.reader import parse_btf
from objbtf.btf.chunk import VERSION, Chunk

from .concat import Blob


def hashed_chunk(blob: Blob) -> Chunk:
    """The chunk ``objbtf encode`` would have written for ``blob``, but for
    its name, which nothing records."""
    offsets: list[int] = []
    hashes, flags = type_hashes(parse_btf(bytes(blob.data), offsets=offsets))
    return _chunk(blob, array('Q', hashes[1:]), offsets, bytes(flags[1:]))


def unmerged_chunk(blob: Blob) -> Chunk:
    """A chunk that keeps every type of ``blob`` as it is (no merging by
    hash): the plain concatenation that libbpf's dedup would be given."""
    offsets: list[int] = []
    parse_btf(bytes(blob.data), offsets=offsets)
    count = len(offsets)
    return _chunk(blob, array('Q', bytes(8 * count)), offsets, bytes([UNMERGEABLE]) * count)


def _chunk(blob: Blob, hashes: array, offsets: list[int], flags: bytes) -> Chunk:
    return Chunk(blob.name, VERSION, HASH_SCHEME, 0, len(offsets), len(blob.data),
                   hashes, array('I', offsets), flags)
