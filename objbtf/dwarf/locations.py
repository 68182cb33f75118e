"""Where a function's parameters arrive: pahole's reading of DW_AT_location.

pahole drops a function whose parameters do not arrive in the registers its
prototype says (a clone the compiler rewrote): BPF programs attached to it
would read the wrong registers.  It reads each parameter's DW_AT_location
(an expression, or a location list in .debug_loclists for DWARF 5,
.debug_loc for DWARF 4) as dwarf_loader.c's ``parameter__reg`` does
(``parameter_register``, pahole 1.31), and the newest pahole as its
``parameter__decode_location`` does (``location_register``, which tells
an optimized-out parameter); this module does the same on the bytes the
encoder already has.
"""
from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

from . import constants as C
from .reader import Expr, read_uleb

#: DW_OP_reg numbers of the registers that carry the first parameters, by
#: ELF machine (dwarf_loader.c's arch__set_register_params).
REGISTER_PARAMS: dict[int, tuple[int, ...]] = {
    62: (0x55, 0x54, 0x51, 0x52, 0x58, 0x59),      # x86_64: rdi rsi rdx rcx r8 r9
    22: (0x52, 0x53, 0x54, 0x55, 0x56),            # s390: r2-r6
    183: tuple(range(0x50, 0x58)),                 # aarch64: x0-x7
    40: tuple(range(0x50, 0x58)),                  # arm: as pahole has it
}
#: How many parameters go in registers (arch__nr_register_params); a
#: machine not listed has none, and pahole then checks nothing.
NR_REGISTER_PARAMS: dict[int, int] = {22: 5, 2: 6, 43: 6, 62: 6, 183: 8, 93: 8, 40: 8,
                                      8: 8, 20: 8, 21: 8, 243: 8}

_LLE_END, _LLE_BASE_ADDRESSX, _LLE_STARTX_ENDX, _LLE_STARTX_LENGTH = 0, 1, 2, 3
_LLE_OFFSET_PAIR, _LLE_DEFAULT, _LLE_BASE_ADDRESS, _LLE_START_END = 4, 5, 6, 7
_LLE_START_LENGTH, _LLE_GNU_VIEW_PAIR = 8, 9

#: Operand sizes of the operations that can start a one-operation
#: expression; -1: ULEB, -2: SLEB, -3: ULEB then SLEB.
_OPERANDS = {0x08: 1, 0x09: 1, 0x0a: 2, 0x0b: 2, 0x0c: 4, 0x0d: 4, 0x0e: 8, 0x0f: 8,
             0x10: -1, 0x11: -2, 0x15: 1, 0x23: -1, 0x28: 2, 0x2f: 2, 0x90: -1, 0x91: -2, 0x92: -3, 0x93: -1,
             0x94: 1, 0xa1: -1, 0xa2: -1, 0xa8: -1, 0xf7: -1, 0xfa: 4, 0xfb: -1}


class Locations:
    """Reads one object's parameter locations: DWARF 5 lists in
    ``loclists``; DWARF 4 ones in what ``loc()`` returns, .debug_loc with
    its relocations applied (its lists end with a pair of zero addresses,
    which unrelocated entries would look like), called at the first one."""

    def __init__(self, loclists: bytes, loc: Callable[[], bytes], byteorder: str):
        self._loclists = loclists
        self._get_loc = loc
        self._loc_data: bytes | None = None
        self._e = '<' if byteorder == 'little' else '>'

    def expressions(self, value, version: int, addr_size: int) -> Iterator[bytes]:
        """The expression of each location of a DW_AT_location ``value``:
        an exprloc, or the offset of a location list."""
        if isinstance(value, Expr):
            yield value.data
        elif isinstance(value, int):
            if version >= 5:
                yield from self._loclist(value, addr_size)
            else:
                yield from self._loc(value, addr_size)

    def _loclist(self, pos: int, addr_size: int) -> Iterator[bytes]:
        """The entries of a DWARF 5 location list that carry an expression."""
        data = self._loclists
        while pos < len(data):
            kind = data[pos]
            pos += 1
            if kind == _LLE_END:
                return
            if kind in (_LLE_BASE_ADDRESSX, _LLE_GNU_VIEW_PAIR):
                _, pos = read_uleb(data, pos)
                if kind == _LLE_GNU_VIEW_PAIR:
                    _, pos = read_uleb(data, pos)
                continue
            if kind == _LLE_BASE_ADDRESS:
                pos += addr_size
                continue
            if kind in (_LLE_STARTX_ENDX, _LLE_STARTX_LENGTH, _LLE_OFFSET_PAIR):
                _, pos = read_uleb(data, pos)
                _, pos = read_uleb(data, pos)
            elif kind == _LLE_START_END:
                pos += 2 * addr_size
            elif kind == _LLE_START_LENGTH:
                pos += addr_size
                _, pos = read_uleb(data, pos)
            elif kind != _LLE_DEFAULT:
                return                      # unknown entry: nothing more can be read
            length, pos = read_uleb(data, pos)
            yield bytes(data[pos:pos + length])
            pos += length

    def _loc(self, pos: int, addr_size: int) -> Iterator[bytes]:
        """The entries of a DWARF 4 .debug_loc list that carry an expression."""
        if self._loc_data is None:
            self._loc_data = self._get_loc()
        data = self._loc_data
        pair = struct.Struct(self._e + ('II' if addr_size == 4 else 'QQ'))
        length = struct.Struct(self._e + 'H')
        base_marker = (1 << (8 * addr_size)) - 1
        while pos + pair.size <= len(data):
            begin, end = pair.unpack_from(data, pos)
            pos += pair.size
            if begin == 0 and end == 0:
                return
            if begin == base_marker:
                continue
            (n,) = length.unpack_from(data, pos)
            pos += 2
            yield bytes(data[pos:pos + n])
            pos += n


