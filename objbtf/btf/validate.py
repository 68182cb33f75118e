"""Check BTF the way the Linux kernel's verifier does (kernel/bpf/btf.c).

The kernel checks BTF in passes and rejects a blob at the first problem:

1. the header and the section layout (``btf_parse_hdr``, ``btf_parse_str_sec``);
2. every type on its own (``btf_check_all_metas``): names, flags, sizes;
3. references (``btf_check_all_types``): a depth-first walk with an explicit
   stack of at most 32 entries that detects loops, gives every modifier, array
   and variable a resolved target and size, and checks struct members against
   their types and function prototypes against their arguments;
4. type tags precede the other modifiers (``btf_check_type_tags``).

This module repeats those rules: where the kernel's verdict depends on the
order of its walk (depth and loops), the walk is the same.  The rules are
Linux 6.1's (the reference kernel), which newer kernels keep, plus those that
newer kernels added.  Three rules were relaxed after 6.1: DATASEC names may be
any printable text (6.1: identifiers), TYPE_TAG and DECL_TAG may carry
kind_flag (6.13, for attribute tags, which recent vmlinux BTF has), and the
header may be 32 bytes, locating a kind layout section (7.x; 6.x kernels
refuse a header whose bytes past the 24th are not zero).  They follow the
newer kernels unless ``linux_6_1`` asks for the old ones.

``validate`` checks the in-memory model; ``validate_bytes`` checks a raw blob,
including what the model cannot express (header, layout, reserved bits, name
offsets).  Names are checked byte by byte with the kernel's ``ctype`` table,
which counts Latin-1 letters as letters.
"""
from __future__ import annotations

from typing import Final

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cmp_to_key

from .. import c_extension
from ..errors import shown
from .errors import BtfError
from .header import BtfHeader, byteorder_of, header_len, magic_order
# Kinds by their module-level names: ``Kind.X`` costs a descriptor call.
from .kinds import (
    ARRAY, BTF_HEADER_LEN, BTF_LAYOUT_HEADER_LEN, BTF_MAGIC, BTF_VERSION, CONST, DATASEC,
    DECL_TAG, ENUM, ENUM64, FLOAT, FUNC, FUNC_PROTO, FWD, INT, KIND_LAYOUT_LEN, KINDS,
    MAX_RESOLVE_DEPTH, PTR, RESTRICT, STRUCT, TYPE_TAG, TYPEDEF, UNION, UNKN, VAR, VOLATILE,
)
from .reader import parse_btf, read_leniently
from .strings import StringReader
from .types import Btf, BtfType, Member, Param, VarSecinfo, VOID

#: objbtf.btf._blob, when the compiled build runs.
_C: Final = c_extension('objbtf.btf._blob')

BTF_MAX_SIZE: Final = 16 * 1024 * 1024
BTF_MAX_TYPE: Final = 0xfffff
BTF_MAX_NAME_OFFSET: Final = 0xffffff
#: Longest name the kernel accepts (KSYM_NAME_LEN since Linux 6.1).
MAX_NAME_BYTES: Final = 512

_U32: Final = 0xffffffff
_BITS_PER_U128: Final = 128

# The kernel's isalpha/isalnum/isprint (lib/ctype.c): Latin-1 letters count.
_ALPHA: Final = rb'A-Za-z\xc0-\xd6\xd8-\xf6\xf8-\xff'
_IDENTIFIER: Final = re.compile(rb'[%s_.][%s0-9_.]{0,%d}' % (_ALPHA, _ALPHA, MAX_NAME_BYTES - 1))
#: ASCII identifiers, one a line: _IDENTIFIER's ASCII part.
_ASCII_IDENTIFIER: Final = r'[A-Za-z_.][A-Za-z0-9_.]{0,%d}' % (MAX_NAME_BYTES - 1)
_ASCII_IDENTIFIERS: Final = re.compile(r'%s(?:\n%s)*' % (_ASCII_IDENTIFIER, _ASCII_IDENTIFIER))
_SECTION_NAME: Final = re.compile(rb'[\x20-\x7e\xa0-\xff]{1,%d}' % MAX_NAME_BYTES)


@dataclass(frozen=True)
class Problem:
    """One rule a BTF blob breaks; ``type_id`` is None for header and layout rules."""
    type_id: int | None
    kind: str
    name: str
    message: str

    def __str__(self) -> str:
        # The message may quote other names (a member's), as read.
        if self.type_id is None:
            return f'BTF: {shown(self.message)}'
        return (f"type [{self.type_id}] {self.kind} '{shown(self.name) or '(anon)'}': "
                f'{shown(self.message)}')


def validate(btf: Btf, linux_6_1: bool = False, ptr_size: int = 0) -> list[Problem]:
    """Problems the kernel would find in ``btf`` (empty when it would load).

    Every type gets its own checks; when they all pass, references are
    resolved, which like the kernel stops at the first problem.  Split BTF is
    checked on top of its base, whose types count as already checked.
    ``linux_6_1`` adds the rules that kernels after 6.1 relaxed.
    ``ptr_size`` is the target's pointer size, 4 or 8, which the kernel
    checks pointer and float members with (its own ``sizeof(void *)``); 0,
    the default, takes ``pointer_size(btf)``.
    """
    return _Checker(btf, 'utf-8', linux_6_1, ptr_size).run()


def first_problem(btf: Btf, linux_6_1: bool = False, ptr_size: int = 0) -> Problem | None:
    """The first problem ``validate`` finds, or None."""
    problems = validate(btf, linux_6_1, ptr_size)
    return problems[0] if problems else None


def first_problem_of_blob(btf: Btf | None, raw: bytes, ptr_size: int) -> Problem | None:
    """``first_problem(btf, ptr_size=ptr_size)`` for base BTF of the
    kernel's kinds whose blob is ``raw`` (None: read from ``raw`` when
    needed): None at once where the compiled build's C check (``_blob.c``)
    accepts ``raw``, else the model's check, which says what is wrong."""
    if _C is not None and _C.accepts(raw, byteorder_of(raw) == 'big', ptr_size):
        return None
    return first_problem(btf if btf is not None else parse_btf(raw), ptr_size=ptr_size)


#: The spellings of ``long`` and ``unsigned long`` a compiler may give an INT.
_LONG_NAMES: Final = frozenset({
    'long', 'long int', 'int long', 'unsigned long', 'long unsigned', 'unsigned long int',
    'unsigned int long', 'long unsigned int', 'long int unsigned', 'int unsigned long',
    'int long unsigned'})


def pointer_size(btf: Btf) -> int:
    """The pointer size of the target ``btf`` was made for, which raw BTF
    does not record: the size of its ``long`` (its base's first), as libbpf
    finds it; 8 when neither table has one."""
    tables = [btf]
    while tables[-1].base is not None:
        tables.append(tables[-1].base)
    for table in reversed(tables):
        for type_id in range(table.start_id, table.next_id):
            t = table[type_id]
            if t.kind is INT and t.size in (4, 8) and t.name in _LONG_NAMES:
                return t.size
    return 8


def first_problem_among(btf: Btf, type_ids: Iterable[int],
                        linux_6_1: bool = False, ptr_size: int = 0) -> Problem | None:
    """The first problem the kernel would find in the types ``type_ids`` of
    ``btf``: their own checks, then resolving them and what they refer to,
    in id order.  For a table most of whose types are known to be valid:
    the link checks the types it makes or that came without a checksum, not
    all of them.  Some checks depend on what was resolved before (a
    DATASEC's entry sizes on its VARs, as in the kernel): give those too."""
    checker = _Checker(btf, 'utf-8', linux_6_1, ptr_size)
    ids = sorted(type_ids)
    for type_id in ids:
        problem = checker.meta_problem(type_id)
        if problem:
            return problem
    problems = checker.check_references(ids)
    return problems[0] if problems else None


