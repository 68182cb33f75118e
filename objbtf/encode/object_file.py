"""Encode one object file on disk: read it, encode, rewrite it atomically."""
from __future__ import annotations

from ..btf.chunk import SECTION as CHUNK_SECTION
from ..btf.types import gc_paused
from ..compiler_btf.loader import encode_compiler_btf
from ..elf.errors import FileChanged
from ..elf.reader import ElfFile
from .cache import EncodeCache
from .encoder import (BTF_SECTION, Encoded, Written, dwarf_dropped, encode_assembly, encode_elf,
                      has_dwarf, is_bare_assembly, write_sections, write_typeless_chunk,
                      written)
from ..errors import ObjbtfError
from ..features import Features
from ..regular_files import error_text


class EncodeFailure(ObjbtfError):
    """One object could not be encoded; str() is the one-line message with its path."""


#: How often an object that changed while it was encoded is read again.
#: Two encodes of one file at once (a misconfigured rule under make -j)
#: give the same bytes, so the later one simply reads the earlier's result.
RETRIES = 5


def encode_path(path: str, features: Features, cache: EncodeCache | None = None,
                drop_dwarf: bool = False) -> Encoded | Written | None:
    """Encode ``path`` in place; None if it has no types to encode,
    what ``cache`` kept if it had the object (``encode_cache.py``).
    ``drop_dwarf`` empties the object's DWARF sections in the same rewrite,
    once its BTF is taken from them: the tree keeps the BTF, not the DWARF.

    The kernel rejects BTF without types, so such an object (C without
    DWARF, assembly without function symbols) gets no .BTF, only the
    .BTF.objbtf chunk that names it (see ``write_typeless_chunk``), and
    loses the .BTF and .rela.BTF an earlier encode left.  The chunk
    records ``path`` as given: the link compares it with the objects a
    build lists.
    """
    for attempt in range(RETRIES):
        try:
            return _encode_once(path, features, cache, drop_dwarf)
        except FileChanged:
            if attempt == RETRIES - 1:
                raise EncodeFailure(f'{path}: the file kept changing while it was '
                                    f'encoded ({RETRIES} attempts)') from None
        except OSError as err:
            raise EncodeFailure(f'{path}: {error_text(err)}') from None
        except ObjbtfError as err:
            raise EncodeFailure(f'{path}: {err}') from None
    raise AssertionError('unreachable')


def _encode_once(path: str, features: Features, cache: EncodeCache | None,
                 drop_dwarf: bool) -> Encoded | Written | None:
    # One object's types never form cycles that refcounting cannot free:
    # the cyclic collector would only walk them, once after each pass.
    key = None
    with gc_paused(), ElfFile.open(path) as elf:
        if dwarf_dropped(elf):
            raise ObjbtfError('its DWARF was dropped when it was encoded (--drop-dwarf), so it '
                              'cannot be encoded again: its BTF stays as that encode wrote it '
                              '(compile it again to encode it anew)')
        if cache is not None:
            key = cache.key(elf.data, features, path)
            kept = cache.get(key)
            if kept is not None:
                write_sections(path, elf, kept, drop_dwarf)
                return kept
        enc = _encode(elf, features, path)
        if enc is None or not enc.types:
            write_typeless_chunk(path, elf, path, drop_dwarf)
            return None
        out = written(enc)
        write_sections(path, elf, out, drop_dwarf)
    if cache is not None and key is not None:
        cache.put(key, out)
    return enc


def _encode(elf: ElfFile, features: Features, path: str) -> Encoded | None:
    """Encode from the object's source of types; None if it has none.

    The compiler's own BTF (GCC ``-gbtf``), with or without DWARF, when
    objbtf has not encoded the object yet: reading it costs a fraction of
    decoding DWARF.  Once objbtf has (a ``.BTF.objbtf`` chunk), ``.BTF`` is
    objbtf's own, not a source: the object is encoded again from its DWARF,
    and without DWARF it has no types left (docs/design.md, "The per-object
    step").  An assembly object without DWARF gets its functions from its
    symbols (``encoder.load_assembly``), the first time and every time after.
    """
    sec = elf.section_by_name(BTF_SECTION)
    if sec is not None and sec.size and elf.section_by_name(CHUNK_SECTION) is None:
        return encode_compiler_btf(elf, features, path)
    if has_dwarf(elf):
        return encode_elf(elf, features, path)
    return encode_assembly(elf, features, path) if is_bare_assembly(elf) else None
