"""Pass 2, merge: every object's types in one table, merged by hash.

Each object's ``.BTF.objbtf`` chunk gives a structural hash per type
(``objbtf/btf/hashing.py``), computed in the parallel per-object step.
Types with equal hashes are identical up to which definition each named
struct or union they refer to resolves to.  So:

1. the first occurrence of each hash is found without parsing anything;
2. only those first occurrences are parsed;
3. names with differing definitions are found among them, and spread to
   every name whose definitions refer to one (the hash cannot tell those
   apart either);
4. types whose hash involves such a name are taken as they occur, every
   occurrence, and so are the types that never merge (VAR, DATASEC, ...);
   every other type becomes one entry for its hash.

The compiled build runs the steps over every hash (1 and 4), the walk of
3 and the parsing of the types it keeps in C (``_merge.c``), which reads
the records of the first occurrences itself, and makes each name once.

The result holds what libbpf's dedup would produce from the plain
concatenation, plus what only dedup can decide (FWD resolution, the
conflicting names), and is much smaller: the full dedup that follows sees
tens of thousands of types instead of a million.  Objects without a chunk
get one at link time (``rehash.py``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import compress
from typing import Final

from objbtf import c_extension
from objbtf.btf.errors import BtfError
from objbtf.btf.hashing import is_definition, named_aggregate
from objbtf.btf.header import order_char
from objbtf.btf.kinds import KINDS, Kind
from objbtf.btf.reader import TypeParser
from objbtf.btf.chunk import Chunk
from objbtf.btf.strings import StringReader
from objbtf.btf.types import Btf, BtfType, Enumerator, Member, Param, VarSecinfo, new_type

from .concat import Blob
from .workers import run_sharded

_LEAF = KINDS.leaf

_LOCAL_BITS = 20                  # BTF holds fewer than 2**20 types
_LOCAL_MASK = (1 << _LOCAL_BITS) - 1
_MERGEABLE = bytes.maketrans(bytes(range(256)), b'\1' + b'\0' * 255)
#: Fewest types worth a worker's scan: scanning takes about 0.15 us a type,
#: forking a worker and taking its result back a few milliseconds.
_MIN_SCAN_SHARE = 100_000
#: linkdedup._merge, when the compiled build runs: the passes over every
#: hash, in C, in one process (the -j workers' scan is for Python's).
_C: Final = c_extension('linkdedup._merge')
#: What the C builds the types with (``new_type``: a BtfType), their kinds and entries.
_CLASSES: Final = (new_type, [Kind(n) for n in range(Kind.ENUM64 + 1)], Member, Param,
                   Enumerator, VarSecinfo)


class _Part:
    """One blob: its type parser, and its chunk's arrays."""

    def __init__(self, order: int, blob: Blob, chunk: Chunk):
        self.order = order
        self.blob = blob
        h = blob.header
        self.strings = _ViewStrings(h.strings(blob.data))
        self.types_start = h.hdr_len + h.type_off
        self.types = h.types(blob.data)
        self.big_endian = h.order == 'big'
        self.parser = TypeParser(self.types, order_char(h.order), self.strings)
        self.chunk = chunk
        self.offsets = chunk.offsets
        self.count = len(chunk.offsets)
        blob.count = self.count
        blob.order = order

    def parse(self, local: int) -> BtfType:
        return self.parser.parse(self.offsets[local - 1], local)[0]


class _ViewStrings(StringReader):
    """A blob's string section, read in place: a vmlinux holds tens of
    megabytes of them.  The section is copied while the blob's types are
    parsed, and the copy dropped with ``release``; names once read stay."""
    __slots__ = ('view',)

    def __init__(self, view: memoryview):
        super().__init__(b'')
        self.view = view
        self.end = len(view)

    def __missing__(self, off: int) -> str:
        if not self.data:
            self.data = bytes(self.view)
        return super().__missing__(off)

    def release(self) -> None:
        self.data = b''


class MergedTable:
    """The merged table, and where each of its types came from."""

    def __init__(self, btf: Btf, parts: list[_Part], positions: list[int], types_in: int):
        self.btf = btf
        self.types_in = types_in
        self._parts = parts
        self._positions = positions

    def origin(self, type_id: int) -> tuple[Blob, int]:
        """The blob a type of the table was taken from, and the byte offset of
        its record in that blob."""
        pos = self._positions[type_id - self.btf.start_id]
        part = self._parts[pos >> _LOCAL_BITS]
        return part.blob, part.types_start + part.offsets[(pos & _LOCAL_MASK) - 1]

    def chunk_entries(self) -> tuple[list[int], bytes]:
        """The hash and the flags that its chunk gives each type of the
        table, in id order."""
        hashes: list[int] = []
        flags = bytearray()
        for pos in self._positions:
            chunk = self._parts[pos >> _LOCAL_BITS].chunk
            local = (pos & _LOCAL_MASK) - 1
            hashes.append(chunk.hashes[local])
            flags.append(chunk.flags[local])
        return hashes, bytes(flags)


