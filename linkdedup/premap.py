"""A module's dedup with a base index: vmlinux's types found by hash first.

Most of what a module's objects hold is vmlinux's: veth.ko's 3.1 k merged
types are vmlinux's but for 94.  dedup finds that out by walking each type
graph against vmlinux's, parsing thousands of vmlinux's types.  The index
(``base_index.py``) has each base type's structural hash, the encoder's; a
module type with the hash of exactly one base type is that base type, and
dedup would map it there, when nothing in its type graph can tell them
apart.  Those types are mapped before dedup ("premapped"), and dedup runs on
the others only, with references to premapped types pointing at the base.

What could tell them apart is a named struct, union or enum: the hash
stands for it by name only.  A module type is premapped only when every
name its graph reaches is one dedup will resolve to the base's: the name is
one type in the base (one definition, or one forward), and in the module
one type with the base type's hash (its graph the same, in turn), a forward
that dedup resolves to the base's definition (a FWD when the base has no
other struct or union of that name and the module no other, an enum
forward when the base's enum is full), or both.  A FWD beside its
definition (a module's .mod.o declares what its .o defines) needs one more
thing: dedup's struct walks, in id order, must resolve one of the two
before any walk meets both, else that walk fails and its type stays in the
module; so the first struct, union or typedef to reach either must reach
only one, and be premapped itself.  Anything else is "tainted" and goes to
dedup, with every type whose graph reaches it: two definitions of a name,
a definition that differs from the base's or that the base lacks, a type
the link's passes changed or added (DATASECs, tombstones, kfunc tags: a
pass replaces a type, never changes it in place, so that comparing each
type with the one merging made finds them), a type that may not merge
(VAR, DATASEC), a hash that the module's table holds more than once.

Then dedup would have mapped each premapped type to its base type, and it
treats the others as it would have: their walks meet the base type where
they would have met the module's copy of it, which is equivalent and would
have been mapped there.  The split BTF is the same, byte for byte, as
without the index (``tests/test_link_kernel.py`` links every module both
ways).
"""
from __future__ import annotations

from collections import Counter

from objbtf.btf.dedup import dedup
from objbtf.btf.hashing import named_aggregate
from objbtf.btf.kinds import KINDS, Kind
from objbtf.btf.types import Btf, BtfType

from .base_index import BaseIndex

_COMPOSITE = KINDS.composite
_ENUMS = KINDS.enums
#: The roots of dedup's struct walks (upstream libbpf walks TYPEDEFs too).
_WALKED = KINDS.composite | {Kind.TYPEDEF}


def split_dedup(btf: Btf, merged: list[BtfType], hashes: list[int], flags: bytes,
                index: BaseIndex) -> tuple[Btf, int]:
    """``dedup(btf)`` for a module's table on the index's base, and how
    many types were premapped: ``merged`` are the table's own types as
    merging by hash made them (the passes may have replaced some since, or
    appended), ``hashes`` and ``flags`` their chunk entries."""
    premapped = premap(btf, merged, hashes, flags, index)
    return dedup(_without(btf, premapped), split_base=index), len(premapped)


def premap(btf: Btf, merged: list[BtfType], hashes: list[int], flags: bytes,
           index: BaseIndex) -> dict[int, int]:
    """Table id → base id of the module types that are the base's."""
    start = btf.start_id
    tainted = _Taint(btf, merged, hashes, flags, index).run()
    out: dict[int, int] = {}
    by_hash = index.by_hash
    for k, h in enumerate(hashes):
        if not tainted[k]:
            found = by_hash(h)
            if found:
                out[start + k] = found
    return out


