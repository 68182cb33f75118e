"""Errors of the ELF layer."""
from ..errors import ObjbtfError


class ElfError(ObjbtfError):
    """An ELF file that cannot be read or rewritten; the message says what is wrong.

    Messages name no file: the caller prefixes the path.
    """


class FileChanged(ElfError):
    """The file on disk is no longer the one that was read (another process
    rewrote it meanwhile): read it again rather than overwrite its change."""
