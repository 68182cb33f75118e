"""``objbtf diff A B``: what differs between two BTFs, by name.

Three sections, in this order: functions (FUNCs, by name, compared by
their C prototype with parameter names), named types (by kind and name,
compared by their declaration: size, members with their types, offsets and
bitfield sizes, enumerators, a typedef's target) and variables (VARs, by
name, compared by declaration, linkage and DATASEC).  Type ids never
matter: two BTFs that declare the same things in another order are equal.
Anonymous types count through the named ones that use them (an anonymous
struct member is spelled out inside its parent).  A name that occurs several
times (static functions or variables of the same name in different files,
two ``struct x`` of different layouts) is compared as the sorted list of
its declarations.

This is the before/after comparison pahole's maintainers ask for when the
choice of functions changes, and what the tests use to compare objbtf's
FUNCs with pahole's.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Iterator

from ..btf.kinds import FUNC_STATIC, Kind
from ..btf.types import Btf, BtfType
from ..errors import ObjbtfError

#: Deeper than this, a declaration is cut with "..." (BTF resolves at most 32).
_MAX_DEPTH = 40
_QUALIFIERS = {Kind.CONST: 'const', Kind.VOLATILE: 'volatile', Kind.RESTRICT: 'restrict'}
_TAGGED = {Kind.STRUCT: 'struct', Kind.UNION: 'union', Kind.ENUM: 'enum', Kind.ENUM64: 'enum'}
#: Named kinds of the types section; FUNC, VAR and DATASEC have their own,
#: and a TYPE_TAG's name is a modifier's value, shown where it is used.
TYPE_KINDS = (Kind.INT, Kind.FLOAT, Kind.STRUCT, Kind.UNION, Kind.ENUM, Kind.ENUM64,
              Kind.FWD, Kind.TYPEDEF, Kind.DECL_TAG)
_LINKAGE = {0: 'static', 1: 'global', 2: 'extern'}
_INT_ENCODING = {1: 'signed', 2: 'char', 4: 'bool'}
SECTIONS = ('functions', 'types', 'variables')


class DiffError(ObjbtfError):
    """An input that cannot be read as BTF; the message names it."""


# ---- declarations --------------------------------------------------------------


def declarator(btf: Btf, type_id: int, inner: str = '', depth: int = 0) -> str:
    """C declaration of ``inner`` (a name, or '' for an abstract type) as
    ``type_id``: ``declarator(btf, ptr_to_int, 'p') == 'int *p'``."""
    if depth > _MAX_DEPTH:
        return _join('...', inner)
    if type_id == 0:
        return _join('void', inner)
    t = btf[type_id]
    k = t.kind
    if k is Kind.PTR:
        target = btf[t.type] if t.type else None
        wrap = target is not None and target.kind in (Kind.ARRAY, Kind.FUNC_PROTO)
        return declarator(btf, t.type, f'(*{inner})' if wrap else '*' + inner, depth + 1)
    if k in _QUALIFIERS:
        q = _QUALIFIERS[k]
        if t.type and btf[t.type].kind is Kind.PTR:       # int *const p
            return declarator(btf, t.type, _join(q, inner), depth + 1)
        return q + ' ' + declarator(btf, t.type, inner, depth + 1)
    if k is Kind.TYPE_TAG:
        return f'__tag({t.name}) ' + declarator(btf, t.type, inner, depth + 1)
    if k is Kind.ARRAY:
        return declarator(btf, t.type, f'{inner}[{t.nelems}]', depth + 1)
    if k is Kind.FUNC_PROTO:
        return declarator(btf, t.type, f'{inner}({_params(btf, t, depth)})', depth + 1)
    if k is Kind.FUNC:
        return declarator(btf, t.type, inner or t.name, depth + 1)
    return _join(_type_name(btf, t, depth), inner)


def _params(btf: Btf, proto: BtfType, depth: int) -> str:
    if not proto.items:
        return 'void'
    return ', '.join('...' if p.type == 0 and not p.name
                     else declarator(btf, p.type, p.name, depth + 1) for p in proto.items)


def _type_name(btf: Btf, t: BtfType, depth: int) -> str:
    k = t.kind
    if k in _TAGGED:
        if t.name:
            return f'{_TAGGED[k]} {t.name}'
        return f'{_TAGGED[k]} {{{_body(btf, t, depth + 1)}}}'
    if k is Kind.FWD:
        return ('union ' if t.fwd_union else 'struct ') + t.name
    return t.name or f'<{k.name}>'


def _join(left: str, right: str) -> str:
    if not right:
        return left
    if right.startswith('[') or (right.startswith('(') and not right.startswith('(*')):
        return left + right            # an abstract array or function type
    return f'{left} {right}'


def _body(btf: Btf, t: BtfType, depth: int = 0) -> str:
    """What is inside a struct's, union's or enum's braces."""
    if t.kind in (Kind.ENUM, Kind.ENUM64):
        return ', '.join(f'{e.name} = {e.value}' for e in t.items)
    out = []
    for m in t.items:
        field = declarator(btf, m.type, m.name, depth + 1)
        bits = f':{m.bitfield_size}' if t.bitfields and m.bitfield_size else ''
        out.append(f'{field}{bits} @{m.bit_offset}; ')
    return ''.join(out).rstrip()


