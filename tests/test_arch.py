"""Other architectures, with their real cross toolchains: arm64 and s390x
objects carry their variables' 64-bit addresses in ``.BTF.addrs``, which a
cross ``ld`` link at kernel addresses resolves and ``objbtf link`` reads;
s390x's BTF is big-endian, as pahole writes it."""
from __future__ import annotations

import errno
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from conftest import C_FIXTURES, ROOT, need, objbtf, run
from objbtf.btf import Kind, parse_btf
from objbtf.btf.writer import encode_btf
from objbtf.elf.reader import ElfFile

ARM64, S390X = 'aarch64-linux-gnu-', 's390x-linux-gnu-'
#: Cross prefix -> (the absolute 64-bit relocation, an address above 4 GB to
#: link the text at).  arm64 6.1 links its kernel at 0xffff800008000000
#: (KIMAGE_VADDR with 48-bit VAs); s390x 6.1 links at low addresses, but no
#: ABI promises that, so the test links above 32 bits too.
CROSS = {ARM64: ('R_AARCH64_ABS64', 0xffff800008000000),
         S390X: ('R_390_64', 0x3ffe0000000)}
COUNTERS = ('counter_a', 'counter_b')
#: The percpu output section as the kernel's PERCPU_INPUT lays it out,
#: at a kernel address.
PERCPU_LDS = '''SECTIONS {
	.text : { *(.text*) }
	.data..percpu : { *(.data..percpu..first) *(.data..percpu..page_aligned)
		*(.data..percpu..read_mostly) *(.data..percpu) *(.data..percpu..shared_aligned) }
	.data : { *(.data*) }
	.comment 0 : { *(.comment) }
}
'''


def btf_objects_lds() -> str:
    """scripts/btf-objects.lds as the vmlinux patch creates it."""
    patch = (ROOT / 'kbuild-integration/linux-6.1/2-vmlinux.patch').read_text()
    body = patch.split('+++ b/scripts/btf-objects.lds\n')[1].split('\n--- ')[0]
    return ''.join(line[1:] + '\n' for line in body.splitlines()[1:])


def cross_objects(tmp_path: Path, prefix: str) -> list[Path]:
    """The counter fixtures compiled by ``prefix``gcc and encoded."""
    objs = []
    for name in COUNTERS:
        obj = tmp_path / f'{name}.o'
        run(need(f'{prefix}gcc'), '-g', '-O2', '-c', '-o', obj, C_FIXTURES / f'{name}.c')
        objbtf('encode', obj)
        objs.append(obj)
    return objs


def relocations(obj: Path) -> dict[str, list[tuple[int, str, str]]]:
    """Relocation section -> (offset, type, symbol) rows, as readelf lists them."""
    out = run(need('readelf'), '-rW', obj).stdout
    sections: dict[str, list[tuple[int, str, str]]] = {}
    for part in out.split("Relocation section '")[1:]:
        name, rows = part.split("'", 1)
        sections[name] = [(int(m[1], 16), m[2], m[3]) for m in re.finditer(
            r'^([0-9a-f]+)\s+[0-9a-f]+\s+(\S+)\s+[0-9a-f]+\s+(\S+)', rows, re.M)]
    return sections


def btf_variables(raw: bytes) -> list[tuple[str, str, int]]:
    """(DATASEC, VAR, offset) of every DATASEC entry, in order."""
    btf = parse_btf(raw)
    return [(t.name, btf[v.type].name, v.offset)
            for _, t in btf.own() if t.kind is Kind.DATASEC for v in t.items]


def per_object_symbols(linked: Path) -> list[dict[str, tuple[str, int]]]:
    """For each input object, in link order: variable -> (output section,
    offset in it), from pyelftools' reading of the symbol table (local
    symbols follow their object's FILE symbol)."""
    with open(linked, 'rb') as f:
        elf = ELFFile(f)
        secs = list(elf.iter_sections())
        out: list[dict[str, tuple[str, int]]] = []
        for sym in elf.get_section_by_name('.symtab').iter_symbols():
            kind = sym['st_info']['type']
            if kind == 'STT_FILE':
                out.append({})
            elif kind == 'STT_OBJECT' and out:
                sec = secs[sym['st_shndx']]
                out[-1][sym.name] = (sec.name, sym['st_value'] - sec['sh_addr'])
    return out