def validate_bytes(data: bytes, base: Btf | None = None, linux_6_1: bool = False,
                   ptr_size: int = 0, kind_layout: bool = True) -> list[Problem]:
    """Problems the kernel would find in a raw BTF blob (split on ``base`` if given).

    The blob may be in either byte order: it is checked as the kernel of an
    architecture with that byte order would check it; ``ptr_size`` as for
    ``validate``.  ``kind_layout``: the kernel knows the 32-byte header that
    locates a kind layout section (Linux 7.x; not with ``linux_6_1``).
    """
    problems, header = _check_layout(data, base is not None,
                                     kind_layout and not linux_6_1)
    if header is None:
        return problems
    problems = []

    def report(type_id: int, kind: str, name: str, message: str) -> None:
        display = name.encode('latin-1').decode('utf-8', 'replace')
        problems.append(Problem(type_id, kind, display, message))

    types, complete = read_leniently(
        header.types(data), header.order, header.strings(data), _base_string_bytes(base),
        base.next_id if base is not None else 1, BTF_MAX_TYPE - 1, report)
    if not complete:
        return problems
    btf = Btf(types=types, base=base) if base is not None else Btf(types=[VOID, *types])
    checker = _Checker(btf, 'latin-1', linux_6_1, ptr_size)
    problems = sorted(problems + checker.check_metas(), key=lambda p: p.type_id or 0)
    return problems or checker.check_references()


# ---------------------------------------------------------------------------
# Header and sections (btf_parse_hdr, btf_check_sec_info, btf_parse_str_sec)

def _layout_problem(message: str) -> tuple[list[Problem], None]:
    return [Problem(None, '', '', message)], None


def _check_layout(data: bytes, split: bool,
                  kind_layout: bool = True) -> tuple[list[Problem], BtfHeader | None]:
    """The kernel's header and section checks; a header when they pass."""
    known = BTF_LAYOUT_HEADER_LEN if kind_layout else BTF_HEADER_LEN
    size = len(data)
    if size > BTF_MAX_SIZE:
        return _layout_problem(f'{size} bytes, more than the {BTF_MAX_SIZE} the kernel takes')
    if size < 8:
        return _layout_problem(f'{size} bytes, too short to hold a header length')
    order = magic_order(data)
    if order is None:
        return _layout_problem(f'bad magic {bytes(data[:2]).hex()}')
    hdr_len = header_len(data, order)
    if hdr_len > size:
        return _layout_problem(f'header length {hdr_len} runs past the {size} bytes of data')
    if hdr_len > known and any(data[known:hdr_len]):
        return _layout_problem(f'header length {hdr_len}: bytes past the {known} '
                               'the kernel knows must be zero')
    header = BtfHeader.read_as_kernel(data, order, hdr_len, known)
    if header.magic != BTF_MAGIC:
        return _layout_problem(f'bad magic {header.magic:#06x} within header length {hdr_len}')
    if header.version != BTF_VERSION:
        return _layout_problem(f'version {header.version}, only {BTF_VERSION} is supported')
    if header.flags:
        return _layout_problem(f'flags {header.flags:#x}, must be 0')
    if not split and size == hdr_len:
        return _layout_problem('no data after the header')
    message = (_sections_problem(header, size - hdr_len)
               or _strings_problem(data, header, split, known)
               or _kind_layout_problem(header, size) or _types_problem(header, split))
    if message:
        return _layout_problem(message)
    return [], header


def _has_kind_layout(h: BtfHeader) -> bool:
    return h.hdr_len >= BTF_LAYOUT_HEADER_LEN and h.layout_len != 0


def _sections_problem(h: BtfHeader, expected: int) -> str | None:
    """Sections must tile the data after the header: no gap, no overlap."""
    secs = [('type', h.type_off, h.type_len), ('string', h.str_off, h.str_len)]
    if _has_kind_layout(h):
        secs.append(('kind layout', h.layout_off, h.layout_len))
    secs.sort(key=cmp_to_key(_sec_cmp))
    total = 0
    for what, off, length in secs:
        if off > expected:
            return f'{what} section offset {off} past the {expected} bytes after the header'
        if off > total:
            return f'gap of {off - total} bytes before the {what} section'
        if off < total:
            return f'{what} section at {off} overlaps the section before it (ending at {total})'
        if length > expected - total:
            return f'{what} section ({length} bytes at {off}) runs past the end of the data'
        total += length
    if total != expected:
        return f'{expected - total} bytes after the last section'
    return None


def _sec_cmp(x: tuple[str, int, int], y: tuple[str, int, int]) -> int:
    """The kernel's comparator: differences taken as signed 32-bit ints."""
    def s32(v: int) -> int:
        v &= _U32
        return v - (1 << 32) if v >= 1 << 31 else v
    return s32(x[1] - y[1]) or s32(x[2] - y[2])


def _strings_problem(data: bytes, h: BtfHeader, split: bool, known: int) -> str | None:
    start = h.hdr_len + h.str_off
    end = start + h.str_len
    # (a kernel that knows the 32-byte header wants strings last only below it)
    last = known == BTF_HEADER_LEN or h.hdr_len < BTF_LAYOUT_HEADER_LEN
    if last and end != len(data):
        return 'the string section is not the last section'
    if split and not h.str_len:
        return None
    if not h.str_len:
        return 'the string section is empty'
    if h.str_len - 1 > BTF_MAX_NAME_OFFSET:
        return f'the string section has {h.str_len} bytes, more than names can address'
    if data[end - 1]:
        return 'the string section does not end with NUL'
    if not split and data[start]:
        return 'the string section does not start with NUL'
    return None


def _kind_layout_problem(h: BtfHeader, size: int) -> str | None:
    """btf_parse_layout_sec: a whole number of 4-byte entries, aligned."""
    if not _has_kind_layout(h):
        return None
    if h.layout_off % 4:
        return f'kind layout section offset {h.layout_off} is not 4-byte aligned'
    if h.layout_len % KIND_LAYOUT_LEN:
        return (f'kind layout section of {h.layout_len} bytes, not a multiple of '
                f'{KIND_LAYOUT_LEN}')
    if h.hdr_len + h.layout_off + h.layout_len > size:
        return 'the kind layout section runs past the end of the data'
    return None


def _types_problem(h: BtfHeader, split: bool) -> str | None:
    if h.type_off % 4:
        return f'type section offset {h.type_off} is not 4-byte aligned'
    if not split and not h.type_len:
        return 'no types'
    return None


def _base_string_bytes(base: Btf | None) -> bytes:
    """All string bytes of a base chain, as split BTF's name offsets see them."""
    if base is None:
        return b''
    if base.strings is None:
        raise BtfError('split BTF can only be checked on a base read from bytes')
    parts = []
    reader: StringReader | None = base.strings
    while reader is not None:
        parts.append(reader.data)
        reader = reader.base
    return b''.join(reversed(parts))


# ---------------------------------------------------------------------------
# The model: per-type rules and reference resolution

_NOT_VISITED: Final = 0
_VISITED: Final = 1
_RESOLVED: Final = 2
_MODE_TBD: Final = 0
_MODE_PTR: Final = 1
_MODE_STRUCT: Final = 2