def describe_type(btf: Btf, t: BtfType) -> str:
    """The declaration a named type of the types section is compared by."""
    k = t.kind
    if k in (Kind.STRUCT, Kind.UNION):
        return f'{_TAGGED[k]} {t.name} {{{_body(btf, t)}}} size {t.size}'
    if k in (Kind.ENUM, Kind.ENUM64):
        sign = 'signed' if t.signed else 'unsigned'
        return f'enum {t.name} {{{_body(btf, t)}}} size {t.size} {sign}'
    if k is Kind.TYPEDEF:
        return 'typedef ' + declarator(btf, t.type, t.name)
    if k is Kind.INT:
        enc = _INT_ENCODING.get(t.encoding, 'none')
        return f'{t.name}: size {t.size}, {t.bits} bits at {t.bit_offset}, {enc}'
    if k is Kind.FLOAT:
        return f'{t.name}: size {t.size}'
    if k is Kind.FWD:
        return ('union ' if t.fwd_union else 'struct ') + t.name + ';'
    if k is Kind.DECL_TAG:
        return f'decl_tag "{t.name}" on {_tag_target(btf, t)}'
    raise ValueError(k)


def _tag_target(btf: Btf, t: BtfType) -> str:
    target = btf[t.type]
    where = f'{target.kind.name} {target.name}'
    if t.component_idx < 0:
        return where
    items = target.items if target.kind is not Kind.FUNC else btf[target.type].items
    idx = t.component_idx
    part = items[idx].name if idx < len(items) else f'#{idx}'
    return f'{where} component {part}'


def function_decl(btf: Btf, t: BtfType) -> str:
    """A FUNC as its C prototype, with parameter names, and its linkage
    when it is not static."""
    decl = declarator(btf, t.type, t.name)
    return decl if t.linkage == FUNC_STATIC else f'{_LINKAGE.get(t.linkage, t.linkage)} {decl}'


def variable_decls(btf: Btf) -> dict[str, list[str]]:
    """Each VAR's name -> its declarations, linkage and DATASEC."""
    section: dict[int, str] = {}
    for _, t in btf.own():
        if t.kind is Kind.DATASEC:
            for v in t.items:
                section[v.type] = t.name
    out: dict[str, list[str]] = defaultdict(list)
    for type_id, t in btf.own():
        if t.kind is Kind.VAR:
            where = section.get(type_id, 'no DATASEC')
            linkage = _LINKAGE.get(t.linkage, str(t.linkage))
            out[t.name].append(f'{linkage} {declarator(btf, t.type, t.name)} in {where}')
    return out


def function_decls(btf: Btf) -> dict[str, list[str]]:
    """Each FUNC's name -> its prototypes."""
    out: dict[str, list[str]] = defaultdict(list)
    for _, t in btf.own():
        if t.kind is Kind.FUNC:
            out[t.name].append(function_decl(btf, t))
    return out


