"""Which objects a link has BTF from: the object names and versions in the
.BTF.objbtf chunks, `objbtf link --objects` (thin archive or text list),
`--allow-missing`, and errors that name the object at fault.

Every object is compiled for real, in the test's directory, under the
relative names a build gives them (Kbuild runs from the top of its tree).
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from conftest import FIXTURES, need, objbtf, run

from linkdedup import pipeline
from linkdedup.archive import thin_member_paths
from linkdedup.settings import LinkSettings
from objbtf.btf import parse_btf
from objbtf.btf.hashing import HASH_SCHEME, type_hashes
from objbtf.btf.chunk import SECTION, VERSION, encode_chunk, split_chunks
from objbtf.btf.writer import type_offsets
from objbtf.elf.reader import ElfFile
from objbtf.features import Features

UNITS = FIXTURES / 'dedup'
NAMES = ('unit_a', 'unit_b', 'unit_c', 'unit_d')


def compile_encoded(tmp_path: Path, name: str, *flags: str) -> str:
    """``name``.o compiled through `objbtf cc` in ``tmp_path``; its relative name."""
    obj = f'{name}.o'
    r = objbtf('cc', '--', need('gcc'), '-g', '-O2', '-c', *flags, '-o', obj,
               UNITS / f'{name}.c', cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return obj


@pytest.fixture
def encoded(tmp_path) -> list[str]:
    return [compile_encoded(tmp_path, name) for name in NAMES]


def compile_plain(tmp_path: Path, name: str, obj: str) -> str:
    """An object compiled without objbtf: no .BTF, no chunk."""
    run(need('gcc'), '-g', '-O2', '-c', '-o', tmp_path / obj, UNITS / f'{name}.c')
    return obj


def assemble_encoded(tmp_path: Path) -> str:
    """An assembly object with DWARF but no types, encoded: a chunk, no .BTF."""
    (tmp_path / 'entry.S').write_text('.globl entry\nentry: ret\n')
    run(need('gcc'), '-g', '-c', '-o', tmp_path / 'entry.o', tmp_path / 'entry.S')
    assert objbtf('encode', '-q', 'entry.o', cwd=tmp_path).returncode == 0
    return 'entry.o'


def ld_r(tmp_path: Path, objs: list[str], out: str = 'all.o') -> str:
    run(need('ld'), '-r', '-o', tmp_path / out, *[tmp_path / o for o in objs])
    return out


def section(path: Path, name: str) -> tuple[int, bytes, str]:
    """(file offset, contents, byte order) of a section."""
    with ElfFile.open(str(path)) as elf:
        sec = elf.section_by_name(name)
        assert sec is not None, f'{path} has no {name}'
        return sec.offset, elf.section_data(sec), elf.byteorder


def patch_file(path: Path, offset: int, data: bytes) -> None:
    with open(path, 'r+b') as f:
        f.seek(offset)
        f.write(data)


def link(tmp_path: Path, linked: str, *options: str, check: bool = False):
    return objbtf('link', *options, '--output', 'out.btf', linked, check=check, cwd=tmp_path)


# --- the chunk ---------------------------------------------------------------

def test_chunk_describes_its_object(tmp_path, encoded):
    for obj in encoded:
        _, raw, order = section(tmp_path / obj, '.BTF')
        _, data, _ = section(tmp_path / obj, SECTION)
        [chunk] = split_chunks(data, order)
        btf = parse_btf(raw)
        hashes, flags = type_hashes(btf)
        assert chunk.name == obj and chunk.usable
        assert (chunk.version, chunk.scheme) == (VERSION, HASH_SCHEME)
        assert chunk.count == len(btf) and chunk.btf_size == len(raw)
        assert list(chunk.hashes) == hashes[1:] and chunk.flags == bytes(flags[1:])
        assert list(chunk.offsets) == type_offsets(btf)[:len(btf)]
        assert len(data) % 8 == 0


@pytest.mark.parametrize('order', ['little', 'big'])
def test_chunk_round_trip(tmp_path, encoded, order):
    """The tables of a real object's chunk, written in either byte order under
    names of every padding length, read back the same, also concatenated
    with zero padding between them, as ld may leave."""
    _, data, native = section(tmp_path / encoded[0], SECTION)
    _, blob, _ = section(tmp_path / encoded[0], '.BTF')
    [real] = split_chunks(data, native)
    assert real.describes(blob)
    for name in ('a.o', 'dir/ab.o', 'x' * 8, 'kernel/fork.o', 'drivers/net/veth.mod.o'):
        chunk = encode_chunk(name, [0, *real.hashes], list(real.offsets), b'\0' + real.flags,
                             blob, order)
        assert len(chunk) % 8 == 0
        first, second = split_chunks(chunk + bytes(8) + chunk, order)
        assert second.position == len(chunk) + 8
        for back in (first, second):
            assert (back.name, back.count, back.btf_size) == (name, real.count, real.btf_size)
            assert back.hashes == real.hashes and back.offsets == real.offsets
            assert back.flags == real.flags and back.usable and back.describes(blob)
            assert not back.describes(blob[:-1] + b'x')


def test_object_without_types_gets_a_named_chunk(tmp_path):
    obj = assemble_encoded(tmp_path)
    with ElfFile.open(str(tmp_path / obj)) as elf:
        assert elf.section_by_name('.debug_info') is not None     # DWARF, but no types
        assert elf.section_by_name('.BTF') is None
    _, data, order = section(tmp_path / obj, SECTION)
    [chunk] = split_chunks(data, order)
    assert chunk.name == obj and chunk.usable and not chunk.has_btf
    assert chunk.count == 0


def test_ld_keeps_every_chunk_in_link_order(tmp_path, encoded):
    objs = [encoded[0], assemble_encoded(tmp_path), *encoded[1:]]
    linked = ld_r(tmp_path, objs)
    _, data, order = section(tmp_path / linked, SECTION)
    assert [c.name for c in split_chunks(data, order)] == objs


# --- another format or hash scheme --------------------------------------------

def rewrite_header_field(path: Path, field_offset: int, value: int) -> None:
    """Set a u16 of the object's chunk header (4: version, 6: hash scheme)."""
    offset, _, order = section(path, SECTION)
    patch_file(path, offset + field_offset, value.to_bytes(2, order))


