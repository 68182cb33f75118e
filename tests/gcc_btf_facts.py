"""What GCC 12's BTF lacks or adds against the DWARF path, derived from the
DWARF of the same objects, and a check that two final (or per-object) BTF
tables differ by no more than that.

The differences (docs/dwarfless.md):
- enumerators outside the 32-bit signed range are dropped
  (``btf_shapes.without_wide_enumerators``); libbpf's dedup then merges an
  enum left without values with a full enum of its name, anonymous ones too;
- types declared inside a function are missing unless a file-scope type
  refers to them: at most as many per kind as the DWARF declares in
  functions, and a named one only if its name is declared in functions only
  (a struct or union declared without its members is a FWD there: 6.12's
  ``BTF_TYPE_EMIT(struct bpf_iter)`` in a function of kernel/bpf/verifier.c);
- base types that no DIE refers to (DWARF 5 location expressions' types)
  are missing;
- bit-fields after an unnamed bit-field (``u32 : 31, invalid : 1``) may
  have other bit offsets (GCC 12 gives ``leaf_0x2_reg``'s ``invalid`` bit
  0, not 31): ``after_a_gap`` finds them in the DWARF path's BTF;
- GCC's BTF has no parameter locations and one prototype per function, so
  the functions the DWARF path's link drops for facts only DWARF has
  (``unexpected_reg``, ``reordered``, ``optimized_clone``, and definitions
  of one name in one object whose prototypes differ, as a clone's DIE
  gives) keep their FUNC: ``dwarf_only_drops`` reads those names from the
  DWARF path's chunks (``uncertain_parm_loc`` the types decide: not one).

No other FUNC may differ: objbtf gives a FUNC only to the functions GCC
compiled (not to one a unit declares in C and defines in top-level
assembly, which DWARF only declares), and an assembly object without DWARF
the FUNCs gas's DWARF gives it (docs/dwarfless.md).  What both sides have
is compared by content (``differently_declared``): every named type, FUNC
prototype and VAR declared alike.
"""
from __future__ import annotations

from collections import Counter

from btf_shapes import kind_counts, named_types, without_wide_enumerators
from libbpf_oracle import libbpf_dedup
from objbtf.btf import Btf, Kind, parse_btf
from objbtf.btf.function_rules import DROPPING_FACTS, FACT_UNCERTAIN_LOC
from objbtf.btf.writer import encode_btf
from objbtf.inspect.diff import diff_btf
from objbtf.elf.reader import ElfFile

#: DWARF type tags and the BTF kind each becomes.
TYPE_KINDS = {0x13: 'STRUCT', 0x17: 'UNION', 0x04: 'ENUM', 0x16: 'TYPEDEF', 0x0f: 'PTR',
              0x26: 'CONST', 0x35: 'VOLATILE', 0x37: 'RESTRICT', 0x01: 'ARRAY',
              0x15: 'FUNC_PROTO', 0x24: 'INT'}
NAMED = ('STRUCT', 'UNION', 'ENUM', 'TYPEDEF', 'FWD')
#: Tags of the aggregates that a declaration (DW_AT_declaration) makes a FWD.
FORWARDED = (0x13, 0x17)
FACTS = ('local kinds', 'local names', 'top names', 'unused base', 'used base')


def dwarf_facts(path: str) -> dict[str, Counter]:
    """One object's facts: per BTF kind, the type DIEs declared in a function
    ('local kinds'); the named aggregates, forward declarations and
    typedefs declared in a function or at file scope ('local names', 'top
    names'); base types no DIE refers to by DW_AT_type, or one does ('unused
    base', 'used base')."""
    from objbtf.dwarf import constants as C
    from objbtf.dwarf.reader import read_units
    from objbtf.encode.encoder import debug_sections, has_dwarf
    facts = {k: Counter() for k in FACTS}
    with ElfFile.open(path) as elf:
        if not has_dwarf(elf):
            return facts
        units = read_units(debug_sections(elf))
    for cu in units:
        dies = cu.all_dies()
        referenced = {d.attrs.get(C.AT_type) for d in dies}
        for d in dies:
            name = d.attrs.get(C.AT_name, '')
            kind = TYPE_KINDS.get(d.tag)
            if d.tag in FORWARDED and d.attrs.get(C.AT_declaration):
                kind = 'FWD'
            if kind is not None and not d.top:
                facts['local kinds'][kind] += 1
            if kind in NAMED and name:
                facts['top names' if d.top else 'local names'][(kind, name)] += 1
            if d.tag == C.TAG_base_type:
                facts['used base' if d.offset in referenced else 'unused base'][name] += 1
    return facts


def summed(all_facts) -> dict[str, Counter]:
    total = {k: Counter() for k in FACTS}
    for facts in all_facts:
        for k, v in facts.items():
            total[k] += v
    return total


#: The facts that make the link drop a function and that only DWARF gives:
#: not FACT_UNCERTAIN_LOC, which the types decide (compiler_btf/loader.py).
DWARF_ONLY_FACTS = DROPPING_FACTS & ~FACT_UNCERTAIN_LOC


