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
from objbtf.dwarf.constants import OP_addrx
from objbtf.dwarf.reader import Expr, read_units
from objbtf.elf.consts import SHF_COMPRESSED
from objbtf.elf.reader import ElfFile
from objbtf.encode.encoder import EncodeError, _Placer, debug_sections

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


def patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, 'r+b') as f:
        f.seek(offset)
        f.write(data)


#: Offsets of fields in an ELF64 section header.
SH_NAME, SH_TYPE, SH_FLAGS, SH_SIZE, SH_ADDRALIGN = 0, 4, 8, 32, 48


def header_field(path: Path, section: str, field: int) -> int:
    """Where in ``path`` the field at ``field`` of ``section``'s header is."""
    with open(path, 'rb') as f:
        elf = ELFFile(f)
        index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == section)
        return elf['e_shoff'] + elf['e_shentsize'] * index + field


def refused(obj: Path, commands: tuple[str, ...], *says: str) -> None:
    """Each command on ``obj``: exit 1, one line naming it and saying
    ``says``, the input as it was."""
    before = obj.read_bytes()
    for command in commands:
        r = objbtf(command, obj, check=False)
        assert r.returncode == 1
        line = one_line(r.stderr)
        assert obj.name in line and all(x in line for x in says), line
        assert obj.read_bytes() == before


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
    assert 'no types to encode' in r.stderr
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

def test_a_location_cut_inside_its_addrx_operand_names_the_variable(tmp_path):
    """A DW_OP_addrx whose operand the expression does not hold (found by
    tests/fuzz.py, seed 20, in a damaged clang object) is an error naming
    the variable, not a traceback."""
    obj = compile_c('clang', C_FIXTURES / 'counter_a.c', tmp_path / 'a.o', '-gdwarf-5')
    with ElfFile.open(str(obj)) as elf:
        unit = read_units(debug_sections(elf))[0]
        placer = _Placer(elf, elf.symbols())
        assert placer.place(unit, Expr(0, bytes([OP_addrx, 0])), 'v', 4) is not None
        with pytest.raises(EncodeError, match="^variable 'v': DW_AT_location ends inside "
                                              'its DW_OP_addrx operand$'):
            placer.place(unit, Expr(0, bytes([OP_addrx])), 'v', 4)


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
    without O_TMPFILE) is removed by the next process's first write in that
    directory; one whose writer still runs is left alone."""
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'k.o')
    dead = subprocess.Popen(['true'])
    dead.wait()
    stale = tmp_path / f'.objbtf-k.o.{dead.pid}.0.tmp'
    live = tmp_path / f'.objbtf-k.o.{os.getpid()}.0.tmp'
    stale.write_bytes(b'partial')
    live.write_bytes(b'in progress')
    objbtf('encode', obj)
    assert litter(tmp_path) == [live.name]


def test_a_process_rids_a_directory_of_stale_temporaries_once(tmp_path):
    """A resident worker writes many objects into one directory: it looks
    for dead writers' temporaries at its first write there only, and what a
    writer killed after that leaves is removed by the next process."""
    code = """if True:
        import subprocess, sys
        from pathlib import Path
        from objbtf.elf.writer import write_atomically
        out = Path(sys.argv[1])
        write_atomically(str(out / 'a'), [b'a'])
        dead = subprocess.Popen(['true'])
        dead.wait()
        (out / f'.objbtf-b.{dead.pid}.0.tmp').write_bytes(b'partial')
        write_atomically(str(out / 'b'), [b'b'])
    """
    env = {**os.environ, 'PYTHONPATH': str(ROOT)}
    subprocess.run([sys.executable, '-c', code, tmp_path], check=True, env=env, timeout=60)
    stale = [name for name in litter(tmp_path) if name.startswith('.objbtf-b.')]
    assert len(stale) == 1, litter(tmp_path)        # the same process's second write kept it
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'k.o')
    objbtf('encode', obj)
    assert litter(tmp_path) == []


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
    patch(obj, header_field(obj, '.data', SH_ADDRALIGN), align.to_bytes(8, 'little'))
    refused(obj, ('encode', 'check', 'dump'), f'alignment 0x{align:x}')


@pytest.mark.parametrize('table', ['.shstrtab', '.strtab'])
def test_a_string_table_of_another_type_is_refused(tmp_path, table):
    """libelf reads names only from a section of type SHT_STRTAB: an object
    whose section name table had another type was encoded, and bpftool could
    not read the result (the fuzzer, encode case 754 of seed 4); the same
    for the symbols' string table, which ld reads."""
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'kinds.o', '-g')
    patch(obj, header_field(obj, table, SH_TYPE), (0xff00).to_bytes(4, 'little'))
    # (check and dump read no symbols)
    refused(obj, ('encode', 'check', 'dump') if table == '.shstrtab' else ('encode',),
            'type 0xff00, not SHT_STRTAB')