_MODIFIERS: Final = KINDS.modifier
_SIZED: Final = KINDS.sized
_STRUCTS: Final = KINDS.composite
_NEEDS_RESOLVE: Final = _MODIFIERS | {PTR, STRUCT, UNION, ARRAY,
                                   VAR, FUNC, DECL_TAG, DATASEC}
#: Types that may only start a resolution, never be referred to by one.
_SOURCE_ONLY: Final = frozenset({VAR, DECL_TAG, DATASEC})
_NO_SIZE: Final = frozenset({UNKN, FWD, FUNC, FUNC_PROTO, DECL_TAG})
_DECL_TAG_TARGETS: Final = frozenset({FUNC, STRUCT, UNION, VAR, TYPEDEF})
#: Per walk mode (the kernel's resolve_mode), the kinds the walk goes into
#: rather than stopping at (the others are its sinks).
_WALKED: Final = {_MODE_TBD: _NEEDS_RESOLVE, _MODE_PTR: _MODIFIERS | {PTR},
           _MODE_STRUCT: _MODIFIERS | {ARRAY} | _STRUCTS}
#: What resolve_reference resolves (btf_ptr_resolve, btf_modifier_resolve,
#: btf_var_resolve).
_REFERENCES: Final = _MODIFIERS | {PTR, VAR}
#: What has a size without resolving (id_size gives it at once) and may be
#: referred to: a pointer's, modifier's or variable's target ends there.
_OWN_SIZE: Final = (_SIZED | {PTR}) - {DATASEC}
#: Members checked by size and byte alignment (_member_sized).
_WHOLE_MEMBERS: Final = frozenset({PTR, STRUCT, UNION, ENUM, ENUM64})
_COMPOSITE_OR_PTR: Final = frozenset({PTR, STRUCT, UNION})
#: The bits of a plain INT (btf_type_int_is_regular, with no bit offset).
_REGULAR_INT_BITS: Final = frozenset({8, 16, 32, 64, 128})
#: What check_metas accepts at once when it looks as it should.
_BARE_KINDS: Final = frozenset({PTR, CONST, VOLATILE, RESTRICT, TYPEDEF,
                         FUNC_PROTO})
_new = tuple.__new__


class _Reject(Exception):
    """A rule broken while resolving ``type_id``."""

    def __init__(self, type_id: int, message: str):
        super().__init__(message)
        self.type_id = type_id
        self.message = message


class _TooDeep(Exception):
    pass


class _Loop(Exception):
    def __init__(self, type_id: int):
        super().__init__(type_id)
        self.type_id = type_id


def _all_types(btf: Btf) -> list[BtfType] | _AllTypes:
    """Every type by id, base types included, void at 0."""
    return btf.types if btf.base is None else _AllTypes(btf)


class _AllTypes:
    """The types of split BTF and its base by id, looked up in the table: a
    base read from bytes is parsed only where the check looks (a module's
    link checks a few types on vmlinux's tens of thousands)."""
    __slots__ = ('btf', 'total')

    def __init__(self, btf: Btf):
        self.btf = btf
        self.total = btf.next_id

    def __getitem__(self, type_id: int) -> BtfType:
        return self.btf[type_id]

    def __len__(self) -> int:
        return self.total


