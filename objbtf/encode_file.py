"""Encode one object file on disk: read it, encode, rewrite it atomically."""
from __future__ import annotations

from .btf.errors import BtfError
from .dwarf.loader import LoadError
from .dwarf.reader import DwarfError
from .elf.errors import ElfError
from .elf.reader import ElfFile
from .encoder import (EncodeError, Encoded, encode_elf, has_dwarf, write_sections,
                      write_typeless_chunk)
from .features import Features


class EncodeFailure(Exception):
    """One object could not be encoded; str() is the one-line message with its path."""


def encode_path(path: str, features: Features) -> Encoded | None:
    """Encode ``path`` in place; None if it has no DWARF types to encode.

    The kernel rejects BTF without types, so such an object (no DWARF, or
    DWARF of assembly only) gets no .BTF, only the .BTF.objbtf chunk that
    names it (see ``write_typeless_chunk``).  The chunk records ``path`` as
    given: the link compares it with the objects a build lists.
    """
    try:
        with ElfFile.open(path) as elf:
            enc = encode_elf(elf, features, path) if has_dwarf(elf) else None
            if enc is None or not len(enc.btf):
                write_typeless_chunk(path, elf, path)
                return None
            write_sections(path, elf, enc)
            return enc
    except OSError as err:
        raise EncodeFailure(f'{path}: {err.strerror or err}') from None
    except (ElfError, DwarfError, LoadError, EncodeError, BtfError) as err:
        raise EncodeFailure(f'{path}: {err}') from None
