"""Turn the DIEs of a compile unit into BTF types, following pahole's rules.

Types are encoded in .debug_info order, so the BTF before dedup looks like
pahole's.  Functions and variables are not chosen here: the encoder decides
which to emit (it needs the ELF symbols) and calls ``add_function`` and
``add_variable``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, NamedTuple

from .. import c_extension
from ..btf.kinds import INT_BOOL, INT_SIGNED, KINDS, VAR_GLOBAL_ALLOCATED, VAR_STATIC, Kind
from ..btf.types import Btf, BtfType, Enumerator, Member, Param, new_type
from ..errors import ObjbtfError
from ..features import Features
from ..btf.type_rules import base_type, declared_enum, enum_type
from . import constants as C
from .reader import (
    E_NAME, E_VALUE, I_TAG, M_BIT_OFFSET, M_BIT_SIZE, M_BYTE_SIZE, M_CHILDREN, M_DATA_BIT_OFFSET,
    M_LOCATION, M_NAME, M_TYPE, P_ABSTRACT_ORIGIN, P_NAME, P_SPECIFICATION, P_TYPE, TYPE_TAGS,
    CompileUnit, Die, DieMap, Expr, read_uleb,
)
from . import reader

_REF_KIND: Final = {
    C.TAG_pointer_type: Kind.PTR, C.TAG_const_type: Kind.CONST,
    C.TAG_volatile_type: Kind.VOLATILE, C.TAG_restrict_type: Kind.RESTRICT,
    C.TAG_typedef: Kind.TYPEDEF,
}
#: Makes a member, parameter or enumerator tuple without its class's
#: __new__, a Python function call per entry.
_new: Final = tuple.__new__
#: DIEs that stand for their target (or void) and get no BTF type.
_TRANSPARENT: Final = frozenset({C.TAG_atomic_type, C.TAG_unspecified_type})


class LoadError(ObjbtfError):
    """DWARF that is well-formed but cannot be expressed as BTF."""


class Annotation(NamedTuple):
    value: str
    component_idx: int


class CuLoader:
    """Encodes one compile unit's types into ``btf`` and maps DIEs to ids."""

    def __init__(self, cu: CompileUnit, btf: Btf, features: Features, dies: DieMap):
        self.cu = cu
        self.btf = btf
        self.f = features
        self.dies = dies
        self.ids: dict[int, int] = {}
        self.index_type = 0

    # ---- attribute helpers -------------------------------------------------

    def origin_attr(self, die: Die | None, attr: int, default=None, seen: int = 0):
        """``attr`` of ``die``, or of its specification / abstract origin
        (``seen``: how many such references led to ``die``)."""
        while die is not None and seen < 8:
            v = die.attrs.get(attr)
            if v is not None:
                return v
            ref = die.attrs.get(C.AT_specification) or die.attrs.get(C.AT_abstract_origin)
            die = self.dies.get(ref) if ref else None
            seen += 1
        return default

    def _param_attr(self, param: tuple, field: int, attr: int, default=None):
        """``origin_attr`` for a function type's parameter, an item
        (``field``: where ``attr`` is in it)."""
        v = param[field]
        if v is not None:
            return v
        ref = param[P_SPECIFICATION] or param[P_ABSTRACT_ORIGIN]
        return self.origin_attr(self.dies.get(ref) if ref else None, attr, default, 1)

    def type_size(self, off: int | None, depth: int = 0) -> int:
        """Byte size of the type DIE at ``off`` (0 for void or unknown)."""
        die = self.dies.get(off) if off else None
        if die is None or depth > 32:
            return 0
        size = die.attrs.get(C.AT_byte_size)
        if size is not None:
            return size
        tag = die.tag
        if tag == C.TAG_pointer_type:
            return self.cu.address_size
        if tag == C.TAG_array_type:
            return self.type_size(die.attrs.get(C.AT_type), depth + 1) * self._nelems(die)
        if tag in (C.TAG_typedef, C.TAG_const_type, C.TAG_volatile_type,
                   C.TAG_restrict_type, C.TAG_atomic_type):
            return self.type_size(die.attrs.get(C.AT_type), depth + 1)
        return 0

    # ---- types ---------------------------------------------------------------

    def load_types(self) -> None:
        """Encode every type DIE of the unit, in DWARF order: in C with the
        compiled build (``_loader.c``, from the type DIEs the C decoder
        keeps in C: the same types and ids in a fraction of the time), which
        leaves whatever it does not expect to ``_load_types``."""
        cu = self.cu
        if _C is not None and cu.types is not None:
            made = _C.load_types(cu.types, cu.first_type, cu.end_type, self.btf.next_id,
                                 cu.address_size, self.btf.byteorder == 'big',
                                 cu.annotated and self.f.type_tag, self.f)
            if made is not None:
                self.ids, types, self.index_type = made
                self.btf.types.extend(types)
                return
        self._load_types()

    def _load_types(self) -> None:
        """``load_types`` in Python.

        Ids are assigned first so that forward references resolve; a pointer
        with btf_type_tag annotations gets its TYPE_TAGs just before it.  The
        ARRAY index type is the unit's ``int``, or one added after the unit's
        types when it has none, as pahole does.
        """
        type_dies = [d for d in self.cu.all_dies()
                     if d.tag in TYPE_TAGS and d.tag not in _TRANSPARENT]
        tags_of: dict[int, list[Die]] = {}
        next_id = self.btf.next_id
        has_array = False
        for die in type_dies:
            if die.tag == C.TAG_pointer_type and self.f.type_tag:
                tags = self._annotations(die.children, 'btf_type_tag')
                if tags:
                    tags_of[die.offset] = tags
                    next_id += len(tags)
            elif die.tag == C.TAG_array_type:
                has_array = True
            elif (die.tag == C.TAG_base_type and not self.index_type
                  and die.attrs.get(C.AT_name) == 'int'):
                self.index_type = next_id
            self.ids[die.offset] = next_id
            next_id += 1
        if has_array and not self.index_type:
            self.index_type = next_id
        for die in type_dies:
            chain = tags_of.get(die.offset)
            if chain:
                self.btf.add(BtfType(Kind.PTR, type=self._add_type_tags(die, chain)))
            else:
                self.btf.add(self._encode(die))
        if self.index_type == self.btf.next_id:
            self.btf.add(BtfType(Kind.INT, 'int', size=4, encoding=INT_SIGNED, bits=32))

    def ref(self, off: int | None, depth: int = 0) -> int:
        """BTF id for a DW_AT_type reference (void for none)."""
        if not off:
            return 0
        type_id = self.ids.get(off)
        if type_id is not None:
            return type_id
        die = self.dies.get(off)
        if die is None:
            raise LoadError(f'DIE at 0x{off:x} is referenced but is not a type')
        if die.tag in _TRANSPARENT and depth < 32:
            return self.ref(die.attrs.get(C.AT_type), depth + 1) if die.tag == C.TAG_atomic_type else 0
        raise LoadError(f'DIE at 0x{off:x} (tag 0x{die.tag:x}) is not a type BTF can hold')

    def _annotations(self, children: Sequence[Die], kind: str) -> list[Die]:
        """The ``kind`` annotations among a DIE's (or a member's) ``children``."""
        if not self.cu.annotated:
            return []
        return [c for c in children
                if c.tag == C.TAG_LLVM_annotation and c.attrs.get(C.AT_name) == kind]

    def _add_type_tags(self, ptr: Die, tags: list[Die]) -> int:
        """Add pointer -> tagN -> ... -> tag1 -> pointee as pahole chains them;
        return the id the pointer must point at."""
        target = self.ref(ptr.attrs.get(C.AT_type))
        for t in tags:
            target = self.btf.add(BtfType(Kind.TYPE_TAG, _text(t.attrs.get(C.AT_const_value)),
                                          type=target))
        return target

    def _encode(self, die: Die) -> BtfType:
        tag = die.tag
        a = die.attrs
        if tag == C.TAG_base_type:
            return self._base_type(die)
        if tag in _REF_KIND:
            kind = _REF_KIND[tag]
            name = a.get(C.AT_name, '') if kind is Kind.TYPEDEF else ''
            return BtfType(kind, name, type=self.ref(a.get(C.AT_type)))
        if tag in (C.TAG_structure_type, C.TAG_union_type, C.TAG_class_type):
            return self._struct(die)
        if tag == C.TAG_enumeration_type:
            return self._enum(die)
        if tag == C.TAG_array_type:
            return BtfType(Kind.ARRAY, type=self.ref(a.get(C.AT_type)),
                           index_type=self.index_type, nelems=self._nelems(die))
        if tag == C.TAG_subroutine_type:
            return self.proto(die)
        raise LoadError(f'DIE at 0x{die.offset:x}: unsupported type tag 0x{tag:x}')

    def _base_type(self, die: Die) -> BtfType:
        a = die.attrs
        enc = a.get(C.AT_encoding, 0)
        if enc in (C.ATE_signed, C.ATE_signed_char):
            encoding = INT_SIGNED
        elif enc == C.ATE_boolean:
            encoding = INT_BOOL
        else:
            encoding = 0
        return base_type(a.get(C.AT_name, ''), a.get(C.AT_byte_size, 0), encoding,
                         enc == C.ATE_float, self.f)

    def _struct(self, die: Die) -> BtfType:
        a = die.attrs
        union = die.tag == C.TAG_union_type
        name = a.get(C.AT_name, '')
        if a.get(C.AT_declaration):
            fwd = BtfType(Kind.FWD, name)
            fwd.fwd_union = union
            return fwd
        members = []
        bitfields = False
        for m in die.items:
            if m[I_TAG] != C.TAG_member:
                continue
            bit_off = self._member_bit_offset(m, union)
            if bit_off is None:
                continue            # a static member
            bits = _or(m[M_BIT_SIZE], 0)
            if bits or bit_off % 8:
                bitfields = True
            members.append(_new(Member, (_or(m[M_NAME], ''), self.ref(m[M_TYPE]), bit_off, bits)))
        t = BtfType(Kind.UNION if union else Kind.STRUCT, name, size=a.get(C.AT_byte_size, 0),
                    items=tuple(members))
        t.bitfields = bitfields
        return t

    def _member_bit_offset(self, m: tuple, in_union: bool) -> int | None:
        dbo = m[M_DATA_BIT_OFFSET]
        if dbo is not None:
            return dbo
        loc = m[M_LOCATION]
        if loc is None:
            return 0 if in_union else None
        if isinstance(loc, Expr):
            loc = _plus_uconst(loc.data)
        bit_off = loc * 8
        bits = _or(m[M_BIT_SIZE], 0)
        old = m[M_BIT_OFFSET]
        if bits and old is not None:
            byte_size = m[M_BYTE_SIZE] or self.type_size(m[M_TYPE])
            if self.btf.byteorder == 'little':
                bit_off += byte_size * 8 - old - bits
            else:
                bit_off += old
        return bit_off

    def _enum(self, die: Die) -> BtfType:
        a = die.attrs
        name = a.get(C.AT_name, '')
        if a.get(C.AT_declaration) and not die.children and not die.items:
            return declared_enum(name)
        values = [_new(Enumerator, (_or(e[E_NAME], ''), _or(e[E_VALUE], 0)))
                  for e in die.items if e[I_TAG] == C.TAG_enumerator]
        return enum_type(name, a.get(C.AT_byte_size, 4), values,
                         self._underlying_signed(a.get(C.AT_type)), self.f)

    def _underlying_signed(self, off: int | None) -> bool:
        die = self.dies.get(off) if off else None
        return die is not None and die.attrs.get(C.AT_encoding) in (C.ATE_signed, C.ATE_signed_char)

    def _nelems(self, die: Die) -> int:
        n = 1
        for sub in die.children:
            if sub.tag != C.TAG_subrange_type:
                continue
            ub = sub.attrs.get(C.AT_upper_bound)
            if ub is not None and not isinstance(ub, Expr):
                n *= (ub + 1) & (2**64 - 1)
            else:
                count = sub.attrs.get(C.AT_count)
                n *= count if isinstance(count, int) else 0
        return n & 0xffffffff

    # ---- functions, parameters, decl tags ------------------------------------

    def params(self, die: Die) -> list[tuple[str, int]]:
        """(name, type id) of each parameter of a function or a function
        type; '' name if unnamed; a trailing ('', 0) for varargs."""
        out = []
        for c in die.children:          # a function's: DIEs
            if c.tag == C.TAG_formal_parameter:
                out.append((self.origin_attr(c, C.AT_name, ''),
                            self.ref(self.origin_attr(c, C.AT_type))))
            elif c.tag == C.TAG_unspecified_parameters:
                out.append(('', 0))
        for p in die.items:             # a function type's: items
            if p[I_TAG] == C.TAG_formal_parameter:
                out.append((self._param_attr(p, P_NAME, C.AT_name, ''),
                            self.ref(self._param_attr(p, P_TYPE, C.AT_type))))
            elif p[I_TAG] == C.TAG_unspecified_parameters:
                out.append(('', 0))
        return out

    def proto(self, die: Die) -> BtfType:
        ret = self.ref(self.origin_attr(die, C.AT_type))
        return BtfType(Kind.FUNC_PROTO, type=ret,
                       items=tuple([_new(Param, p) for p in self.params(die)]))

    def add_function(self, die: Die, name: str) -> int:
        """FUNC_PROTO + FUNC (static linkage, as pahole) + its decl tags."""
        proto_id = self.btf.add(self.proto(die))
        func_id = self.btf.add(BtfType(Kind.FUNC, name, type=proto_id))
        if self.f.decl_tag:
            self._add_decl_tags(func_id, self.function_decl_tags(die))
        return func_id

    def function_decl_tags(self, die: Die) -> list[Annotation]:
        return self._tags_with_components(
            die, [c.children for c in die.children if c.tag == C.TAG_formal_parameter])

    def _tags_with_components(self, die: Die,
                              components: list[Sequence[Die]]) -> list[Annotation]:
        """The decl tags of ``die`` (-1) and of its members or parameters
        (their index; ``components``: the DIEs under each)."""
        tags = self.decl_tags_of(die.children, -1)
        for idx, children in enumerate(components):
            tags += self.decl_tags_of(children, idx)
        return tags

    def decl_tags_of(self, children: Sequence[Die], component_idx: int) -> list[Annotation]:
        """The decl tags among a DIE's (or a member's) ``children``."""
        return [Annotation(_text(c.attrs.get(C.AT_const_value)), component_idx)
                for c in self._annotations(children, 'btf_decl_tag')]

    def add_type_decl_tags(self) -> None:
        """DECL_TAGs of structs, unions (and their members) and typedefs."""
        if not self.f.decl_tag or not self.cu.annotated:
            return
        for die in self.cu.all_dies():
            if die.tag not in (C.TAG_structure_type, C.TAG_union_type, C.TAG_typedef):
                continue
            tags = self._tags_with_components(
                die, [m[M_CHILDREN] for m in die.items if m[I_TAG] == C.TAG_member])
            self._add_decl_tags(self.ids[die.offset], tags)

    def _add_decl_tags(self, target: int, tags: list[Annotation]) -> None:
        for t in tags:
            self.btf.add(BtfType(Kind.DECL_TAG, t.value, type=target,
                                 component_idx=t.component_idx))

    def add_variable(self, die: Die, name: str) -> int:
        """A VAR for ``die`` (GLOBAL_ALLOCATED if external) + its decl tags."""
        external = bool(self.origin_attr(die, C.AT_external))
        var_id = self.btf.add(BtfType(Kind.VAR, name, type=self.ref(self.origin_attr(die, C.AT_type)),
                                      linkage=VAR_GLOBAL_ALLOCATED if external else VAR_STATIC))
        if self.f.decl_tag:
            self._add_decl_tags(var_id, self.decl_tags_of(die.children, -1))
        return var_id


def _plus_uconst(expr: bytes) -> int:
    """The offset of a DWARF 2 style member location ``DW_OP_plus_uconst N``."""
    if not expr or expr[0] != C.OP_plus_uconst:
        raise LoadError('member location is not a constant offset')
    return read_uleb(expr, 1)[0]


def _or(value, default):
    """``value``, or ``default`` for an attribute an item does not have."""
    return default if value is None else value


def _text(v) -> str:
    return v if isinstance(v, str) else ''


def _c_loader() -> Any:
    """objbtf.dwarf._loader, told what this loader makes, when the compiled
    build runs and has it and the C decoder (whose arenas it reads); else
    None."""
    loader = c_extension('objbtf.dwarf._loader')
    if loader is None or reader._C is None:
        return None
    loader.init(new_type, [i.kind for i in KINDS], Member, Param, Enumerator,
                Expr, base_type, enum_type, declared_enum, reader._C.Arena)
    return loader


_C: Final = _c_loader()
