"""Split BTF on a distilled base (``.BTF.base``), and its relocation onto a full base.

An out-of-tree module is built against one kernel and may be loaded into
another build of the same version, whose vmlinux BTF numbers its types
otherwise.  So its split BTF does not refer to vmlinux's ids: it comes with
a distilled base, a small BTF of only the base types it names, each kept
just enough to be found again by name (libbpf's ``btf__distill_base()``,
pahole's ``distilled_base``; the link writes it, ``linkdedup/distill.py``).
The module loader of Linux 6.12 and later (``btf_relocate()``, shared with
libbpf as ``btf__relocate()``) maps each distilled type onto the running
vmlinux's type of its name and renumbers the split BTF onto it.

This module holds what both sides agree on (which kinds the distilled base
holds, and how) and the relocation, by the kernel's rules, so that objbtf's
readers (``dump``, ``check``, ``diff``) read such a module on a full base:

- the distilled base holds only named INT, FLOAT, FWD, STRUCT, UNION and
  ENUM types (an ENUM64 is distilled to an ENUM of its size), else the
  kernel refuses it;
- each is mapped to the full base's type of its name: INT and FLOAT of the
  same kind, size (and INT's encoding), ENUM to an ENUM or ENUM64 of its
  size, FWD to a FWD of its kind_flag or to a struct or union, STRUCT and
  UNION to the type of its name, by size when the base has more than one
  struct or union of that name, or when the split BTF embeds it in a
  struct or union of its own (through typedefs, modifiers and arrays, not
  pointers): an embedded type's size must be the same;
- every distilled type must find exactly one such type.
"""
from __future__ import annotations

from .errors import BtfError
from .kinds import (
    ARRAY, CONST, ENUM, ENUM64, FLOAT, FWD, INT, RESTRICT, STRUCT, TYPE_TAG, TYPEDEF, UNION,
    VOLATILE,
)
from .types import Btf, BtfType

#: The section of a module's ELF file that holds its distilled base.
SECTION = '.BTF.base'

#: The kinds a distilled base may hold, all of them named.
DISTILLED_KINDS = frozenset({INT, FLOAT, FWD, STRUCT, UNION, ENUM})
#: The kinds of the split BTF's base that go through an embedding: a
#: struct or union reached from a member through these is inside it.
_THROUGH = frozenset({CONST, VOLATILE, RESTRICT, TYPEDEF, TYPE_TAG, ARRAY})
_COMPOSITE = (STRUCT, UNION)


class RelocationError(BtfError):
    """The split BTF cannot be relocated onto the base (as the kernel refuses
    the module's BTF)."""


def check_distilled_base(dist: Btf) -> None:
    """RelocationError unless every type of ``dist`` is a named type of a
    kind a distilled base holds (``btf_relocate_validate_distilled_base``)."""
    for type_id, t in dist.own():
        if t.kind not in DISTILLED_KINDS:
            raise RelocationError(f'type [{type_id}] of the distilled base is a {t.kind.name}, '
                                  'which a distilled base does not hold')
        if not t.name:
            raise RelocationError(f'type [{type_id}] of the distilled base ({t.kind.name}) '
                                  'is anonymous')


def embedded_ids(split: Btf) -> set[int]:
    """The distilled base's structs and unions that a struct or union of
    ``split`` holds by value: their sizes must match on relocation."""
    first = split.start_id
    out: set[int] = set()
    for _, t in split.own():
        if t.kind not in _COMPOSITE:
            continue
        for member in t.items:
            next_id = member[1]
            while next_id:
                m = split[next_id]
                if m.kind in _THROUGH:
                    next_id = m.type
                    continue
                if m.kind in _COMPOSITE and next_id < first:
                    out.add(next_id)
                break
    return out


