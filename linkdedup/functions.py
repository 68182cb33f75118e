"""Pass 4, functions: the cross-object rules pahole applies to FUNCs.

- consistent_func: a name whose prototypes disagree between objects is
  dropped everywhere; prototypes are compared shallowly, as pahole does
  (base types and aggregates by name, const and volatile ignored), since
  the same struct may not yet be one type before dedup.
- one name at several addresses: when the output has several function
  symbols of that name (static functions of the same name in different
  files), a FUNC cannot say which it describes, and is dropped.
Dropped FUNCs take their DECL_TAGs and, when nothing else uses it, their
FUNC_PROTO with them.
"""
from __future__ import annotations

from collections import defaultdict

from objbtf.btf.kinds import LEAF_KINDS, Kind
from objbtf.btf.types import Btf

from .tombstone import Tombstones

STT_FUNC = 2
_SKIPPED = (Kind.CONST, Kind.VOLATILE, Kind.RESTRICT, Kind.TYPE_TAG)


def shallow(btf: Btf, type_id: int, depth: int = 0) -> str:
    """A type as pahole compares it across objects."""
    if type_id == 0:
        return 'void'
    t = btf[type_id]
    while t.kind in _SKIPPED and depth < 32:
        if t.type == 0:
            return 'void'
        t = btf[t.type]
        depth += 1
    k = t.kind
    if k is Kind.PTR:
        return '*' + (shallow(btf, t.type, depth + 1) if depth < 32 else '?')
    if k is Kind.ARRAY:
        return f'{shallow(btf, t.type, depth + 1)}[{t.nelems}]'
    if k is Kind.FUNC_PROTO:
        return 'fn'
    if k in (Kind.STRUCT, Kind.FWD):
        return ('union ' if (k is Kind.FWD and t.kflag) else 'struct ') + t.name
    if k is Kind.UNION:
        return 'union ' + t.name
    if k in (Kind.ENUM, Kind.ENUM64):
        return 'enum ' + t.name
    return t.name


def prototype(btf: Btf, func_id: int) -> tuple[str, ...]:
    proto = btf[btf[func_id].type]
    return (shallow(btf, proto.type),) + tuple(shallow(btf, p.type) for p in proto.items)


class FunctionReport:
    def __init__(self):
        self.inconsistent: list[str] = []
        self.ambiguous: list[str] = []

    @property
    def dropped(self) -> int:
        return len(self.inconsistent) + len(self.ambiguous)


def ambiguous_names(symbols) -> set[str]:
    """Names of the output's function symbols that sit at several addresses."""
    first: dict[str, int] = {}
    out: set[str] = set()
    for s in symbols:
        if s.type == STT_FUNC and first.setdefault(s.name, s.value) != s.value:
            out.add(s.name)
    return out


def check_functions(btf: Btf, ambiguous: set[str], graves: Tombstones,
                    consistent: bool) -> FunctionReport:
    """Drop the FUNCs pahole would not emit; say which and why.

    ``ambiguous``: names of function symbols at several addresses.  FUNCs
    that differ in nothing were merged by hash already, so a name with one
    FUNC left needs no prototype comparison.
    """
    by_name: dict[str, list[int]] = defaultdict(list)
    func = Kind.FUNC
    for type_id, t in btf.own():
        if t.kind is func:
            by_name[t.name].append(type_id)
    report = FunctionReport()
    drop: list[int] = []
    for name in sorted(by_name):
        ids = by_name[name]
        if name in ambiguous:
            report.ambiguous.append(name)
        elif consistent and len(ids) > 1 and len({prototype(btf, i) for i in ids}) > 1:
            report.inconsistent.append(name)
        else:
            continue
        drop.extend(ids)
    _drop(btf, set(drop), graves)
    return report


def _drop(btf: Btf, funcs: set[int], graves: Tombstones) -> None:
    if not funcs:
        return
    doomed_protos = {btf[f].type for f in funcs}
    kept: set[int] = set()        # doomed prototypes that kept types still use
    tag = Kind.DECL_TAG
    for type_id, t in btf.own():
        if type_id in funcs:
            continue
        if t.kind is tag and t.type in funcs:
            graves.bury(type_id)
            continue
        if t.kind in LEAF_KINDS:
            continue
        kept.update(r for r in t.refs() if r in doomed_protos)
    for f in funcs:
        graves.bury(f)
    for p in doomed_protos - kept:
        graves.bury(p)
