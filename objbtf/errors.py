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