def test_a_section_name_table_marked_compressed_is_refused(tmp_path):
    """libelf reads no section name from a table marked SHF_COMPRESSED
    (bpftool: "failed to get section(1) name"): objbtf read the names as
    they are and wrote its BTF into such an object, which bpftool then
    could not read (the fuzzer, encode case 8838 of seed 13)."""
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'kinds.o', '-g')
    field = header_field(obj, '.shstrtab', SH_FLAGS)
    flags = int.from_bytes(obj.read_bytes()[field:field + 8], 'little') | SHF_COMPRESSED
    patch(obj, field, flags.to_bytes(8, 'little'))
    refused(obj, ('encode', 'check', 'dump'), 'section name table', 'marked compressed')


def test_a_name_with_a_control_character_is_escaped_in_the_one_line(tmp_path):
    """A DWARF name holding a vertical tab (fuzz, seed 4): the kernel's rule
    refuses it, and the message showed it raw, which split the one line."""
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'kinds.o')
    patch(obj, obj.read_bytes().index(b'\0percpu_counter\0') + 7, b'\x0b')
    refused(obj, ('encode',), "VAR 'percpu\\x0bcounter'")


@pytest.mark.parametrize('compiler', ['gcc', 'clang'])
def test_a_section_name_that_is_not_utf8_is_refused(tmp_path, compiler):
    """A DATASEC takes its section's name; one that is not UTF-8 (clang keeps
    section names in .strtab, beside the symbols') was a UnicodeEncodeError
    (fuzz: encode case 5163 of seed 4)."""
    obj = compile_c(compiler, C_FIXTURES / 'kinds.c', tmp_path / 'kinds.o')
    patch(obj, obj.read_bytes().index(b'.data..percpu..read_mostly\0') + 17, b'\xcd')
    refused(obj, ('encode',), 'not UTF-8', '\\udccd')


def test_two_sections_named_btf_are_refused(tmp_path):
    """An encoded object whose .rela.BTF.addrs name lost its tail left two
    sections named .BTF: encode replaced the first, libbpf reads the last,
    and bpftool could not read the result (fuzz: encode case 3869 of seed 6,
    an s390x object).  Here .comment is renamed .BTF the same way."""
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'kinds.o')
    objbtf('encode', obj)
    with open(obj, 'rb') as f:
        secs = [sec.name for sec in ELFFile(f).iter_sections()]
    comment, btf = secs.index('.comment'), secs.index('.BTF')
    name = obj.read_bytes()[header_field(obj, '.BTF', SH_NAME):][:4]
    patch(obj, header_field(obj, '.comment', SH_NAME), name)
    refused(obj, ('encode',), f'sections {comment} and {btf} are both named .BTF')


# --- the chunk cannot lie -------------------------------------------------------

