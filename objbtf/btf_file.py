"""Find the BTF of a file: the .BTF section of an ELF object, or a raw blob."""
from __future__ import annotations

import os

from .btf.chunk import SECTION as CHUNK_SECTION, Chunk, split_chunks
from .btf.distilled import SECTION as DISTILLED_SECTION
from .btf.errors import BtfError
from .btf.reader import parse_btf
from .btf.types import Btf
from .elf.errors import ElfError
from .elf.consts import ET_REL, SHT_REL
from .elf.reader import ElfFile, Section
from .regular_files import open_regular, read_regular

ELF_MAGIC = b'\x7fELF'


def read_btf_bytes(path: str) -> bytes:
    """The raw BTF of ``path``: its .BTF section if it is ELF, else the file."""
    return read_btf(path)[0]


def read_btf(path: str) -> tuple[bytes, int]:
    """The raw BTF of ``path`` and the pointer size of the target it was
    built for: its .BTF section and its ELF class's 4 or 8 if it is ELF,
    else the file and 0 (raw BTF does not record it; the check then takes
    the size of its ``long``: ``validate.pointer_size``)."""
    if not _is_elf(path):
        return read_regular(path), 0
    with ElfFile.open(path) as elf:
        sec = elf.section_by_name('.BTF')
        if sec is None:
            raise BtfError('no .BTF section')
        return _as_linked_alone(elf, sec, elf.section_data(sec)), elf.pointer_size


def read_split(path: str, base: Btf | None) -> tuple[bytes, Btf | None, int]:
    """``read_btf`` of ``path``, with the base its BTF is split on: ``base``.
    A module with a distilled base (``.BTF.base``: an out-of-tree module's,
    ``objbtf.btf.distilled``) is read as the kernel loads it: its BTF
    relocated onto ``base`` (re-encoded on it), or without ``base`` on the
    distilled base itself.  BtfError (a ``RelocationError``) when it cannot
    be relocated."""
    raw, pointer_size = read_btf(path)
    dist = distilled_base_of(path)
    if dist is None:
        return raw, base, pointer_size
    on_dist = parse_btf(raw, parse_btf(dist))
    if base is None:
        assert on_dist.base is not None
        return raw, on_dist.base, pointer_size
    from .btf.distilled import relocate
    from .btf.writer import encode_btf
    return encode_btf(relocate(on_dist, base)), base, pointer_size


def distilled_base_of(path: str) -> bytes | None:
    """The ``.BTF.base`` section of ``path``, if it is ELF and has one."""
    if not _is_elf(path):
        return None
    with ElfFile.open(path) as elf:
        sec = elf.section_by_name(DISTILLED_SECTION)
        return None if sec is None else elf.section_data(sec)


def chunks_of(path: str) -> list[Chunk]:
    """The ``.BTF.objbtf`` chunks of ``path``: an encoded object's one, a
    relocatable link's of each object; none for raw BTF or a file without
    them.  BtfError (or ElfError) where they cannot be read."""
    if not _is_elf(path):
        return []
    with ElfFile.open(path) as elf:
        sec = elf.section_by_name(CHUNK_SECTION)
        return [] if sec is None else split_chunks(elf.section_data(sec), elf.byteorder)


def _is_elf(path: str) -> bool:
    """Whether ``path`` (opened as a regular file only) starts as ELF does."""
    fd, _ = open_regular(path)
    with os.fdopen(fd, 'rb') as f:
        return f.read(4) == ELF_MAGIC


def _as_linked_alone(elf: ElfFile, sec: Section, raw: bytes) -> bytes:
    """An object's .BTF as if it were linked alone, on machines whose
    relocations keep their addends in the relocated bytes (REL: i386).
    There, until the link, each DATASEC entry's offset field holds the
    addend, not the variable's offset in its section (RELA objects hold
    that offset); applied against the symbols' offsets, they do."""
    rsec = elf.reloc_section_for(sec.index)
    if elf.e_type != ET_REL or rsec is None or rsec.type != SHT_REL:
        return raw
    by_field = elf.relocations_by_field(sec, 4)
    if not by_field:                # no symbol to read: the object's may be damaged
        return raw
    symbols = elf.symbols()
    out = bytearray(raw)
    for offset, (symbol, addend) in by_field.items():
        value = symbols[symbol].value + addend
        out[offset:offset + 4] = (value & 0xffff_ffff).to_bytes(4, elf.byteorder)
    return bytes(out)


def pointer_size_of(path: str) -> int:
    """The pointer size ``read_btf`` gives, from the ELF header only: for a
    file that need not have BTF (a link's input)."""
    fd, _ = open_regular(path)
    with os.fdopen(fd, 'rb') as f:
        head = f.read(5)
    if head[:4] != ELF_MAGIC:
        return 0
    return 4 if head[4] == 1 else 8         # e_ident[EI_CLASS]: ELFCLASS32 is 1


def load_btf_file(path: str, base: Btf | None = None) -> Btf:
    """Parse the BTF of ``path`` (split on ``base`` if given; a module with
    a distilled base relocated onto it: ``read_split``)."""
    try:
        raw, on, _ = read_split(path, base)
        return parse_btf(raw, on)
    except ElfError as err:
        raise BtfError(str(err)) from None
