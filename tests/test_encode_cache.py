"""The encode cache (OBJBTF_CACHE_DIR): on objects gcc compiled, a hit
writes the bytes an encode writes, without encoding; its key covers the
object's bytes, its path, the features and objbtf's sources; a damaged
entry is a miss; a cache that cannot be written never fails an encode;
each directory keeps its share of the size, least recently used out first;
``objbtf cache stats`` counts hits and misses, also of encodes at once.
The server's side (the client's environment decides) is in test_resident.py.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import C_FIXTURES, ROOT, cache_entries as entries, compile_c, need, run
from objbtf.encode import cache as encode_cache, object_file
from objbtf.encode.cache import EncodeCache, parse_size
from objbtf.encode.object_file import encode_path
from objbtf.encode.encoder import Written
from objbtf.features import Features


@pytest.fixture(scope='module')
def compiled(tmp_path_factory) -> list[Path]:
    d = tmp_path_factory.mktemp('cache-objs')
    return [compile_c('gcc', src, d / f'{src.stem}.o') for src in sorted(C_FIXTURES.glob('*.c'))[:3]]


def fresh(obj: Path, where: Path, name: str | None = None) -> str:
    """A copy of ``obj`` at ``where``/NAME; NAME, relative, as Kbuild gives paths."""
    name = name or obj.name
    (where / name).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(obj, where / name)
    return name


def encoded_bytes(monkeypatch, obj: Path, where: Path, name: str | None = None,
                  features: Features | None = None) -> bytes:
    """What an encode without the cache writes into ``obj`` named ``name``."""
    name = fresh(obj, where, name)
    monkeypatch.chdir(where)
    encode_path(name, features or Features())
    return (where / name).read_bytes()


def cli(*args: str, cwd: Path, **env: str):
    """objbtf in a process of its own, in process (no server), with ``env``."""
    return run(sys.executable, '-m', 'objbtf', *args, cwd=cwd, check=False,
               env={**os.environ, 'PYTHONPATH': str(ROOT), 'OBJBTF_RESIDENT': '0', **env})


def no_encoding(monkeypatch) -> None:
    """Any encode from now on fails the test: what follows must be a hit."""
    def refuse(*args):
        raise AssertionError('encoded although the cache had the object')
    monkeypatch.setattr(object_file, '_encode', refuse)


def test_a_hit_writes_the_bytes_an_encode_writes_without_encoding(tmp_path, compiled,
                                                                     monkeypatch):
    cache = EncodeCache(str(tmp_path / 'cache'))
    for obj in compiled:
        expected = encoded_bytes(monkeypatch, obj, tmp_path / 'plain')
        name = fresh(obj, tmp_path / 'cached')
        monkeypatch.chdir(tmp_path / 'cached')
        encode_path(name, Features(), cache)                     # a miss: kept
        assert (tmp_path / 'cached' / name).read_bytes() == expected
    assert len(entries(tmp_path / 'cache')) == len(compiled)
    no_encoding(monkeypatch)
    for obj in compiled:
        expected = (tmp_path / 'plain' / obj.name).read_bytes()
        name = fresh(obj, tmp_path / 'cached')                   # as ccache restores it
        assert isinstance(encode_path(name, Features(), cache), Written)
        assert (tmp_path / 'cached' / name).read_bytes() == expected
    assert cache.problem is None


@pytest.mark.parametrize('change', ['path', 'features', 'bytes', 'sources'])
def test_the_key_covers_what_the_output_depends_on(tmp_path, compiled, change, monkeypatch):
    """Each of the four gives another entry and its own right output."""
    obj, other = compiled[0], compiled[1]
    cache = EncodeCache(str(tmp_path / 'cache'))
    monkeypatch.chdir(tmp_path)
    encode_path(fresh(obj, tmp_path), Features(), cache)
    features, name, source = Features(), obj.name, obj
    if change == 'path':
        name = f'sub/{obj.name}'            # the chunk records the path as given
    elif change == 'features':
        features = Features.parse('default,global_var')
    elif change == 'bytes':
        source = other
        name = obj.name
    else:                                   # an upgraded or edited objbtf
        monkeypatch.setattr(encode_cache, 'source_digest', lambda *packages: b'other code')
    expected = encoded_bytes(monkeypatch, source, tmp_path / 'plain', name, features)
    monkeypatch.chdir(tmp_path)
    encode_path(fresh(source, tmp_path, name), features, cache)
    assert (tmp_path / name).read_bytes() == expected
    assert len(entries(tmp_path / 'cache')) == 2


def kept_once(monkeypatch, tmp_path: Path, obj: Path) -> tuple[EncodeCache, bytes, Path, bytes]:
    """A cache in tmp_path/cache that kept ``obj``'s encode: the cache, what
    an encode writes, the entry and its bytes."""
    expected = encoded_bytes(monkeypatch, obj, tmp_path / 'plain')
    cache = EncodeCache(str(tmp_path / 'cache'))
    monkeypatch.chdir(tmp_path)
    encode_path(fresh(obj, tmp_path), Features(), cache)
    [entry] = entries(tmp_path / 'cache')
    return cache, expected, entry, entry.read_bytes()


def test_a_damaged_entry_is_a_miss_and_is_written_anew(tmp_path, compiled, monkeypatch):
    obj = compiled[0]
    cache, expected, entry, good = kept_once(monkeypatch, tmp_path, obj)
    for damaged in (good[:-1] + bytes([good[-1] ^ 1]), good[:len(good) // 2], b''):
        entry.write_bytes(damaged)
        encode_path(fresh(obj, tmp_path), Features(), cache)
        assert (tmp_path / obj.name).read_bytes() == expected
        assert entry.read_bytes() == good


def test_objects_ccache_restores_are_encode_cache_hits(tmp_path, compiled):
    """``objbtf cc -- ccache gcc ...`` twice: the second compile is ccache's
    hit and its encode the encode cache's (the entry read and its time
    refreshed, not written anew), with the first one's bytes."""
    need('ccache')
    src = sorted(C_FIXTURES.glob('*.c'))[0]
    env = {'CCACHE_DIR': str(tmp_path / 'ccache'), 'OBJBTF_CACHE_DIR': str(tmp_path / 'cache')}
    command = ('cc', '--', 'ccache', 'gcc', '-g', '-O2', '-c', str(src), '-o', 'x.o')
    assert cli(*command, cwd=tmp_path, **env).returncode == 0
    first = (tmp_path / 'x.o').read_bytes()
    [entry] = entries(tmp_path / 'cache')
    os.utime(entry, ns=(0, 0))
    inode = entry.stat().st_ino
    (tmp_path / 'x.o').unlink()
    r = cli(*command, cwd=tmp_path, **env)
    assert (r.returncode, r.stderr) == (0, '')
    assert (tmp_path / 'x.o').read_bytes() == first
    assert entry.stat().st_ino == inode and entry.stat().st_mtime > 0
    stats = run('ccache', '--print-stats', env={**os.environ, **env}).stdout
    assert re.search(r'^direct_cache_hit\t1$', stats, re.M), stats