@pytest.mark.parametrize('cross', CROSS)
def test_objects_carry_64_bit_addresses_beside_their_btf(tmp_path, cross):
    for obj in cross_objects(tmp_path, cross):
        relocs = relocations(obj)
        assert '.rela.BTF' not in relocs          # ABS32 cannot hold the addresses
        table = relocs['.rela.BTF.addrs']
        assert {t for _, t, _ in table} == {CROSS[cross][0]}
        with ElfFile.open(str(obj)) as elf:
            raw = elf.section_data(elf.section_by_name('.BTF'))
            symbols = {s.name: (elf.sections[s.shndx].name, s.value) for s in elf.symbols()
                       if s.type == 1}
        variables = btf_variables(raw)
        # One address per DATASEC entry, against the entry's own variable, in
        # the entries' order; the offset fields keep the in-section offsets.
        assert [sym for _, _, sym in table] == [var for _, var, _ in variables]
        assert all(symbols[var] == (sec, off) for sec, var, off in variables)
    assert {var for _, var, _ in btf_variables(raw)} == {'pad', 'counter', 'hot'}


def cross_link(tmp_path: Path, cross: str, objs: list[Path], name: str) -> Path:
    """``objs`` linked by the cross ld above 4 GB, as the kernel's BTF link:
    with the Kbuild patch's btf-objects.lds and a percpu output section."""
    (tmp_path / 'percpu.lds').write_text(PERCPU_LDS)
    (tmp_path / 'btf-objects.lds').write_text(btf_objects_lds())
    linked = tmp_path / name
    run(need(f'{cross}ld'), '-o', linked, '-e', 'bump_a', '--strip-debug',
        f'--section-start=.text={CROSS[cross][1]:#x}', '-T', tmp_path / 'btf-objects.lds',
        '-T', tmp_path / 'percpu.lds', *objs)
    return linked


def kernel_like_link(tmp_path: Path, cross: str) -> tuple[Path, Path]:
    """(linked file, its final raw BTF): the counters, cross_link, objbtf link."""
    linked = cross_link(tmp_path, cross, cross_objects(tmp_path, cross), 'vmlinux')
    out = tmp_path / 'vmlinux.btf'
    objbtf('link', '--input-section', '.BTF.objects', '--output', out, linked)
    return linked, out


@pytest.mark.parametrize('cross', CROSS)
def test_link_at_kernel_addresses_places_every_variable(tmp_path, cross):
    """ld applies every relocation (R_AARCH64_ABS32 could not hold the
    addresses), and each variable lands where the symbol table says."""
    linked, out = kernel_like_link(tmp_path, cross)

    symbols = per_object_symbols(linked)
    assert all(sec == '.data..percpu' for s in symbols for sec, _ in s.values())
    with open(linked, 'rb') as f:
        percpu = ELFFile(f).get_section_by_name('.data..percpu')['sh_addr']
    assert percpu > 0xffffffff
    # Each static `counter` at its own object's address (the link does not
    # say which object an entry came from, so compare the sets).
    expected = sorted(('.data..percpu', name, off) for s in symbols
                      for name, (_, off) in s.items())
    assert sorted(btf_variables(out.read_bytes())) == expected
    assert len({off for _, name, off in expected if name == 'counter'}) == 2