class _Checker:
    """The kernel's checks on a model, with its resolution state."""

    def __init__(self, btf: Btf, encoding: str, linux_6_1: bool, ptr_size: int):
        self.btf = btf
        self.encoding = encoding
        self.linux_6_1 = linux_6_1
        self.ptr_size = ptr_size or pointer_size(btf)
        self.types = _all_types(btf)
        self.total = len(self.types)
        self.first = btf.start_id
        # The kernel's start_id: 0 for base BTF, whose void is then never
        # "resolved"; the first own id for split BTF.
        self.kstart = 0 if btf.base is None else self.first
        self._identifiers: dict[str, bool] = {}
        self._base_sizes: dict[int, int] = {}
        # The resolution state, per type id: visit state, resolved id and size.
        self.state = bytearray(self.total)
        self.rid = [0] * self.total
        self.rsize = [0] * self.total
        self.stack: list[list[int]] = []
        self.mode = _MODE_TBD

    def run(self) -> list[Problem]:
        return self.check_metas() or self.check_references()

    def problem(self, type_id: int, message: str) -> Problem:
        t = self.types[type_id]
        name = t.name
        if self.encoding != 'utf-8':
            name = name.encode(self.encoding, 'replace').decode('utf-8', 'replace')
        return Problem(type_id, t.kind.name, name, message)

    def describe(self, type_id: int) -> str:
        t = self.get(type_id)
        if t is None:
            return f'missing type [{type_id}]'
        if t.kind is UNKN:
            return 'void'
        return f"[{type_id}] {t.kind.name} '{t.name or '(anon)'}'"

    # -- pass 2: every type on its own ------------------------------------

    def check_metas(self) -> list[Problem]:
        if self.total > BTF_MAX_TYPE:
            return [Problem(None, '', '', f'{self.total - 1} types, more than the '
                            f'{BTF_MAX_TYPE - 1} BTF can number')]
        problems = []
        types, idents = self.types, self._identifiers
        for type_id in range(self.first, self.total):
            t = types[type_id]
            k = t.kind
            # What nearly every pointer, modifier, typedef and prototype is,
            # accepted at once: no field but its own set, a target id in
            # range (a prototype's: encodable), named as its kind must be.
            # Any other type, or any doubt, goes through the rules below.
            if k in _BARE_KINDS and not (t.size or t.kflag or t.encoding or t.bit_offset
                                         or t.bits or t.index_type or t.nelems or t.linkage) \
                    and t.component_idx == -1 and 0 <= t.type:
                if k is FUNC_PROTO:
                    if not t.name and t.type <= _U32 and len(t.items) <= 0xffff \
                            and not any([p[1] >> 32 for p in t.items]):
                        continue
                elif t.items or t.type > BTF_MAX_TYPE:
                    pass
                elif k is TYPEDEF:
                    if t.name and (idents.get(t.name) or self.identifier(t.name)):
                        continue
                elif not t.name:
                    continue
            elif k in _STRUCTS and not (t.type or t.encoding or t.bit_offset or t.bits
                                        or t.index_type or t.nelems or t.linkage) \
                    and t.component_idx == -1 and 0 <= t.size <= _U32 and 0 <= t.kflag <= 1 \
                    and len(t.items) <= 0xffff and _composite_fine(self, t):
                continue
            problem = self.meta_problem(type_id)
            if problem:
                problems.append(problem)
        return problems

    def meta_problem(self, type_id: int) -> Problem | None:
        """What the kernel finds wrong with the type on its own, if anything."""
        t = self.types[type_id]
        message = _unencodable(t) or _META.get(t.kind, _meta_not_linux)(self, t)
        return self.problem(type_id, message) if message else None

    def identifier(self, name: str) -> bool:
        ok = self._identifiers.get(name)
        if ok is None:
            if name.isascii():
                # _IDENTIFIER's ASCII part is Python's ASCII identifiers, with '.'
                ok = len(name) <= MAX_NAME_BYTES and name.replace('.', '_').isidentifier()
            else:
                ok = _IDENTIFIER.fullmatch(name.encode(self.encoding, 'replace')) is not None
            self._identifiers[name] = ok
        return ok

    def identifiers(self, names: list[str]) -> bool:
        """Whether every one of ``names`` (none empty) is a valid
        identifier: ASCII ones all at once, by one match over them joined
        (none may hold the separator), else one by one."""
        joined = '\n'.join(names)
        if joined.isascii() and joined.count('\n') == len(names) - 1:
            return _ASCII_IDENTIFIERS.fullmatch(joined) is not None
        return all([self.identifier(n) for n in names])

    def named(self, t: BtfType, what: str = 'name') -> str | None:
        if not t.name:
            return f'needs a {what}'
        if not self.identifier(t.name):
            return f'{what} {t.name!r} is not a valid identifier'
        return None

    def optionally_named(self, t: BtfType) -> str | None:
        return self.named(t) if t.name else None

    def section_named(self, t: BtfType) -> str | None:
        if self.linux_6_1:
            return self.named(t)
        if not t.name:
            return 'needs a name'
        if not _SECTION_NAME.fullmatch(t.name.encode(self.encoding, 'replace')):
            return f'name {t.name!r} is not printable text of at most {MAX_NAME_BYTES} bytes'
        return None

    def tag_kflag(self, t: BtfType) -> str | None:
        """Tags may carry kind_flag (attribute tags) since Linux 6.13."""
        return _no_kflag(t) if self.linux_6_1 else None

    # -- pass 3: references (btf_check_all_types) --------------------------

    def check_references(self, type_ids: list[int] | None = None) -> list[Problem]:
        """Resolve ``type_ids`` (every own type by default) and what they
        need, and check their type tags."""
        types, state, kstart = self.types, self.state, self.kstart
        try:
            for type_id in range(self.first, self.total) if type_ids is None else type_ids:
                t = types[type_id]
                k = t.kind
                if k in _NEEDS_RESOLVE and type_id >= kstart and state[type_id] != _RESOLVED:
                    self.resolve(type_id)
                if k is FUNC_PROTO:
                    self.check_func_proto(type_id, t)
            self.check_type_tags(type_ids)
        except _Reject as r:
            return [self.problem(r.type_id, r.message)]
        return []

    def get(self, type_id: int) -> BtfType | None:
        return self.types[type_id] if 0 <= type_id < self.total else None

    def resolved(self, type_id: int) -> bool:
        return type_id < self.kstart or self.state[type_id] == _RESOLVED

    def sink(self, t: BtfType) -> bool:
        """Whether the walk in its current mode stops at ``t``."""
        return t.kind not in _WALKED[self.mode]

    def push(self, type_id: int) -> None:
        if len(self.stack) == MAX_RESOLVE_DEPTH:
            raise _TooDeep()
        if type_id < self.kstart or self.state[type_id] != _NOT_VISITED:
            raise _Loop(type_id)
        self.state[type_id] = _VISITED
        self.stack.append([type_id, 0])
        if self.mode == _MODE_TBD:
            k = self.types[type_id].kind
            if k is PTR:
                self.mode = _MODE_PTR
            elif k in _STRUCTS or k is ARRAY:
                self.mode = _MODE_STRUCT

    def pop(self, resolved_id: int, resolved_size: int) -> None:
        type_id = self.stack.pop()[0]
        self.state[type_id] = _RESOLVED
        self.rid[type_id] = resolved_id
        self.rsize[type_id] = resolved_size & _U32

    def resolved_id(self, type_id: int) -> int:
        if type_id >= self.kstart:
            return self.rid[type_id]
        t = self.types[type_id]
        if t.kind in _MODIFIERS or t.kind in (VAR, PTR, ARRAY):
            return self.skip_modifiers(t.type)
        return t.type if t.kind in (FUNC, DECL_TAG) else 0

    def resolved_size(self, type_id: int) -> int:
        if type_id >= self.kstart:
            return self.rsize[type_id]
        size = self._base_sizes.get(type_id)
        if size is None:
            t = self.types[type_id]
            elem = self.id_size(t.type) if t.kind is ARRAY else None
            size = self._base_sizes[type_id] = (elem[1] * t.nelems) & _U32 if elem else 0
        return size

    def skip_modifiers(self, type_id: int) -> int:
        """A base type's target past modifiers, as a resolved base would record it."""
        for _ in range(MAX_RESOLVE_DEPTH):
            t = self.get(type_id)
            if t is None or t.kind not in _MODIFIERS:
                break
            type_id = t.type
        return type_id

    def id_size(self, type_id: int) -> tuple[int, int] | None:
        """(id, size) of the sized type ``type_id`` stands for (btf_type_id_size)."""
        t = self.types[type_id] if 0 <= type_id < self.total else None
        if t is None or t.kind in _NO_SIZE:
            return None
        if t.kind in _SIZED:
            return type_id, t.size
        size = self._own_size(type_id, t)
        if size is not None:
            return type_id, size
        if t.kind not in _MODIFIERS and t.kind is not VAR:
            return None
        type_id = self.resolved_id(type_id)
        t = self.get(type_id)
        if t is None or t.kind in _NO_SIZE:
            return None
        size = self._own_size(type_id, t)
        return None if size is None else (type_id, size)

    def _own_size(self, type_id: int, t: BtfType) -> int | None:
        if t.kind in _SIZED:
            return t.size
        if t.kind is ARRAY:
            return self.resolved_size(type_id)
        if t.kind is PTR:
            return self.ptr_size
        return None

    def resolve(self, root: int) -> None:
        """Resolve ``root`` and what it needs, depth first (btf_resolve)."""
        types, state = self.types, self.state
        t = types[root]
        if t.kind in _REFERENCES and state[root] == _NOT_VISITED and root >= self.kstart:
            # A pointer, modifier or variable whose target has a size of
            # its own and needs no walk first: what push, resolve_reference,
            # pop and resolve_valid would do for it, at once.
            next_id = t.type
            nk = types[next_id].kind if 0 <= next_id < self.total else None
            walked = _WALKED[_MODE_PTR] if t.kind is PTR else _NEEDS_RESOLVE
            if nk in _OWN_SIZE and (nk not in walked or next_id < self.kstart
                                    or state[next_id] == _RESOLVED):
                state[root] = _RESOLVED
                self.rid[root] = next_id
                self.rsize[root] = 0
                return
        self.mode = _MODE_TBD
        self.push(root)
        stack, types = self.stack, self.types
        try:
            while stack:
                top = stack[-1]
                _RESOLVE[types[top[0]].kind](self, top)
        except _TooDeep:
            raise _Reject(root, f'references nest deeper than {MAX_RESOLVE_DEPTH} types '
                          '(or loop)') from None
        except _Loop as loop:
            raise _Reject(root, f'reference loop through {self.describe(loop.type_id)}') from None
        if not self.resolve_valid(root):
            raise _Reject(root, 'resolves to an invalid state')

    def resolve_valid(self, type_id: int) -> bool:
        t = self.types[type_id]
        if not self.resolved(type_id):
            return False
        if t.kind in _STRUCTS or t.kind is DATASEC:
            return not self.rid[type_id] and not self.rsize[type_id]
        if t.kind in (DECL_TAG, FUNC):
            return bool(self.rid[type_id]) and not self.rsize[type_id]
        if t.kind in _MODIFIERS or t.kind in (PTR, VAR):
            target = self.get(self.rid[type_id])
            return target is not None and target.kind not in _MODIFIERS \
                and target.kind not in (VAR, DATASEC)
        if t.kind is ARRAY:
            elem = self.id_size(t.type)
            return elem is not None and self.types[elem[0]].kind not in _MODIFIERS \
                and (t.nelems * elem[1]) & _U32 == self.rsize[type_id]
        return False

    # -- resolve steps, one per kind; each pushes a dependency or pops ----

    def resolve_reference(self, top: list[int]) -> None:
        """PTR, modifiers and VAR (btf_ptr_resolve, btf_modifier_resolve, btf_var_resolve)."""
        type_id = top[0]
        types = self.types
        t = types[type_id]
        follow_ptr = t.kind is PTR or t.kind is VAR
        next_id = t.type
        next_t = types[next_id] if 0 <= next_id < self.total else None
        if next_t is None or next_t.kind in _SOURCE_ONLY:
            raise _Reject(type_id, f'refers to {self.describe(next_id)}')
        nk = next_t.kind
        if nk in _WALKED[self.mode] and next_id >= self.kstart \
                and self.state[next_id] != _RESOLVED:
            self.push(next_id)
            return
        if nk in _SIZED or nk is PTR:                # what id_size gives at once
            self.pop(next_id, 0)
            return
        if follow_ptr and nk in _MODIFIERS:
            target = self.resolved_id(next_id)
            target_t = self.get(target)
            if target_t is not None and target_t.kind is PTR and not self.sink(target_t) \
                    and not self.resolved(target):
                self.push(target)
                return
        sized = self.id_size(next_id)
        if sized is not None:
            self.pop(sized[0], 0)
            return
        if t.kind is VAR:
            raise _Reject(type_id, f'refers to {self.describe(next_id)}, which has no size')
        if self.resolved(next_id):
            next_id = self.resolved_id(next_id)
            next_t = self.get(next_id)
        if next_t is None or next_t.kind not in (UNKN, FWD, FUNC_PROTO):
            raise _Reject(type_id, f'refers to {self.describe(next_id)}, which has no size')
        self.pop(next_id, 0)

    def needs_first(self, owner: int, what: str, ref: int) -> bool:
        """Reject a reference to a type without size; push it if it must resolve first."""
        rt = self.get(ref)
        if rt is None or rt.kind in _NO_SIZE or rt.kind in _SOURCE_ONLY:
            raise _Reject(owner, f'{what} refers to {self.describe(ref)}, which has no size')
        if not self.sink(rt) and not self.resolved(ref):
            self.push(ref)
            return True
        return False

    def resolve_struct(self, top: list[int]) -> None:
        type_id, start = top
        types = self.types
        t = types[type_id]
        members = t.items
        if start:
            last = members[start - 1]
            if not self.resolved(last.type):
                raise _Reject(type_id, f"member '{last.name}' did not resolve")
            self.check_member(type_id, t, last, types[last.type])
        # needs_first, inline: the walk's mode does not change before it pushes.
        total, kstart, state, rid = self.total, self.kstart, self.state, self.rid
        walked = _WALKED[self.mode]
        check_member = self.check_member
        size, bitfields, ptr_size = t.size, t.kflag, self.ptr_size
        for i in range(start, len(members)):
            m = members[i]
            top[1] = i + 1
            ref = m[1]
            rt = types[ref] if 0 <= ref < total else None
            if rt is None or rt.kind in _NO_SIZE or rt.kind in _SOURCE_ONLY:
                raise _Reject(type_id, f"member '{m.name}' refers to {self.describe(ref)}, "
                              'which has no size')
            k = rt.kind
            if k in walked and ref >= kstart and state[ref] != _RESOLVED:
                self.push(ref)
                return
            # What check_member accepts of the commonest members, at once,
            # past a resolved modifier as it goes: a pointer, struct or
            # union (or, outside bitfield structs, an enum) that is not a
            # bitfield, byte aligned, inside the struct (_member_sized); an
            # INT that fits (_member_int; in a bitfield struct
            # check_int_bitfield).  Anything else, or any doubt, goes
            # through it.
            mt = rt
            if k in _MODIFIERS and ref >= kstart:
                mt = types[rid[ref]]      # (resolved: modifiers are always walked)
                k = mt.kind
            off = m[2]
            if k in _WHOLE_MEMBERS:
                if not m[3] and not off & 7 and (not bitfields or k in _COMPOSITE_OR_PTR) \
                        and (size - (off >> 3)) & _U32 >= (ptr_size if k is PTR else mt.size):
                    continue
            elif k is INT:
                if not bitfields:
                    at, nbits = off + mt.bit_offset, mt.bits
                    fits = _U32 - off >= mt.bit_offset
                else:
                    at, nbits, bits = off, m[3], mt.bits
                    fits = not mt.bit_offset and bits in _REGULAR_INT_BITS \
                        and (nbits <= bits if nbits else not off & 7)
                    nbits = nbits or bits
                copy_bits = nbits + (at & 7)
                if fits and copy_bits <= _BITS_PER_U128 and size >= (at >> 3) \
                        and size - (at >> 3) >= (copy_bits + 7) >> 3:
                    continue
            check_member(type_id, t, m, rt)
        self.pop(0, 0)

    def resolve_array(self, top: list[int]) -> None:
        type_id = top[0]
        t = self.types[type_id]
        if self.needs_first(type_id, 'index type', t.index_type):
            return
        index = self.id_size(t.index_type)
        if index is None or self.types[index[0]].kind is not INT \
                or not self.regular_int(index[0]):
            raise _Reject(type_id, f'index type {self.describe(t.index_type)} is not a plain INT')
        if self.needs_first(type_id, 'element type', t.type):
            return
        sized = self.id_size(t.type)
        if sized is None:
            raise _Reject(type_id, f'element type {self.describe(t.type)} has no size')
        elem_id, elem_size = sized
        if self.types[elem_id].kind is INT and not self.regular_int(elem_id):
            raise _Reject(type_id, f'element type {self.describe(elem_id)} is a bitfield INT')
        if t.nelems and elem_size > _U32 // t.nelems:
            raise _Reject(type_id, f'{t.nelems} elements of {elem_size} bytes overflow 32 bits')
        self.pop(elem_id, elem_size * t.nelems)

    def resolve_func(self, top: list[int]) -> None:
        type_id = top[0]
        t = self.types[type_id]
        proto = self.get(t.type)
        if proto is None or proto.kind is not FUNC_PROTO:
            raise _Reject(type_id, f'refers to {self.describe(t.type)}, not a FUNC_PROTO')
        for i, p in enumerate(proto.items, 1):
            if not p.name and p.type:
                raise _Reject(type_id, f'argument #{i} of its FUNC_PROTO [{t.type}] has no name')
        self.pop(t.type, 0)

    def resolve_decl_tag(self, top: list[int]) -> None:
        type_id = top[0]
        t = self.types[type_id]
        target = self.get(t.type)
        if target is None or target.kind not in _DECL_TAG_TARGETS:
            raise _Reject(type_id, f'tags {self.describe(t.type)}; only FUNC, STRUCT, '
                          'UNION, VAR and TYPEDEF can be tagged')
        if not self.sink(target) and not self.resolved(t.type):
            self.push(t.type)
            return
        if t.component_idx != -1:
            if target.kind in (VAR, TYPEDEF):
                raise _Reject(type_id, f'component_idx {t.component_idx} on a {target.kind.name}')
            if target.kind is FUNC:
                target = self.get(target.type) or VOID
            if t.component_idx >= len(target.items):
                raise _Reject(type_id, f'component_idx {t.component_idx} past the '
                              f'{len(target.items)} members or arguments of [{t.type}]')
        self.pop(t.type, 0)

    def resolve_datasec(self, top: list[int]) -> None:
        type_id, start = top
        t = self.types[type_id]
        self.mode = _MODE_TBD
        # Like the kernel, the entry whose VAR had to be resolved first is not
        # checked again when the walk comes back (the loop resumes after it).
        for i in range(start, len(t.items)):
            entry = t.items[i]
            var = self.get(entry.type)
            if var is None or var.kind is not VAR:
                raise _Reject(type_id, f'entry {i} refers to {self.describe(entry.type)}, not a VAR')
            if not self.sink(var) and not self.resolved(entry.type):
                top[1] = i + 1
                self.push(entry.type)
                return
            sized = self.id_size(var.type)
            if sized is None:
                raise _Reject(type_id, f'entry {i}: the type of VAR [{entry.type}] has no size')
            if entry.size < sized[1]:
                raise _Reject(type_id, f'entry {i} (VAR [{entry.type}]) has size {entry.size}, '
                              f'less than its type\'s {sized[1]}')
        self.pop(0, 0)

    # -- struct members against their types (check_member ops) ------------

    def regular_int(self, type_id: int) -> bool:
        """A plain integer: no bit offset, 8/16/32/64/128 bits (btf_type_int_is_regular)."""
        t = self.types[type_id]
        nbytes = (t.bits + 7) >> 3
        return not t.bits % 8 and not t.bit_offset and nbytes in (1, 2, 4, 8, 16)

    def check_member(self, sid: int, s: BtfType, m: Member, mt: BtfType) -> None:
        """``s`` is a STRUCT or UNION: its kind_flag says bitfields."""
        k = mt.kind
        if k in _MODIFIERS:
            sized = self.id_size(m.type)
            if sized is None:
                raise _Reject(sid, f"member '{m.name}' type {self.describe(m.type)} has no size")
            # (never a modifier again: id_size goes past them)
            m = _new(Member, (m[0], sized[0], m[2], m[3]))
            mt = self.types[sized[0]]
            k = mt.kind
        if s.kflag:
            if k is INT:
                return self.check_int_bitfield(sid, s, m, mt)
            if k in (ENUM, ENUM64):
                return self.check_enum_bitfield(sid, s, m)
            if m.bitfield_size:
                raise _Reject(sid, f"member '{m.name}' is a bitfield of a {k.name}")
        check = _MEMBER_CHECKS.get(k)
        if check is None:
            raise _Reject(sid, f"member '{m.name}': a {k.name} cannot be a member")
        message = check(self, s, m, mt)
        if message:
            raise _Reject(sid, f"member '{m.name}' {message}")

    def check_int_bitfield(self, sid: int, s: BtfType, m: Member, it: BtfType) -> None:
        if not self.regular_int(m.type):
            raise _Reject(sid, f"member '{m.name}': bitfield base {self.describe(m.type)} "
                          'is not a plain INT')
        nbits = m.bitfield_size
        if not nbits:
            if m.bit_offset % 8:
                raise _Reject(sid, f"member '{m.name}' at bit {m.bit_offset} is not byte aligned")
            nbits = it.bits
        elif nbits > it.bits:
            raise _Reject(sid, f"member '{m.name}': bitfield of {nbits} bits is wider than "
                          f'its base {self.describe(m.type)} ({it.bits} bits)')
        message = _bits_fit(s.size, m.bit_offset, nbits)
        if message:
            raise _Reject(sid, f"member '{m.name}' {message}")

    def check_enum_bitfield(self, sid: int, s: BtfType, m: Member) -> None:
        nbits = m.bitfield_size
        if not nbits:
            if m.bit_offset % 8:
                raise _Reject(sid, f"member '{m.name}' at bit {m.bit_offset} is not byte aligned")
            nbits = 32      # the kernel takes sizeof(int) for ENUM64 too
        elif nbits > 32:
            raise _Reject(sid, f"member '{m.name}': enum bitfield of {nbits} bits is wider than 32")
        if (m.bit_offset + nbits + 7) >> 3 > s.size:
            raise _Reject(sid, f"member '{m.name}' ({nbits} bits at bit {m.bit_offset}) "
                          f'runs past the struct size {s.size}')

    # -- FUNC_PROTO arguments (btf_func_proto_check) -----------------------

    def check_func_proto(self, type_id: int, t: BtfType) -> None:
        if t.type:
            ret = self.get(t.type)
            if ret is None or ret.kind in _SOURCE_ONLY:
                raise _Reject(type_id, f'returns {self.describe(t.type)}')
            if ret.kind in _NEEDS_RESOLVE and not self.resolved(t.type):
                self.resolve(t.type)
            if self.id_size(t.type) is None:
                raise _Reject(type_id, f'returns {self.describe(t.type)}, which has no size')
        args = t.items
        if args and not args[-1].type:
            if args[-1].name:
                raise _Reject(type_id, f'the varargs marker (last argument, type void) '
                              f'is named {args[-1].name!r}')
            args = args[:-1]
        types, total, kstart, state, idents = self.types, self.total, self.kstart, self.state, \
            self._identifiers
        for i, p in enumerate(args, 1):
            # check_argument accepts at once an argument with a size of its
            # own that needs no resolving (or is resolved), validly named.
            name, ref = p
            k = types[ref].kind if 0 <= ref < total else None
            if k in _OWN_SIZE and (k not in _NEEDS_RESOLVE or ref < kstart
                                   or state[ref] == _RESOLVED) \
                    and (not name or idents.get(name) or self.identifier(name)):
                continue
            self.check_argument(type_id, i, p)

    def check_argument(self, type_id: int, i: int, p: Param) -> None:
        at = self.get(p.type)
        if at is None or at.kind in _SOURCE_ONLY:
            raise _Reject(type_id, f'argument #{i} has type {self.describe(p.type)}')
        if p.name and not self.identifier(p.name):
            raise _Reject(type_id, f'argument #{i} name {p.name!r} is not a valid identifier')
        if at.kind in _NEEDS_RESOLVE and not self.resolved(p.type):
            self.resolve(p.type)
        if self.id_size(p.type) is None:
            where = 'only the last argument may be void (varargs)' if not p.type else 'no size'
            raise _Reject(type_id, f'argument #{i} has type {self.describe(p.type)}: {where}')

    # -- pass 4: type tags first in modifier chains (btf_check_type_tags) --

    def check_type_tags(self, type_ids: Iterable[int] | None = None) -> None:
        """Every chain of modifiers from ``type_ids`` (every own type by
        default, which lets a chain stop at a type already checked)."""
        good_id = self.first - 1
        whole = type_ids is None
        ids = range(self.first, self.total) if type_ids is None else type_ids
        for type_id in ids:
            t = self.types[type_id]
            if t.kind not in _MODIFIERS:
                continue
            in_tags = t.kind is TYPE_TAG
            cur, limit = type_id, MAX_RESOLVE_DEPTH
            while t.kind in _MODIFIERS:
                if not limit:
                    raise _Reject(type_id, f'modifier chain longer than {MAX_RESOLVE_DEPTH}')
                limit -= 1
                if t.kind is TYPE_TAG and not in_tags:
                    raise _Reject(type_id, f'TYPE_TAG [{cur}] follows another modifier; '
                                  'type tags must come first')
                in_tags = in_tags and t.kind is TYPE_TAG
                if cur <= good_id:
                    break
                cur = t.type
                target = self.get(cur)
                if target is None:
                    raise _Reject(type_id, f'modifier chain reaches missing type [{cur}]')
                t = target
            if whole:
                good_id = type_id


