"""The encode cache: an object a compiler cache restored is not encoded again.

ccache (and sccache) restore only what the compiler wrote, so Kbuild's
post-step encodes every object they restore anew: about 20 ms of CPU on an
object whose cache hit took 9 (bench/ccache_bench.py).  With
``OBJBTF_CACHE_DIR`` set, ``objbtf encode`` (and ``objbtf cc``) keeps what
it writes into each object under a key of everything that output depends
on: the object's bytes as it found them, the path it was given (the chunk
records it), the features, and objbtf's sources (``sources.py``).  An
object whose key is kept gets the kept sections: the bytes a new encode
would write.

Entries are files ``DIR/KK/KEY`` (KK the key's first two hex digits),
written to a temporary file and renamed; each starts with a digest of the
rest, so a damaged entry is a miss and is written anew.  A hit refreshes
the entry's time; a write that takes its directory (one of 256) past
1/256 of ``OBJBTF_CACHE_SIZE`` (bytes, or with K, M or G; default 2G)
removes that directory's least recently used entries.

Hits and misses are counted as ccache counts them, for ``objbtf cache
stats``: a byte appended to ``DIR/stats/hits`` or ``DIR/stats/misses``
per event.  An append of one byte is atomic (O_APPEND), so any number of
encodes at once count without a lock, for about 3 us each.
"""
from __future__ import annotations

import marshal
import os
import re
from hashlib import blake2b, sha256
from typing import NamedTuple

from ..elf.reader import Buffer
from ..elf.writer import Reloc, write_atomically
from .encoder import Written
from ..errors import ObjbtfError
from ..features import Features
from ..regular_files import error_text
from ..source_digest import source_digest