def merge_blobs(blobs: list[Blob], chunks: list[Chunk], base: Btf | None,
                byteorder: str, release: Callable[[Blob], None] = lambda blob: None,
                jobs: int = 1) -> MergedTable:
    """Concatenate ``blobs`` (in this order), merging by hash where that is
    exact; ``chunks`` are the blobs' chunks, in the same order.
    ``release(blob)`` is called when the blob's bytes are not needed for now.
    ``jobs`` processes scan the chunks (the pure-Python build's scan; the
    C one takes one)."""
    parts = [_Part(i, b, chunks[i]) for i, b in enumerate(blobs)]
    first, unmergeable = _scan_chunks(parts, jobs)
    start = base.next_id if base is not None else 1
    merged = _c_merged(parts, first, unmergeable, start, release) if _C is not None else None
    order, types = merged or _merged(parts, first, unmergeable, start, release)
    out = Btf(base=base, byteorder=byteorder)
    out.types += types
    return MergedTable(out, parts, order, sum(p.count for p in parts))


def _merged(parts: list[_Part], first: dict[int, int], unmergeable: list[int], start: int,
            release: Callable[[Blob], None]) -> tuple[list[int], list[BtfType]]:
    """The merged table's positions in order (the first occurrence of each
    hash that merges, and those taken as they are) and its types, numbered
    from ``start``."""
    parsed = _parse_positions(parts, first.values(), release)
    unsafe = _unsafe_hashes(parts, first, parsed)
    own = _own_positions(parts, unsafe, unmergeable)
    parsed.update(_parse_positions(parts, own - parsed.keys(), release))
    merged = {h: p for h, p in first.items() if h not in unsafe}
    order = sorted(set(merged.values()) | own)
    ids = {pos: start + k for k, pos in enumerate(order)}
    by_hash = {h: ids[p] for h, p in merged.items()}
    resolvers = [_resolver(part, ids, by_hash) for part in parts]
    types = []
    for pos in order:
        t = parsed[pos]
        t.remap(resolvers[pos >> _LOCAL_BITS])
        types.append(t)
    return order, types


def _c_merged(parts: list[_Part], first: dict[int, int], unmergeable: list[int], start: int,
              release: Callable[[Blob], None]) -> tuple[list[int], list[BtfType]] | None:
    """``_merged`` in C (linkdedup._merge), which builds the types from
    their records as ``TypeParser`` does, each name once.  None when the C
    leaves it to the Python, which then says what is wrong: a type that
    refers past its blob's last type, a record the parser refuses."""
    hashes = [(p.chunk.hashes, p.chunk.flags) for p in parts]
    records = [(p.chunk.hashes, p.chunk.flags, p.offsets, p.types, p.strings.view,
                p.big_endian) for p in parts]

    def release_part(i: int) -> None:
        release(parts[i].blob)

    unsafe = _C.unsafe_hashes(records, first, release_part)
    laid_out = _C.layout(hashes, first, unsafe, unmergeable, start) if unsafe is not None else None
    if laid_out is None:
        return None
    order, maps = laid_out
    types = _C.merged(records, order, maps, _CLASSES, release_part)
    return None if types is None else (order, types)


def _resolver(part: _Part, ids: dict[int, int],
              by_hash: dict[int, int]) -> Callable[[int], int]:
    """Maps a type id local to ``part`` to its id in the merged table: its
    own entry if it was taken as it is, else its hash's."""
    low = part.order << _LOCAL_BITS
    hashes = part.chunk.hashes
    count = part.count

    def resolve(local: int) -> int:
        if local == 0:
            return 0
        if local > count:
            raise _dangling(part, local)
        found = ids.get(low | local)
        return found if found is not None else by_hash[hashes[local - 1]]
    return resolve


def _dangling(part: _Part, ref: int) -> BtfError:
    """A type of ``part`` refers past its last type.  The encoder never
    writes one, and the link's own chunks (``rehash``) refuse them: only a
    chunk made to pass its checksum gets here."""
    return BtfError(f'{part.blob.label}: a type refers to type {ref}, past the last '
                    f'type ({part.count})')


def _scan_chunks(parts: list[_Part], jobs: int) -> tuple[dict[int, int], list[int]]:
    """hash -> position of its first mergeable occurrence, in blob order;
    and the positions of the unmergeable types.  Each of the ``jobs``
    processes pre-merges a shard of the blobs: a million occurrences come
    back as tens of thousands of distinct hashes per shard."""
    if _C is not None:
        found: tuple[dict[int, int], list[int]] = _C.first_occurrences(
            [(p.chunk.hashes, p.chunk.flags) for p in parts])
        return found

    def shard(r: range) -> tuple[dict[int, int], list[int]]:
        return _first_occurrences(parts[r.start:r.stop]), _unmergeable(parts[r.start:r.stop])
    results = run_sharded(shard, [p.count for p in parts], jobs, _MIN_SCAN_SHARE)
    first: dict[int, int] = {}
    for shard_first, _ in reversed(results):
        first.update(shard_first)
    return first, [pos for _, positions in results for pos in positions]