def _bits_fit(struct_size: int, bit_offset: int, nbits: int) -> str | None:
    """Whether ``nbits`` at ``bit_offset`` can be copied out of the struct."""
    copy_bits = nbits + bit_offset % 8
    if copy_bits > _BITS_PER_U128:
        return f'({nbits} bits at bit {bit_offset}) spans more than 128 bits'
    byte_off = bit_offset >> 3
    if struct_size < byte_off or struct_size - byte_off < (copy_bits + 7) >> 3:
        return f'({nbits} bits at bit {bit_offset}) runs past the struct size {struct_size}'
    return None


def _member_int(c: _Checker, s: BtfType, m: Member, it: BtfType) -> str | None:
    if _U32 - m.bit_offset < it.bit_offset:
        return f'bit offset {m.bit_offset} + {it.bit_offset} overflows 32 bits'
    return _bits_fit(s.size, m.bit_offset + it.bit_offset, it.bits)


def _member_sized(size: int, s: BtfType, m: Member) -> str | None:
    """Byte-aligned members: pointers, arrays, structs, enums."""
    if m.bit_offset % 8:
        return f'at bit {m.bit_offset} is not byte aligned'
    if (s.size - (m.bit_offset >> 3)) & _U32 < size:
        return f'({size} bytes at byte {m.bit_offset >> 3}) runs past the struct size {s.size}'
    return None