def test_link_refuses_another_hash_scheme_naming_the_object(tmp_path, encoded):
    stale = encoded[2]
    rewrite_header_field(tmp_path / stale, 6, HASH_SCHEME + 1)
    r = link(tmp_path, ld_r(tmp_path, encoded))
    assert r.returncode == 1 and 'Traceback' not in r.stderr
    assert f'{stale} (hash scheme {HASH_SCHEME + 1})' in r.stderr
    assert 'rebuild' in r.stderr and '1 of 4 objects was encoded by another objbtf' in r.stderr
    assert not any(other in r.stderr for other in encoded if other != stale)
    assert not (tmp_path / 'out.btf').exists()


def test_link_refuses_another_format_naming_the_object(tmp_path, encoded):
    rewrite_header_field(tmp_path / encoded[1], 4, VERSION + 1)
    r = link(tmp_path, ld_r(tmp_path, encoded))
    assert r.returncode == 1 and f'{encoded[1]} (format {VERSION + 1})' in r.stderr


def version_1_chunk(chunk: bytes, order: str) -> bytes:
    """The same hashes in the first layout (chunk.py's docstring): a
    16-byte header, no scheme, no name."""
    [c] = split_chunks(chunk, order)
    e = '<' if order == 'little' else '>'
    body = (struct.pack(e + '4sHHII', b'OBTF', 1, 0, c.count, c.btf_size)
            + c.hashes.tobytes() + c.offsets.tobytes() + c.flags)
    return body + bytes(-len(body) % 8)


def test_link_refuses_a_version_1_chunk(tmp_path, encoded):
    """An object encoded before chunks had names: said as such, with where it is."""
    path = tmp_path / encoded[0]
    offset, chunk, order = section(path, SECTION)
    old = version_1_chunk(chunk, order)
    assert len(old) < len(chunk)
    patch_file(path, offset, old + bytes(len(chunk) - len(old)))   # zeros: padding to ld
    r = link(tmp_path, ld_r(tmp_path, encoded))
    assert r.returncode == 1 and 'format 1, which records no name' in r.stderr
    assert '1 of 4 objects' in r.stderr