def test_arm64_cached_relink_places_variables_from_the_table(tmp_path):
    """The link cache replays a link by placing its variables anew, through
    the address table too: objects linked in the other order (every
    variable moves) give the bytes of a full link of that order."""
    linked, _ = kernel_like_link(tmp_path, ARM64)
    cache = tmp_path / 'cache'
    link = ['link', '--input-section', '.BTF.objects', '--output']
    objbtf(*link, tmp_path / 'first.btf', '--cache', cache, linked)
    swapped = cross_link(tmp_path, ARM64, [tmp_path / f'{n}.o' for n in reversed(COUNTERS)],
                         'swapped')
    r = objbtf(*link, tmp_path / 'replayed.btf', '--cache', cache, swapped)
    assert '(replayed from the cache)' in r.stderr
    objbtf(*link, tmp_path / 'full.btf', swapped)
    replayed = (tmp_path / 'replayed.btf').read_bytes()
    assert replayed == (tmp_path / 'full.btf').read_bytes()
    assert replayed != (tmp_path / 'first.btf').read_bytes()


def test_arm64_btf_is_accepted_by_the_running_kernel(tmp_path, kernel_loader):
    """BTF is the same format on every little-endian machine: the x86_64
    kernel checks arm64's."""
    _, out = kernel_like_link(tmp_path, ARM64)
    assert out.read_bytes()[:2] == b'\x9f\xeb'
    verdict = kernel_loader(out.read_bytes())
    assert verdict.ok, verdict.log


def test_arm64_relocatable_link_and_module_in_place(tmp_path):
    """ld -r (a module) keeps the table's relocations; objbtf link reads them,
    and linking in place empties the table with the other spent sections."""
    objs = cross_objects(tmp_path, ARM64)
    module = tmp_path / 'module.o'
    run(need(f'{ARM64}ld'), '-r', '-o', module, *objs)
    out = tmp_path / 'module.btf'
    objbtf('link', '--output', out, module)
    # ld -r keeps the input sections' names, one output section each.
    expected = sorted((sec, name, off) for s in per_object_symbols(module)
                      for name, (sec, off) in s.items())
    assert sorted(btf_variables(out.read_bytes())) == expected
    assert {sec for sec, _, _ in expected} == {'.data..percpu', '.data..percpu..read_mostly',
                                               '.data..percpu..shared_aligned'}

    objbtf('link', module)
    with ElfFile.open(str(module)) as elf:
        spent = {name: elf.section_by_name(name).size
                 for name in ('.BTF.objbtf', '.BTF.addrs', '.rela.BTF.addrs')}
    assert spent == {'.BTF.objbtf': 0, '.BTF.addrs': 0, '.rela.BTF.addrs': 0}


def test_arm64_link_names_an_object_without_address_table(tmp_path):
    """An arm64 object whose BTF came without an address table (an objbtf
    before it, or another tool) is refused by name, not placed wrongly."""
    objs = cross_objects(tmp_path, ARM64)
    run(need(f'{ARM64}objcopy'), '--remove-section=.BTF.addrs',
        '--remove-section=.rela.BTF.addrs', objs[1])
    module = tmp_path / 'module.o'
    run(need(f'{ARM64}ld'), '-r', '-o', module, *objs)
    r = objbtf('link', '--output', tmp_path / 'out.btf', module, check=False)
    assert r.returncode == 1
    assert re.fullmatch(rf'Error: {module}: \.BTF\.addrs has no record for the BTF '
                        rf'of {objs[1]} .*Rebuild it\n', r.stderr), r.stderr


def test_arm64_object_that_lost_its_types_loses_its_addresses(tmp_path):
    """Re-encoding an arm64 object whose DWARF is gone empties its .BTF and
    its address table: a stale record would pair with another object's blob."""
    obj = cross_objects(tmp_path, ARM64)[0]
    run(need(f'{ARM64}objcopy'), '--strip-debug', obj)
    objbtf('encode', '-q', obj)
    with ElfFile.open(str(obj)) as elf:
        sizes = {name: elf.section_by_name(name).size
                 for name in ('.BTF', '.BTF.addrs', '.rela.BTF.addrs')}
    assert sizes == {'.BTF': 0, '.BTF.addrs': 0, '.rela.BTF.addrs': 0}


# --- s390x: big-endian BTF ----------------------------------------------------

