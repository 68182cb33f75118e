"""Encode one object file on disk: read it, encode, rewrite it atomically."""
from __future__ import annotations

from .btf.errors import BtfError
from .dwarf.loader import LoadError
from .dwarf.reader import DwarfError
from .elf.errors import ElfError
from .elf.reader import ElfFile
from .encoder import EncodeError, Encoded, encode_elf, has_dwarf, write_sections
from .features import Features


class EncodeFailure(Exception):
    """One object could not be encoded; str() is the one-line message with its path."""


def encode_path(path: str, features: Features) -> Encoded | None:
    """Encode ``path`` in place; None if it has no DWARF types to encode.

    The kernel rejects BTF without types, so such an object (no DWARF, or
    DWARF of assembly only) is left without the sections.
    """
    try:
        with ElfFile.open(path) as elf:
            if not has_dwarf(elf):
                return None
            enc = encode_elf(elf, features)
            if not len(enc.btf):
                return None
            write_sections(path, elf, enc)
            return enc
    except OSError as err:
        raise EncodeFailure(f'{path}: {err.strerror or err}') from None
    except (ElfError, DwarfError, LoadError, EncodeError, BtfError) as err:
        raise EncodeFailure(f'{path}: {err}') from None
