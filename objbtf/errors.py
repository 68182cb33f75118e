"""The root of every error objbtf reports.

Each layer raises its own subclass (``BtfError``, ``ElfError``,
``DwarfError``, ``LoadError``, ``EncodeError``, the link's ``LinkError``,
``ObjectsError``, ``ArchiveError``, ``WorkerError``) with a one-line
message; the command line catches ``ObjbtfError`` and prints it, prefixed
with the file when the message does not name one, and exits 1.  Anything
else escaping is a bug in objbtf.
"""


class ObjbtfError(Exception):
    """An error objbtf reports on one line; the message says what is wrong."""

    def __str__(self) -> str:
        # Names read from a damaged file (a section's, a member's) may hold a
        # newline or bytes that are not UTF-8: whatever a message quotes,
        # it prints as one line of text.
        return shown(super().__str__())


def shown(text: str) -> str:
    """``text`` for a one-line message: as it is when printable, else with
    Python's escapes (a name read from a corrupt file may hold any bytes,
    a newline among them)."""
    return text if text.isprintable() else ascii(text)[1:-1]
