"""Pass 11, emit: write the final BTF where it was asked for, atomically,
with a module's distilled base (``.BTF.base``) beside it in the same rewrite."""
from __future__ import annotations

from objbtf.btf.chunk import SECTION as CHUNK_SECTION
from objbtf.btf.distilled import SECTION as DISTILLED_BASE
from objbtf.elf.addrtable import SECTION as ADDR_TABLE
from objbtf.elf.consts import ET_REL, SHF_ALLOC
from objbtf.elf.reader import ElfFile
from objbtf.elf.writer import (
    NewSection,
    new_object,
    replace_in_place,
    rewrite_object,
    write_atomically,
)

BTF = '.BTF'


def emit(raw: bytes, source: ElfFile, source_path: str, section: str, output: str | None,
         distilled: bytes | None = None) -> str:
    """Write ``raw``; returns a phrase saying where it went.

    ``output`` ending in ``.o``: an object with an alloc, read-only ``.BTF``,
    like the kernel's ``.btf.vmlinux.bin.o``.  Another ``output``: the raw
    blob.  No ``output``: in place, into ``source``'s BTF section (a module
    gets its ``.rela.BTF``, ``.BTF.objbtf`` and address table emptied: the
    final BTF needs none of them; ``distilled``, its distilled base, goes
    into ``.BTF.base``, added or replaced, in the same rewrite).
    """
    if distilled is not None and (output is not None or source.e_type != ET_REL):
        raise ValueError('a distilled base goes only into a module, in place')
    if output is not None and output.endswith('.o'):
        write_atomically(output, [new_object(source, [NewSection(BTF, raw, flags=SHF_ALLOC,
                                                                   addralign=4)])])
        return f'{output} (.BTF object)'
    if output is not None:
        write_atomically(output, [raw])
        return f'{output} (raw BTF)'
    if source.e_type == ET_REL:
        # The per-object hashes and relocations are spent: emptied, not removed,
        # which would renumber the sections of the module.
        spent = [NewSection(section, raw, addralign=4),
                 NewSection(CHUNK_SECTION, b'', addralign=8)]
        if source.section_by_name(ADDR_TABLE) is not None:
            spent.append(NewSection(ADDR_TABLE, b'', addralign=8))
        if distilled is not None:
            spent.append(NewSection(DISTILLED_BASE, distilled, addralign=4))
        rewrite_object(source_path, source, spent, {section: []})
    else:
        replace_in_place(source_path, source, section, raw)
    beside = f' and {DISTILLED_BASE}' if distilled is not None else ''
    return f'{source_path} ({section}{beside}, in place)'
