"""Pass 6, emit: write the final BTF where it was asked for, atomically."""
from __future__ import annotations

from objbtf.btf.sidecar import SECTION as SIDECAR
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


def emit(raw: bytes, source: ElfFile, source_path: str, section: str, output: str | None) -> str:
    """Write ``raw``; returns a phrase saying where it went.

    ``output`` ending in ``.o``: an object with an alloc, read-only ``.BTF``,
    like the kernel's ``.btf.vmlinux.bin.o``.  Another ``output``: the raw
    blob.  No ``output``: in place, into ``source``'s BTF section (a module
    gets its ``.rela.BTF`` and ``.BTF.objbtf`` emptied: the final BTF needs
    neither).
    """
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
        rewrite_object(source_path, source, [NewSection(section, raw, addralign=4),
                                             NewSection(SIDECAR, b'', addralign=8)],
                       {section: []})
    else:
        replace_in_place(source_path, source, section, raw)
    return f'{source_path} ({section}, in place)'
