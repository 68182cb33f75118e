"""Print BTF the way ``bpftool btf dump file X`` (raw format) prints it.

The format is bpftool's ``dump_btf_type`` (bpftool 7.1, tools/bpf/bpftool/
btf.c of Linux 6.1): one ``[id] KIND 'name' ...`` line per type, then one
tab-indented line per member, enumerator, parameter or DATASEC entry.  Split
BTF prints only its own types, numbered on from its base.  A kind bpftool
does not know gets what its registry entry says it holds: its size or its
type ids.
"""
from __future__ import annotations

from typing import Callable, Iterator, NamedTuple

from .kinds import Kind, info_of
from .types import Btf, BtfType

_LINKAGE = {0: 'static', 1: 'global', 2: 'extern'}
_INT_ENCODING = {0: '(none)', 1: 'SIGNED', 2: 'CHAR', 4: 'BOOL'}


def dump_btf(btf: Btf) -> Iterator[str]:
    """The lines of bpftool's raw dump of ``btf``, without line ends."""
    for type_id, t in btf.own():
        yield from dump_type(btf, type_id, t)


def dump_type(btf: Btf, type_id: int, t: BtfType) -> Iterator[str]:
    """bpftool's lines for one type."""
    head = f"[{type_id}] {_kind_name(t)} '{_name(t.name)}'"
    extra, items = _DETAILS.get(t.kind, _by_layout)(btf, t)
    yield head + extra
    for item in items:
        yield '\t' + item


def _name(name: str) -> str:
    return name or '(anon)'


def _kind_name(t: BtfType) -> str:
    return 'UNKNOWN' if t.kind is Kind.UNKN else t.kind.name


def _s32(v: int) -> int:
    v &= 0xffffffff
    return v - (1 << 32) if v >= 1 << 31 else v


def _s64(v: int) -> int:
    v &= 0xffffffffffffffff
    return v - (1 << 64) if v >= 1 << 63 else v


_Details = tuple[str, list[str]]


def _int(btf: Btf, t: BtfType) -> _Details:
    encoding = _INT_ENCODING.get(t.encoding, 'UNKN')
    return (f' size={t.size} bits_offset={t.bit_offset} nr_bits={t.bits} '
            f'encoding={encoding}'), []


def _reference(btf: Btf, t: BtfType) -> _Details:
    return f' type_id={t.type}', []


def _array(btf: Btf, t: BtfType) -> _Details:
    return f' type_id={t.type} index_type_id={t.index_type} nr_elems={t.nelems}', []


def _struct(btf: Btf, t: BtfType) -> _Details:
    lines = []
    for m in t.items:
        line = f"'{_name(m.name)}' type_id={m.type} bits_offset={m.bit_offset}"
        if t.bitfields and m.bitfield_size:
            line += f' bitfield_size={m.bitfield_size}'
        lines.append(line)
    return f' size={t.size} vlen={len(t.items)}', lines


def _enum(btf: Btf, t: BtfType) -> _Details:
    encoding = 'SIGNED' if t.signed else 'UNSIGNED'
    if t.kind is Kind.ENUM64:
        values = [f"'{_name(v.name)}' val={_s64(v.value)}LL" if t.signed
                  else f"'{_name(v.name)}' val={v.value & 0xffffffffffffffff}ULL"
                  for v in t.items]
    else:
        values = [f"'{_name(v.name)}' val={_s32(v.value) if t.signed else v.value & 0xffffffff}"
                  for v in t.items]
    return f' encoding={encoding} size={t.size} vlen={len(t.items)}', values


def _fwd(btf: Btf, t: BtfType) -> _Details:
    return f" fwd_kind={'union' if t.fwd_union else 'struct'}", []


def _func(btf: Btf, t: BtfType) -> _Details:
    return f' type_id={t.type} linkage={_LINKAGE.get(t.linkage, "(unknown)")}', []


def _func_proto(btf: Btf, t: BtfType) -> _Details:
    params = [f"'{_name(p.name)}' type_id={p.type}" for p in t.items]
    return f' ret_type_id={t.type} vlen={len(t.items)}', params


def _var(btf: Btf, t: BtfType) -> _Details:
    return f' type_id={t.type}, linkage={_LINKAGE.get(t.linkage, "(unknown)")}', []


def _datasec(btf: Btf, t: BtfType) -> _Details:
    lines = []
    for v in t.items:
        line = f'type_id={v.type} offset={v.offset} size={v.size}'
        if v.type < btf.next_id:
            vt = btf[v.type]
            line += f" ({_kind_name(vt)} '{_name(vt.name)}')"
        lines.append(line)
    return f' size={t.size} vlen={len(t.items)}', lines


def _float(btf: Btf, t: BtfType) -> _Details:
    return f' size={t.size}', []


def _decl_tag(btf: Btf, t: BtfType) -> _Details:
    return f' type_id={t.type} component_idx={t.component_idx}', []


def _nothing(btf: Btf, t: BtfType) -> _Details:
    return '', []


def _by_layout(btf: Btf, t: BtfType) -> _Details:
    info = info_of(t.kind)
    size = f' size={t.size}' if info.sized else ''
    refs = ''.join(f' {name}_id={getattr(t, name)}' for name in info.refs)
    if not info.entry:
        return size + refs, []
    return f'{size}{refs} vlen={len(t.items)}', [_entry(e) for e in t.items]


def _entry(entry: NamedTuple) -> str:
    """An entry of a kind only its registry entry describes: its name, type
    id and other fields as the model names them."""
    return ' '.join(f"'{_name(v)}'" if f == 'name' else f'type_id={v}' if f == 'type'
                    else f'{f}={v}' for f, v in zip(entry._fields, entry))


_DETAILS: dict[Kind, Callable[[Btf, BtfType], _Details]] = {
    Kind.UNKN: _nothing,
    Kind.INT: _int, Kind.PTR: _reference, Kind.CONST: _reference,
    Kind.VOLATILE: _reference, Kind.RESTRICT: _reference, Kind.TYPEDEF: _reference,
    Kind.TYPE_TAG: _reference, Kind.ARRAY: _array, Kind.STRUCT: _struct,
    Kind.UNION: _struct, Kind.ENUM: _enum, Kind.ENUM64: _enum, Kind.FWD: _fwd,
    Kind.FUNC: _func, Kind.FUNC_PROTO: _func_proto, Kind.VAR: _var,
    Kind.DATASEC: _datasec, Kind.FLOAT: _float, Kind.DECL_TAG: _decl_tag,
}
