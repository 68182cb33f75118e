"""The distill pass: with ``distilled_base``, a module's split BTF on a
distilled base of its own (``.BTF.base``) instead of on its build's vmlinux.

Why: an out-of-tree module is built against one kernel tree and loaded
into others of the same version, whose vmlinux BTF numbers its types
otherwise: split BTF on the build's own vmlinux would name the wrong
types there, and the kernel refuses it.  Linux 6.12's ``Makefile.btf``
asks pahole for ``--btf_features=distilled_base`` for such modules
(``KBUILD_EXTMOD``); pahole calls libbpf's ``btf__distill_base()`` after
dedup; the module loader relocates the result onto the running vmlinux
(``btf_relocate()``; its rules in ``objbtf/btf/distilled.py``).  This
pass makes the same two blobs, by the same rules:

1. The base types the module's types reach, following references from
   every type of the split BTF and on through the base types they name,
   but not into a named struct or union: its members stay in vmlinux.
   The module may only reach base types of the kinds a type can name (no
   FUNC, VAR, DATASEC or DECL_TAG of vmlinux).
2. The distilled base: those of them that the running kernel can find
   again by name, in base id order (``distilled.distilled_entry``): named
   INT, FLOAT and FWD as they are, named STRUCT and UNION empty with their
   size, named ENUM and ENUM64 as an empty ENUM of their size.
3. The split BTF: the module's own types, in their order, then copies of
   the other reached base types (modifiers, pointers, typedefs, arrays,
   function prototypes, anonymous structs, unions and enums), in base id
   order; every reference renumbered onto the distilled base and the new
   split ids.

The result is libbpf's type for type, id for id, string for string: the
tests compare it with the vendored libbpf's own ``btf__distill_base()``
(tests/newest_libbpf.py), with the newest pahole's on real modules, and
boot a kernel of another build that loads it.  After dedup, since dedup
decides which base types the module's types are; before encode, which
writes the split BTF on the distilled base's strings.
"""
from __future__ import annotations

from objbtf.btf.distilled import distilled_entry
from objbtf.btf.kinds import (
    ARRAY, CONST, ENUM, ENUM64, FLOAT, FUNC_PROTO, FWD, INT, PTR, RESTRICT, STRUCT, TYPE_TAG,
    TYPEDEF, UNION, VOLATILE,
)
from objbtf.btf.types import Btf, BtfType
from objbtf.errors import ObjbtfError

#: The base kinds split BTF may refer to (libbpf refuses the others).
REACHABLE = frozenset({INT, FLOAT, FWD, ARRAY, STRUCT, UNION, TYPEDEF, ENUM, ENUM64, PTR,
                       CONST, RESTRICT, VOLATILE, FUNC_PROTO, TYPE_TAG})


class DistillError(ObjbtfError):
    """The split BTF refers to a base type a distilled base cannot stand for."""


def reached_base_types(split: Btf) -> list[int]:
    """The ids of the base types ``split``'s types reach (step 1), in id order."""
    base = split.base
    assert base is not None
    first = split.start_id
    seen: set[int] = set()
    pending: list[int] = []

    def reach(refs: tuple[int, ...], whose: str) -> None:
        for ref in refs:
            if not ref or ref >= first or ref in seen:
                continue
            t = base[ref]
            if t.kind not in REACHABLE:
                raise DistillError(f'{whose} refers to base type [{ref}], a {t.kind.name} '
                                   f'{t.name!r}, which a distilled base cannot stand for')
            seen.add(ref)
            if not (t.kind in (STRUCT, UNION) and t.name):
                pending.append(ref)
    for type_id, t in split.own():
        reach(t.refs(), f'type [{type_id}] ({t.kind.name} {t.name!r})')
        while pending:
            ref = pending.pop()
            reach(base[ref].refs(), f'base type [{ref}]')
    return sorted(seen)


def distill(split: Btf) -> tuple[Btf, Btf]:
    """``split`` (split BTF on vmlinux's) as (distilled base, split BTF on
    it); the second's base is the first."""
    base = split.base
    assert base is not None
    reached = reached_base_types(split)
    kept: list[BtfType] = []
    moved: list[int] = []
    new_ids: dict[int, int] = {}
    for type_id in reached:
        entry = distilled_entry(base[type_id])
        if entry is None:
            moved.append(type_id)
        else:
            kept.append(entry)
            new_ids[type_id] = len(kept)
    dist = Btf(None, byteorder=split.byteorder)
    dist.types.extend(kept)
    first, new_first = split.start_id, dist.next_id
    own = len(split)
    for k, type_id in enumerate(moved):
        new_ids[type_id] = new_first + own + k

    def new_id(type_id: int) -> int:
        if type_id >= first:
            return type_id - first + new_first
        return new_ids[type_id] if type_id else 0
    types = [t.copy() for _, t in split.own()] + [base[i].copy() for i in moved]
    for t in types:
        t.remap(new_id)
    return dist, Btf(types, base=dist, byteorder=split.byteorder)
