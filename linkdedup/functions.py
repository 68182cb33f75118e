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

from objbtf.btf.kinds import Kind
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


def check_functions(btf: Btf, symbols, graves: Tombstones, consistent: bool) -> FunctionReport:
    """Drop the FUNCs pahole would not emit; say which and why.

    ``symbols``: the output's function symbols.  FUNCs that differ in
    nothing were merged by hash already, so a name with one FUNC left needs
    no prototype comparison.
    """
    by_name: dict[str, list[int]] = defaultdict(list)
    for type_id, t in btf.own():
        if t.kind is Kind.FUNC:
            by_name[t.name].append(type_id)
    addresses: dict[str, set[int]] = defaultdict(set)
    for s in symbols:
        if s.type == STT_FUNC and s.name in by_name:
            addresses[s.name].add(s.value)
    report = FunctionReport()
    drop: list[int] = []
    for name in sorted(by_name):
        ids = by_name[name]
        if len(addresses.get(name, ())) > 1:
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
    protos: dict[int, int] = defaultdict(int)      # references from kept types
    doomed_protos = {btf[f].type for f in funcs}
    for type_id, t in btf.own():
        if type_id in funcs:
            continue
        if t.kind is Kind.DECL_TAG and t.type in funcs:
            graves.bury(type_id)
            continue
        for ref in t.refs():
            if ref in doomed_protos:
                protos[ref] += 1
    for f in funcs:
        graves.bury(f)
    for p in doomed_protos:
        if not protos[p]:
            graves.bury(p)
