"""Read ELF files lazily: headers on open, section data, symbols and relocations on demand.

Only the standard library is used, so that importing this on the per-object
path costs nothing: the tool runs once per object of a kernel build.
"""
from __future__ import annotations

import mmap
import os
import struct
import zlib
from collections.abc import Callable
from typing import Literal, NamedTuple

from .consts import (ELFCLASS32, ELFCLASS64, EV_CURRENT, ELFCOMPRESS_ZLIB, ELFCOMPRESS_ZSTD,
                     ELFDATA2LSB, ELFDATA2MSB, SHF_COMPRESSED, SHN_XINDEX,
                     SHT_DYNSYM, SHT_NOBITS, SHT_NULL, SHT_REL, SHT_RELA,
                     SHT_STRTAB, SHT_SYMTAB, SHT_SYMTAB_SHNDX)
from .. import c_extension
from ..regular_files import file_identity, open_regular
from .errors import ElfError

#: objbtf.elf._relocs, when the compiled build runs.
_C = c_extension('objbtf.elf._relocs')

ByteOrder = Literal['little', 'big']
_BYTE_ORDERS: dict[int, ByteOrder] = {ELFDATA2LSB: 'little', ELFDATA2MSB: 'big'}


class Layout:
    """The struct formats of one ELF class and byte order."""

    def __init__(self, bits: int, byteorder: str) -> None:
        self.prefix = e = '<' if byteorder == 'little' else '>'   # for struct formats
        if bits == 64:
            self.ehdr = struct.Struct(e + '16sHHIQQQIHHHHHH')
            self.shdr = struct.Struct(e + 'IIQQQQIIQQ')
            self.sym = struct.Struct(e + 'IBBHQQ')
            self.rel = struct.Struct(e + 'QQ')
            self.rela = struct.Struct(e + 'QQq')
            self.chdr = struct.Struct(e + 'IIQQ')
            self.sym_shift = 32          # r_info = sym << 32 | type
        else:
            self.ehdr = struct.Struct(e + '16sHHIIIIIHHHHHH')
            self.shdr = struct.Struct(e + 'IIIIIIIIII')
            self.sym = struct.Struct(e + 'IIIBBH')
            self.rel = struct.Struct(e + 'II')
            self.rela = struct.Struct(e + 'IIi')
            self.chdr = struct.Struct(e + 'III')
            self.sym_shift = 8           # r_info = sym << 8 | type
        self.type_mask = (1 << self.sym_shift) - 1
        self.word = bits // 8            # alignment of the tables of this class


LAYOUTS = {(bits, order): Layout(bits, order)
           for bits in (32, 64) for order in ('little', 'big')}


#: What Linux maps around a page a read faults in (fault_around_bytes):
#: ``ElfFile.release`` drops whole windows of it.
_FAULT_AROUND = 1 << 16
#: The largest section alignment objbtf reads: a kernel's sections ask for
#: a page at the most, and a rewrite honours what they ask.
MAX_ALIGN = 1 << 24


class Section(NamedTuple):
    """One section header; ``name_offset`` is sh_name, kept for rewriting."""
    index: int          # type: ignore[assignment]  # (a field, over tuple.index)
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    addralign: int
    entsize: int
    name_offset: int


class Symbol(NamedTuple):
    """One symbol table entry; ``shndx`` is already resolved through SHT_SYMTAB_SHNDX."""
    index: int          # type: ignore[assignment]  # (a field, over tuple.index)
    name: str
    value: int
    size: int
    type: int
    bind: int
    shndx: int


Relocation = tuple[int, int, int, int]   # (offset, symbol index, type, addend)
Buffer = bytes | bytearray | memoryview | mmap.mmap


def _cstr(table: bytes, offset: int, what: str) -> str:
    """The NUL-terminated string at ``offset`` of a string table."""
    end = table.find(b'\0', offset)
    if offset >= len(table) or end < 0:
        raise ElfError(f'{what} name offset {offset} is outside its string table '
                       f'({len(table)} bytes)')
    return table[offset:end].decode('utf-8', 'surrogateescape')


def _inflate(stream: bytes, size: int, name: str) -> bytes:
    try:
        out = zlib.decompress(stream)
    except zlib.error as exc:
        raise ElfError(f'section {name}: bad compressed data ({exc})') from None
    if len(out) != size:
        raise ElfError(f'section {name}: decompressed to {len(out)} bytes, '
                       f'the header says {size}')
    return out


