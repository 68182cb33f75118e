"""Pass 1, concatenate: every object's types in one table, merged by hash.

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

The result holds what libbpf's dedup would produce from the plain
concatenation, plus what only dedup can decide (FWD resolution, the
conflicting names), and is much smaller: the full dedup that follows sees
tens of thousands of types instead of a million.  Objects without a chunk
are taken whole, type by type.
"""
from __future__ import annotations

from itertools import compress

from objbtf.btf.errors import BtfError
from objbtf.btf.hashing import is_definition, named_aggregate
from objbtf.btf.reader import TypeParser, read_header
from objbtf.btf.sidecar import Sidecar
from objbtf.btf.strings import StringReader
from objbtf.btf.types import Btf, BtfType

from .concat import Blob

_LOCAL_BITS = 20                  # BTF holds fewer than 2**20 types
_LOCAL_MASK = (1 << _LOCAL_BITS) - 1
_MERGEABLE = bytes.maketrans(bytes(range(256)), b'\1' + b'\0' * 255)


class _Part:
    """One blob: its type parser, and its sidecar's arrays when it has one."""

    def __init__(self, order: int, blob: Blob, sidecar: Sidecar | None):
        self.order = order
        self.blob = blob
        order_str, hdr_len, type_off, type_len, str_off, str_len = read_header(blob.data)
        e = '<' if order_str == 'little' else '>'
        strings = StringReader(bytes(blob.data[hdr_len + str_off:hdr_len + str_off + str_len]))
        self.parser = TypeParser(blob.data[hdr_len + type_off:hdr_len + type_off + type_len],
                                 e, strings)
        self.sidecar = sidecar
        if sidecar is None:
            self.offsets = _scan_offsets(self.parser)
            self.count = len(self.offsets)
        else:
            self.offsets = sidecar.offsets
            self.count = len(sidecar.offsets)
        blob.count = self.count
        blob.order = order

    def parse(self, local: int) -> BtfType:
        return self.parser.parse(self.offsets[local - 1], local)[0]


def _scan_offsets(parser: TypeParser) -> list[int]:
    offsets, pos, n = [], 0, len(parser.tdata)
    while pos < n:
        offsets.append(pos)
        pos = parser.parse(pos, len(offsets))[1]
    return offsets


class MergedTable:
    """The merged table, and where each (blob order, local id) went in it."""

    def __init__(self, btf: Btf, locate, types_in: int):
        self.btf = btf
        self.locate = locate
        self.types_in = types_in


def merge_blobs(blobs: list[Blob], sidecars: list[Sidecar] | None, base: Btf | None,
                byteorder: str) -> MergedTable:
    """Concatenate ``blobs`` (in this order), merging by hash where that is exact."""
    parts = [_Part(i, b, sidecars[b.index] if sidecars else None) for i, b in enumerate(blobs)]
    first = _first_occurrences(parts)
    parsed = _parse_positions(parts, set(first.values()))
    unsafe = _unsafe_hashes(parts, first, parsed)
    own = _own_positions(parts, unsafe)
    for pos, t in _parse_positions(parts, own - parsed.keys()).items():
        parsed[pos] = t
    merged = {h: p for h, p in first.items() if h not in unsafe}
    order = sorted(set(merged.values()) | own)
    start = base.next_id if base is not None else 1
    ids = {pos: start + k for k, pos in enumerate(order)}

    def locate(part_order: int, local: int) -> int:
        if local == 0:
            return 0
        pos = part_order << _LOCAL_BITS | local
        found = ids.get(pos)
        if found is None:
            found = ids[merged[parts[part_order].sidecar.hashes[local - 1]]]
        return found

    out = Btf(base=base, byteorder=byteorder)
    for pos in order:
        t = parsed[pos]
        part = pos >> _LOCAL_BITS
        t.remap(lambda r, part=part: locate(part, r))
        out.types.append(t)
    return MergedTable(out, locate, sum(p.count for p in parts))


def _first_occurrences(parts: list[_Part]) -> dict[int, int]:
    """hash -> position of its first mergeable occurrence, in blob order."""
    first: dict[int, int] = {}
    for part in reversed(parts):
        sc = part.sidecar
        if sc is None:
            continue
        low = part.order << _LOCAL_BITS
        selector = sc.flags.translate(_MERGEABLE)
        hashes = list(compress(sc.hashes, selector))
        positions = list(compress(range(low + 1, low + 1 + part.count), selector))
        first.update(zip(reversed(hashes), reversed(positions)))
    return first


def _parse_positions(parts: list[_Part], positions) -> dict[int, BtfType]:
    """The types at these positions, their refs still local to their blob."""
    out = {}
    for pos in positions:
        part = parts[pos >> _LOCAL_BITS]
        try:
            out[pos] = part.parse(pos & _LOCAL_MASK)
        except BtfError as err:
            raise BtfError(f'{part.blob.label}: {err}') from None
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
        part = parts[pos >> _LOCAL_BITS]
        hashes = part.sidecar.hashes
        for ref in parsed[pos].refs():
            if ref == 0:
                continue
            rh = hashes[ref - 1]
            name = named.get(rh)
            if name is not None:
                name_users.setdefault(name, []).append(h)
            else:
                hash_users.setdefault(rh, []).append(h)
    return name_users, hash_users


def _own_positions(parts: list[_Part], unsafe: set[int]) -> set[int]:
    """Positions taken as they are: unmergeable types, occurrences of unsafe
    hashes, and every type of a blob without a sidecar."""
    own: set[int] = set()
    for part in parts:
        low = part.order << _LOCAL_BITS
        sc = part.sidecar
        if sc is None:
            own.update(range(low + 1, low + 1 + part.count))
            continue
        if sc.flags.count(0) != len(sc.flags):
            own.update(low + 1 + i for i, f in enumerate(sc.flags) if f)
        if unsafe:
            own.update(low + 1 + i for i, h in enumerate(sc.hashes) if h in unsafe)
    return own