def test_a_cache_that_cannot_be_written_never_fails_the_encode(tmp_path, compiled,
                                                               monkeypatch):
    obj = compiled[0]
    expected = encoded_bytes(monkeypatch, obj, tmp_path / 'plain')
    (tmp_path / 'file').write_text('not a directory')
    name = fresh(obj, tmp_path / 'work')
    r = cli('encode', name, cwd=tmp_path / 'work', OBJBTF_CACHE_DIR=str(tmp_path / 'file'))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / 'work' / name).read_bytes() == expected
    [line] = r.stderr.splitlines()
    assert line.startswith(f'objbtf: OBJBTF_CACHE_DIR: cannot keep an encode in {tmp_path}/file/')
    assert line.endswith('(Not a directory): encoded without keeping it')


def test_a_size_that_is_no_size_fails_naming_the_variable(tmp_path, compiled):
    name = fresh(compiled[0], tmp_path)
    r = cli('encode', name, cwd=tmp_path, OBJBTF_CACHE_DIR=str(tmp_path / 'cache'),
            OBJBTF_CACHE_SIZE='2X')
    assert r.returncode == 1
    assert r.stderr == ("objbtf: OBJBTF_CACHE_SIZE='2X' is not a size "
                        "(bytes, or a number with K, M or G)\n")
    assert (tmp_path / name).read_bytes() == compiled[0].read_bytes()
    assert [parse_size(s) for s in ('', '100', '3k', '5M', '2G')] == \
        [2 << 30, 100, 3 << 10, 5 << 20, 2 << 30]