class ElfFile:
    """An ELF file over a buffer (bytes, or a read-only mmap from ``open``).

    Parsing reads only the ELF header, the section headers and the section
    name table; everything else is read when asked for. ``path`` is kept for
    the caller's messages.
    """

    def __init__(self, data: Buffer, path: str = '<memory>') -> None:
        self.path = path
        self.data = data
        self._mmap: mmap.mmap | None = None
        self._parse_header()
        self.sections = self._parse_sections()
        self._by_name: dict[str, Section] | None = None
        self._relocs_for: dict[int, Section] | None = None
        self._symbols: list[Symbol] | None = None
        self._relocations: dict[int, list[Relocation]] = {}
        self._inflated: dict[int, bytes] = {}
        #: (device, inode, size, mtime) of the file it was read from, if any
        self.identity: tuple[int, int, int, int] | None = None

    @classmethod
    def open(cls, path: str) -> ElfFile:
        """Map ``path`` read-only; close() (or a with block) unmaps it.

        Pages are read only when touched, so a large vmlinux opens at the cost
        of its section headers. The file must not be truncated while mapped
        (rewrite_object replaces it by rename, which is safe).
        """
        fd, st = open_regular(path)
        try:
            if st.st_size == 0:
                raise ElfError('empty file')
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        try:
            elf = cls(mm, path)
        except BaseException:
            mm.close()
            raise
        elf._mmap = mm
        elf.identity = file_identity(st)
        return elf

    def close(self) -> None:
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:       # a view is still alive (an error unwinding):
                pass                  # the mapping goes when the last one does
            self._mmap = None

    def __enter__(self) -> ElfFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- headers ---------------------------------------------------------

    def _parse_header(self) -> None:
        data = self.data
        if len(data) < 16:
            raise ElfError(f'truncated: {len(data)} bytes, no room for the ELF identification')
        if data[:4] != b'\x7fELF':
            raise ElfError('bad magic, not an ELF file')
        bits = {ELFCLASS32: 32, ELFCLASS64: 64}.get(data[4])
        order = _BYTE_ORDERS.get(data[5])
        if bits is None or order is None:
            raise ElfError(f'bad ELF class {data[4]} or data encoding {data[5]}')
        self.layout = layout = LAYOUTS[bits, order]
        self.elf_class = bits
        #: The target's ``sizeof(void *)`` (and ``long``'s), by its ELF class.
        self.pointer_size = bits // 8
        self.byteorder: ByteOrder = order
        if len(data) < layout.ehdr.size:
            raise ElfError(f'truncated: {len(data)} bytes, the ELF header needs '
                           f'{layout.ehdr.size}')
        (_, self.e_type, self.machine, version, _, _, self.e_shoff, _, ehsize, _,
         self.e_phnum, self._shentsize, self._shnum,
         self._shstrndx) = layout.ehdr.unpack_from(data)
        # What libelf (and so bpftool and the kernel's resolve_btfids) insists on.
        if data[6] != EV_CURRENT or version != EV_CURRENT:
            raise ElfError(f'unknown ELF version {data[6]}/{version} (only {EV_CURRENT} exists)')
        if ehsize != layout.ehdr.size:
            raise ElfError(f'ELF header size {ehsize}, expected {layout.ehdr.size}')

    def _header_rows(self) -> list[tuple[int, ...]]:
        """Raw section header tuples, with extended numbering resolved."""
        shdr, size = self.layout.shdr, len(self.data)
        if self.e_shoff == 0:
            return []
        if self._shentsize != shdr.size:
            raise ElfError(f'section header size {self._shentsize}, expected {shdr.size}')
        if self.e_shoff + shdr.size > size:
            raise ElfError(f'section header table at 0x{self.e_shoff:x} is past the '
                           f'end of the file ({size} bytes)')
        first = shdr.unpack_from(self.data, self.e_shoff)
        count = self._shnum or first[5]            # sh_size of header 0
        if self._shstrndx == SHN_XINDEX:
            self._shstrndx = first[6]              # sh_link of header 0
        end = self.e_shoff + count * shdr.size
        if end > size:
            raise ElfError(f'section header table ({count} entries at '
                           f'0x{self.e_shoff:x}) runs past the end of the file ({size} bytes)')
        return list(shdr.iter_unpack(self.data[self.e_shoff:end]))

    def _parse_sections(self) -> list[Section]:
        rows = self._header_rows()
        size = len(self.data)
        for i, (_, typ, _, _, off, sz, _, _, align, _) in enumerate(rows):
            if typ not in (SHT_NULL, SHT_NOBITS) and off + sz > size:
                raise ElfError(f'section {i} (offset 0x{off:x}, size 0x{sz:x}) runs past '
                               f'the end of the file ({size} bytes)')
            # libelf refuses the first (ELF_E_INVALID_ALIGN); a rewrite would
            # pad the file by gigabytes for the second.
            if align & (align - 1) or align > MAX_ALIGN:
                raise ElfError(f'section {i} has alignment 0x{align:x}: not a power of two '
                               f'up to 0x{MAX_ALIGN:x}')
        names = self._section_names(rows)
        return [Section(i, names(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7],
                        r[8], r[9], r[0]) for i, r in enumerate(rows)]

    def _section_names(self, rows: list[tuple[int, ...]]) -> Callable[[int], str]:
        """A function from sh_name to the name (all names empty without e_shstrndx)."""
        if self._shstrndx == 0:
            return lambda off: ''
        if self._shstrndx >= len(rows):
            raise ElfError(f'bad e_shstrndx {self._shstrndx}, there are {len(rows)} sections')
        row = rows[self._shstrndx]
        # libelf reads names only from a string table (elf_strptr) that is
        # not compressed, so libbpf and bpftool could not read an object
        # with another.
        if row[1] != SHT_STRTAB:
            raise ElfError(f'the section name table (section {self._shstrndx}) has type '
                           f'0x{row[1]:x}, not SHT_STRTAB')
        if row[2] & SHF_COMPRESSED:
            raise ElfError(f'the section name table (section {self._shstrndx}) is marked '
                           'compressed (SHF_COMPRESSED): libelf reads no names from it')
        table = self._raw(row[4], row[5])
        return lambda off: _cstr(table, off, 'section')

    @property
    def shstrndx(self) -> int:
        """Index of the section name table (0 if none), extended numbering resolved."""
        return self._shstrndx

    def _raw(self, offset: int, size: int) -> bytes:
        return bytes(self.data[offset:offset + size])

    # --- sections --------------------------------------------------------

    def section_by_name(self, name: str) -> Section | None:
        """The first section called ``name``."""
        if self._by_name is None:
            by_name: dict[str, Section] = {}
            for sec in self.sections:
                by_name.setdefault(sec.name, sec)
            self._by_name = by_name
        return self._by_name.get(name)

    def debug_section(self, name: str) -> Section | None:
        """The DWARF section ``name`` (``.debug_info``...), or its legacy
        ``-gz=zlib-gnu`` form ``.zdebug_info``, which ``section_data``
        inflates."""
        return self.section_by_name(name) or self.section_by_name('.z' + name[1:])

    def section_data(self, sec: Section) -> bytes:
        """The contents of ``sec``, decompressed if it is compressed; b'' for NOBITS."""
        if sec.type in (SHT_NULL, SHT_NOBITS):
            return b''
        compressed = sec.flags & SHF_COMPRESSED or sec.name.startswith('.zdebug')
        if not compressed:
            return self._raw(sec.offset, sec.size)
        out = self._inflated.get(sec.index)
        if out is None:
            out = self._inflated[sec.index] = self._decompress(sec)
        return out

    def section_view(self, sec: Section) -> bytes | memoryview:
        """Like ``section_data``, but a view into the mapped file where the
        section is stored as it is: no copy of a vmlinux's tens of megabytes.
        Views must be released before the file is closed."""
        compressed = sec.flags & SHF_COMPRESSED or sec.name.startswith('.zdebug')
        if compressed or sec.type in (SHT_NULL, SHT_NOBITS):
            return self.section_data(sec)
        return memoryview(self.data)[sec.offset:sec.offset + sec.size]

    def release(self, sec: Section, start: int = 0, end: int | None = None) -> None:
        """Done reading bytes ``start:end`` of ``sec`` for now: their pages
        leave this process's memory (they stay in the page cache, and come
        back if read again).  The link reads a vmlinux's hundreds of
        megabytes of per-object BTF piece by piece and would otherwise keep
        it all.  A read maps the pages around the one it faults in too
        (Linux's fault-around, 64 KB), those of the bytes beside these
        among them, so the whole 64 KB windows the range touches go: what
        of them is read again comes back from the page cache."""
        if self._mmap is None:
            return
        end = sec.size if end is None else end
        first = (sec.offset + start) // _FAULT_AROUND * _FAULT_AROUND
        last = min(-(-(sec.offset + end) // _FAULT_AROUND) * _FAULT_AROUND, len(self._mmap))
        if last > first:
            self._mmap.madvise(mmap.MADV_DONTNEED, first, last - first)

    def _decompress(self, sec: Section) -> bytes:
        raw = self._raw(sec.offset, sec.size)
        if not sec.flags & SHF_COMPRESSED:
            # legacy .zdebug_*: "ZLIB", 8-byte big-endian size, zlib stream
            if raw[:4] != b'ZLIB' or len(raw) < 12:
                return raw
            return _inflate(raw[12:], int.from_bytes(raw[4:12], 'big'), sec.name)
        chdr = self.layout.chdr
        if len(raw) < chdr.size:
            raise ElfError(f'section {sec.name}: truncated compression header')
        fields = chdr.unpack_from(raw)
        ch_type, ch_size = fields[0], fields[-2]
        if ch_type != ELFCOMPRESS_ZLIB:
            kind = ' (zstd)' if ch_type == ELFCOMPRESS_ZSTD else ''
            raise ElfError(f'section {sec.name}: unsupported compression type {ch_type}{kind}')
        return _inflate(raw[chdr.size:], ch_size, sec.name)

    def _linked(self, sec: Section, what: str) -> Section:
        if not 0 < sec.link < len(self.sections):
            raise ElfError(f'section {sec.name}: bad sh_link {sec.link} to its {what}')
        return self.sections[sec.link]

    # --- symbols ---------------------------------------------------------

    def symtab(self) -> Section | None:
        """The first SHT_SYMTAB section."""
        return next((s for s in self.sections if s.type == SHT_SYMTAB), None)

    def _symbol_count(self, symtab: Section) -> int:
        entsize = self.layout.sym.size
        if symtab.type not in (SHT_SYMTAB, SHT_DYNSYM):
            raise ElfError(f'section {symtab.name} is not a symbol table')
        if symtab.entsize != entsize or symtab.size % entsize:
            raise ElfError(f'symbol table {symtab.name}: entry size {symtab.entsize} '
                           f'and size {symtab.size}, expected multiples of {entsize}')
        return symtab.size // entsize

    def symbols(self) -> list[Symbol]:
        """All entries of the symbol table (parsed once), or [] without one."""
        if self._symbols is None:
            symtab = self.symtab()
            self._symbols = [] if symtab is None else self._read_symbols(symtab)
        return self._symbols

    def typed_symbols(self, stt: int) -> list[Symbol]:
        """The symbols of one type (STT_FUNC, ...), without building the
        others: a vmlinux has a hundred thousand."""
        if self._symbols is not None:
            return [s for s in self._symbols if s.type == stt]
        symtab = self.symtab()
        return [] if symtab is None else self._read_symbols(symtab, stt)

    def section_symbols(self, sec: Section) -> list[Symbol]:
        """The symbols defined in ``sec``, without building the others."""
        if self._symbols is not None:
            return [s for s in self._symbols if s.shndx == sec.index]
        symtab = self.symtab()
        return [] if symtab is None else self._read_symbols(symtab, section=sec.index)

    def _read_symbols(self, symtab: Section, stt: int | None = None,
                      section: int | None = None) -> list[Symbol]:
        """The entries of ``symtab``; with ``stt``, only those of that type;
        with ``section``, only those defined in that section."""
        self._symbol_count(symtab)          # a size that holds whole entries
        strtab = self._linked(symtab, 'string table')
        if strtab.type != SHT_STRTAB:
            raise ElfError(f'section {symtab.name}: its string table {strtab.name} has type '
                           f'0x{strtab.type:x}, not SHT_STRTAB')
        strs = self.section_data(strtab)
        rows = self.layout.sym.iter_unpack(self._raw(symtab.offset, symtab.size))
        if self.elf_class == 64:
            rows = ((n, v, sz, info, shndx) for n, info, _, shndx, v, sz in rows)
        else:
            rows = ((n, v, sz, info, shndx) for n, v, sz, info, _, shndx in rows)
        syms = [Symbol(i, _cstr(strs, n, 'symbol') if n else '', v, sz, info & 0xf,
                       info >> 4, shndx)
                for i, (n, v, sz, info, shndx) in enumerate(rows)
                if (stt is None or info & 0xf == stt)
                and (section is None or shndx in (section, SHN_XINDEX))]
        if any(s.shndx == SHN_XINDEX for s in syms):
            xindex = self._extended_indices(symtab, self._symbol_count(symtab))
            syms = [s if s.shndx != SHN_XINDEX else s._replace(shndx=xindex[s.index])
                    for s in syms]
            if section is not None:
                syms = [s for s in syms if s.shndx == section]
        return syms

    def _extended_indices(self, symtab: Section, count: int) -> tuple[int, ...]:
        """The SHT_SYMTAB_SHNDX words of ``symtab``."""
        sec = next((s for s in self.sections
                    if s.type == SHT_SYMTAB_SHNDX and s.link == symtab.index), None)
        if sec is None or sec.size < 4 * count:
            raise ElfError('symbols use SHN_XINDEX but the extended index table '
                           'is missing or short')
        return struct.unpack_from(f'{self.layout.prefix}{count}I',
                                  self._raw(sec.offset, 4 * count))

    # --- relocations -----------------------------------------------------

    def relocations(self, sec: Section) -> list[Relocation]:
        """(offset, symbol index, type, addend) of every entry of a REL/RELA
        section; REL entries get addend 0 (theirs is in the target's bytes).
        Read once.  The compiled build reads the encoder's in C (``_relocs.c``:
        relocs.apply_relocations and ``relocations_by_field``)."""
        rels = self._relocations.get(sec.index)
        if rels is None:
            rels = self._relocations[sec.index] = self._read_relocations(sec)
        return rels

    def relocations_by_field(self, target: Section, width: int,
                             types: frozenset[int] | None = None) -> dict[int, tuple[int, int]]:
        """The relocations of ``target``'s ``width``-byte fields by the
        field's offset, as (symbol index, addend); only those of ``types``
        if given. A REL section's addend is the field's value (``ld -r``
        adds the input section's place to it where the relocation is
        against a section symbol); RELA's is the entry's."""
        rsec = self.reloc_section_for(target.index)
        if rsec is None:
            return {}
        if _C is not None:
            raw, nsyms = self.relocation_entries(rsec)
            rela = rsec.type == SHT_RELA
            found = _C.by_field(b'' if rela else self.section_view(target), raw, rela,
                                self.elf_class == 64, self.byteorder == 'big', nsyms, width,
                                types)
            if found is not None:
                return found
        rels = self.relocations(rsec)
        if rsec.type != SHT_REL:
            if types is None:
                return {off: (sym, addend) for off, sym, _type, addend in rels}
            return {off: (sym, addend) for off, sym, rtype, addend in rels if rtype in types}
        if types is not None:
            rels = [r for r in rels if r[2] in types]
        data, byteorder = self.section_view(target), self.byteorder
        if rels and max(r[0] for r in rels) + width > len(data):
            raise ElfError(f'a relocation of {rsec.name} is past the end of {target.name}')
        return {off: (sym, int.from_bytes(data[off:off + width], byteorder))
                for off, sym, _type, _addend in rels}

    def relocation_entries(self, sec: Section) -> tuple[bytes, int]:
        """The entries of REL/RELA section ``sec`` as stored, and the size
        of the symbol table they index, once the headers of both are checked."""
        if sec.type not in (SHT_REL, SHT_RELA):
            raise ElfError(f'section {sec.name} is not a relocation section')
        st = self.layout.rela if sec.type == SHT_RELA else self.layout.rel
        if sec.entsize != st.size or sec.size % st.size:
            raise ElfError(f'relocation section {sec.name}: entry size {sec.entsize} '
                           f'and size {sec.size}, expected multiples of {st.size}')
        nsyms = self._symbol_count(self._linked(sec, 'symbol table'))
        return self._raw(sec.offset, sec.size), nsyms

    def _read_relocations(self, sec: Section) -> list[Relocation]:
        raw, nsyms = self.relocation_entries(sec)
        layout = self.layout
        shift, mask = layout.sym_shift, layout.type_mask
        if sec.type == SHT_RELA:
            rels = [(o, i >> shift, i & mask, a) for o, i, a in layout.rela.iter_unpack(raw)]
        else:
            rels = [(o, i >> shift, i & mask, 0) for o, i in layout.rel.iter_unpack(raw)]
        if rels and max(r[1] for r in rels) >= nsyms:
            k, r = next((k, r) for k, r in enumerate(rels) if r[1] >= nsyms)
            raise ElfError(f'relocation {k} of {sec.name} refers to symbol {r[1]}, '
                           f'the symbol table has {nsyms}')
        return rels

    def reloc_section_for(self, target_index: int) -> Section | None:
        """The (first) SHT_REL/SHT_RELA section whose sh_info is ``target_index``."""
        if self._relocs_for is None:
            found: dict[int, Section] = {}
            for sec in self.sections:
                if sec.type in (SHT_REL, SHT_RELA) and sec.info:
                    found.setdefault(sec.info, sec)
            self._relocs_for = found
        return self._relocs_for.get(target_index)
