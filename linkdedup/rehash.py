"""Chunks for blobs that came without one: the encoder's hashing, at link time.

A linked file without ``.BTF.objbtf`` (its objects' BTF came from another
tool, or the section was lost on the way) still has every object's blob.
Hashing each blob as ``objbtf encode`` would have done lets the link merge
by hash all the same, instead of handing a million types to dedup: the
work the per-object step does in parallel under ``make -j``, done here in
``-j`` workers.  The hashes leave out what ld relocated (DATASEC offsets),
so they are the encoder's, and so is the final BTF.  No checksum vouches
for such blobs, so each is first checked against the kernel's rules, as
the encoder checks what it writes; that costs as much again as parsing
and hashing it (the reference kernel's link: 11 s of CPU without the
check, 22 s with it), on a path that is already the slow one.
"""
from __future__ import annotations

from array import array

from objbtf.btf.chunk import VERSION, Chunk
from objbtf.btf.errors import BtfError
from objbtf.btf.hashing import HASH_SCHEME, UNMERGEABLE, blob_hashes
from objbtf.btf.kinds import Kind
from objbtf.btf.reader import parse_btf
from objbtf.btf.types import Btf
from objbtf.btf.validate import first_problem_among
from objbtf.errors import shown

from .concat import Blob


def hashed_chunk(blob: Blob, check: bool = True) -> Chunk:
    """The chunk ``objbtf encode`` would have written for ``blob``, but for
    its name, which nothing records; ``check``: see ``_parsed``."""
    offsets: list[int] = []
    raw = bytes(blob.data)
    hashes, flags = blob_hashes(_parsed(raw, offsets, check), raw)
    return _chunk(blob, array('Q', hashes[1:]), offsets, bytes(flags[1:]))


def unmerged_chunk(blob: Blob, check: bool = True) -> Chunk:
    """A chunk that keeps every type of ``blob`` as it is (no merging by
    hash): the plain concatenation that libbpf's dedup would be given."""
    offsets: list[int] = []
    _parsed(bytes(blob.data), offsets, check)
    count = len(offsets)
    return _chunk(blob, array('Q', bytes(8 * count)), offsets, bytes([UNMERGEABLE]) * count)


def _parsed(raw: bytes, offsets: list[int], check: bool) -> Btf:
    """The types of blob ``raw``; with ``check``, BtfError unless they follow the
    kernel's rules, as ``objbtf encode`` checked those of a blob it wrote
    (all but the DATASECs: ld wrote addresses into their offsets, and the
    link makes them anew and checks those)."""
    btf = parse_btf(raw, offsets=offsets)
    if check:
        problem = first_problem_among(btf, [i for i, t in btf.own()
                                            if t.kind is not Kind.DATASEC])
        if problem is not None:
            raise BtfError(f'BTF the kernel would reject: {shown(str(problem))}')
    return btf


def _chunk(blob: Blob, hashes: array, offsets: list[int], flags: bytes) -> Chunk:
    return Chunk(blob.name, VERSION, HASH_SCHEME, 0, len(offsets), len(blob.data),
                   hashes, array('I', offsets), flags)