def section_bytes(obj: Path, name: str) -> bytes:
    with ElfFile.open(str(obj)) as elf:
        return elf.section_data(elf.section_by_name(name))


def bpftool_dump(path: Path) -> str:
    return run(need('bpftool'), 'btf', 'dump', 'file', path).stdout


def test_s390x_btf_is_big_endian_like_paholes(tmp_path):
    """Each object's BTF in the target's byte order, as pahole writes it for
    the same object; bpftool reads both, and they hold the same types (but
    the .data..percpu..* variable pahole misses: docs/pahole-differences.md)."""
    for name in COUNTERS:
        obj = tmp_path / f'{name}.o'
        run(need(f'{S390X}gcc'), '-g', '-O2', '-c', '-o', obj, C_FIXTURES / f'{name}.c')
        theirs = tmp_path / f'{name}.pahole.o'
        shutil.copy(obj, theirs)
        run(need('pahole'), '-J', '--btf_gen_floats', theirs)
        objbtf('encode', obj)
        ours_raw, their_raw = section_bytes(obj, '.BTF'), section_bytes(theirs, '.BTF')
        assert ours_raw[:2] == their_raw[:2] == b'\xeb\x9f'       # magic, big-endian
        assert objbtf('check', obj).returncode == 0
        (tmp_path / 'ours.btf').write_bytes(ours_raw)
        (tmp_path / 'theirs.btf').write_bytes(their_raw)
        ours_dump, their_dump = bpftool_dump(tmp_path / 'ours.btf'), bpftool_dump(tmp_path / 'theirs.btf')
        kinds = [Counter(re.findall(r'^\[\d+\] (\w+)', d, re.M)) for d in (ours_dump, their_dump)]
        missed = {'counter_a': 1, 'counter_b': 1}[name]        # 'other', 'hot'
        assert kinds[0] - kinds[1] == Counter(VAR=missed, DATASEC=1)
        assert kinds[1] - kinds[0] == Counter()


def test_s390x_link_is_big_endian_and_the_kernel_takes_it_in_its_own_order(
        tmp_path, kernel_loader):
    """The link writes big-endian BTF too.  The x86_64 kernel cannot load
    it: it reads the header in its own byte order, where hdr_len 24 is
    0x18000000, more than the blob; the same types in little-endian it
    accepts, and bpftool dumps both the same."""
    _, out = kernel_like_link(tmp_path, S390X)
    raw = out.read_bytes()
    assert raw[:2] == b'\xeb\x9f'
    assert objbtf('check', out).returncode == 0
    rejected = kernel_loader(raw)
    assert (rejected.ok, rejected.errno, rejected.log) == (False, errno.EINVAL,
                                                           'btf_header not found')
    little = tmp_path / 'little.btf'
    little.write_bytes(encode_btf(parse_btf(raw), byteorder='little'))
    verdict = kernel_loader(little.read_bytes())
    assert verdict.ok, verdict.log
    assert bpftool_dump(out) == bpftool_dump(little)


def test_s390x_btf_object_links_into_vmlinux(tmp_path):
    """``objbtf link --output X.o`` writes the kernel's .btf.vmlinux.bin.o:
    a big-endian s390x object whose alloc .BTF the cross ld links in."""
    linked, raw = kernel_like_link(tmp_path, S390X)
    obj = tmp_path / '.btf.vmlinux.bin.o'
    objbtf('link', '--input-section', '.BTF.objects', '--output', obj, linked)
    header = run(need('readelf'), '-hW', obj).stdout
    assert re.search(r"Data:\s+2's complement, big endian", header)
    assert re.search(r'Type:\s+REL ', header) and re.search(r'Machine:\s+IBM S/390', header)
    final = tmp_path / 'vmlinux'
    run(need(f'{S390X}ld'), '-o', final, '-e', '0', obj)
    with open(final, 'rb') as f:
        btf = ELFFile(f).get_section_by_name('.BTF')
        assert btf['sh_flags'] & 2 and btf.data() == raw.read_bytes()