def type_decls(btf: Btf) -> dict[tuple[str, str], list[str]]:
    """(kind, name) of each named type -> its declarations."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for _, t in btf.own():
        if t.kind in TYPE_KINDS and t.name:
            out[(t.kind.name, t.name)].append(describe_type(btf, t))
    return out


# ---- comparing -------------------------------------------------------------------


class Section:
    """One section's differences: entries only in B (added), only in A
    (removed), in both with other declarations (changed)."""

    def __init__(self):
        self.added: list[dict] = []
        self.removed: list[dict] = []
        self.changed: list[dict] = []

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def as_dict(self) -> dict:
        return {'added': self.added, 'removed': self.removed, 'changed': self.changed}


def compare(a: dict, b: dict, label=lambda key: {'name': key}) -> Section:
    """The differences between two ``key -> [declarations]`` maps;
    ``label(key)`` names an entry in the output."""
    out = Section()
    for key in sorted(a.keys() | b.keys()):
        da, db = sorted(a.get(key, ())), sorted(b.get(key, ()))
        if da == db:
            continue
        if not da:
            out.added.append({**label(key), 'decls': db})
        elif not db:
            out.removed.append({**label(key), 'decls': da})
        else:
            out.changed.append({**label(key), 'a': da, 'b': db})
    return out


def diff_btf(a: Btf, b: Btf) -> dict[str, Section]:
    """The three sections of differences from ``a`` to ``b``."""
    return {
        'functions': compare(function_decls(a), function_decls(b)),
        'types': compare(type_decls(a), type_decls(b),
                         lambda key: {'kind': key[0], 'name': key[1]}),
        'variables': compare(variable_decls(a), variable_decls(b)),
    }


# ---- output ----------------------------------------------------------------------


def text_lines(sections: dict[str, Section]) -> Iterator[str]:
    """The report: per section a count line, then ``+`` added, ``-``
    removed and ``~`` changed entries with their declarations."""
    for name in SECTIONS:
        s = sections[name]
        if not s:
            continue
        yield (f'{name}: {len(s.added)} added, {len(s.removed)} removed, '
               f'{len(s.changed)} changed')
        for sign, entries in (('+', s.added), ('-', s.removed)):
            for e in entries:
                for d in e['decls']:
                    yield f'{sign} {_title(e)}: {d}'
        for e in s.changed:
            yield f'~ {_title(e)}'
            for d in e['a']:
                yield f'    - {d}'
            for d in e['b']:
                yield f'    + {d}'


def _title(entry: dict) -> str:
    return f"{entry['kind']} {entry['name']}" if 'kind' in entry else entry['name']


def as_json(a: str, b: str, sections: dict[str, Section]) -> str:
    doc = {'a': a, 'b': b, 'equal': not any(sections.values())}
    doc.update((name, sections[name].as_dict()) for name in SECTIONS)
    return json.dumps(doc, indent=1, sort_keys=False)


# ---- the command -----------------------------------------------------------------


def load(path: str, base_path: str | None) -> Btf:
    """The BTF of ``path`` (raw, an object, a vmlinux, or a module on
    ``base_path``); DiffError naming the file otherwise."""
    from ..btf.errors import BtfError
    from ..btf_file import load_btf_file
    from ..elf.errors import ElfError
    base = None
    if base_path:
        try:
            base = load_btf_file(base_path)
        except (OSError, BtfError, ElfError) as err:
            raise DiffError(f'{base_path}: {getattr(err, "strerror", None) or err}') from None
    try:
        return load_btf_file(path, base)
    except (OSError, BtfError, ElfError) as err:
        raise DiffError(f'{path}: {getattr(err, "strerror", None) or err}') from None


def run_diff(a: str, b: str, base: str | None = None, base_b: str | None = None,
             fmt: str = 'text') -> int:
    """Print the differences; 0 when there are none, 1 when there are, 2
    when an input cannot be read."""
    try:
        sections = diff_btf(load(a, base), load(b, base_b or base))
    except DiffError as err:
        print(f'objbtf diff: {err}', file=sys.stderr)
        return 2
    if fmt == 'json':
        print(as_json(a, b, sections))
    else:
        for line in text_lines(sections):
            print(line)
    return 1 if any(sections.values()) else 0