def test_each_directory_keeps_its_share_least_recently_used_out_first(tmp_path):
    """A directory (one of 256) holds at most 1/256 of the size: a write
    past it removes the entries used longest ago, never the one written."""
    out = Written(b'x' * 1000, b'chunk', {}, None)
    entry_size = len(encode_cache._encode(out, 'ab' + '0' * 38, bytes(32)))
    cache = EncodeCache(str(tmp_path), max_size=256 * (3 * entry_size))   # 3 per directory
    keys = [f'ab{n:038d}' for n in range(5)]
    for n, key in enumerate(keys[:3]):
        cache.put(key, out)
        os.utime(cache._path(key), ns=(n * 10**9, n * 10**9))          # 0 oldest
    assert cache.get(keys[0]) == out                                   # now the newest
    cache.put(keys[3], out)
    assert sorted('ab' + p.name for p in (tmp_path / 'ab').iterdir()) == \
        sorted([keys[0], keys[2], keys[3]])
    tiny = EncodeCache(str(tmp_path), max_size=1)
    tiny.put(keys[4], out)
    assert [p.name for p in (tmp_path / 'ab').iterdir()] == [keys[4][2:]]
    assert tiny.problem is None


def test_stats_count_hits_and_misses_of_encodes_at_once_and_clear_zeroes_them(tmp_path, compiled):
    """``objbtf cache stats``: the entries and their bytes as they are on
    disk, a miss per object encoded and kept, a hit per object given kept
    sections, also of 12 encodes at once; ``objbtf cache clear`` removes
    the entries and zeroes the counters."""
    cache = tmp_path / 'cache'
    env = {'OBJBTF_CACHE_DIR': str(cache)}
    names = [fresh(obj, tmp_path) for obj in compiled]
    assert cli('encode', *names, cwd=tmp_path, **env).returncode == 0      # misses
    names = [fresh(obj, tmp_path) for obj in compiled]
    assert cli('encode', *names, cwd=tmp_path, **env).returncode == 0      # hits
    storm = [fresh(compiled[0], tmp_path, f'storm/{n}.o') for n in range(12)]
    assert cli('encode', *storm, cwd=tmp_path, **env).returncode == 0      # misses (by path)
    storm = [fresh(compiled[0], tmp_path, name) for name in storm]
    procs = [subprocess.Popen([sys.executable, '-m', 'objbtf', 'encode', name], cwd=tmp_path,
                              env={**os.environ, 'PYTHONPATH': str(ROOT), 'OBJBTF_RESIDENT': '0',
                                   **env}) for name in storm]
    assert [p.wait(timeout=300) for p in procs] == [0] * 12                # hits, at once
    kept = entries(cache)
    assert len(kept) == len(compiled) + len(storm)
    stats = cli('cache', 'stats', cwd=tmp_path, **env)
    assert stats.returncode == 0, stats.stderr
    values = dict(re.findall(r'^(\w[\w ]*?) {2,}(.*)$', stats.stdout, re.M))
    assert values['hits'] == values['misses'] == str(len(compiled) + len(storm))
    assert values['hit rate'] == '50.0 %'
    size = sum(p.stat().st_size for p in kept)
    assert values['cache directory'] == str(cache)
    assert values['entries'] == str(len(kept))
    assert values['size'] == f'{size / (1 << 20):.1f} MiB ({size} bytes), at most 2048 MiB'
    cleared = cli('cache', 'clear', '--dir', str(cache), cwd=tmp_path)
    assert cleared.stdout == f'removed {len(kept)} entries from {cache}; counters zeroed\n'
    assert entries(cache) == []
    stats = cli('cache', 'stats', '--dir', str(cache), cwd=tmp_path).stdout
    assert re.search(r'^entries +0$', stats, re.M) and re.search(r'^hits +0$', stats, re.M)
    assert re.search(r'^misses +0$', stats, re.M) and re.search(r'^hit rate +-$', stats, re.M)


def test_cache_commands_name_what_is_missing(tmp_path):
    r = cli('cache', 'stats', cwd=tmp_path, OBJBTF_CACHE_DIR='')
    assert r.returncode == 2
    assert 'Error: no encode cache: set OBJBTF_CACHE_DIR or give --dir DIR' in r.stderr
    r = cli('cache', 'clear', cwd=tmp_path, OBJBTF_CACHE_DIR=str(tmp_path / 'none'))
    assert r.returncode == 1
    assert r.stderr == f'Error: {tmp_path}/none: no encode cache there (no such directory)\n'