def _first_occurrences(parts: list[_Part]) -> dict[int, int]:
    """hash -> position of its first mergeable occurrence, in blob order."""
    first: dict[int, int] = {}
    for part in reversed(parts):
        sc = part.chunk
        low = part.order << _LOCAL_BITS
        positions = range(low + part.count, low, -1)
        if any(sc.flags):
            selector = sc.flags[::-1].translate(_MERGEABLE)
            first.update(zip(compress(reversed(sc.hashes), selector),
                             compress(positions, selector)))
        else:
            first.update(zip(reversed(sc.hashes), positions))
    return first


def _unmergeable(parts: list[_Part]) -> list[int]:
    """The positions of the types flagged never to merge."""
    out: list[int] = []
    for part in parts:
        if any(part.chunk.flags):
            low = part.order << _LOCAL_BITS
            out += compress(range(low + 1, low + 1 + part.count), part.chunk.flags)
    return out


def _parse_positions(parts: list[_Part], positions: Iterable[int],
                     release: Callable[[Blob], None]) -> dict[int, BtfType]:
    """The types at these positions, their refs still local to their blob;
    read blob by blob, each released once read."""
    out = {}
    part: _Part | None = None
    for pos in sorted(positions):
        current = parts[pos >> _LOCAL_BITS]
        if part is not current:
            if part is not None:
                part.strings.release()
                release(part.blob)
            part = current
        try:
            out[pos] = current.parse(pos & _LOCAL_MASK)
        except BtfError as err:
            raise BtfError(f'{current.blob.label}: {err}') from None
    if part is not None:
        part.strings.release()
        release(part.blob)
    return out


def _unsafe_hashes(parts: list[_Part], first: dict[int, int],
                   parsed: dict[int, BtfType]) -> set[int]:
    """Hashes that involve a name whose definitions differ.

    Starts from the names with several definitions and walks back to what
    refers to them: through unnamed types, and through definitions, whose
    own name then becomes ambiguous in turn.
    """
    definitions: dict[str, set[int]] = {}
    named: dict[int, str] = {}
    for h, pos in first.items():
        t = parsed[pos]
        name = named_aggregate(t)
        if name is not None:
            named[h] = name
            if is_definition(t):
                definitions.setdefault(name, set()).add(h)
    ambiguous = [n for n, hs in definitions.items() if len(hs) > 1]
    if not ambiguous:
        return set()
    name_users, hash_users = _users(parts, first, parsed, named)
    unsafe: set[int] = set()
    seen = set(ambiguous)
    queue = list(ambiguous)
    while queue:
        name = queue.pop()
        todo = list(definitions.get(name, ())) + name_users.get(name, [])
        while todo:
            h = todo.pop()
            if h in unsafe:
                continue
            unsafe.add(h)
            todo.extend(hash_users.get(h, ()))
            own = named.get(h)
            if own is not None and own not in seen and h in definitions.get(own, ()):
                seen.add(own)
                queue.append(own)
    return unsafe


def _users(parts: list[_Part], first: dict[int, int], parsed: dict[int, BtfType],
           named: dict[int, str]) -> tuple[dict[str, list[int]], dict[int, list[int]]]:
    """Who refers to what, among the first occurrences: by name (a named
    struct, union or enum) or by hash (anything else)."""
    name_users: dict[str, list[int]] = {}
    hash_users: dict[int, list[int]] = {}
    for h, pos in first.items():
        t = parsed[pos]
        if t.kind in _LEAF:
            continue
        part = parts[pos >> _LOCAL_BITS]
        hashes = part.chunk.hashes
        for ref in t.refs():
            if ref:
                if ref > part.count:
                    raise _dangling(part, ref)
                rh = hashes[ref - 1]
                name = named.get(rh)
                if name is not None:
                    name_users.setdefault(name, []).append(h)
                else:
                    hash_users.setdefault(rh, []).append(h)
    return name_users, hash_users


def _own_positions(parts: list[_Part], unsafe: set[int], unmergeable: list[int]) -> set[int]:
    """Positions taken as they are: unmergeable types and occurrences of
    unsafe hashes."""
    own = set(unmergeable)
    if not unsafe:
        return own
    for part in parts:
        hashes = part.chunk.hashes
        if not unsafe.isdisjoint(hashes):
            low = part.order << _LOCAL_BITS
            own.update(low + 1 + i for i, h in enumerate(hashes) if h in unsafe)
    return own