def test_a_hash_copied_over_another_is_an_error_naming_the_object(tmp_path):
    """The issue's reproduction: in a.o's chunk, the hash of `int` copied over
    that of `long unsigned int` made the link merge the two and write
    `struct pkt_stats { int rx_bytes; int tx_bytes; }`, valid BTF, exit 0.
    The chunk's checksum no longer matches: the link refuses, naming a.o."""
    from objbtf.btf.chunk import SECTION, split_chunks
    from objbtf.btf.reader import parse_btf
    need('ld')
    (tmp_path / 'a.c').write_text(PERCPU_SOURCE)
    (tmp_path / 'b.c').write_text('__attribute__((section(".data..percpu"))) int only_b;\n')
    a = compile_c('gcc', tmp_path / 'a.c', tmp_path / 'a.o')
    b = compile_c('gcc', tmp_path / 'b.c', tmp_path / 'b.o')
    objbtf('encode', 'a.o', 'b.o', cwd=tmp_path)
    run('ld', '-r', '-o', tmp_path / 'good.o', a, b)
    objbtf('link', '-o', 'good.btf', 'good.o', cwd=tmp_path)
    assert "'rx_bytes' type_id=" in objbtf('dump', tmp_path / 'good.btf').stdout

    btf = parse_btf(section_bytes(a, '.BTF'))
    ids = {t.name: i for i, t in btf.own() if t.name in ('int', 'long unsigned int')}
    chunk_bytes = section_bytes(a, SECTION)
    [chunk] = split_chunks(chunk_bytes, 'little')
    source, target = (chunk.hashes[ids[n] - 1].to_bytes(8, 'little')
                      for n in ('int', 'long unsigned int'))
    assert chunk_bytes.count(target) == 1
    data = a.read_bytes()
    at = data.index(chunk_bytes)
    a.write_bytes(data[:at] + chunk_bytes.replace(target, source) + data[at + len(chunk_bytes):])
    run('ld', '-r', '-o', tmp_path / 'bad.o', a, b)
    r = objbtf('link', '-o', 'bad.btf', 'bad.o', cwd=tmp_path, check=False)
    assert r.returncode == 1
    line = one_line(r.stderr)
    assert 'bad.o' in line and 'chunk of a.o' in line and 'checksum' in line, line
    assert not (tmp_path / 'bad.btf').exists()


# --- link: inputs that lie, damaged or forged ------------------------------------

def linked_fixture(tmp_path: Path, executable: bool = False) -> Path:
    """counter_a.o, counter_b.o (percpu statics of one name) and kinds.o,
    encoded and linked: ``ld -r``, or as an executable, as vmlinux is."""
    need('ld')
    objs = [compile_c('gcc', C_FIXTURES / f'{n}.c', tmp_path / f'{n}.o')
            for n in ('counter_a', 'counter_b', 'kinds')]
    objbtf('encode', *[o.name for o in objs], cwd=tmp_path)
    out = tmp_path / ('all' if executable else 'all.o')
    flags = ['-e', '0', '--unresolved-symbols=ignore-all'] if executable else ['-r']
    run('ld', *flags, '-o', out, *objs)
    return out


def blob_types(path: Path, index: int) -> list[tuple[int, object]]:
    """(file offset, type) of each type of the ``index``-th blob of .BTF."""
    from linkdedup.concat import split_blobs
    from objbtf.btf.reader import parse_btf
    with ElfFile.open(str(path)) as elf:
        sec = elf.section_by_name('.BTF')
        blob = split_blobs(elf.section_data(sec))[index]
        offsets: list[int] = []
        btf = parse_btf(bytes(blob.data), offsets=offsets)
        start = sec.offset + blob.offset + blob.header.hdr_len + blob.header.type_off
        return [(start + off, btf[i + 1]) for i, off in enumerate(offsets)]


def first_of(types: list[tuple[int, object]], kind: str) -> int:
    return next(at for at, t in types if t.kind.name == kind)


def link_fails(tmp_path: Path, target: Path, *says: str) -> str:
    """Link ``target``: exit 1, one line naming it and saying ``says``, no
    output, the input as it was."""
    before = target.read_bytes()
    r = objbtf('link', '-q', '-o', 'out.btf', target.name, cwd=tmp_path, check=False)
    assert r.returncode == 1, r.stderr
    line = one_line(without_warnings(r.stderr))
    assert target.name in line and all(s in line for s in says), line
    assert not (tmp_path / 'out.btf').exists() and target.read_bytes() == before
    return line


def without_warnings(stderr: str) -> str:
    """The link's stderr without its warnings (each a line of its own, as
    that a file has no .BTF.objbtf): what is left is the error."""
    return ''.join(line for line in stderr.splitlines(keepends=True)
                   if not line.startswith('objbtf link: warning: '))


COUNT_PAST = 1000


