"""Pass 5, functions: pahole 1.31's choice of FUNCs, where the final symbol
table is known (btf_encoder.c of dwarves v1.31), with the newest pahole's
rules for GCC's clones (dwarves 109e5e4 and fb8328e).

Each object's encoder emitted a FUNC for every function definition named
after one of its function symbols' keys (``objbtf/btf/function_rules.py``: the
name before the first '.', so a ``foo.constprop.0`` clone gives ``foo``)
and recorded what DWARF says of it in its chunk.  Here, with
``consistent_func`` (pahole's --skip_encoding_btf_inconsistent_proto), a
name loses its FUNC when

- its key sits at several addresses in the output (static functions of the
  same name in different files, or ``foo`` beside a ``foo.isra.0``; the
  ``.cold`` and ``.part`` pieces do not count): a FUNC could not say which
  one it describes;
- a parameter of some definition arrives in another register than its
  place says (``unexpected_reg``, not counted when a parameter is a
  struct), or a packed struct is passed on the stack
  (``uncertain_parm_loc``);
- its prototypes differ between objects or within one, compared shallowly
  as pahole does (base types and aggregates by name, const and volatile
  ignored), since the same struct may not yet be one type before dedup;
- a concrete instance lists its parameters in another order than the
  function (``reordered_parm``);
- its code is a ``.constprop`` or ``.isra`` clone with a parameter
  optimized out: the clone need not take its parameters where the
  prototype says.

Other optimized-out parameters do not drop a function: callers still pass
every argument, the function just does not use it.  A name keeps exactly one FUNC:
when its objects' FUNCs differ in what the shallow comparison ignores
(parameter names, const), the one from an object where the symbol is not
weak, the strong definition the linker kept (dwarves master finds it by
``DW_AT_low_pc``), else the first in merge order.  Dropped FUNCs take their
DECL_TAGs and, when nothing else uses it, their FUNC_PROTO with them.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from objbtf.btf.kinds import KINDS, Kind
from objbtf.btf.types import Btf
from objbtf.btf.function_rules import (
    FACT_INCONSISTENT, FACT_OPTIMIZED_CLONE, FACT_REORDERED, FACT_UNCERTAIN_LOC,
    FACT_UNEXPECTED_REG, STT_FUNC, function_key, prototype,
)

from .tombstone import Tombstones

_LEAF = KINDS.leaf

__all__ = ['STT_FUNC', 'FunctionReport', 'ambiguous_names', 'check_functions', 'merged_facts']


class FunctionReport:
    """The names the pass dropped, by reason, and how many other FUNCs of
    kept names it removed (``duplicates``)."""
    REASONS = ('ambiguous', 'unexpected_reg', 'uncertain_loc', 'inconsistent', 'reordered',
               'optimized_clone')

    def __init__(self):
        self.ambiguous: list[str] = []
        self.unexpected_reg: list[str] = []
        self.uncertain_loc: list[str] = []
        self.inconsistent: list[str] = []
        self.reordered: list[str] = []
        self.optimized_clone: list[str] = []
        self.duplicates = 0

    @property
    def dropped(self) -> int:
        return sum(len(getattr(self, r)) for r in self.REASONS)

    def as_dict(self) -> dict:
        return {r: getattr(self, r) for r in self.REASONS} | {'duplicates': self.duplicates}

    @classmethod
    def from_dict(cls, d: dict) -> FunctionReport:
        report = cls()
        for r in cls.REASONS:
            setattr(report, r, list(d.get(r, ())))
        report.duplicates = d.get('duplicates', 0)
        return report


def ambiguous_names(symbols) -> set[str]:
    """Keys of the output's function symbols that sit at several addresses."""
    first: dict[str, int] = {}
    out: set[str] = set()
    for s in symbols:
        if s.type != STT_FUNC:
            continue
        key = function_key(s.name)
        if key is not None and first.setdefault(key, s.value) != s.value:
            out.add(key)
    return out


def merged_facts(chunks: Iterable) -> dict[str, int]:
    """Every object's facts of each function name, or-ed together."""
    out: dict[str, int] = defaultdict(int)
    for chunk in chunks:
        for name, flags in chunk.facts.items():
            out[name] |= flags
    return out


def check_functions(btf: Btf, ambiguous: set[str], graves: Tombstones, consistent: bool,
                    facts: dict[str, int] | None = None,
                    weak: Callable[[int], bool] = lambda func_id: False) -> FunctionReport:
    """Drop the FUNCs pahole would not emit; say which and why.

    ``ambiguous``: keys of function symbols at several addresses;
    ``facts``: ``merged_facts`` of the objects; ``weak(func id)``: whether
    that FUNC came from an object whose symbol of its name is weak.  FUNCs
    that differ in nothing were merged by hash already.
    """
    facts = facts or {}
    by_name: dict[str, list[int]] = defaultdict(list)
    func = Kind.FUNC
    for type_id, t in btf.own():
        if t.kind is func:
            by_name[t.name].append(type_id)
    report = FunctionReport()
    drop: list[int] = []
    for name in sorted(by_name):
        ids = by_name[name]
        reason = _reason(btf, name, ids, ambiguous, facts.get(name, 0)) if consistent else None
        if reason is not None:
            getattr(report, reason).append(name)
            drop.extend(ids)
        elif len(ids) > 1:
            keep = next((i for i in ids if not weak(i)), ids[0])
            drop.extend(i for i in ids if i != keep)
            report.duplicates += len(ids) - 1
    _drop(btf, set(drop), graves)
    return report


def _reason(btf: Btf, name: str, ids: list[int], ambiguous: set[str], flags: int) -> str | None:
    """Why pahole leaves ``name`` out, or None."""
    if name in ambiguous:
        return 'ambiguous'
    if flags & FACT_UNEXPECTED_REG:
        return 'unexpected_reg'
    if flags & FACT_UNCERTAIN_LOC:
        return 'uncertain_loc'
    if flags & FACT_INCONSISTENT or (
            len(ids) > 1 and len({prototype(btf, btf[btf[i].type]) for i in ids}) > 1):
        return 'inconsistent'
    if flags & FACT_REORDERED:
        return 'reordered'
    if flags & FACT_OPTIMIZED_CLONE:
        return 'optimized_clone'
    return None


def _drop(btf: Btf, funcs: set[int], graves: Tombstones) -> None:
    if not funcs:
        return
    doomed_protos = {btf[f].type for f in funcs}
    used: list[int] = []          # what the kept types refer to
    tag = Kind.DECL_TAG
    for type_id, t in btf.own():
        if type_id in funcs:
            continue
        kind = t.kind
        if kind is tag and t.type in funcs:
            graves.bury(type_id)
        elif kind not in _LEAF:
            used += t.refs()
    for f in funcs:
        graves.bury(f)
    for p in doomed_protos.difference(used):
        graves.bury(p)
