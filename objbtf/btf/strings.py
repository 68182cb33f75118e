"""The BTF string section: NUL-terminated names, offset 0 is the empty string."""
from __future__ import annotations


class StringTable:
    """Builds a string section, adding each distinct string once.

    ``base`` maps strings of a base BTF to their offsets there; a split
    table refers to those instead of copying them, and its own offsets
    start at ``base_len``, as libbpf and the kernel expect.
    """

    def __init__(self, base: dict[str, int] | None = None, base_len: int = 0):
        self._base = base or {}
        self._base_len = base_len
        self._offsets: dict[str, int] = {} if base_len else {'': 0}
        self._parts: list[bytes] = [] if base_len else [b'\0']
        self._size = 0 if base_len else 1

    def add(self, s: str) -> int:
        off = self._base.get(s)
        if off is not None:
            return off
        off = self._offsets.get(s)
        if off is None:
            data = s.encode() + b'\0'
            off = self._base_len + self._size
            self._offsets[s] = off
            self._parts.append(data)
            self._size += len(data)
        return off

    def data(self) -> bytes:
        return b''.join(self._parts)

    def offsets(self) -> dict[str, int]:
        return dict(self._offsets)


class StringReader:
    """Resolves name offsets of a string section (split: after the base's)."""

    def __init__(self, data: bytes, base: StringReader | None = None):
        self.data = data
        self.base = base
        self.start = base.end if base is not None else 0
        self.end = self.start + len(data)
        self._cache: dict[int, str] = {}

    def __call__(self, off: int) -> str:
        s = self._cache.get(off)
        if s is not None:
            return s
        if off < self.start:
            return self.base(off)
        pos = off - self.start
        end = self.data.find(b'\0', pos)
        if pos >= len(self.data) or end < 0:
            raise ValueError(f'string offset {off} outside the string section')
        s = self.data[pos:end].decode('utf-8', 'replace')
        self._cache[off] = s
        return s

    def offsets(self) -> dict[str, int]:
        """First offset of every whole string of this section."""
        out: dict[str, int] = {}
        pos = 0
        data = self.data
        while pos < len(data):
            end = data.find(b'\0', pos)
            if end < 0:
                break
            out.setdefault(data[pos:end].decode('utf-8', 'replace'), self.start + pos)
            pos = end + 1
        return out