class _Taint:
    """Which merged types dedup must decide (see the module's docstring);
    types are numbered from 0 in table order (``k``)."""

    def __init__(self, btf: Btf, merged: list[BtfType], hashes: list[int], flags: bytes,
                 index: BaseIndex):
        self.merged = merged
        self.hashes = hashes
        self.index = index
        own = btf.types
        start, count = btf.start_id, len(merged)
        repeated = Counter(hashes)
        self.seeds = [k for k in range(count)
                      if own[k] is not merged[k] or flags[k] or repeated[hashes[k]] > 1]
        self.users: list[list[int]] = [[] for _ in range(count)]
        for k in range(count):
            for ref in own[k].refs():
                r = ref - start
                if r >= count:
                    self.seeds.append(k)        # refers to a type the passes added
                elif r >= 0:
                    self.users[r].append(k)
        self.tokens = [named_aggregate(t) for t in merged]
        self.by_token: dict[str, list[int]] = {}
        for k, token in enumerate(self.tokens):
            if token is not None:
                self.by_token.setdefault(token, []).append(k)
        self.composites = Counter(t.name for t in merged if t.kind in _COMPOSITE)
        #: FWD beside its definition: (the definition, the FWD).
        self.pairs: list[tuple[int, int]] = []
        self.tainted = bytearray(count)

    def run(self) -> bytearray:
        for token, ks in self.by_token.items():
            if not self._resolves_to_base(token, ks):
                self.seeds += ks
        self._spread(self.seeds)
        firsts = self._first_walks(self.pairs)
        pairs = list(range(len(self.pairs)))
        while pairs:
            left = [i for i in pairs if self._walked_apart(*firsts[i])]
            for i in pairs:
                if i not in left:
                    self._spread(list(self.pairs[i]))
            if len(left) == len(pairs):
                break
            pairs = left
        return self.tainted

    def _spread(self, queue: list[int]) -> None:
        """Taint ``queue``, every type that reaches one, and every type of
        a name that a tainted type has."""
        tainted, users, tokens, by_token = self.tainted, self.users, self.tokens, self.by_token
        while queue:
            k = queue.pop()
            if tainted[k]:
                continue
            tainted[k] = 1
            queue += users[k]
            token = tokens[k]
            if token is not None:
                queue += by_token[token]

    def _resolves_to_base(self, token: str, ks: list[int]) -> bool:
        """Whether dedup maps the module's types named ``token`` to the
        base's only one: each has its hash, or is a forward that dedup
        resolves to it (a FWD beside its definition is checked later)."""
        found = self.index.named(token)
        if found is None or found[1]:
            return False
        base_id = found[0]
        base_hash = self.index.hashes[base_id]
        same = [k for k in ks if self.hashes[k] == base_hash]
        forwards = [k for k in ks if self.hashes[k] != base_hash]
        if len(same) > 1 or len(forwards) > 1:
            return False
        if not forwards:
            return True
        t, b = self.merged[forwards[0]], self.index.head(base_id)
        if t.kind in _ENUMS:             # dedup's enum pass: a forward takes the full enum
            return not t.items and b.kind in _ENUMS and bool(self.index.base[base_id].items)
        if t.kind is not Kind.FWD or b.kind not in _COMPOSITE:
            return False
        # resolve_fwds: the one struct or union of the name, base and module alike.
        if self.composites[t.name] != len(same) or self.index.composite(t.name) != base_id:
            return False
        if same:
            self.pairs.append((same[0], forwards[0]))
        return True

    def _walked_apart(self, first: int, reaches_both: bool) -> bool:
        """Whether dedup resolves a FWD and its definition before any
        struct walk meets both: a walk that did would fail, and leave its
        type in the module.  The walks go in id order, so the first walk
        to meet either (``first``, from ``_first_walks``) must reach only
        one, and succeed (it is untainted and the base has it), which
        resolves it."""
        return (not reaches_both and not self.tainted[first]
                and self.index.by_hash(self.hashes[first]) != 0)

    def _first_walks(self, pairs: list[tuple[int, int]]) -> list[tuple[int, bool]]:
        """Per pair (definition, FWD): the first struct, union or typedef in
        id order that reaches either (itself included), and whether it
        reaches both.  One walk up the users for all the pairs: each type
        collects two bits per pair, one for each end it reaches, and passes
        on only the bits it had not seen (the ends share most of what
        reaches them: veth.ko's 16 reach about 1,400 types each)."""
        reach = [0] * len(self.merged)
        users = self.users
        pending: dict[int, int] = {}        # bits on their way to a type, merged
        for bit, end in enumerate(e for pair in pairs for e in pair):
            pending[end] = pending.get(end, 0) | 1 << bit
        queue = list(pending)               # breadth first: bits of many ends travel together
        for k in queue:
            new = pending.pop(k) & ~reach[k]
            if not new:
                continue
            reach[k] |= new
            for u in users[k]:
                if u in pending:
                    pending[u] |= new
                else:
                    pending[u] = new
                    queue.append(u)
        firsts: dict[int, tuple[int, bool]] = {}
        merged = self.merged
        for k, bits in enumerate(reach):
            if not bits or merged[k].kind not in _WALKED:
                continue
            for i in range(len(pairs)):
                ends = (bits >> 2 * i) & 3
                if ends and i not in firsts:
                    firsts[i] = (k, ends == 3)
            if len(firsts) == len(pairs):
                break
        # (a definition is a struct or union: walked itself)
        return [firsts[i] for i in range(len(pairs))]


def _without(btf: Btf, premapped: dict[int, int]) -> Btf:
    """``btf`` without the premapped types, whose references go to the base."""
    start = btf.start_id
    own = btf.types
    kept = [k for k in range(len(own)) if start + k not in premapped]
    new_ids = {start + k: i for i, k in enumerate(kept, start)}
    new_ids.update(premapped)

    def new_id(type_id: int) -> int:
        return type_id if type_id < start else new_ids[type_id]
    types = []
    for k in kept:
        t = own[k]
        t.remap(new_id)
        types.append(t)
    return Btf(types=types, base=btf.base, byteorder=btf.byteorder)
