"""The codec's writer: a ``Btf`` into the raw BTF format the kernel and libbpf read.

Every kind is written as the registry (``kinds.py``) lays it out, with one
encoder per layout of the words after ``struct btf_type``.
"""
from __future__ import annotations

import functools
import sys
from array import array
from collections.abc import Callable
from typing import Final

from .. import c_extension
from .errors import BtfError
from .header import BtfHeader
from .kinds import (
    BTF_ARRAY, BTF_DECL_TAG, BTF_ENUM, BTF_ENUM64, BTF_MEMBER, BTF_PARAM, BTF_VAR,
    BTF_VAR_SECINFO, INT_DATA, KINDS, LINKAGE, SIZE, SIZE_TYPE_OFFSET, TYPE_HEAD_LEN, ZERO,
    KindInfo, KindRegistry, in_c,
)
from .strings import StringTable
from .types import Btf, BtfType

#: objbtf.btf._blob, when the compiled build runs.
_C: Final = c_extension('objbtf.btf._blob')

#: Appends what follows a type's common header, as 32-bit words.
Extra = Callable[[list, BtfType, StringTable], None]


def encode_btf(btf: Btf, offsets: list[int] | None = None, byteorder: str | None = None,
               kinds: KindRegistry = KINDS) -> bytes:
    """The raw BTF blob of ``btf``: header, type section, string section.

    Strings are laid out in order of first use, so equal tables give equal
    bytes.  Split BTF refers to its base's strings where the base has them.
    The compiled build writes base BTF of the kernel's kinds in C
    (``_blob.c``), and leaves what it does not expect to the code below.
    ``offsets``, if given, receives each own type's offset in the type
    section, in id order (the encoder places relocations with them).
    ``byteorder`` ('little' or 'big') defaults to the table's own.

    A value the format cannot hold raises BtfError.
    """
    order = byteorder or btf.byteorder
    if _C is not None and btf.base is None and in_c(kinds):
        written = _C.write(btf.types, order == 'big')
        if written is not None:
            section, sdata, at = written
            if offsets is not None:
                offsets += at
            return BtfHeader.for_sections(order, len(section), len(sdata)).pack() + section + sdata
    if btf.base is not None:
        if btf.base.strings is None:
            raise BtfError('split BTF needs a base read from bytes')
        strings = StringTable(btf.base.strings)
    else:
        strings = StringTable()
    words: list[int] = []
    starts: list[int] = []
    add_start = starts.append
    specs = _write_specs(kinds)
    own = btf.types if btf.base is not None else btf.types[1:]
    for i, t in enumerate(own):
        add_start(len(words) << 2)
        k = t.kind
        try:
            word, linkage, extra, kind_bits = specs[k]
        except KeyError:
            raise BtfError(f'type {btf.start_id + i} has kind {k.name}, '
                           'which this registry does not know') from None
        vlen = t.linkage if linkage else len(t.items)
        if vlen > 0xffff:
            raise BtfError(f'type {btf.start_id + i} ({k.name} {t.name!r}) has {vlen} entries, '
                           'more than BTF can hold')
        words += (strings[t.name], (t.kflag & 1) << 31 | kind_bits | (vlen & 0xffff),
                  t.type if word == _TYPE_WORD else t.size if word == _SIZE_WORD else 0)
        if extra is not None:
            try:
                extra(words, t, strings)
            except _Unfit as err:
                raise BtfError(f'type {btf.start_id + i} ({k.name} {t.name!r}): {err}') from None
    if offsets is not None:
        offsets += starts
    types = _word_bytes(words, order)
    sdata = strings.data()
    return BtfHeader.for_sections(order, len(types), len(sdata)).pack() + types + sdata


def with_kind_layout(blob: bytes, kinds: KindRegistry = KINDS) -> bytes:
    """``blob`` with a kind layout section (``kinds.layout``) between its
    types and its strings, under a 32-byte header, as libbpf writes BTF made
    with ``add_layout`` (pahole's ``layout`` feature): a reader that does not
    know a kind can still step over it.  Linux 7.x reads it; older kernels
    refuse the longer header, so it is for base BTF of kernels that know it."""
    h = BtfHeader.read(blob)
    layout = kinds.layout
    header = BtfHeader.for_sections(h.order, h.type_len, h.str_len, len(layout))
    return header.pack() + bytes(h.types(blob)) + layout + bytes(h.strings(blob))


