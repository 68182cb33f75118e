"""The BTF string section: NUL-terminated names, offset 0 is the empty string."""
from __future__ import annotations

from itertools import accumulate

from .errors import BtfError


class StringTable(dict):
    """Builds a string section, adding each distinct string once.

    A dict from string to offset: ``table[s]`` is a plain dict lookup for a
    string already laid out, and lays it out on first use.  ``base`` is the
    string section of a base BTF; a split table refers to the base's strings
    instead of copying them, and its own offsets start after the base's, as
    libbpf and the kernel expect.
    """
    __slots__ = ('_base', '_base_len', '_parts', '_size')

    def __init__(self, base: StringReader | None = None):
        super().__init__()
        self._base = base
        self._base_len = base.end if base is not None else 0
        self._parts: list[str] = []
        self._size = 0
        if not self._base_len:
            self[''] = 0
            self._parts.append('')
            self._size = 1

    def __missing__(self, s: str) -> int:
        off = self._base.find(s) if self._base is not None else None
        if off is None:
            off = self._base_len + self._size
            self._parts.append(s)
            self._size += (len(s) if s.isascii() else len(s.encode())) + 1
        self[s] = off
        return off

    def data(self) -> bytes:
        """The section's own bytes (without the base's)."""
        return ('\0'.join(self._parts) + '\0').encode() if self._parts else b''


class StringReader(dict):
    """Resolves name offsets of a string section (split: after the base's).

    A dict from offset to string, filled on first use: ``reader[off]`` is a
    plain dict lookup for an offset seen before.
    """
    __slots__ = ('_ascii', '_firsts', 'base', 'data', 'end', 'start')

    def __init__(self, data: bytes, base: StringReader | None = None):
        super().__init__()
        self.data = data
        self.base = base
        self.start: int = base.end if base is not None else 0
        self.end: int = self.start + len(data)
        self._firsts: dict | None = None
        self._ascii = True

    def __missing__(self, off: int) -> str:
        if off < self.start:
            assert self.base is not None        # only split strings start past 0
            s = self.base[off]
        else:
            pos = off - self.start
            end = self.data.find(b'\0', pos)
            if pos >= len(self.data) or end < 0:
                raise BtfError(f'string offset {off} outside the string section')
            s = self.data[pos:end].decode('utf-8', 'replace')
        self[off] = s
        return s

    def load_all(self) -> None:
        """Read every whole string of the section at once, much cheaper than
        one by one when most will be used (ASCII sections only: those decode
        the same either way)."""
        data = self.data
        if not data.isascii():
            return
        parts = data.decode('ascii').split('\0')[:-1]     # the last piece has no NUL
        self.update(zip(_starts(parts, self.start), parts))

    def valid_below(self) -> int:
        """An offset such that every smaller one names a string (the section
        up to its last NUL, the base's too when it ends in one)."""
        own = self.start + self.data.rfind(b'\0') + 1
        if self.base is None or self.base.valid_below() == self.start:
            return own
        return self.base.valid_below()

    def find(self, s: str) -> int | None:
        """The first offset of the whole string ``s`` in this section (not
        its base's), or None: what split BTF on top of it refers to."""
        if self._firsts is None:
            self._firsts = self._first_offsets()
        return self._firsts.get(s.encode() if self._ascii else s)

    def _first_offsets(self) -> dict:
        """Each whole string of the section to its first offset.  Keyed by
        the bytes themselves when the section is ASCII (nothing to decode),
        else by the strings decoded as names are."""
        self._ascii = self.data.isascii()
        parts = self.data.split(b'\0')[:-1]     # the last piece has no NUL
        pairs = zip(reversed(parts), reversed(_starts(parts, self.start)))  # the first wins
        if not self._ascii:
            return {p.decode('utf-8', 'replace'): off for p, off in pairs}
        return dict(pairs)


def _starts(parts: list, start: int) -> list[int]:
    """Offsets of NUL-terminated ``parts`` laid out from ``start``."""
    sizes = map((1).__add__, map(len, parts))         # each with its NUL
    return list(accumulate(sizes, initial=start))[:len(parts)]
