"""pahole's encoding rules for base types and enums, shared by the loaders
(``dwarf.loader`` reads them from DWARF, ``compiler_btf.loader`` from the
compiler's own BTF) so that both give the same types."""
from __future__ import annotations

from .kinds import ENUM, ENUM64, Kind
from .types import BtfType, Enumerator
from ..features import Features

FAKE_INT = '__SANITIZED_FAKE_INT__'
_new = tuple.__new__


def base_type(name: str, size: int, encoding: int, is_float: bool,
              features: Features) -> BtfType:
    """An INT or FLOAT of ``size`` bytes; ``encoding`` is INT_SIGNED,
    INT_BOOL or 0 (pahole never sets INT_CHAR).  A size BTF cannot hold
    (DWARF 5's DW_OP_convert types) becomes a 4-byte ``__SANITIZED_FAKE_INT__``,
    a float without the ``float`` feature a plain INT."""
    if is_float and features.float:
        return BtfType(Kind.FLOAT, name, size=size)
    if size == 0 or size & (size - 1) or size > 16:
        return BtfType(Kind.INT, FAKE_INT, size=4, bits=32)
    return BtfType(Kind.INT, name, size=size, encoding=encoding, bits=size * 8)


def declared_enum(name: str) -> BtfType:
    """A declaration-only enum: ENUM of size 4 without values, as pahole."""
    return BtfType(Kind.ENUM, name, size=4)


def enum_type(name: str, size: int, values: list[Enumerator], signed: bool,
              features: Features) -> BtfType:
    """An ENUM (up to 4 bytes, or any size without ``enum64``; signed when a
    value is negative) or an ENUM64 (signed when ``signed``, the underlying
    type's signedness)."""
    if size <= 4 or not features.enum64:
        kind, signed = ENUM, any([v < 0 for _, v in values])
        vals = tuple([_new(Enumerator, (n, _s32(v) if signed else v & 0xffffffff))
                      for n, v in values])
    else:
        kind = ENUM64
        vals = tuple([_new(Enumerator, (n, _s64(v) if signed else v & (2**64 - 1)))
                      for n, v in values])
    t = BtfType(kind, name, size=size, items=vals)
    t.signed = signed
    return t


def _s32(v: int) -> int:
    v &= 0xffffffff
    return v - (1 << 32) if v >= 1 << 31 else v


def _s64(v: int) -> int:
    v &= 2**64 - 1
    return v - (1 << 64) if v >= 1 << 63 else v
