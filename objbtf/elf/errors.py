"""Errors of the ELF layer."""


class ElfError(Exception):
    """An ELF file that cannot be read or rewritten; the message says what is wrong.

    Messages name no file: the caller prefixes the path.
    """
