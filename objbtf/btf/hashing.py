"""Structural hashes of types, computed per object so the link only merges.

A type's hash covers everything that makes it what it is, including the
types it refers to, except that a reference to a named struct or union
(definition or FWD alike) stands for its name only: binutils' CTF linker
cuts the type graph the same way.  So does a reference to a named enum,
since libbpf matches an enum forward (vlen 0) with an enum of that name.  That makes the hash a function of the
type alone (C cycles always pass through a named struct or union) and lets
a FWD and a definition hash alike where they are referred to.

Two types with equal hashes are identical up to which definition each
named reference resolves to.  For a name with a single definition in the
whole link that is no difference at all, and the link merges them before
dedup; for names whose definitions differ, the link keeps every occurrence
and leaves them to the full dedup.

Types that must never merge (VAR, DATASEC, and what refers to them, or a
cycle without a named aggregate, which C cannot produce) are flagged
UNMERGEABLE.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from hashlib import blake2b
from typing import Final

from .. import c_extension
from .errors import BtfError
from .header import byteorder_of
from .kinds import (
    KINDS, Kind, KindRegistry, DATASEC as _DATASEC, FUNC_PROTO as _FUNC_PROTO, FWD as _FWD,
)
from .reader import parse_btf
from .types import Btf, BtfType

#: The version of the hashing below, recorded in every object's
#: ``.BTF.objbtf`` chunk.  Bump it with any change that can make
#: ``type_hashes`` return other hashes or flags for the same BTF: the link
#: refuses to merge hashes of different schemes, which would silently give
#: other BTF, and asks for the stale objects to be rebuilt.
HASH_SCHEME: Final = 2
UNMERGEABLE: Final = 1
_IN_PROGRESS: Final = -1
#: objbtf.btf._blob, when the compiled build runs.
_C: Final = c_extension('objbtf.btf._blob')


@functools.cache
def aggregate_namer(kinds: KindRegistry) -> Callable[[BtfType], str | None]:
    """``named_aggregate`` for the kinds of registry ``kinds``: a kind of
    the STRUCT/UNION family is called by its own name ('union NAME'), the
    ENUM family all 'enum NAME'."""
    composite, enums = kinds.composite, kinds.enums
    prefixes = {k: kinds[k].name.lower() + ' ' for k in composite}

    def named(t: BtfType) -> str | None:
        if not t.name:
            return None
        k = t.kind
        if k in composite:
            return prefixes[k] + t.name
        if k is _FWD:
            return ('union ' if t.fwd_union else 'struct ') + t.name
        if k in enums:
            return 'enum ' + t.name
        return None
    return named


#: 'struct NAME', 'union NAME' or 'enum NAME' for a type that dedup matches
#: by name (a named struct, union, enum, or a FWD), else None.
named_aggregate = aggregate_namer(KINDS)
_AGGREGATES: Final = KINDS.composite
_ENUMS: Final = KINDS.enums


def is_definition(t: BtfType) -> bool:
    """A named struct, union or enum with its body (not a forward)."""
    return bool(t.name) and (t.kind in _AGGREGATES or (t.kind in _ENUMS and bool(t.items)))


@functools.cache
def _scalar_writer(kinds: KindRegistry) -> Callable[[BtfType], str]:
    """``scalars(t)`` for the kinds of registry ``kinds``: a type's own
    fields, without the ids it refers to, as one string."""
    composite, enums, entry_type_at = kinds.composite, kinds.enums, kinds.entry_type_at
    numbers = {i.kind: str(i.number) for i in kinds}

    def scalars(t: BtfType) -> str:
        k = t.kind
        if k in composite:
            items = '\x1e'.join([f'{m.name}\x1f{m.bit_offset}\x1f{m.bitfield_size}'
                                 for m in t.items])
        elif k is _FUNC_PROTO:
            items = '\x1e'.join([p.name for p in t.items])
        elif k is _DATASEC:
            # Not the offsets: ld relocates them, and a link that hashes blobs
            # itself (linkdedup/rehash.py) must get the hashes the encoder gave.
            items = '\x1e'.join([str(v.size) for v in t.items])
        elif k in enums:
            items = '\x1e'.join([f'{v.name}\x1f{v.value}' for v in t.items])
        elif t.items:               # a kind only its registry entry describes
            at = entry_type_at.get(k)
            items = '\x1e'.join('\x1f'.join([str(x) for j, x in enumerate(e) if j != at])
                                for e in t.items)
        else:
            items = ''
        if not (t.encoding or t.bit_offset or t.bits or t.nelems or t.linkage) \
                and t.component_idx == -1:      # most types: fewer numbers to format
            return (f'{numbers[k]}\x1f{t.name}\x1f{t.size}\x1f{t.kflag}'
                    f'\x1f0\x1f0\x1f0\x1f0\x1f0\x1f-1\x1d{items}')
        return (f'{numbers[k]}\x1f{t.name}\x1f{t.size}\x1f{t.kflag}\x1f{t.encoding}\x1f'
                f'{t.bit_offset}\x1f{t.bits}\x1f{t.nelems}\x1f{t.linkage}\x1f{t.component_idx}'
                f'\x1d{items}')
    return scalars


@functools.cache
def _bare_scalars(kinds: KindRegistry) -> dict[Kind, bytes]:
    """Per kind that refers to one type: the fields of one that is
    anonymous and sets nothing but its target (most of them), encoded."""
    scalars = _scalar_writer(kinds)
    return {k: scalars(BtfType(k)).encode() for k in kinds.one_ref}


class Hasher:
    """Hashes every own type of one BTF table (ids local to it), whose
    kinds are those of registry ``kinds``."""

    def __init__(self, btf: Btf, kinds: KindRegistry = KINDS):
        self.btf = btf
        self._scalars = _scalar_writer(kinds)
        self._bare = _bare_scalars(kinds)
        self._unmerged = kinds.not_deduped
        self._one_ref = kinds.one_ref
        n = btf.next_id
        named_aggregate = aggregate_namer(kinds)
        names = [None] + [named_aggregate(t) if t.name else None for _, t in btf.own()]
        self.named = bytearray([name is not None for name in names])
        # What a reference to each type contributes: a named aggregate its
        # name only, anything else its hash once known.
        self.tokens: list[bytes | None] = [b'N' + name.encode() if name is not None else None
                                           for name in names]
        self.tokens[0] = b'V'
        self.hashes = [0] * n
        self.flags = bytearray(n)
        self._state = [0] * n          # 0 new, -1 in progress, 1 done
        self._types = btf.types
        self._flagged = False          # whether any type has a flag yet

    def run(self) -> tuple[list[int], bytearray]:
        state = self._state
        try:
            for type_id, _ in self.btf.own():
                if not state[type_id]:
                    self._hash(type_id)
        except IndexError:
            dangling = self.btf.dangling()
            if dangling is None:
                raise
            raise BtfError(past_the_last(self.btf, *dangling)) from None
        return self.hashes, self.flags

    def _token(self, type_id: int) -> bytes:
        token = self.tokens[type_id]
        if token is not None:
            return token
        if self._state[type_id] == _IN_PROGRESS:     # a cycle without a named aggregate
            self.flags[type_id] |= UNMERGEABLE
            self._flagged = True
            return b'H' + type_id.to_bytes(8, 'little')
        self._hash(type_id)
        token = self.tokens[type_id]
        assert token is not None        # _hash gives every unnamed type its token
        return token

    def _hash(self, type_id: int) -> None:
        state = self._state
        state[type_id] = _IN_PROGRESS
        t = self._types[type_id]
        k = t.kind
        refs: tuple[int, ...]
        if k in self._one_ref:
            refs = (t.type,)
            bare = not (t.name or t.size or t.kflag or t.encoding or t.bit_offset or t.bits
                        or t.nelems or t.linkage or t.items) and t.component_idx == -1
            parts = [self._bare[k] if bare else self._scalars(t).encode()]
        else:
            refs = t.refs()
            parts = [self._scalars(t).encode()]
        tokens = self.tokens
        for ref in refs:
            token = tokens[ref]
            parts.append(token if token is not None else self._token(ref))
        flag = UNMERGEABLE if k in self._unmerged else 0
        named, flags = self.named, self.flags
        if self._flagged:           # (else no flag to inherit: every one is 0)
            for ref in refs:
                if ref and not named[ref]:
                    flag |= flags[ref]
        digest = blake2b(b'\x1c'.join(parts), digest_size=8).digest()
        if flag:
            flags[type_id] |= flag
            self._flagged = True
        self.hashes[type_id] = int.from_bytes(digest, 'little')
        if not named[type_id]:
            tokens[type_id] = b'H' + digest
        state[type_id] = 1


def type_hashes(btf: Btf, kinds: KindRegistry = KINDS) -> tuple[list[int], bytearray]:
    """(hash, flags) per type id of ``btf`` (index 0, void, is unused);
    ``kinds`` is the registry of the kinds it holds."""
    return Hasher(btf, kinds).run()


def blob_hashes(btf: Btf | None, raw: bytes) -> tuple[list[int], bytearray]:
    """``type_hashes(btf)`` for base BTF of the kernel's kinds whose blob
    is ``raw`` (written from it, or read into it; None: read from ``raw``
    when needed): in the compiled build from ``raw`` in C (``_blob.c``, a
    third of the time), else, or where the C code stops, from the model."""
    if _C is not None:
        found = _C.hashes(raw, byteorder_of(raw) == 'big')
        if found is not None:
            return found
    return type_hashes(btf if btf is not None else parse_btf(raw))


def past_the_last(btf: Btf, type_id: int, ref: int) -> str:
    """What to say of ``btf`` when ``type_id`` refers to ``ref`` past its
    last type (``Btf.dangling``)."""
    return f'type {type_id} refers to type {ref}, past the last type ({btf.next_id - 1})'
