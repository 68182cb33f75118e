"""Bad inputs, faults and races (issue: nothing wrong is ever written, every
error is one line): non-regular inputs, a stale .BTF after re-encoding,
legacy compressed DWARF, two encodes of one file at once, kill -9."""
from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from conftest import C_FIXTURES, ROOT, compile_c, need, objbtf, run

COMMANDS = ('encode', 'check', 'dump', 'link')


def section_sizes(obj: Path) -> dict[str, int]:
    """Section name -> size, read by pyelftools (an independent reader)."""
    with open(obj, 'rb') as f:
        return {s.name: s['sh_size'] for s in ELFFile(f).iter_sections()}


def section_bytes(obj: Path, name: str) -> bytes:
    with open(obj, 'rb') as f:
        sec = ELFFile(f).get_section_by_name(name)
        assert sec is not None, f'{obj} has no {name}'
        return sec.data()


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert 'Traceback' not in stderr
    return lines[0]


# --- inputs that are not regular files ---------------------------------------

@pytest.fixture
def odd_inputs(tmp_path) -> dict[str, tuple[Path, str]]:
    """path -> what the error must say, for each kind of non-regular input."""
    fifo = tmp_path / 'fifo'
    os.mkfifo(fifo)
    (tmp_path / 'dir').mkdir()
    return {'fifo': (fifo, 'is a FIFO'), 'dir': (tmp_path / 'dir', 'is a directory'),
            'device': (Path('/dev/zero'), 'is a character device'),
            'missing': (tmp_path / 'missing.o', 'No such file or directory')}


@pytest.mark.parametrize('command', COMMANDS)
@pytest.mark.parametrize('kind', ['fifo', 'dir', 'device', 'missing'])
def test_non_regular_inputs_are_refused_at_once(odd_inputs, command, kind):
    """A FIFO would block open() forever and /dev/zero would be read without
    end: each is refused at once, on one line naming it, with status 1."""
    path, says = odd_inputs[kind]
    r = subprocess.run([sys.executable, '-m', 'objbtf', command, str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr)
    line = one_line(r.stderr)
    assert str(path) in line and says in line, line


def test_non_regular_base_is_refused(odd_inputs, tmp_path):
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'k.o')
    objbtf('encode', obj)
    fifo, says = odd_inputs['fifo']
    r = subprocess.run([sys.executable, '-m', 'objbtf', 'dump', '--base', str(fifo), str(obj)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and str(fifo) in one_line(r.stderr) and says in r.stderr


# --- re-encoding replaces everything objbtf wrote ----------------------------

PERCPU_SOURCE = '''
__attribute__((section(".data..percpu"))) long hits;
struct pkt_stats { unsigned long rx_bytes; unsigned long tx_bytes; };
__attribute__((section(".data..percpu"))) struct pkt_stats stats;
int account(struct pkt_stats *s) { return s->rx_bytes > s->tx_bytes; }
'''


def test_stale_btf_after_reencoding_is_gone(tmp_path):
    """The issue's reproduction: a.o encoded, stripped of DWARF, encoded
    again.  Its old .BTF and .rela.BTF must not reach the link."""
    (tmp_path / 'a.c').write_text(PERCPU_SOURCE)
    (tmp_path / 'b.c').write_text('__attribute__((section(".data..percpu"))) int only_b;\n')
    a = compile_c('gcc', tmp_path / 'a.c', tmp_path / 'a.o')
    b = compile_c('gcc', tmp_path / 'b.c', tmp_path / 'b.o')
    objbtf('encode', a, b)
    assert section_sizes(a)['.rela.BTF'] > 0
    run('strip', '--strip-debug', a)
    r = objbtf('encode', a)
    assert 'no DWARF types' in r.stderr
    sizes = section_sizes(a)
    assert sizes['.BTF'] == 0 and sizes['.rela.BTF'] == 0 and sizes['.BTF.objbtf'] > 0

    need('ld')
    run('ld', '-r', '-o', tmp_path / 'ab.o', a, b)
    run('ld', '-r', '-o', tmp_path / 'b_only.o', b)
    objbtf('link', '-o', tmp_path / 'ab.btf', tmp_path / 'ab.o')
    objbtf('link', '-o', tmp_path / 'b.btf', tmp_path / 'b_only.o')
    # The same types and variables as b.o's alone; only the DATASEC's size
    # and offsets differ, since a.o's percpu variables still take their room.
    both = objbtf('dump', tmp_path / 'ab.btf').stdout.splitlines()
    alone = objbtf('dump', tmp_path / 'b.btf').stdout.splitlines()
    assert [re.sub(r" (size|offset)=\d+", '', line) for line in both] == \
        [re.sub(r" (size|offset)=\d+", '', line) for line in alone]
    assert "VAR 'only_b'" in '\n'.join(both) and 'stats' not in '\n'.join(both)


def test_reencoding_with_types_again_restores_them(tmp_path):
    (tmp_path / 'a.c').write_text(PERCPU_SOURCE)
    a = compile_c('gcc', tmp_path / 'a.c', tmp_path / 'a.o')
    fresh = tmp_path / 'fresh.o'
    shutil.copy(a, fresh)
    objbtf('encode', fresh)
    objbtf('encode', a)
    run('strip', '--strip-debug', a)
    objbtf('encode', a)
    compile_c('gcc', tmp_path / 'a.c', a)
    objbtf('encode', a)
    assert section_bytes(a, '.BTF') == section_bytes(fresh, '.BTF')


# --- legacy compressed DWARF --------------------------------------------------

def test_zdebug_sections_are_decoded(tmp_path):
    """-gz=zlib-gnu writes .zdebug_* sections: the same BTF as plain DWARF."""
    plain = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'plain.o')
    legacy = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'legacy.o', '-gz=zlib-gnu')
    assert '.zdebug_info' in section_sizes(legacy)
    objbtf('encode', plain, legacy)
    assert section_bytes(legacy, '.BTF') == section_bytes(plain, '.BTF')


