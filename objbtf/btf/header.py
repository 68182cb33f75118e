"""``struct btf_header``: the 24 bytes before a blob's sections, in either
byte order, or 32 with the kind layout section's place (Linux 7.x)."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import overload

from .errors import BtfError
from .kinds import BTF_HEADER_LEN, BTF_LAYOUT_HEADER_LEN, BTF_MAGIC, BTF_VERSION

_LAYOUT = 'HBBIIIII'     # magic, version, flags, hdr_len, type_off, type_len, str_off, str_len
_KIND_LAYOUT = 'II'      # layout_off, layout_len, after them in a 32-byte header
_MAGIC_BYTES = {b'\x9f\xeb': 'little', b'\xeb\x9f': 'big'}


def order_char(byteorder: str) -> str:
    """The ``struct`` prefix of 'little' or 'big'."""
    return '<' if byteorder == 'little' else '>'


def byteorder_of(data: bytes | memoryview) -> str:
    """'little' or 'big' from the magic, or raise BtfError."""
    if len(data) < 4:
        raise BtfError('too short for a BTF header')
    magic = bytes(data[0:2])
    order = _MAGIC_BYTES.get(magic)
    if order is None:
        raise BtfError(f'bad magic 0x{magic[0]:02x}{magic[1]:02x}, not BTF')
    return order


def magic_order(data: bytes) -> str | None:
    """'little' or 'big' when ``data`` starts with the magic, else None."""
    return _MAGIC_BYTES.get(bytes(data[:2]))


def header_len(data: bytes, order: str) -> int:
    """The hdr_len field of a blob of at least 8 bytes in byte order
    ``order``, as it is (the kernel reads it before anything else)."""
    return struct.unpack_from(order_char(order) + _LAYOUT[:4], data)[3]


@dataclass(frozen=True)
class BtfHeader:
    """A blob's header; offsets count from the end of the header."""
    order: str              # 'little' or 'big'
    hdr_len: int
    type_off: int
    type_len: int
    str_off: int
    str_len: int
    magic: int = BTF_MAGIC
    version: int = BTF_VERSION
    flags: int = 0
    layout_off: int = 0     # the kind layout section (a header of 32 bytes or more)
    layout_len: int = 0

    @classmethod
    def read(cls, data: bytes | memoryview) -> BtfHeader:
        """The header of a blob whose sections lie within ``data``, or raise BtfError."""
        order = byteorder_of(data)
        fmt = order_char(order) + _LAYOUT
        if len(data) < struct.calcsize(fmt):
            raise BtfError('too short for a BTF header')
        magic, version, flags, hdr_len, type_off, type_len, str_off, str_len = \
            struct.unpack_from(fmt, data)
        layout_off = layout_len = 0
        if BTF_LAYOUT_HEADER_LEN <= hdr_len <= len(data):
            layout_off, layout_len = struct.unpack_from(order_char(order) + _KIND_LAYOUT, data,
                                                        BTF_HEADER_LEN)
        h = cls(order, hdr_len, type_off, type_len, str_off, str_len, magic, version, flags,
                layout_off, layout_len)
        if version != BTF_VERSION:
            raise BtfError(f'unsupported BTF version {version}')
        if h.hdr_len < BTF_HEADER_LEN or h.hdr_len > len(data):
            raise BtfError(f'bad header length {h.hdr_len}')
        end = len(data) - h.hdr_len
        if (h.type_off + h.type_len > end or h.str_off + h.str_len > end
                or h.layout_off + h.layout_len > end):
            raise BtfError(f'sections run past the end of the data '
                           f'(types {h.type_off}+{h.type_len}, strings {h.str_off}+{h.str_len}, '
                           f'kind layout {h.layout_off}+{h.layout_len}, '
                           f'{end} bytes after the header)')
        return h

    @classmethod
    def read_as_kernel(cls, data: bytes, order: str, hdr_len: int,
                       known: int = BTF_LAYOUT_HEADER_LEN) -> BtfHeader:
        """The header as a kernel that knows ``known`` bytes of it reads it:
        the first ``min(hdr_len, known)`` bytes copied into a zeroed header,
        nothing checked."""
        head = bytes(data[:min(hdr_len, known)]).ljust(BTF_LAYOUT_HEADER_LEN, b'\0')
        magic, version, flags, _, type_off, type_len, str_off, str_len, layout_off, layout_len = \
            struct.unpack(order_char(order) + _LAYOUT + _KIND_LAYOUT, head)
        return cls(order, hdr_len, type_off, type_len, str_off, str_len, magic, version, flags,
                   layout_off, layout_len)

    @classmethod
    def for_sections(cls, order: str, type_len: int, str_len: int,
                     layout_len: int = 0) -> BtfHeader:
        """The header objbtf writes: types, then strings, right after it;
        with a kind layout section, a 32-byte header and the section between
        them, as libbpf lays it out."""
        if not layout_len:
            return cls(order, BTF_HEADER_LEN, 0, type_len, type_len, str_len)
        return cls(order, BTF_LAYOUT_HEADER_LEN, 0, type_len, type_len + layout_len, str_len,
                   layout_off=type_len, layout_len=layout_len)

    def pack(self) -> bytes:
        fmt = order_char(self.order) + _LAYOUT
        fields = [self.magic, self.version, self.flags, self.hdr_len, self.type_off,
                  self.type_len, self.str_off, self.str_len]
        if self.hdr_len >= BTF_LAYOUT_HEADER_LEN:
            fmt += _KIND_LAYOUT
            fields += [self.layout_off, self.layout_len]
        return struct.pack(fmt, *fields).ljust(self.hdr_len, b'\0')

    @property
    def size(self) -> int:
        """Bytes of the whole blob: header and sections."""
        return self.hdr_len + max(self.type_off + self.type_len, self.str_off + self.str_len,
                                  self.layout_off + self.layout_len)

    def kind_layout(self, data: bytes | memoryview) -> bytes:
        """The kind layout section of the blob ``data`` (empty without one)."""
        start = self.hdr_len + self.layout_off
        return bytes(data[start:start + self.layout_len])

    @overload
    def types(self, data: bytes) -> bytes: ...
    @overload
    def types(self, data: memoryview) -> memoryview: ...

    def types(self, data: bytes | memoryview) -> bytes | memoryview:
        """The type section of the blob ``data``."""
        start = self.hdr_len + self.type_off
        return data[start:start + self.type_len]

    @overload
    def strings(self, data: bytes) -> bytes: ...
    @overload
    def strings(self, data: memoryview) -> memoryview: ...

    def strings(self, data: bytes | memoryview) -> bytes | memoryview:
        """The string section of the blob ``data``."""
        start = self.hdr_len + self.str_off
        return data[start:start + self.str_len]