@pytest.mark.parametrize('damage, says', [
    ('a reference past the last type', ('BTF blob 3 at offset', 'refers to missing type [1000]')),
    ('a name past the string section', ('BTF blob 3 at offset', 'outside the string section')),
    ('an INT with kflag', ('BTF blob 3 at offset', 'the kernel would reject')),
    ('a DATASEC entry smaller than its VAR', ("DATASEC '.data..percpu'",
                                              "less than its type's 4")),
])
def test_link_without_chunks_names_what_is_wrong(tmp_path, damage, says):
    """No .BTF.objbtf: nothing vouches for the blobs, so the link checks each
    against the kernel's rules (tracebacks in the issue: IndexError in
    hashing.py and merge.py), and the DATASECs it makes of them."""
    linked = linked_fixture(tmp_path)
    bare = tmp_path / 'bare.o'
    run(need('objcopy'), '--remove-section', '.BTF.objbtf', linked, bare)
    types = blob_types(bare, 2)
    if damage == 'a reference past the last type':
        patch(bare, first_of(types, 'PTR') + 8, (COUNT_PAST).to_bytes(4, 'little'))
    elif damage == 'a name past the string section':
        patch(bare, first_of(types, 'STRUCT'), (0xfffff0).to_bytes(4, 'little'))
    elif damage == 'an INT with kflag':
        at = first_of(types, 'INT') + 4
        info = int.from_bytes(bare.read_bytes()[at:at + 4], 'little')
        patch(bare, at, (info | 1 << 31).to_bytes(4, 'little'))
    else:       # the size of the first entry of counter_a.o's DATASEC, an int
        patch(bare, first_of(blob_types(bare, 0), 'DATASEC') + 12 + 8, (2).to_bytes(4, 'little'))
    link_fails(tmp_path, bare, *says)


def test_a_forged_chunk_still_gives_one_line_naming_the_object(tmp_path):
    """The checksum guards against damage, not forgery: a chunk made to
    match a blob whose VAR refers past its last type is trusted, and the
    merge still stops on one line naming the object."""
    import fuzz
    linked = linked_fixture(tmp_path)
    patch(linked, first_of(blob_types(linked, 0), 'VAR') + 8,
          COUNT_PAST.to_bytes(4, 'little'))
    line = link_fails(tmp_path, linked, 'checksum')
    assert 'counter_a.o' in line, line
    linked.write_bytes(fuzz.resign(linked.read_bytes()))
    link_fails(tmp_path, linked, 'the BTF of counter_a.o', 'past the last type')


def test_a_corrupt_chunk_name_is_shown_escaped_on_one_line(tmp_path):
    from objbtf.btf.chunk import SECTION
    linked = linked_fixture(tmp_path)
    data = linked.read_bytes()
    chunks = section_bytes(linked, SECTION)
    at = data.index(chunks) + data[data.index(chunks):].index(b'counter_b.o')
    patch(linked, at, b'\ncou\x01')
    link_fails(tmp_path, linked, 'chunk of \\ncou\\x01er_b.o', 'checksum')


def rela_btf(path: Path) -> tuple[int, list[tuple[int, int, int]]]:
    """File offset of .rela.BTF and its entries (offset, info, addend)."""
    with open(path, 'rb') as f:
        sec = ELFFile(f).get_section_by_name('.rela.BTF')
        return sec['sh_offset'], [(r['r_offset'], r['r_info'], r['r_addend'])
                                  for r in sec.iter_relocations()]


@pytest.mark.parametrize('addend', [-1, 2**32])
def test_link_refuses_a_variable_placed_outside_its_section(tmp_path, addend):
    """A `.rela.BTF` addend of -1 or 2^32 (struct.error in the issue)."""
    linked = linked_fixture(tmp_path)
    at, relocs = rela_btf(linked)
    patch(linked, at + 16, addend.to_bytes(8, 'little', signed=True))
    link_fails(tmp_path, linked, 'in section .data..percpu', 'lies outside the section',
               'of the BTF of counter_a.o')


def test_link_refuses_variables_that_overlap(tmp_path):
    """Two entries at one place: ld never gives that, the kernel refuses it."""
    linked = linked_fixture(tmp_path)
    at, relocs = rela_btf(linked)
    sym = relocs[0][1]
    second = next(k for k, r in enumerate(relocs) if k and r[1] != sym)
    patch(linked, at + 24 * second + 8, relocs[0][1].to_bytes(8, 'little'))
    patch(linked, at + 24 * second + 16, relocs[0][2].to_bytes(8, 'little', signed=True))
    link_fails(tmp_path, linked, 'overlaps variable')