def rewrite_type(buf: bytearray, pos: int, t: BtfType, byteorder: str,
                 kinds: KindRegistry = KINDS) -> None:
    """Writes ``t``'s size-or-type word and the words after it over the type
    at byte ``pos`` of ``buf``, in place (a cached link's DATASECs placed
    anew); its name, kind and vlen stay.  ``t`` has the kind and vlen of the
    type it replaces, and its entries name no strings."""
    word, _, extra, _ = _write_specs(kinds)[t.kind]
    words = [t.type if word == _TYPE_WORD else t.size if word == _SIZE_WORD else 0]
    if extra is not None:
        extra(words, t, _NO_STRINGS)
    start = pos + SIZE_TYPE_OFFSET
    buf[start:start + 4 * len(words)] = _word_bytes(words, byteorder)


def _word_bytes(words: list[int], byteorder: str) -> bytes:
    """32-bit words in byte order ``byteorder``."""
    try:
        section = array(_U32, words)
    except (OverflowError, TypeError) as err:
        raise BtfError(f'a value does not fit in its 32-bit field: {err}') from None
    if (byteorder == 'big') != (sys.byteorder == 'big'):
        section.byteswap()
    return section.tobytes()


class _Unfit(Exception):
    """A model value its field cannot hold."""


# What a kind's size-or-type word is written from.
_TYPE_WORD: Final = 0
_SIZE_WORD: Final = 1
_ZERO_WORD: Final = 2


def _int(words: list[int], t: BtfType, name: StringTable) -> None:
    words.append((t.encoding & 0x0f) << 24 | (t.bit_offset & 0xff) << 16 | (t.bits & 0xff))


def _array(words: list[int], t: BtfType, name: StringTable) -> None:
    words += (t.type, t.index_type, t.nelems)


def _members(words: list[int], t: BtfType, name: StringTable) -> None:
    if t.kflag:
        for n, mt, off, bits in t.items:
            words += (name[n], mt, bits << 24 | off)
    else:
        for n, mt, off, _ in t.items:
            words += (name[n], mt, off)


def _enum(words: list[int], t: BtfType, name: StringTable) -> None:
    for n, value in t.items:
        words += (name[n], value & 0xffffffff)


def _enum64(words: list[int], t: BtfType, name: StringTable) -> None:
    for n, value in t.items:
        value &= 0xffffffffffffffff
        words += (name[n], value & 0xffffffff, value >> 32)


def _params(words: list[int], t: BtfType, name: StringTable) -> None:
    for n, pt in t.items:
        words += (name[n], pt)


def _var(words: list[int], t: BtfType, name: StringTable) -> None:
    words.append(t.linkage)


def _datasec(words: list[int], t: BtfType, name: StringTable) -> None:
    for v in t.items:
        words += v


def _decl_tag(words: list[int], t: BtfType, name: StringTable) -> None:
    idx = t.component_idx
    if not -1 << 31 <= idx < 1 << 31:
        raise _Unfit(f'component index {idx} does not fit in 32 bits')
    words.append(idx & 0xffffffff)


#: The encoder of each layout of the words after ``struct btf_type``.
_ENCODERS: dict[tuple[str, ...], Extra] = {
    INT_DATA: _int, BTF_ARRAY: _array, BTF_VAR: _var, BTF_DECL_TAG: _decl_tag,
    BTF_MEMBER: _members, BTF_ENUM: _enum, BTF_ENUM64: _enum64, BTF_PARAM: _params,
    BTF_VAR_SECINFO: _datasec,
}
_U32: Final = next(code for code in 'IL' if array(code).itemsize == 4)
#: What ``rewrite_type`` gives the encoders for strings: none to look up.
_NO_STRINGS: dict[str, int] = {}


def encoder(info: KindInfo) -> Extra | None:
    """The encoder of a kind's words after ``struct btf_type`` (None: none)."""
    layout = info.fixed or info.entry
    return _ENCODERS[layout] if layout else None


@functools.cache
def _write_specs(kinds: KindRegistry) -> dict:
    """Per kind: what its size-or-type word is written from, whether vlen
    holds its linkage, its encoder, and its number in place in the info word."""
    return {i.kind: (_SIZE_WORD if i.word == SIZE else _ZERO_WORD if i.word == ZERO
                     else _TYPE_WORD,
                     i.vlen == LINKAGE, encoder(i), (i.number & 0x1f) << 24)
            for i in kinds}


def type_offsets(btf: Btf, kinds: KindRegistry = KINDS) -> list[int]:
    """Byte offset of each own type within the type section, in id order.

    The encoder uses this to place ``.rel.BTF`` relocations on DATASEC
    entries.
    """
    offs = []
    pos = 0
    for _, t in btf.own():
        offs.append(pos)
        pos += TYPE_HEAD_LEN + kinds[t.kind].extra_len(t.vlen)
    return offs