def _member_ptr(c: _Checker, s: BtfType, m: Member, mt: BtfType) -> str | None:
    return _member_sized(c.ptr_size, s, m)


def _member_array(c: _Checker, s: BtfType, m: Member, mt: BtfType) -> str | None:
    sized = c.id_size(m.type)
    return _member_sized(sized[1] if sized else 0, s, m)


def _member_aggregate(c: _Checker, s: BtfType, m: Member, mt: BtfType) -> str | None:
    return _member_sized(mt.size, s, m)


def _member_float(c: _Checker, s: BtfType, m: Member, mt: BtfType) -> str | None:
    align_bits = min(c.ptr_size, mt.size) * 8
    if align_bits and m.bit_offset % align_bits:
        return f'at bit {m.bit_offset} is not aligned to {align_bits} bits'
    if (m.bit_offset >> 3) + mt.size > s.size:
        return f'({mt.size} bytes at byte {m.bit_offset >> 3}) runs past the struct size {s.size}'
    return None


_MEMBER_CHECKS: Final = {INT: _member_int, PTR: _member_ptr, ARRAY: _member_array,
                  STRUCT: _member_aggregate, UNION: _member_aggregate,
                  ENUM: _member_aggregate, ENUM64: _member_aggregate,
                  FLOAT: _member_float}