DIR_VARIABLE = 'OBJBTF_CACHE_DIR'
SIZE_VARIABLE = 'OBJBTF_CACHE_SIZE'
DEFAULT_SIZE = 2 << 30
#: The first bytes of an entry; another layout gets another magic.
MAGIC = b'OBTFENC1'
_CHECK_LEN = 16
_SIZE = re.compile(r'(\d+)([KMG]?)', re.I)
_UNITS = {'': 1, 'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
#: The counters' directory under the cache's, and their files.
STATS = 'stats'
HITS, MISSES = 'hits', 'misses'
_ENTRY_DIR = re.compile(r'[0-9a-f]{2}')


class CacheConfigError(ObjbtfError):
    """OBJBTF_CACHE_SIZE is not a size; str() says so."""


class CacheStats(NamedTuple):
    """What ``objbtf cache stats`` prints: the entries kept, their bytes,
    and the events counted since the counters were last zeroed."""
    entries: int
    size: int
    hits: int
    misses: int


class EncodeCache:
    """The cache in directory ``root``, at most about ``max_size`` bytes."""

    def __init__(self, root: str, max_size: int = DEFAULT_SIZE):
        self.root = root
        self.max_size = max_size
        #: Why the first entry that could not be written was not: a cache
        #: never fails an encode, its caller says this instead.
        self.problem: str | None = None

    @classmethod
    def from_environment(cls) -> EncodeCache | None:
        """The cache OBJBTF_CACHE_DIR names, or None when it is unset or
        empty.  Raises CacheConfigError on a bad OBJBTF_CACHE_SIZE."""
        root = os.environ.get(DIR_VARIABLE)
        if not root:
            return None
        return cls(root, parse_size(os.environ.get(SIZE_VARIABLE) or ''))

    @staticmethod
    def key(data: Buffer, features: Features, name: str) -> str:
        """The key of encoding ``data`` (the object's bytes) read from
        ``name`` with ``features``."""
        h = sha256(MAGIC + source_digest('objbtf'))     # SHA-256: SHA-NI makes it fastest
        h.update(f'{",".join(features.names())}\0{name}\0'.encode(errors='surrogateescape'))
        h.update(data)
        return h.hexdigest()[:40]

    def _path(self, key: str) -> str:
        return os.path.join(self.root, key[:2], key[2:])

    def get(self, key: str) -> Written | None:
        """The kept output for ``key``; None if there is none, or it is
        damaged or unreadable."""
        path = self._path(key)
        try:
            with open(path, 'rb') as f:
                data = f.read()
        except OSError:
            return None
        try:
            os.utime(path)      # most recently used (a read-only cache stays as it is)
        except OSError:
            pass
        kept = _decode(data)
        if kept is not None:
            self._count(HITS)
        return kept

    def put(self, key: str, out: Written) -> None:
        """Keep ``out`` under ``key`` (a miss: an encode the cache did not
        have); if that fails, say why in ``problem``."""
        self._count(MISSES)
        path = self._path(key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_atomically(path, [_encode(out)])
            self._trim(os.path.dirname(path), keep=path)
        except OSError as err:
            if self.problem is None:
                self.problem = (f'{DIR_VARIABLE}: cannot keep an encode in '
                                f'{err.filename or path} ({error_text(err)})')

    def _count(self, event: str) -> None:
        """One more ``event`` (HITS, MISSES): a byte appended to its file.
        A cache that cannot be written counts nothing and says nothing
        (``put`` says why it keeps nothing)."""
        path = os.path.join(self.root, STATS, event)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        try:
            try:
                fd = os.open(path, flags, 0o666)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                fd = os.open(path, flags, 0o666)
        except OSError:
            return
        try:
            os.write(fd, b'.')
        except OSError:
            pass
        finally:
            os.close(fd)

    def stats(self) -> CacheStats:
        """The entries and their bytes, and the counters.  Raises OSError
        (FileNotFoundError when there is no cache in ``root``)."""
        entries = size = 0
        for directory in self._directories():
            for _, st in _entries(directory):
                entries += 1
                size += st.st_size
        return CacheStats(entries, size, self._counted(HITS), self._counted(MISSES))

    def _directories(self) -> list[str]:
        """The cache's directories of entries (DIR/KK)."""
        with os.scandir(self.root) as top:
            return [e.path for e in top if _ENTRY_DIR.fullmatch(e.name) and e.is_dir()]

    def _counted(self, event: str) -> int:
        try:
            return os.stat(os.path.join(self.root, STATS, event)).st_size
        except FileNotFoundError:
            return 0

    def clear(self) -> int:
        """Remove every entry (not another writer's temporary file) and
        zero the counters; the number of entries removed.  Raises OSError."""
        removed = 0
        for directory in self._directories():
            for name, _ in _entries(directory):
                try:
                    os.unlink(os.path.join(directory, name))
                    removed += 1
                except FileNotFoundError:       # another process removed it
                    pass
        for event in (HITS, MISSES):
            try:
                os.unlink(os.path.join(self.root, STATS, event))
            except FileNotFoundError:
                pass
        return removed

    def _trim(self, directory: str, keep: str) -> None:
        """Remove the least recently used entries of ``directory`` until it
        holds at most 1/256 of the cache's size (never ``keep``)."""
        entries = [(st.st_mtime_ns, name, st.st_size) for name, st in _entries(directory)]
        total = sum(size for _, _, size in entries)
        limit = self.max_size // 256
        if total <= limit:
            return
        for _, name, size in sorted(entries):
            path = os.path.join(directory, name)
            if path == keep:
                continue
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            total -= size
            if total <= limit:
                return


def _entries(directory: str) -> list[tuple[str, os.stat_result]]:
    """The entries of one of the cache's directories, by name, with their
    stat (not another writer's temporary file, nor one removed meanwhile)."""
    found = []
    with os.scandir(directory) as it:
        for e in it:
            if e.name.startswith('.'):      # another writer's temporary file
                continue
            try:
                found.append((e.name, e.stat(follow_symlinks=False)))
            except FileNotFoundError:       # another process removed it
                continue
    return found


def parse_size(text: str) -> int:
    """Bytes from '2G', '500M', '100000': OBJBTF_CACHE_SIZE; '' is the default."""
    if not text:
        return DEFAULT_SIZE
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise CacheConfigError(f'{SIZE_VARIABLE}={text!r} is not a size '
                               '(bytes, or a number with K, M or G)')
    return int(m[1]) * _UNITS[m[2].upper()]


def _encode(out: Written) -> bytes:
    relocs = {name: [tuple(r) for r in rels] for name, rels in out.relocs.items()}
    payload = marshal.dumps((out.raw, out.chunk, relocs, out.addrs))
    return MAGIC + blake2b(payload, digest_size=_CHECK_LEN).digest() + payload


def _decode(data: bytes) -> Written | None:
    start = len(MAGIC) + _CHECK_LEN
    payload = data[start:]
    if (data[:len(MAGIC)] != MAGIC
            or blake2b(payload, digest_size=_CHECK_LEN).digest() != data[len(MAGIC):start]):
        return None
    try:
        raw, chunk, relocs, addrs = marshal.loads(payload)
        return Written(raw, chunk,
                       {name: [Reloc(*r) for r in rels] for name, rels in relocs.items()}, addrs)
    except (ValueError, EOFError, TypeError):
        return None
