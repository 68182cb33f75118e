"""Find the BTF of a file: the .BTF section of an ELF object, or a raw blob."""
from __future__ import annotations

import os

from .btf.errors import BtfError
from .btf.reader import parse_btf
from .btf.types import Btf
from .elf.errors import ElfError
from .elf.reader import ElfFile
from .files import open_regular, read_regular

ELF_MAGIC = b'\x7fELF'


def read_btf_bytes(path: str) -> bytes:
    """The raw BTF of ``path``: its .BTF section if it is ELF, else the file."""
    fd, _ = open_regular(path)
    with os.fdopen(fd, 'rb') as f:
        head = f.read(4)
    if head != ELF_MAGIC:
        return read_regular(path)
    with ElfFile.open(path) as elf:
        sec = elf.section_by_name('.BTF')
        if sec is None:
            raise BtfError('no .BTF section')
        return elf.section_data(sec)


def load_btf_file(path: str, base: Btf | None = None) -> Btf:
    """Parse the BTF of ``path`` (split on ``base`` if given)."""
    try:
        return parse_btf(read_btf_bytes(path), base)
    except ElfError as err:
        raise BtfError(str(err)) from None