_RESOLVE: Final = {
    **{k: _Checker.resolve_reference for k in _MODIFIERS},
    PTR: _Checker.resolve_reference,
    VAR: _Checker.resolve_reference,
    STRUCT: _Checker.resolve_struct,
    UNION: _Checker.resolve_struct,
    ARRAY: _Checker.resolve_array,
    FUNC: _Checker.resolve_func,
    DECL_TAG: _Checker.resolve_decl_tag,
    DATASEC: _Checker.resolve_datasec,
}


# ---------------------------------------------------------------------------
# Per-kind rules (the check_meta ops)

def _no_vlen(t: BtfType) -> str | None:
    return f'vlen {len(t.items)}, must be 0' if t.items else None


def _no_kflag(t: BtfType) -> str | None:
    return 'kind_flag must be 0' if t.kflag else None


def _type_id(what: str, type_id: int, allow_void: bool = True) -> str | None:
    if not allow_void and not type_id:
        return f'{what} is void'
    if type_id > BTF_MAX_TYPE:
        return f'{what} id {type_id} is out of range'
    return None


def _anonymous(t: BtfType) -> str | None:
    return f'must be anonymous, is named {t.name!r}' if t.name else None


def _meta_unknown(c: _Checker, t: BtfType) -> str | None:
    return f'kind {t.kind.name} cannot be a type'


def _meta_not_linux(c: _Checker, t: BtfType) -> str | None:
    return f'kind {t.kind.name} ({int(t.kind)}) is not one Linux knows'


def _meta_int(c: _Checker, t: BtfType) -> str | None:
    nbits = t.bits + t.bit_offset
    if nbits > _BITS_PER_U128:
        return f'{t.bits} bits at bit offset {t.bit_offset} exceed {_BITS_PER_U128} bits'
    if (nbits + 7) >> 3 > t.size:
        return f'{t.bits} bits at bit offset {t.bit_offset} do not fit its size {t.size}'
    if t.encoding not in (0, 1, 2, 4):
        return f'encoding {t.encoding:#x} is not one of none, SIGNED, CHAR, BOOL'
    return _no_vlen(t) or _no_kflag(t)


def _meta_reference(c: _Checker, t: BtfType) -> str | None:
    k = t.kind
    if t.items or t.kflag or t.type > BTF_MAX_TYPE:
        kflag = c.tag_kflag(t) if k is TYPE_TAG else _no_kflag(t)
        message = _no_vlen(t) or kflag or _type_id('target', t.type)
        if message:
            return message
    if k is TYPEDEF:
        return c.named(t)
    if k is TYPE_TAG:
        return None if t.name else 'needs a tag value'
    return _anonymous(t) if t.name else None


def _meta_fwd(c: _Checker, t: BtfType) -> str | None:
    if t.type:
        return f'type field {t.type}, must be 0'
    return _no_vlen(t) or c.named(t)


def _meta_array(c: _Checker, t: BtfType) -> str | None:
    return (_anonymous(t) or _no_vlen(t) or _no_kflag(t)
            or _type_id('element type', t.type, allow_void=False)
            or _type_id('index type', t.index_type, allow_void=False))


def _meta_struct(c: _Checker, t: BtfType) -> str | None:
    message = c.optionally_named(t) if t.name else None
    if message:
        return message
    # The members in one loop, each rule inline; a member that breaks one
    # is looked at again by _member_meta, which says which.
    last = 0
    end = t.size << 3
    idents = c._identifiers
    union = t.kind is UNION
    named_well = c.identifiers([m[0] for m in t.items if m[0]])
    for m in t.items:
        name, mtype, off, _ = m
        if (not named_well and name and not (idents.get(name) or c.identifier(name))) \
                or not 0 < mtype <= BTF_MAX_TYPE or off < last or off > end or (union and off):
            message = _member_meta(c, t, m, last)
            if message:
                return f"member '{m.name or '(anon)'}' {message}"
        last = off
    return None


def _composite_fine(c: _Checker, t: BtfType) -> bool:
    """Whether a struct or union whose own fields are in range passes its
    members' _unencodable and _meta_struct rules: one loop over them, for
    what nearly every one is (a False leaves the rules to say why)."""
    if t.name and not c.identifier(t.name):
        return False
    items = t.items
    if not c.identifiers([m[0] for m in items if m[0]]):
        return False
    last, end, union = 0, t.size << 3, t.kind is UNION
    offset_bits, max_bitfield = (24, 0xff) if t.kflag else (32, 0)
    for _, mtype, off, bitfield in items:
        if not (0 < mtype <= BTF_MAX_TYPE and last <= off <= end
                and 0 <= bitfield <= max_bitfield) or off >> offset_bits or (union and off):
            return False
        last = off
    return True