def symbol_entry(path: Path, name: str) -> int:
    """File offset of the symbol table entry of ``name``."""
    with open(path, 'rb') as f:
        symtab = ELFFile(f).get_section_by_name('.symtab')
        index = next(i for i, s in enumerate(symtab.iter_symbols()) if s.name == name)
        return symtab['sh_offset'] + 24 * index


def test_link_refuses_a_symbol_of_a_section_the_file_does_not_have(tmp_path):
    """A symbol's section index out of range (IndexError in relocate.py)."""
    linked = linked_fixture(tmp_path)
    _, relocs = rela_btf(linked)
    with open(linked, 'rb') as f:
        symtab = ELFFile(f).get_section_by_name('.symtab')
        sym = relocs[0][1] >> 32
        at = symtab['sh_offset'] + 24 * sym + 6                    # st_shndx
    patch(linked, at, (0xfe00).to_bytes(2, 'little'))
    link_fails(tmp_path, linked, 'of section 65024, which the file does not have')


def test_link_refuses_a_section_too_small_for_its_variables(tmp_path):
    """The DATASEC entry past its section of the issue: here the output
    section shrunk under its variables."""
    linked = linked_fixture(tmp_path)
    patch(linked, header_field(linked, '.data..percpu', SH_SIZE), (4).to_bytes(8, 'little'))
    link_fails(tmp_path, linked, 'lies outside the section (4 bytes)')


def test_odd_symbols_do_not_stop_the_link(tmp_path):
    """A non-UTF-8 symbol name and a symbol size of 2^64-1 (the issue's
    UnicodeEncodeError and struct.error) are names and sizes like others:
    the link gives the BTF it gives without them."""
    linked = linked_fixture(tmp_path)
    objbtf('link', '-o', 'good.btf', linked.name, cwd=tmp_path)
    patch(linked, symbol_entry(linked, 'bump_a') + 16, (2**64 - 1).to_bytes(8, 'little'))
    with open(linked, 'rb') as f:
        strtab = ELFFile(f).get_section_by_name('.strtab')
        at = strtab['sh_offset'] + strtab.data().index(b'bump_b\0')
    patch(linked, at, b'\xff\xfe')
    objbtf('link', '-o', 'odd.btf', linked.name, cwd=tmp_path)
    assert (tmp_path / 'odd.btf').read_bytes() == (tmp_path / 'good.btf').read_bytes()


def test_a_damaged_link_cache_is_not_replayed(tmp_path):
    """The cache's final BTF damaged on disk: its checksum fails, the link
    is a full one, and gives the full link's bytes."""
    linked = linked_fixture(tmp_path, executable=True)
    objbtf('link', '-o', 'full.btf', linked.name, cwd=tmp_path)
    objbtf('link', '--cache', 'c', '-o', 'first.btf', linked.name, cwd=tmp_path)
    cache = tmp_path / 'c'
    data = bytearray(cache.read_bytes())
    data[-20] ^= 0x40
    cache.write_bytes(bytes(data))
    r = objbtf('link', '--cache', 'c', '-o', 'again.btf', linked.name, cwd=tmp_path)
    assert 'replayed' not in r.stderr, r.stderr
    assert (tmp_path / 'again.btf').read_bytes() == (tmp_path / 'full.btf').read_bytes()
    r = objbtf('link', '--cache', 'c', '-o', 'third.btf', linked.name, cwd=tmp_path)
    assert 'replayed' in r.stderr and (tmp_path / 'third.btf').read_bytes() == \
        (tmp_path / 'full.btf').read_bytes()


# --- link: faults and races ---------------------------------------------------------

