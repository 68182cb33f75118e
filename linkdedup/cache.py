"""The link cache: a relink whose objects' types are unchanged replays the last link.

An incremental kernel build relinks vmlinux after every change, and most
changes (a function body, a constant) leave every object's types as they
were: only the variables' addresses move.  The final BTF is then the last
one with its DATASECs rebuilt from the new addresses, which takes reading
a few hundred offset fields instead of merging a million types.

The cache file (``objbtf link --cache FILE``) holds one link: its key, the
final BTF, and for each final DATASEC where its record sits in that BTF
and where each entry's offset was read (which blob in merge order, where
in the blob).  The key covers everything else the final BTF depends on:
the objects' types (their ``.BTF.objbtf`` chunks, which hash every type,
in merge order), the function symbols at several addresses, the kfuncs of
``.BTF_ids`` with their tags (a kfunc added to a set changes no type), the
features, the input section's name, and objbtf's own code.  A replay whose
variables changed output section is not a hit either.  Either way, a miss
is a full link, which then refills the cache.
"""
from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from hashlib import blake2b

from objbtf.btf.kinds import KINDS, TYPE_HEAD_LEN, Kind
from objbtf.btf.types import Btf, BtfType, VarSecinfo
from objbtf.btf.writer import rewrite_type
from objbtf.elf.reader import ElfFile, Section
from objbtf.elf.writer import write_atomically
from objbtf.source_digest import source_digest

from .concat import Blob, datasecs
from .datasec import misplaced
from .kfuncs import Kfuncs
from .relocate import Field, place_fields, section_offsets

MAGIC = b'OBTFLINKCACHE\x00\x00\x02'
_KEY_LEN = 32


def cache_key(chunks: list, ambiguous: set[str], kfuncs: Kfuncs, features: list[str],
              section: str) -> bytes:
    """The key of a link; ``chunks`` in merge order."""
    h = blake2b(digest_size=_KEY_LEN)
    h.update(MAGIC)
    h.update(source_digest('linkdedup', 'objbtf'))
    h.update(json.dumps([section, features, sorted(ambiguous), sorted(kfuncs.items())]).encode())
    for c in chunks:
        h.update(struct.pack('<II', len(c.hashes), c.btf_size))
        h.update(c.hashes)
        h.update(c.offsets)
        h.update(c.flags)
        h.update(struct.pack('<I', len(c.raw_facts)))
        h.update(c.raw_facts)
    return h.digest()


@dataclass
class CachedDatasec:
    """One final DATASEC: where its record sits in the BTF, its entries'
    (VAR id, size), and where each entry's offset is read."""
    record: int
    name: str
    vars: list[tuple[int, int]]
    fields: list[Field]


@dataclass
class CachedLink:
    raw: bytes
    datasecs: list[CachedDatasec]
    summary: dict


def describe_datasecs(final: Btf, type_offsets: list[int], layout: list[list[Field]],
                      header_len: int) -> list[CachedDatasec] | None:
    """The final DATASECs with their fields (``layout``, in order), or None
    when the final BTF does not end with them as the link laid them out."""
    found = datasecs(final)
    if len(found) != len(layout):
        return None
    out = []
    for (type_id, ds), fields in zip(found, layout):
        if len(ds.items) != len(fields):
            return None
        out.append(CachedDatasec(header_len + type_offsets[type_id - final.start_id], ds.name,
                                 [(v.type, v.size) for v in ds.items], fields))
    return out


def store(path: str, key: bytes, link: CachedLink) -> None:
    """Keep ``link`` in ``path``: the magic, the key, the checksum (crc32)
    and length of the description, the description (JSON), the final BTF."""
    meta = json.dumps({'summary': link.summary,
                       'datasecs': [[d.record, d.name, d.vars, d.fields] for d in link.datasecs]},
                      separators=(',', ':')).encode()
    crc = zlib.crc32(link.raw, zlib.crc32(meta))
    write_atomically(path, [MAGIC, key, struct.pack('<II', crc, len(meta)), meta, link.raw])


def holds_a_link(path: str) -> bool:
    """Whether ``path`` begins as a cached link does (``load`` says if it
    is the one wanted)."""
    try:
        with open(path, 'rb') as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def load(path: str, key: bytes) -> CachedLink | None:
    """The cached link if ``path`` holds one made with ``key``, intact:
    the BTF it holds was checked when the link that stored it wrote it."""
    try:
        with open(path, 'rb') as f:
            head = f.read(len(MAGIC) + _KEY_LEN + 8)
            if head[:len(MAGIC)] != MAGIC or head[len(MAGIC):-8] != key:
                return None
            crc, meta_len = struct.unpack('<II', head[-8:])
            meta = f.read(meta_len)
            raw = f.read()
        if zlib.crc32(raw, zlib.crc32(meta)) != crc:
            return None
        meta = json.loads(meta)
    except (OSError, ValueError, struct.error):
        return None
    datasecs = [CachedDatasec(r, n, [tuple(v) for v in vs], [tuple(f) for f in fs])
                for r, n, vs, fs in meta['datasecs']]
    layout = KINDS[Kind.DATASEC]
    if any(d.record + TYPE_HEAD_LEN + layout.extra_len(len(d.vars)) > len(raw)
           for d in datasecs):
        return None
    return CachedLink(raw, datasecs, meta['summary'])


def replay(link: CachedLink, elf: ElfFile, btf_section: Section, blobs: list[Blob]) -> bytes | None:
    """The cached BTF with its DATASECs placed anew; None when a variable
    left the output section its DATASEC is for."""
    owners = [ds for ds in link.datasecs for _ in ds.fields]
    placed = iter(place_fields(elf, btf_section, blobs,
                               section_offsets([f for ds in link.datasecs for f in ds.fields],
                                               blobs),
                               lambda k: f"variable {k} of DATASEC '{owners[k].name}'"))
    out = bytearray(link.raw)
    for ds in link.datasecs:
        mine = [next(placed) for _ in ds.fields]
        if any(sec.name != ds.name for sec, _ in mine):
            return None
        rows = sorted((off, var, size) for (_, off), (var, size) in zip(mine, ds.vars))
        if misplaced([(off, size) for off, _, size in rows], mine[0][0].size) is not None:
            return None         # the full link names the culprits
        placed_ds = BtfType(Kind.DATASEC, ds.name, size=mine[0][0].size,
                            items=tuple([VarSecinfo(var, off, size) for off, var, size in rows]))
        rewrite_type(out, ds.record, placed_ds, elf.byteorder)
    return bytes(out)