def _member_meta(c: _Checker, t: BtfType, m: Member, last: int) -> str | None:
    if m.name and not c.identifier(m.name):
        return 'name is not a valid identifier'
    if not m.type:
        return 'is void'
    if m.type > BTF_MAX_TYPE:
        return f'type id {m.type} is out of range'
    if t.kind is UNION and m.bit_offset:
        return f'offset {m.bit_offset}: union members are at offset 0'
    if m.bit_offset < last:
        return f'offset {m.bit_offset} is before the previous member\'s {last}'
    if (m.bit_offset + 7) >> 3 > t.size:
        return f'offset {m.bit_offset} past the struct size {t.size}'
    return None


def _meta_enum(c: _Checker, t: BtfType) -> str | None:
    if t.size > 8 or t.size & (t.size - 1) or not t.size:
        return f'size {t.size}, must be 1, 2, 4 or 8'
    message = c.optionally_named(t)
    if message:
        return message
    if all([v[0] for v in t.items]) and c.identifiers([v[0] for v in t.items]):
        return None
    for v in t.items:
        if not v.name:
            return 'a value has no name'
        if not c.identifier(v.name):
            return f'value name {v.name!r} is not a valid identifier'
    return None


def _meta_func_proto(c: _Checker, t: BtfType) -> str | None:
    return _anonymous(t) or _no_kflag(t)


def _meta_func(c: _Checker, t: BtfType) -> str | None:
    message = c.named(t)
    if message:
        return message
    if t.linkage > 1:
        return f'linkage {t.linkage}, must be static (0) or global (1)'
    return _no_kflag(t)


def _meta_var(c: _Checker, t: BtfType) -> str | None:
    message = (_no_vlen(t) or _no_kflag(t) or c.named(t)
               or _type_id('type', t.type, allow_void=False))
    if message:
        return message
    if t.linkage not in (0, 1):
        return f'linkage {t.linkage}, must be static (0) or global allocated (1)'
    return None


def _meta_datasec(c: _Checker, t: BtfType) -> str | None:
    if not t.size:
        return 'size 0'
    message = _no_kflag(t) or c.section_named(t)
    if message:
        return message
    end = total = 0
    for i, v in enumerate(t.items):
        message = _datasec_entry(t, v, end)
        if message:
            return f'entry {i} (type [{v.type}], offset {v.offset}, size {v.size}): {message}'
        end = v.offset + v.size
        total += v.size
    if total > t.size:
        return f'entries add up to {total} bytes, more than its size {t.size}'
    return None


def _datasec_entry(t: BtfType, v: VarSecinfo, end: int) -> str | None:
    if not v.type or v.type > BTF_MAX_TYPE:
        return 'type is void or out of range'
    if v.offset < end:
        return f'overlaps the previous entry (ending at {end}) or is out of order'
    if v.offset >= t.size:
        return f'offset past the section size {t.size}'
    if not v.size or v.size > t.size:
        return f'size must be 1..{t.size}'
    if v.offset + v.size > t.size:
        return f'ends past the section size {t.size}'
    return None


def _meta_float(c: _Checker, t: BtfType) -> str | None:
    return (_no_vlen(t) or _no_kflag(t)
            or (None if t.size in (2, 4, 8, 12, 16) else f'size {t.size}, must be 2, 4, 8, 12 or 16'))


def _meta_decl_tag(c: _Checker, t: BtfType) -> str | None:
    if not t.name:
        return 'needs a tag value'
    message = _no_vlen(t) or c.tag_kflag(t)
    if message:
        return message
    if t.component_idx < -1:
        return f'component_idx {t.component_idx}, must be -1 or a member/argument index'
    return None


_META: Final = {
    UNKN: _meta_unknown, INT: _meta_int, PTR: _meta_reference,
    ARRAY: _meta_array, STRUCT: _meta_struct, UNION: _meta_struct,
    ENUM: _meta_enum, FWD: _meta_fwd, TYPEDEF: _meta_reference,
    VOLATILE: _meta_reference, CONST: _meta_reference,
    RESTRICT: _meta_reference, FUNC: _meta_func,
    FUNC_PROTO: _meta_func_proto, VAR: _meta_var, DATASEC: _meta_datasec,
    FLOAT: _meta_float, DECL_TAG: _meta_decl_tag,
    TYPE_TAG: _meta_reference, ENUM64: _meta_enum,
}


# ---------------------------------------------------------------------------
# Model fields that the binary format cannot hold

def _unencodable(t: BtfType) -> str | None:
    """A model value that ``encode_btf`` would have to truncate."""
    # What nearly every type passes, in a few operations (a negative value
    # shifts to -1); a type that does not is looked at field by field.
    if not ((t.size | t.type | t.index_type | t.nelems) >> 32 or t.linkage >> 16
            or t.kflag >> 1 or (t.bits | t.bit_offset) >> 8 or t.encoding >> 4
            or len(t.items) > 0xffff or not -(1 << 31) <= t.component_idx < 1 << 31):
        check = _ITEM_RANGES.get(t.kind)
        return check(t) if check else None
    for field, value, limit in ((
            'size', t.size, _U32), ('type', t.type, _U32), ('index_type', t.index_type, _U32),
            ('nelems', t.nelems, _U32), ('kind_flag', t.kflag, 1), ('vlen', t.vlen, 0xffff),
            ('bits', t.bits, 0xff), ('bit_offset', t.bit_offset, 0xff),
            ('encoding', t.encoding, 0x0f), ('linkage', t.linkage, _U32)):
        if not 0 <= value <= limit:
            return f'{field} {value} does not fit its field (0..{limit})'
    if not -(1 << 31) <= t.component_idx < 1 << 31:
        return f'component_idx {t.component_idx} does not fit 32 bits'
    check = _ITEM_RANGES.get(t.kind)
    return check(t) if check else None


def _members_encodable(t: BtfType) -> str | None:
    # Each field in its range (a negative one shifts to -1): what nearly
    # every member passes, before the loop that says which does not.
    if t.kflag:
        if not any([(m[1] >> 32) | (m[2] >> 24) | (m[3] >> 8) for m in t.items]):
            return None
    elif not any([(m[1] >> 32) | (m[2] >> 32) | m[3] for m in t.items]):
        return None
    offset_limit = 0xffffff if t.bitfields else _U32
    for m in t.items:
        if not 0 <= m.type <= _U32 or not 0 <= m.bit_offset <= offset_limit:
            return f"member '{m.name}' type or offset does not fit its field"
        if not 0 <= m.bitfield_size <= (0xff if t.bitfields else 0):
            return (f"member '{m.name}' bitfield size {m.bitfield_size} "
                    + ('does not fit 8 bits' if t.bitfields else 'needs kind_flag 1'))
    return None


def _values_encodable(t: BtfType) -> str | None:
    bits = 64 if t.kind is ENUM64 else 32
    for v in t.items:
        if not -(1 << (bits - 1)) <= v.value < 1 << bits:
            return f"value '{v.name}' = {v.value} does not fit {bits} bits"
    return None


def _params_encodable(t: BtfType) -> str | None:
    """A FUNC_PROTO's parameter types (names are strings, not ids)."""
    if not any([p[1] >> 32 for p in t.items]):
        return None
    return _ids_encodable(t)


def _ids_encodable(t: BtfType) -> str | None:
    for item in t.items:
        if any(not 0 <= x <= _U32 for x in item if isinstance(x, int)):
            return f'entry {item} does not fit 32-bit fields'
    return None


_ITEM_RANGES: Final = {STRUCT: _members_encodable, UNION: _members_encodable,
                ENUM: _values_encodable, ENUM64: _values_encodable,
                FUNC_PROTO: _params_encodable, DATASEC: _ids_encodable}