def test_link_onto_a_full_disk_names_the_output(tmp_path):
    """`link -o` onto a full file system blamed the input in the issue."""
    if os.geteuid() != 0:
        pytest.fail('mounting a small tmpfs needs root')
    linked = linked_fixture(tmp_path)
    full = tmp_path / 'full'
    full.mkdir()
    run('mount', '-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', full)
    try:
        fd = os.open(full / 'filler', os.O_WRONLY | os.O_CREAT)
        try:
            with pytest.raises(OSError):
                while True:
                    os.write(fd, bytes(4096))
        finally:
            os.close(fd)
        for out in ('out.btf', 'out.o'):
            r = objbtf('link', '-q', '-o', full / out, linked, check=False)
            assert r.returncode == 1
            line = one_line(r.stderr)
            assert str(full / out) in line and 'No space left on device' in line, line
            assert linked.name not in line
        assert sorted(p.name for p in full.iterdir()) == ['filler']
    finally:
        run('umount', full)


def test_in_place_link_of_an_immutable_file_names_it(tmp_path):
    """The issue's message named the temporary file instead."""
    linked = linked_fixture(tmp_path)
    objbtf('link', '-o', 'base.btf', linked.name, cwd=tmp_path)
    module = tmp_path / 'mod.ko'
    shutil.copy(linked, module)
    run('chattr', '+i', module)
    try:
        r = objbtf('link', '--base', 'base.btf', 'mod.ko', cwd=tmp_path, check=False)
    finally:
        run('chattr', '-i', module)
    assert r.returncode == 1
    assert one_line(r.stderr) == 'Error: mod.ko: Operation not permitted'
    assert module.read_bytes() == linked.read_bytes() and litter(tmp_path) == []


