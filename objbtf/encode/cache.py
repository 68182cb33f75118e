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
rest, keyed with the cache's secret (``DIR/secret``, 32 random bytes, mode
0600), so a damaged entry, or one planted by someone who cannot read the
secret, is a miss and is written anew.  Every file is opened relative to
the directory's descriptor without following a symbolic link.

The cache trusts its directory: one this user does not own, or that its
group or others may write, is refused (the encode says so on one line and
keeps nothing) unless ``OBJBTF_CACHE_SHARED=1`` says that it is shared (a
shared cache trusts everyone who may write to it; its secret is then
readable by the directory's group).  A hit refreshes
the entry's time; a write that takes its directory (one of 256) past
1/256 of ``OBJBTF_CACHE_SIZE`` (bytes, or with K, M or G; default 2G)
removes that directory's least recently used entries.

Hits and misses are counted as ccache counts them, for ``objbtf cache
stats``: a byte appended to ``DIR/stats/hits`` or ``DIR/stats/misses``
per event.  An append of one byte is atomic (O_APPEND), so any number of
encodes at once count without a lock, for about 3 us each.
"""
from __future__ import annotations

import hmac
import marshal
import os
import re
import stat
from hashlib import blake2b, sha256
from typing import NamedTuple

from ..elf.reader import Buffer
from ..elf.writer import Reloc, write_atomically_at
from .encoder import Written
from ..errors import ObjbtfError
from ..features import Features
from ..regular_files import MAX_READ, error_text
from ..source_digest import source_digest

DIR_VARIABLE = 'OBJBTF_CACHE_DIR'
SIZE_VARIABLE = 'OBJBTF_CACHE_SIZE'
SHARED_VARIABLE = 'OBJBTF_CACHE_SHARED'
DEFAULT_SIZE = 2 << 30
#: The first bytes of an entry; another layout gets another magic.
MAGIC = b'OBTFENC2'
_CHECK_LEN = 16
#: The file of the key of the entries' digests, and its length.
SECRET = 'secret'
_SECRET_LEN = 32
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SIZE = re.compile(r'(\d+)([KMG]?)', re.I)
_UNITS = {'': 1, 'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
#: The counters' directory under the cache's, and their files.
STATS = 'stats'
HITS, MISSES = 'hits', 'misses'
_ENTRY_DIR = re.compile(r'[0-9a-f]{2}')


class CacheConfigError(ObjbtfError):
    """OBJBTF_CACHE_SIZE is not a size; str() says so."""


class Untrusted(ObjbtfError):
    """A cache directory (or secret) this user may not trust; str() says why.
    Never raised to the caller: the cache is then off, ``problem`` says so."""


class CacheStats(NamedTuple):
    """What ``objbtf cache stats`` prints: the entries kept, their bytes,
    and the events counted since the counters were last zeroed."""
    entries: int
    size: int
    hits: int
    misses: int


class EncodeCache:
    """The cache in directory ``root``, at most about ``max_size`` bytes."""

    def __init__(self, root: str, max_size: int = DEFAULT_SIZE, shared: bool = False):
        self.root = root
        self.max_size = max_size
        self.shared = shared
        #: Why the first entry that could not be written was not: a cache
        #: never fails an encode, its caller says this instead.
        self.problem: str | None = None
        #: The directory's descriptor and secret once opened (``_open``);
        #: why not, if it could not be.
        self._opened: tuple[int, bytes] | None = None
        self._failure: OSError | Untrusted | None = None

    @classmethod
    def from_environment(cls) -> EncodeCache | None:
        """The cache OBJBTF_CACHE_DIR names, or None when it is unset or
        empty.  Raises CacheConfigError on a bad OBJBTF_CACHE_SIZE."""
        root = os.environ.get(DIR_VARIABLE)
        if not root:
            return None
        return cls(root, parse_size(os.environ.get(SIZE_VARIABLE) or ''),
                   os.environ.get(SHARED_VARIABLE, '0') not in ('', '0'))

    def _open(self) -> tuple[int, bytes] | None:
        """The directory's descriptor and the secret, opened at the first
        use (created if missing: a private cache with mode 0700); None
        when the cache cannot be used (``_failure`` says why)."""
        if self._opened is None and self._failure is None:
            try:
                self._opened = self._trusted()
            except (OSError, Untrusted) as err:
                self._failure = err
        return self._opened

    def _trusted(self) -> tuple[int, bytes]:
        try:
            os.makedirs(self.root, mode=0o777 if self.shared else 0o700, exist_ok=True)
        except OSError:
            pass                    # the open says what is wrong
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not self.shared:
                if st.st_uid != os.geteuid():
                    raise Untrusted(f'owned by uid {st.st_uid}, not by this user')
                if st.st_mode & 0o022:
                    raise Untrusted(f'its group or others may write to it '
                                    f'(mode {stat.S_IMODE(st.st_mode):o})')
            return fd, self._secret(fd)
        except BaseException:
            os.close(fd)
            raise

    def _secret(self, fd: int) -> bytes:
        """The key of the entries' digests, made by the first encode."""
        try:
            secret_fd = os.open(SECRET, _OPEN, dir_fd=fd)
        except FileNotFoundError:
            _make_secret(fd, 0o640 if self.shared else 0o600)
            secret_fd = os.open(SECRET, _OPEN, dir_fd=fd)
        try:
            st = os.fstat(secret_fd)
            data = os.read(secret_fd, _SECRET_LEN + 1)
        finally:
            os.close(secret_fd)
        if (not stat.S_ISREG(st.st_mode) or len(data) != _SECRET_LEN
                or not self.shared and (st.st_uid != os.geteuid() or st.st_mode & 0o077)):
            raise Untrusted(f'{SECRET} is not {_SECRET_LEN} bytes that only this user may read')
        return data

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
        damaged, unreadable or not trusted."""
        opened = self._open()
        if opened is None:
            return None
        fd, secret = opened
        try:
            directory = os.open(key[:2], _OPEN_DIR, dir_fd=fd)
            try:
                data = _read_entry(directory, key[2:])
            finally:
                os.close(directory)
        except OSError:
            return None
        kept = _decode(data, key, secret) if data is not None else None
        if kept is not None:
            self._count(HITS)
        return kept

    def put(self, key: str, out: Written) -> None:
        """Keep ``out`` under ``key`` (a miss: an encode the cache did not
        have); if that fails, say why in ``problem``."""
        self._count(MISSES)
        opened = self._open()
        path = self._path(key)
        try:
            if isinstance(self._failure, OSError):
                raise self._failure
            if opened is None:
                if self.problem is None:
                    self.problem = (f'{DIR_VARIABLE}: {self.root}: {self._failure}; set '
                                    f'{SHARED_VARIABLE}=1 if it is meant to be shared')
                return
            fd, secret = opened
            try:
                os.mkdir(key[:2], dir_fd=fd)
            except FileExistsError:
                pass
            directory = os.open(key[:2], _OPEN_DIR, dir_fd=fd)
            try:
                write_atomically_at(directory, key[2:], [_encode(out, key, secret)])
                self._trim(directory, keep=key[2:])
            finally:
                os.close(directory)
        except OSError as err:
            if self.problem is None:
                where = err.filename if err.filename not in (None, self.root) else path
                self.problem = (f'{DIR_VARIABLE}: cannot keep an encode in '
                                f'{where} ({error_text(err)})')

    def _count(self, event: str) -> None:
        """One more ``event`` (HITS, MISSES): a byte appended to its file.
        A cache that cannot be written (or is not trusted) counts nothing
        and says nothing (``put`` says why it keeps nothing)."""
        opened = self._open()
        if opened is None:
            return
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            try:
                directory = os.open(STATS, _OPEN_DIR, dir_fd=opened[0])
            except FileNotFoundError:
                os.mkdir(STATS, dir_fd=opened[0])
                directory = os.open(STATS, _OPEN_DIR, dir_fd=opened[0])
            try:
                fd = os.open(event, flags, 0o666, dir_fd=directory)
            finally:
                os.close(directory)
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
            return [e.path for e in top
                    if _ENTRY_DIR.fullmatch(e.name) and e.is_dir(follow_symlinks=False)]

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

    def _trim(self, directory: int, keep: str) -> None:
        """Remove the least recently used entries of ``directory`` (a
        descriptor) until it holds at most 1/256 of the cache's size (never
        ``keep``)."""
        entries = [(st.st_mtime_ns, name, st.st_size) for name, st in _entries(directory)]
        total = sum(size for _, _, size in entries)
        limit = self.max_size // 256
        if total <= limit:
            return
        for _, name, size in sorted(entries):
            if name == keep:
                continue
            try:
                os.unlink(name, dir_fd=directory)
            except FileNotFoundError:
                pass
            total -= size
            if total <= limit:
                return


def _entries(directory: str | int) -> list[tuple[str, os.stat_result]]:
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


def _make_secret(fd: int, mode: int) -> None:
    """Write ``SECRET`` into the directory ``fd`` unless another encode
    just did: under a name of this process's, then linked (never replaced)."""
    temporary = f'.{SECRET}.{os.getpid()}'
    out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                  mode, dir_fd=fd)
    try:
        try:
            os.write(out, os.urandom(_SECRET_LEN))
            os.fchmod(out, mode)
        finally:
            os.close(out)
        try:
            os.link(temporary, SECRET, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
        except FileExistsError:
            pass
    finally:
        os.unlink(temporary, dir_fd=fd)


def _read_entry(directory: int, name: str) -> bytes | None:
    """The entry ``name`` in ``directory``, if it is a regular file (not a
    link, nor a FIFO) of at most MAX_READ bytes; its time refreshed."""
    try:
        fd = os.open(name, _OPEN, dir_fd=directory)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_READ:
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        try:
            os.utime(fd)    # most recently used (a read-only cache stays as it is)
        except OSError:
            pass
        return b''.join(chunks)
    finally:
        os.close(fd)


def _mac(secret: bytes, key: str, payload: bytes) -> bytes:
    """The digest of an entry: keyed, and over its key too (an entry copied
    under another key is no entry)."""
    h = blake2b(key.encode(), key=secret, digest_size=_CHECK_LEN)
    h.update(payload)
    return h.digest()


def _encode(out: Written, key: str, secret: bytes) -> bytes:
    relocs = {name: [tuple(r) for r in rels] for name, rels in out.relocs.items()}
    payload = marshal.dumps((out.raw, out.chunk, relocs, out.addrs))
    return MAGIC + _mac(secret, key, payload) + payload


def _decode(data: bytes, key: str, secret: bytes) -> Written | None:
    """The entry ``data`` of ``key``; None unless its digest is right and
    it holds what ``_encode`` writes (never an exception)."""
    start = len(MAGIC) + _CHECK_LEN
    payload = data[start:]
    if (data[:len(MAGIC)] != MAGIC
            or not hmac.compare_digest(_mac(secret, key, payload), data[len(MAGIC):start])):
        return None
    try:
        raw, chunk, relocs, addrs = marshal.loads(payload)
        if not (isinstance(raw, bytes) and isinstance(chunk, bytes) and isinstance(relocs, dict)
                and (addrs is None or isinstance(addrs, bytes))):
            return None
        kept = {name: [Reloc(*r) for r in rels] for name, rels in relocs.items()}
        if not all(isinstance(name, str) and all(isinstance(v, int) for r in rels for v in r)
                   for name, rels in kept.items()):
            return None
        return Written(raw, chunk, kept, addrs)
    except (ValueError, EOFError, TypeError):
        return None