def _compatible(dist_t: BtfType, base_t: BtfType, embedded: bool) -> bool:
    """Whether ``base_t``, of the same name, may stand for ``dist_t``."""
    dk, bk = dist_t.kind, base_t.kind
    if dk is FWD:
        if bk is FWD:
            return dist_t.kflag == base_t.kflag
        # The kernel compares the base struct's or union's own kind_flag
        # here (btf_relocate.c), and so does this.
        if bk is STRUCT:
            return not base_t.kflag
        if bk is UNION:
            return bool(base_t.kflag)
        return False
    if dk is INT:
        return bk is INT and dist_t.encoding == base_t.encoding
    if dk is FLOAT:
        return bk is FLOAT
    if dk is ENUM:
        return bk is ENUM or bk is ENUM64
    if dk in _COMPOSITE:
        return not embedded or base_t.size == dist_t.size
    return False


def base_map(split: Btf, base: Btf) -> dict[int, int]:
    """Each type id of ``split``'s distilled base -> the id of the type of
    ``base`` it stands for, by the kernel's rules (see the module's
    docstring); RelocationError naming the first type that finds none, or
    more than one."""
    dist = split.base
    if dist is None:
        raise RelocationError('the BTF is not split')
    check_distilled_base(dist)
    embedded = embedded_ids(split)
    by_name: dict[str, list[int]] = {}
    for type_id, t in dist.own():
        by_name.setdefault(t.name, []).append(type_id)
    composites: dict[str, int] = {}
    for _, t in base.own():
        if t.kind in _COMPOSITE and t.name:
            composites[t.name] = composites.get(t.name, 0) + 1
    mapped: dict[int, int] = {}
    for base_id, base_t in base.own():
        if not base_t.name or base_t.name not in by_name:
            continue
        bk = base_t.kind
        if bk in (INT, FLOAT, ENUM, ENUM64):
            by_size = True
        elif bk is FWD:
            by_size = False
        elif bk in _COMPOSITE:
            by_size = composites[base_t.name] > 1
        else:
            continue
        for dist_id in by_name[base_t.name]:
            dist_t = dist[dist_id]
            if by_size and dist_t.size != base_t.size:
                continue
            # The kernel asks an embedded type for its size only until it
            # is mapped: a later candidate of its name is then one too many.
            if not _compatible(dist_t, base_t, dist_id in embedded and dist_id not in mapped):
                continue
            if dist_id in mapped:
                raise RelocationError(
                    f"distilled base type '{dist_t.name}' [{dist_id}], size {base_t.size}, "
                    f'has more than one candidate of that size in the base '
                    f'([{mapped[dist_id]}] and [{base_id}])')
            mapped[dist_id] = base_id
    for dist_id, dist_t in dist.own():
        if dist_id not in mapped:
            raise RelocationError(f"distilled base type '{dist_t.name}' [{dist_id}] "
                                  f'({dist_t.kind.name}, {dist_t.size} bytes) matches no type '
                                  'of the base')
    return mapped


def relocate(split: Btf, base: Btf) -> Btf:
    """``split`` (split BTF on a distilled base) as split BTF on ``base``:
    its references to the distilled base's types moved to the types of
    ``base`` they stand for (``base_map``), its own ids shifted past
    ``base``'s.  The result's own types are copies, in ``split``'s order."""
    dist = split.base
    assert dist is not None
    mapped = base_map(split, base)
    shift = base.next_id - dist.next_id
    first = split.start_id

    def new_id(type_id: int) -> int:
        if type_id >= first:
            return type_id + shift
        return mapped[type_id] if type_id else 0
    types = []
    for _, t in split.own():
        c = t.copy()
        c.remap(new_id)
        types.append(c)
    return Btf(types, base=base, byteorder=split.byteorder)


def distilled_entry(t: BtfType) -> BtfType | None:
    """What a base type keeps of itself in a distilled base: a named INT,
    FLOAT or FWD as it is, a named STRUCT or UNION empty with its size and
    kind, a named ENUM or ENUM64 as an empty ENUM of its size; None for a
    type that goes into the split BTF instead (``linkdedup/distill.py``)."""
    k = t.kind
    if k in (INT, FLOAT, FWD):
        return t.copy()
    if not t.name:
        return None
    if k in _COMPOSITE:
        return BtfType(k, t.name, size=t.size)
    if k is ENUM or k is ENUM64:
        return BtfType(ENUM, t.name, size=t.size)
    return None