# --- two encodes of one file at once ------------------------------------------

def test_concurrent_encodes_of_one_file_both_succeed(tmp_path):
    """The later encode reads the earlier's result again and succeeds: the
    same bytes either way."""
    src = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'src.o')
    expected = tmp_path / 'expected.o'
    shutil.copy(src, expected)
    objbtf('encode', expected)
    for i in range(20):
        obj = tmp_path / f'race{i}.o'
        shutil.copy(src, obj)
        procs = [subprocess.Popen([sys.executable, '-m', 'objbtf', 'encode', str(obj)],
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        assert section_bytes(obj, '.BTF') == section_bytes(expected, '.BTF')
        assert section_bytes(obj, '.BTF.objbtf')[8:] != b''


# --- kill -9 ---------------------------------------------------------------

def big_source(path: Path, structs: int = 400) -> Path:
    """A unit with enough types that encoding takes a while to kill."""
    body = [f'struct s{i} {{ int a; long b; struct s{i - 1} *prev; char c[{i % 7 + 1}]; }};'
            if i else 'struct s0 { int a; };' for i in range(structs)]
    body += [f'int use{i}(struct s{i} *p) {{ return p->a; }}' for i in range(structs)]
    path.write_text('\n'.join(body) + '\n')
    return path


def litter(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith('.objbtf-'))


def test_kill_9_never_corrupts_and_leaves_no_litter(tmp_path):
    src = compile_c('gcc', big_source(tmp_path / 'big.c'), tmp_path / 'big.o')
    original = src.read_bytes()
    work = tmp_path / 'work'
    work.mkdir()
    obj = work / 'big.o'
    shutil.copy(src, obj)
    objbtf('encode', obj)            # the chunk names the object: same path
    encoded = obj.read_bytes()
    rng = random.Random(1234)
    for _ in range(30):
        shutil.copy(src, obj)
        p = subprocess.Popen([sys.executable, '-m', 'objbtf', 'encode', str(obj)],
                             stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.05, 0.6))
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert obj.read_bytes() in (original, encoded)
    objbtf('encode', obj)
    assert obj.read_bytes() == encoded
    assert litter(work) == []


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path):
    """A temporary file whose writer is gone (a killed run on a file system
    without O_TMPFILE) is removed by the next write in that directory; one
    whose writer still runs is left alone."""
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'k.o')
    dead = subprocess.Popen(['true'])
    dead.wait()
    stale = tmp_path / f'.objbtf-k.o.{dead.pid}.0.tmp'
    live = tmp_path / f'.objbtf-k.o.{os.getpid()}.0.tmp'
    stale.write_bytes(b'partial')
    live.write_bytes(b'in progress')
    objbtf('encode', obj)
    assert litter(tmp_path) == [live.name]


def test_encode_writes_through_no_named_temporary(tmp_path):
    """Where the file system has O_TMPFILE, the new object has no name until
    the instant before the rename: strace shows the open and the linkat."""
    strace = shutil.which('strace')
    if strace is None:
        pytest.fail('strace is not installed (Debian package strace); this test needs it')
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'k.o')
    r = run(strace, '-f', '-e', 'trace=openat,linkat,rename,renameat,renameat2',
            sys.executable, '-m', 'objbtf', 'encode', obj,
            env={**os.environ, 'PYTHONPATH': str(ROOT)})
    assert 'O_TMPFILE' in r.stderr and 'linkat(' in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize('align', [0xff000000, 1 << 31])
def test_an_absurd_section_alignment_is_refused_at_once(tmp_path, align):
    """A rewrite honours each section's alignment: 2^31 padded the output to
    2 GB (the fuzzer's MemoryError or hang).  libelf refuses an alignment
    that is not a power of two; objbtf also one above 16 MiB."""
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'kinds.o', '-g')
    with open(obj, 'rb') as f:
        elf = ELFFile(f)
        index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == '.data')
        at = elf['e_shoff'] + elf['e_shentsize'] * index + 48           # sh_addralign
    data = bytearray(obj.read_bytes())
    data[at:at + 8] = align.to_bytes(8, 'little')
    obj.write_bytes(data)
    for command in ('encode', 'check', 'dump'):
        r = objbtf(command, obj, check=False)
        assert r.returncode == 1
        line = one_line(r.stderr)
        assert obj.name in line and f'alignment 0x{align:x}' in line, line
        assert obj.read_bytes() == data