def test_two_links_to_one_output_at_once_both_succeed(tmp_path):
    linked = linked_fixture(tmp_path)
    objbtf('link', '-o', 'expected.btf', linked.name, cwd=tmp_path)
    expected = (tmp_path / 'expected.btf').read_bytes()
    for out in ['out.btf'] * 10 + ['out.o'] * 5:
        procs = [subprocess.Popen([sys.executable, '-m', 'objbtf', 'link', '-q', '-o', out,
                                   linked.name], cwd=tmp_path, stderr=subprocess.PIPE,
                                  text=True, env={**os.environ, 'PYTHONPATH': str(ROOT)})
                 for _ in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        if out == 'out.btf':
            assert (tmp_path / out).read_bytes() == expected
        else:
            assert section_bytes(tmp_path / out, '.BTF') == expected
    assert litter(tmp_path) == []


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat ('t': stopped by a tracer), '' if gone."""
    try:
        return Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return ''


def unnamed_file_open(pid: int, directory: Path) -> bool:
    """Whether ``pid`` has an O_TMPFILE file of ``directory`` open."""
    try:
        return any(os.readlink(fd.path).startswith(f'{directory}/#')
                   for fd in os.scandir(f'/proc/{pid}/fd'))
    except OSError:
        return False


#: Where a write can be killed: the new file written but still unnamed
#: (O_TMPFILE), and named, just before the rename over the target.
UNNAMED, NAMED = 'linkat', 'rename,renameat,renameat2'


def kill_when_stopped(tmp_path: Path, calls: str, *args: str) -> None:
    """Run objbtf ``args`` under strace, which holds it at the system calls
    ``calls`` (and at no others) of its write, and kill -9 it there."""
    strace = shutil.which('strace')
    if strace is None:
        pytest.fail('strace is not installed (Debian package strace); this test needs it')
    p = subprocess.Popen([strace, '-f', '--seccomp-bpf', '-qq', '-o', '/dev/null',
                          '-e', f'trace={calls}', '-e', f'inject={calls}:delay_enter=60000000',
                          sys.executable, '-m', 'objbtf', *args], cwd=tmp_path,
                         env={**os.environ, 'PYTHONPATH': str(ROOT),
                              'PYTHONDONTWRITEBYTECODE': '1'})
    held = ((lambda pid: unnamed_file_open(pid, tmp_path)) if calls == UNNAMED
            else (lambda pid: bool(litter(tmp_path))))
    deadline = time.monotonic() + 120
    children = Path(f'/proc/{p.pid}/task/{p.pid}/children')
    while True:
        assert p.poll() is None and time.monotonic() < deadline, f'never held at {calls}'
        tracee = [int(pid) for pid in children.read_text().split()]
        if tracee and process_state(tracee[0]) == 't' and held(tracee[0]):
            break
        time.sleep(0.01)
    os.kill(tracee[0], signal.SIGKILL)
    p.kill()            # strace would hold the killed process until its delay ends
    p.wait(timeout=60)
    while process_state(tracee[0]):       # a zombie still counts as a running writer
        assert time.monotonic() < deadline, f'{tracee[0]} never went'
        time.sleep(0.01)


@pytest.mark.parametrize('where', [UNNAMED, NAMED])
def test_a_link_killed_while_writing_leaves_the_old_output(tmp_path, where):
    """kill -9 at the two moments of a write that matter: the output stays
    as it was (-o, and a module linked in place), and a named temporary
    left behind is removed by the next link."""
    linked = linked_fixture(tmp_path)
    objbtf('link', '-o', 'base.btf', linked.name, cwd=tmp_path)
    objbtf('link', '-o', 'expected.btf', linked.name, cwd=tmp_path)
    module = tmp_path / 'mod.ko'
    shutil.copy(linked, module)
    objbtf('link', '--base', 'base.btf', 'mod.ko', cwd=tmp_path)
    linked_module = module.read_bytes()
    out = tmp_path / 'out.btf'
    for args, target, old in ((['link', '-j', '1', '-o', 'out.btf', linked.name], out, b'old'),
                              (['link', '-j', '1', '--base', 'base.btf', 'mod.ko'], module,
                               linked.read_bytes())):
        target.write_bytes(old)
        kill_when_stopped(tmp_path, where, *args)
        assert target.read_bytes() == old
        if where == UNNAMED:
            assert litter(tmp_path) == []
        else:
            [left] = litter(tmp_path)
            assert left.startswith(f'.objbtf-{target.name}.')
        objbtf(*args, cwd=tmp_path)
        assert litter(tmp_path) == []
    assert out.read_bytes() == (tmp_path / 'expected.btf').read_bytes()
    assert module.read_bytes() == linked_module


def test_a_link_removes_the_temporaries_of_dead_writers(tmp_path):
    linked = linked_fixture(tmp_path)
    dead = subprocess.Popen(['true'])
    dead.wait()
    stale = tmp_path / f'.objbtf-out.btf.{dead.pid}.0.tmp'
    stale.write_bytes(b'partial')
    objbtf('link', '-o', 'out.btf', linked.name, cwd=tmp_path)
    assert litter(tmp_path) == []


@pytest.mark.parametrize('align', [0xff000000, 1 << 31])
def test_an_absurd_section_alignment_in_a_linked_input_is_refused(tmp_path, align):
    """A rewrite honours each section's alignment: 2^31 padded an in-place
    link's output to 2 GB (a hang in the fuzzer).  libelf refuses an
    alignment that is not a power of two; objbtf also one above 16 MiB."""
    linked = linked_fixture(tmp_path)
    patch(linked, header_field(linked, '.data..percpu', SH_ADDRALIGN), align.to_bytes(8, 'little'))
    before = linked.read_bytes()
    for args in (['link', '-q', linked.name], ['encode', '-q', linked.name]):
        r = objbtf(*args, cwd=tmp_path, check=False)
        assert r.returncode == 1
        line = one_line(r.stderr)
        assert linked.name in line and f'alignment 0x{align:x}' in line, line
        assert linked.read_bytes() == before


def test_link_refuses_a_section_name_that_is_not_utf8(tmp_path):
    """The DATASEC takes its output section's name: one that is not UTF-8
    was a UnicodeEncodeError when the BTF was written (fuzz: link case 4350
    of seed 6, compiled)."""
    linked = linked_fixture(tmp_path)
    data = linked.read_bytes()
    at = data.rindex(b'\0.data..percpu\0') + 1
    patch(linked, at + 5, b'\xf0')
    link_fails(tmp_path, linked, 'not UTF-8', "'.data\\udcf0.percpu'")


def test_link_refuses_a_datasec_the_kernel_would_not_take(tmp_path):
    """The DATASEC takes its output section's name: one that is not
    printable text (a damaged section name table) is refused on one line,
    by the kernel's rules on the final DATASECs."""
    linked = linked_fixture(tmp_path)
    data = linked.read_bytes()
    at = data.rindex(b'\0.data..percpu\0') + 1
    patch(linked, at + 5, b'\x01')
    link_fails(tmp_path, linked, "rule of the kernel's", "DATASEC '.data\\x01.percpu'", 'printable')
