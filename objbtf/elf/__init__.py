"""The ELF layer: lazy reading, bulk relocation, atomic rewriting of objects.

Standard library only (no lief, no pyelftools): it runs once per object of a
kernel build.
"""
from .errors import ElfError
from .reader import ElfFile, Section, Symbol
from .relocs import Arch, RelocType, apply_relocations, arch_for
from .writer import NewSection, Reloc, remove_sections, rewrite_object, section_symbol_index

__all__ = ['Arch', 'ElfError', 'ElfFile', 'NewSection', 'Reloc', 'RelocType', 'Section',
           'Symbol', 'apply_relocations', 'arch_for', 'remove_sections', 'rewrite_object',
           'section_symbol_index']