def dwarf_only_drops(linked) -> set[str]:
    """The function names the link drops for facts that only the DWARF of
    the objects linked into ``linked`` gives (their chunks' facts)."""
    from linkdedup.functions import merged_facts
    from objbtf.btf.chunk import SECTION, split_chunks
    with ElfFile.open(str(linked)) as elf:
        chunks = split_chunks(elf.section_data(elf.section_by_name(SECTION)), elf.byteorder)
    return {name for name, flags in merged_facts(chunks).items() if flags & DWARF_ONLY_FACTS}


def expected_from_dwarf(dwarf: Btf) -> Btf:
    """The DWARF path's BTF without what GCC's BTF cannot hold of enums,
    deduplicated again by libbpf."""
    return parse_btf(libbpf_dedup(encode_btf(without_wide_enumerators(dwarf))))


def after_a_gap(t) -> bool:
    """Whether a struct or union of the DWARF path's BTF has a bit-field
    that starts past bit 0 as its first member, or past the end of the
    bit-field before it: where the source has an unnamed bit-field, which
    neither BTF keeps, and GCC 12's BTF gives the bit-fields after it other
    offsets (``struct leaf_0x2_reg { u32 : 31, invalid : 1; }``: 0 for 31)."""
    before = None
    for m in t.items:
        if m.bitfield_size:
            start = 0 if before is None else before.bit_offset + before.bitfield_size
            if m.bit_offset > start and (before is None or before.bitfield_size):
                return True
        before = m
    return False


def differently_declared(expected: Btf, ours: Btf) -> list[str]:
    """What both have but declare otherwise, by content (``objbtf diff``'s
    comparison): named types (members with their types, offsets and bit
    fields; enumerators), FUNC prototypes with their parameter names and
    linkage, VARs with their linkage and DATASEC; and any VAR one side
    lacks.  GCC's BTF has each of these as the DWARF does, but for the bit
    offsets of bit-fields after an unnamed one (``after_a_gap``)."""
    sections = diff_btf(expected, ours)
    gaps = {(t.kind.name, t.name) for _, t in expected.own()
            if t.kind in (Kind.STRUCT, Kind.UNION) and t.name and after_a_gap(t)}
    types = [e for e in sections['types'].changed if (e['kind'], e['name']) not in gaps]
    out = [f'{len(entries)} {what} declared otherwise: '
           + ', '.join(str(e.get('name')) for e in entries[:10])
           for what, entries in (('named types', types),
                                 ('FUNCs', sections['functions'].changed),
                                 ('VARs', sections['variables'].changed))
           if entries]
    variables = sections['variables']
    if variables.added or variables.removed:
        out.append(f'VARs only from GCC BTF: {[e["name"] for e in variables.added][:10]}; '
                   f'only from DWARF: {[e["name"] for e in variables.removed][:10]}')
    return out


def unexplained(ours: Btf, dwarf: Btf, facts: dict[str, Counter],
                dwarf_drops: set[str] = frozenset()) -> list[str]:
    """How ``ours`` (from GCC's BTF) differs from ``dwarf`` (the DWARF path's,
    same objects) beyond the derived differences; ``dwarf_drops``:
    ``dwarf_only_drops`` of the DWARF path's link, the only FUNCs ``ours``
    may have more (and none fewer)."""
    expected = expected_from_dwarf(dwarf)
    problems = []
    extra_named = named_types(ours) - named_types(expected)
    if extra_named:
        problems.append(f'named types only from GCC BTF: {sorted(extra_named)[:10]}')
    local_only = {n for _, n in facts['local names']} - {n for _, n in facts['top names']}
    unused_base = set(facts['unused base']) - set(facts['used base'])
    for kind, name, _, _ in sorted(named_types(expected) - named_types(ours)):
        if not (kind in NAMED and name in local_only or kind == 'INT' and name in unused_base):
            problems.append(f'{kind} {name!r} missing, neither declared in functions only '
                            'nor a base type of location expressions only')
    funcs = {t.name for _, t in ours.own() if t.kind is Kind.FUNC}
    theirs = {t.name for _, t in expected.own() if t.kind is Kind.FUNC}
    extra, missing = funcs - theirs, theirs - funcs
    if missing:
        problems.append(f'{len(missing)} FUNCs missing: {sorted(missing)[:10]}')
    if extra - dwarf_drops:
        problems.append(f'{len(extra - dwarf_drops)} FUNCs the DWARF path drops for no fact '
                        f'of its own: {sorted(extra - dwarf_drops)[:10]}')
    problems += differently_declared(expected, ours)
    mine, other = kind_counts(ours), kind_counts(expected)
    local = facts['local kinds'] + Counter(INT=sum(facts['unused base'].values()))
    local['ENUM64'] = local['ENUM']
    change = len(extra) - len(missing)
    bounds = {'FUNC': (change, change),
              'FUNC_PROTO': (-local['FUNC_PROTO'] - len(missing), len(extra))}
    for kind in sorted(set(mine) | set(other)):
        low, high = bounds.get(kind, (-local[kind], 0))
        if not low <= mine[kind] - other[kind] <= high:
            problems.append(f'{kind}: {mine[kind]} from GCC BTF, {other[kind]} from DWARF '
                            f'(allowed difference {low}..{high})')
    return problems