def version_3_chunk(chunk: bytes, order: str) -> bytes:
    """The same chunk in the layout before checksums: no checksum field."""
    e = '<' if order == 'little' else '>'
    _, _, scheme, size, name_len, count, btf_size = struct.unpack_from(e + '4sHHIIII', chunk)
    tables = 24 + name_len + (-name_len % 8)
    return (struct.pack(e + '4sHHIIII', b'OBTF', 3, scheme, size - 8, name_len, count, btf_size)
            + chunk[24:tables] + chunk[tables + 8:])


def test_link_refuses_the_previous_format_saying_to_encode_again(tmp_path, encoded):
    """An object encoded before chunks had checksums is named, to be rebuilt
    (as any other format is): its hashes are not to be trusted unchecked."""
    path = tmp_path / encoded[2]
    offset, chunk, order = section(path, SECTION)
    old = version_3_chunk(chunk, order)
    [back] = split_chunks(old, order)
    assert (back.name, back.version, back.usable) == (encoded[2], 3, False)
    patch_file(path, offset, old + bytes(len(chunk) - len(old)))   # zeros: padding to ld
    r = link(tmp_path, ld_r(tmp_path, encoded))
    assert r.returncode == 1 and 'Traceback' not in r.stderr
    assert f'{encoded[2]} (format 3)' in r.stderr and 'rebuild' in r.stderr
    assert '1 of 4 objects was encoded by another objbtf' in r.stderr


# --- --objects, --allow-missing ------------------------------------------------

def test_objects_archive_names_the_object_without_btf(tmp_path, encoded):
    plain = compile_plain(tmp_path, 'unit_e', 'plain.o')
    asm = assemble_encoded(tmp_path)
    objs = [*encoded, asm, plain]
    run(need('ar'), 'rcT', tmp_path / 'built-in.a', *objs, cwd=tmp_path)
    linked = ld_r(tmp_path, objs)
    r = link(tmp_path, linked, '--objects', 'built-in.a')
    assert r.returncode == 1, r.stderr
    assert f'1 of the {len(objs)} objects in built-in.a has no BTF: plain.o' in r.stderr
    assert '--allow-missing' in r.stderr
    assert not any(o in r.stderr for o in objs if o != plain)

    r = link(tmp_path, linked, '--objects', 'built-in.a', '--allow-missing')
    assert r.returncode == 0, r.stderr
    [warning] = [line for line in r.stderr.splitlines() if 'warning' in line]
    assert 'plain.o' in warning and 'linked without them' in warning
    with_warning = (tmp_path / 'out.btf').read_bytes()
    assert link(tmp_path, linked).returncode == 0
    assert (tmp_path / 'out.btf').read_bytes() == with_warning