def test_a_cache_others_may_write_is_refused_unless_shared(tmp_path, compiled, monkeypatch):
    """A cache directory its group may write: one line, nothing kept, the
    object encoded; OBJBTF_CACHE_SHARED=1 says it is meant to be shared."""
    obj = compiled[0]
    expected = encoded_bytes(monkeypatch, obj, tmp_path / 'plain')
    (tmp_path / 'cache').mkdir()
    os.chmod(tmp_path / 'cache', 0o775)
    name = fresh(obj, tmp_path / 'work')
    r = cli('encode', name, cwd=tmp_path / 'work', OBJBTF_CACHE_DIR=str(tmp_path / 'cache'))
    assert r.returncode == 0 and (tmp_path / 'work' / name).read_bytes() == expected
    assert r.stderr == (f'objbtf: OBJBTF_CACHE_DIR: {tmp_path}/cache: its group or others may '
                        'write to it (mode 775); set OBJBTF_CACHE_SHARED=1 if it is meant to be '
                        'shared: encoded without keeping it\n')
    assert list((tmp_path / 'cache').iterdir()) == []
    name = fresh(obj, tmp_path / 'work')
    r = cli('encode', name, cwd=tmp_path / 'work', OBJBTF_CACHE_DIR=str(tmp_path / 'cache'),
            OBJBTF_CACHE_SHARED='1')
    assert (r.returncode, r.stderr) == (0, '')
    assert len(entries(tmp_path / 'cache')) == 1
    assert (tmp_path / 'cache' / encode_cache.SECRET).stat().st_mode & 0o777 == 0o640


def test_a_cache_of_another_user_is_refused(tmp_path, compiled):
    if os.geteuid() != 0:
        pytest.skip('giving a directory to another user needs root')
    (tmp_path / 'cache').mkdir(mode=0o700)
    os.chown(tmp_path / 'cache', 65534, 65534)
    name = fresh(compiled[0], tmp_path / 'work')
    r = cli('encode', name, cwd=tmp_path / 'work', OBJBTF_CACHE_DIR=str(tmp_path / 'cache'))
    assert r.returncode == 0
    assert r.stderr.startswith(f'objbtf: OBJBTF_CACHE_DIR: {tmp_path}/cache: owned by uid '
                               '65534, not by this user; set OBJBTF_CACHE_SHARED=1')
    assert list((tmp_path / 'cache').iterdir()) == []


def test_links_and_planted_entries_in_the_cache_are_not_trusted(tmp_path, compiled, monkeypatch):
    """A symbolic link where an entry goes is replaced, never written
    through nor read; an entry written with another cache's secret, or
    copied under another key, is a miss."""
    obj = compiled[0]
    cache, expected, entry, good = kept_once(monkeypatch, tmp_path, obj)
    victim = tmp_path / 'victim'
    victim.write_bytes(good)
    entry.unlink()
    entry.symlink_to(victim)
    assert cache.get(entry.parent.name + entry.name) is None     # not read through
    encode_path(fresh(obj, tmp_path), Features(), cache)
    assert not entry.is_symlink() and victim.read_bytes() == good
    assert (tmp_path / obj.name).read_bytes() == expected
    key = entry.parent.name + entry.name
    kept = cache.get(key)
    assert kept is not None
    planted = encode_cache._encode(kept, key, bytes(32))           # not this cache's secret
    entry.write_bytes(planted)
    assert cache.get(key) is None
    other = 'ff' + '0' * 38                                         # a good entry, moved
    (tmp_path / 'cache' / 'ff').mkdir()
    (tmp_path / 'cache' / 'ff' / other[2:]).write_bytes(good)
    assert cache.get(other) is None


def test_the_entry_reader_never_raises(tmp_path, compiled, monkeypatch):
    """Fuzz: random bytes, and mutations of a good entry (flipped, cut,
    grown, spliced), as they are and with their digest made right again
    (so that the payload's reading is reached): a miss or a Written, never
    an exception."""
    import random
    rng = random.Random(45)
    _, _, entry, good = kept_once(monkeypatch, tmp_path, compiled[0])
    key = entry.parent.name + entry.name
    secret = (tmp_path / 'cache' / encode_cache.SECRET).read_bytes()
    start = len(encode_cache.MAGIC) + encode_cache._CHECK_LEN
    resigned = 0
    for case in range(3000):
        data = bytearray(good)
        kind = case % 5
        if kind == 0:
            data = bytearray(rng.randbytes(rng.randrange(200)))
        elif kind == 1:
            for _ in range(rng.randrange(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 2:
            del data[rng.randrange(start, len(data)):]
        elif kind == 3:
            at = rng.randrange(start, len(data))
            data[at:at] = rng.randbytes(rng.randrange(1, 16))
        else:
            at = rng.randrange(start, len(data))
            data[at:at + 8] = good[rng.randrange(start, len(good)):][:8]
        if case % 2:
            payload = bytes(data[start:])
            data = bytearray(encode_cache.MAGIC + encode_cache._mac(secret, key, payload) + payload)
            resigned += 1
        result = encode_cache._decode(bytes(data), key, secret)
        assert result is None or isinstance(result, Written), case
    assert resigned == 1500