def _op_length(expr: bytes, pos: int) -> int | None:
    """Bytes of the operation at ``pos`` (None: one this module does not size)."""
    op = expr[pos]
    if 0x30 <= op <= 0x6f or op in (0x06, 0x96, 0x9c, 0x9f) or \
            (0x12 <= op <= 0x2e and op not in _OPERANDS):
        return 1
    if 0x70 <= op <= 0x8f:                      # DW_OP_breg0..31 SLEB
        return read_uleb(expr, pos + 1)[1] - pos
    if op in (C.OP_entry_value, C.OP_GNU_entry_value):
        n, p = read_uleb(expr, pos + 1)
        return p + n - pos
    size = _OPERANDS.get(op)
    if size is None:
        return None
    if size > 0:
        return 1 + size
    p = read_uleb(expr, pos + 1)[1]
    if size == -3:
        p = read_uleb(expr, p)[1]
    return p - pos


def _single_operation(expr: bytes) -> bool:
    """Whether ``expr`` is one operation, a trailing DW_OP_stack_value aside."""
    if not expr:
        return False
    try:
        n = _op_length(expr, 0)
    except IndexError:
        return False
    return n is not None and (n == len(expr) or
                              (n == len(expr) - 1 and expr[-1] == C.OP_stack_value))


def parameter_register(exprs: Iterator[bytes], expected: int) -> int:
    """pahole's ``parameter__reg``: ``expected`` (a DW_OP_reg number) when
    the first location is that register or some location is
    DW_OP_entry_value of it; else the last register seen that way; -1 when
    there is none (the parameter counts as optimized out)."""
    found = -1
    for i, expr in enumerate(exprs):
        if not _single_operation(expr):
            continue
        op = expr[0]
        if C.OP_reg0 <= op <= C.OP_reg31:
            if i == 0:
                found = op
                if op == expected:
                    return op
        elif op in (C.OP_entry_value, C.OP_GNU_entry_value):
            n, p = read_uleb(expr, 1)
            inner = expr[p:p + n]
            if inner and _op_length(inner, 0) == len(inner):
                found = inner[0]
                if found == expected:
                    return found
    return found


def _operations(expr: bytes) -> list[int] | None:
    """The opcodes of ``expr``, or None if it has one this module does not size."""
    ops = []
    pos = 0
    while pos < len(expr):
        n = _op_length(expr, pos)
        if n is None:
            return None
        ops.append(expr[pos])
        pos += n
    return ops


def _is_reg(op: int) -> bool:
    return C.OP_reg0 <= op <= C.OP_reg31


def _is_breg(op: int) -> bool:
    return C.OP_breg0 <= op <= C.OP_breg31


def _is_constant(op: int) -> bool:
    return C.OP_lit0 <= op <= C.OP_lit31 or op in (C.OP_constu, C.OP_consts)


def location_register(exprs: Iterator[bytes], aggregate: bool) -> int:
    """The newest pahole's register of a parameter (``loc_reg`` of
    dwarf_loader.c's parameter__decode_location), or -1 when its locations
    name none: then pahole counts a parameter that should arrive in a
    register as optimized out.  In the first location: ``DW_OP_regN``, or
    ``DW_OP_bregN`` computing a value (``DW_OP_stack_value``); in any
    location: ``DW_OP_entry_value(DW_OP_regN)``.  An ``aggregate`` (a
    parameter wider than a register, which may take two) is described in
    pieces: their first register, in any location."""
    for i, expr in enumerate(exprs):
        ops = _operations(expr) if expr else None
        if not ops:
            continue
        first = ops[0]
        stack_value = ops[-1] == C.OP_stack_value
        if len(ops) == 1 or (len(ops) == 2 and stack_value):
            if i == 0 and _is_reg(first):
                return first
            if i == 0 and stack_value and _is_breg(first):
                return first - C.OP_breg0 + C.OP_reg0
            if first in (C.OP_entry_value, C.OP_GNU_entry_value):
                n, p = read_uleb(expr, 1)
                inner = expr[p:p + n]
                if inner and _op_length(inner, 0) == len(inner) and _is_reg(inner[0]):
                    return inner[0]
        elif _is_constant(first):
            continue
        elif not aggregate:
            if i == 0 and _is_reg(first):
                return first
            if i == 0 and stack_value and _is_breg(first):
                return first - C.OP_breg0 + C.OP_reg0
        else:
            for op in ops:
                if _is_reg(op):
                    return op
    return -1