def test_objects_text_list_and_thin_archive_in_a_subdirectory(tmp_path, encoded):
    """A text list (as Kbuild's .mod) names paths from the current directory;
    a thin archive's members are relative to the archive's directory."""
    (tmp_path / 'drivers').mkdir()
    (tmp_path / 'drivers/unit_c.o').write_bytes((tmp_path / encoded[2]).read_bytes())
    r = objbtf('encode', 'drivers/unit_c.o', cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    objs = [encoded[0], encoded[1], assemble_encoded(tmp_path), 'drivers/unit_c.o']
    linked = ld_r(tmp_path, objs)
    (tmp_path / 'mod.list').write_text(''.join(f'{o}\n' for o in objs) + '\n')
    r = link(tmp_path, linked, '--objects', 'mod.list')
    assert r.returncode == 0, r.stderr

    archive = tmp_path / 'drivers/built-in.a'
    run(need('ar'), 'rcT', 'drivers/built-in.a', *objs, cwd=tmp_path)
    shown = run('ar', 't', 'drivers/built-in.a', cwd=tmp_path).stdout.split()
    assert thin_member_paths(archive.read_bytes(), 'drivers/built-in.a') == \
        [os.path.normpath(name) for name in shown] == objs
    r = link(tmp_path, linked, '--objects', 'drivers/built-in.a')
    assert r.returncode == 0, r.stderr

    # Listed under names the objects were not encoded under: all missing, and said why.
    (tmp_path / 'elsewhere.list').write_text(''.join(f'build/{o}\n' for o in objs))
    r = link(tmp_path, linked, '--objects', 'elsewhere.list')
    assert r.returncode == 1 and 'run the link from the directory' in r.stderr


def test_objects_lists_ten_and_counts_the_rest(tmp_path, encoded):
    """13 objects without BTF (copies of one, so only the first is linked)."""
    plain = [compile_plain(tmp_path, 'unit_e', f'plain{i:02}.o') for i in range(13)]
    (tmp_path / 'list').write_text('\n'.join([*encoded, *plain]))
    r = link(tmp_path, ld_r(tmp_path, [*encoded, plain[0]]), '--objects', 'list')
    assert r.returncode == 1
    assert f'13 of the {len(encoded) + 13} objects in list have no BTF' in r.stderr
    assert ', '.join(plain[:10]) + ' and 3 more' in r.stderr
    assert plain[10] not in r.stderr


def test_objects_refuses_what_it_cannot_read(tmp_path, encoded):
    linked = ld_r(tmp_path, encoded)
    run(need('ar'), 'rc', tmp_path / 'regular.a', *encoded, cwd=tmp_path)
    r = link(tmp_path, linked, '--objects', 'regular.a')
    assert r.returncode == 1 and 'regular.a' in r.stderr and 'thin archive' in r.stderr
    r = link(tmp_path, linked, '--objects', encoded[0])
    assert r.returncode == 1 and 'neither an ar archive nor a text list' in r.stderr
    (tmp_path / 'empty').write_text('\n')
    r = link(tmp_path, linked, '--objects', 'empty')
    assert r.returncode == 1 and 'empty: lists no objects' in r.stderr
    bare = tmp_path / 'bare.o'
    run(need('objcopy'), '--remove-section', SECTION, tmp_path / linked, bare)
    (tmp_path / 'list').write_text('\n'.join(encoded))
    r = link(tmp_path, 'bare.o', '--objects', 'list')
    assert r.returncode == 1 and f'no {SECTION} section' in r.stderr


# --- errors name the object ------------------------------------------------------

def test_corrupt_blob_header_names_the_object(tmp_path, encoded):
    offset, _, _ = section(tmp_path / encoded[1], '.BTF')
    patch_file(tmp_path / encoded[1], offset, b'\xde\xad')          # the BTF magic
    r = link(tmp_path, ld_r(tmp_path, encoded))
    assert r.returncode == 1 and 'Traceback' not in r.stderr
    assert f'the BTF of {encoded[1]} (blob 2 at offset' in r.stderr


def make_kinds_unknown(path: Path) -> None:
    """Every type's kind in ``path``'s blob made 31, which BTF has not."""
    offset, raw, order = section(path, '.BTF')
    _, data, _ = section(path, SECTION)
    [chunk] = split_chunks(data, order)
    hdr_len, type_off = struct.unpack_from(('<' if order == 'little' else '>') + 'II', raw, 4)
    for type_offset in chunk.offsets:
        info = offset + hdr_len + type_off + type_offset + 4 + (3 if order == 'little' else 0)
        patch_file(path, info, bytes([0x1f]))                       # the top byte


def test_corrupt_types_name_the_object(tmp_path, encoded):
    """Every type's kind made unknown in unit_b.o's blob: its chunk's
    checksum no longer matches, which names it."""
    make_kinds_unknown(tmp_path / 'unit_b.o')
    r = link(tmp_path, ld_r(tmp_path, encoded))
    assert r.returncode == 1 and 'Traceback' not in r.stderr
    assert 'the .BTF.objbtf chunk of unit_b.o (at offset ' in r.stderr
    assert 'does not match its checksum' in r.stderr and 'encode it again' in r.stderr


class FromSymbolsHere(pipeline.FromSymbols):
    """``FromSymbols`` that says which process read them, when it comes
    back from another."""
    came_from: list[int] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pid = os.getpid()

    def __setstate__(self, state: dict) -> None:
        self.came_from.append(state['pid'])
        self.__dict__.update(state)


@pytest.fixture
def beside_always(monkeypatch):
    """Every link checks its checksums and reads its symbols in a process
    of its own while it merges the types, as vmlinux's link does."""
    monkeypatch.setattr(pipeline, '_BESIDE_FROM', 0)
    monkeypatch.setattr(pipeline, 'FromSymbols', FromSymbolsHere)
    FromSymbolsHere.came_from = []


def link_beside(tmp_path: Path, linked: str, **settings) -> pipeline.Summary:
    """``linked`` linked in this process, with two jobs, into out.btf."""
    return pipeline.link(LinkSettings(str(tmp_path / linked), Features(), jobs=2, quiet=True,
                                      output=str(tmp_path / 'out.btf'), **settings))


def test_the_checks_beside_the_types_give_the_same_link(tmp_path, encoded, beside_always):
    """Read in another process while the types merge, the symbols give
    the link made in one; with --cache, the key made there replays it."""
    linked = ld_r(tmp_path, encoded)
    assert link(tmp_path, linked).returncode == 0
    alone = (tmp_path / 'out.btf').read_bytes()
    cache = str(tmp_path / 'cache')
    first = link_beside(tmp_path, linked, cache=cache)
    assert (tmp_path / 'out.btf').read_bytes() == alone and not first.replayed
    again = link_beside(tmp_path, linked, cache=cache)
    assert (tmp_path / 'out.btf').read_bytes() == alone and again.replayed
    assert len(FromSymbolsHere.came_from) == 2
    assert os.getpid() not in FromSymbolsHere.came_from


@pytest.mark.parametrize('cached', [False, True], ids=['merged', 'cached'])
def test_a_checksum_found_wrong_beside_the_merge_is_the_error(tmp_path, encoded,
                                                               beside_always, cached):
    """Whatever the merge makes of a blob changed after its encode, the
    link says what a link in one process says: its checksum is wrong.  A
    link the cache holds (its key is the chunks', which did not change) is
    not replayed: the link waits for the key beside, and checks the
    checksums meanwhile."""
    cache = str(tmp_path / 'cache')
    if cached:
        link_beside(tmp_path, ld_r(tmp_path, encoded), cache=cache)
        (tmp_path / 'out.btf').unlink()
    make_kinds_unknown(tmp_path / encoded[1])
    with pytest.raises(pipeline.LinkError, match=f'chunk of {encoded[1]} .* does not match'):
        link_beside(tmp_path, ld_r(tmp_path, encoded), cache=cache)
    assert not (tmp_path / 'out.btf').exists()


def test_missing_relocation_names_the_object(tmp_path, encoded):
    """unit_a.o has a percpu variable: without its .rela.BTF, the entry is unplaced."""
    run(need('objcopy'), '--remove-section', '.rela.BTF', tmp_path / 'unit_a.o')
    r = link(tmp_path, ld_r(tmp_path, encoded))
    assert r.returncode == 1 and 'has no relocation' in r.stderr
    assert "variable 'pcpu_list' of DATASEC '.data..percpu' in the BTF of unit_a.o (blob " \
        in r.stderr


# --- quiet ---------------------------------------------------------------------------

def test_quiet_link_says_nothing_but_warnings(tmp_path, encoded):
    plain = compile_plain(tmp_path, 'unit_e', 'plain.o')
    linked = ld_r(tmp_path, [*encoded, plain])
    loud = link(tmp_path, linked, check=True)
    assert 'objbtf link: 4 objects' in loud.stderr
    assert link(tmp_path, linked, '--quiet', check=True).stderr == ''
    (tmp_path / 'list').write_text('\n'.join([*encoded, plain]))
    r = link(tmp_path, linked, '-q', '--objects', 'list', '--allow-missing', check=True)
    assert r.stderr.count('\n') == 1 and 'warning' in r.stderr and 'plain.o' in r.stderr


def test_a_module_linked_twice_says_so(tmp_path, encoded):
    """A module's link empties its chunks: linking it again is refused as such."""
    base = link(tmp_path, ld_r(tmp_path, encoded[1:3], 'base.o'), check=True)
    assert base.returncode == 0
    module = ld_r(tmp_path, [encoded[0], encoded[3]], 'mod.ko')
    (tmp_path / 'mod.list').write_text(f'{encoded[0]}\n{encoded[3]}\n')
    first = objbtf('link', '--base', 'out.btf', '--objects', 'mod.list', module, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = objbtf('link', '--base', 'out.btf', module, cwd=tmp_path, check=False)
    assert again.returncode == 1 and 'linked already' in again.stderr
