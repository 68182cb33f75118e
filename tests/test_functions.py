"""pahole's function rules on small gcc-compiled objects, one case each
(tests/fixtures/functions), against what the newest pahole (built from
vendor/) chooses on the same objects and against the objects' symbol tables."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from conftest import need, objbtf, run
from newest_pahole import build_clones, funcs
from objbtf.btf.chunk import SECTION, split_chunks
from objbtf.btf_file import load_btf_file
from objbtf.dwarf.locations import location_register
from objbtf.inspect.diff import compare, function_decls
from objbtf.elf.reader import ElfFile
from objbtf.btf.function_rules import (
    FACT_INCONSISTENT, FACT_OPTIMIZED_CLONE, FACT_REORDERED, FACT_UNCERTAIN_LOC,
    FACT_UNEXPECTED_REG, FACT_WEAK, function_key,
)

STT_FUNC, STB_WEAK = 2, 2


def encode(obj: Path) -> None:
    objbtf('encode', obj)


@pytest.fixture(scope='module')
def clones(tmp_path_factory) -> tuple[Path, Path, str]:
    """(the encoded objects linked, objbtf link's raw BTF of it, the summary)."""
    need('gcc')
    need('ld')
    out = tmp_path_factory.mktemp('clones')
    linked = build_clones(out, encode)
    btf = out / 'clones.btf'
    r = objbtf('link', '--output', btf, linked)
    return linked, btf, r.stderr


def symbols(path: Path) -> list:
    with ElfFile.open(str(path)) as elf:
        return [s for s in elf.symbols() if s.type == STT_FUNC and s.shndx]


def chunk_facts(path: Path) -> dict[str, int]:
    with ElfFile.open(str(path)) as elf:
        data = elf.section_data(elf.section_by_name(SECTION))
        out: dict[str, int] = {}
        for chunk in split_chunks(data, elf.byteorder):
            for name, flags in chunk.facts.items():
                out[name] = out.get(name, 0) | flags
        return out


def test_funcs_are_the_newest_pahole_s(clones, newest_pahole):
    """The same FUNCs with the same prototypes as the newest pahole on the
    same objects, the strong definition's for a name with a weak one too,
    its optimized clones included."""
    linked, btf, _ = clones
    theirs = funcs(newest_pahole, linked)
    ours = function_decls(load_btf_file(str(btf)))
    diff = compare(theirs, ours)
    assert diff.removed == diff.changed == diff.added == []
    weak = {s.name for s in symbols(linked.parent / 'clones_a.o') if s.bind == STB_WEAK}
    strong = function_decls(load_btf_file(str(linked.parent / 'clones_b.o')))
    assert weak == {'hook'} and ours['hook'] == strong['hook'] == ['int hook(int value)']


def test_each_rule_as_the_symbols_and_dwarf_facts_say(clones):
    linked, btf, summary = clones
    syms = symbols(linked)
    names = {s.name for s in syms}
    ours = function_decls(load_btf_file(str(btf)))
    # Keys at several addresses: static helper here, helper.constprop.0 there.
    addresses: dict[str, set[int]] = {}
    for s in syms:
        if function_key(s.name):
            addresses.setdefault(function_key(s.name), set()).add(s.value)
    ambiguous = {k for k, a in addresses.items() if len(a) > 1}
    assert ambiguous == {'helper'} and 'helper' not in ours
    # Clones keep a FUNC under the function's name; .cold pieces are none.
    clone_only = {k for k in addresses if k not in names}
    assert clone_only == {'constarg', 'lastarg', 'coldarg', 'bystruct', 'up'}
    assert {'split', 'split.cold', 'coldarg.constprop.0.cold'} <= names
    assert {'split', 'coldarg'} <= ours.keys()
    # What DWARF says, recorded per object, drops the others and the packed struct.
    facts = chunk_facts(linked)
    assert facts['up'] & FACT_UNEXPECTED_REG and facts['bystruct'] & FACT_INCONSISTENT
    assert facts['many'] & FACT_UNCERTAIN_LOC and facts['hook'] & FACT_WEAK
    # constarg's clone lists x, then mode (a constant); lastarg's keeps the
    # order, but its code is a clone's without mode.  coldarg's is too, but
    # its DWARF gives the clone's address ranges, not the symbol's address,
    # and hook's unused parameter is no clone's.
    assert facts['constarg'] == FACT_REORDERED | FACT_OPTIMIZED_CLONE
    assert facts['lastarg'] == FACT_OPTIMIZED_CLONE
    assert 'coldarg' not in facts and facts['hook'] == FACT_WEAK
    assert not {'up', 'bystruct', 'many', 'constarg', 'lastarg'} & ours.keys()
    assert ('functions dropped: 1 with prototypes that differ between objects, 1 at several '
            'addresses, 1 with parameters in unexpected registers, 1 with packed structs on '
            'the stack, 1 with parameters reordered, 1 clones with parameters optimized '
            'out') in summary


@pytest.mark.parametrize('cc', ['gcc', 'clang'])
def test_location_lists_of_each_dwarf_form(tmp_path, cc):
    """DWARF 4 .debug_loc (relocated), DWARF 5 .debug_loclists by offset
    (gcc) or by index (clang): the facts the location lists give do not
    depend on the form.  gcc's DWARF 5 is the reference; clang's own
    DWARF 5 and 4 must agree with each other."""
    src = Path(__file__).parent / 'fixtures' / 'functions' / 'clones_a.c'
    facts = {}
    for variant in ('-gdwarf-4', '-gdwarf-5'):
        obj = tmp_path / f'{variant}.o'
        run(need(cc), variant, '-O2', '-c', '-o', obj, src)
        encode(obj)
        facts[variant] = chunk_facts(obj)
    first, second = facts.values()
    assert first == second and any(f & FACT_UNEXPECTED_REG for f in first.values())
    if cc == 'gcc':
        assert first['up'] & FACT_UNEXPECTED_REG
    else:       # clang's DWARF 5 refers to its lists by index (DW_FORM_loclistx)
        info = run(need('readelf'), '--debug-dump=abbrev', tmp_path / '-gdwarf-5.o').stdout
        assert 'DW_FORM_loclistx' in info


@pytest.mark.parametrize('version', [2, 4, 5])
def test_link_refuses_objects_with_an_earlier_chunk_format(clones, tmp_path, version):
    """A version 2 chunk (no function facts), 4 (without the facts that drop
    reordered and optimized clones) or 5 (without the source of the types
    and their losses; both in today's layout) is named, to be rebuilt."""
    linked, _, _ = clones
    obj = tmp_path / 'old.o'
    src = linked.parent / 'clones_b.o'
    with ElfFile.open(str(src)) as elf:
        sec = elf.section_by_name(SECTION)
        data = elf.section_data(sec)
        order = elf.byteorder
    [chunk] = split_chunks(data, order)
    e = '<' if order == 'little' else '>'
    if version > 2:
        old = data[:4] + struct.pack(e + 'H', version) + data[6:]
    else:
        name = chunk.name.encode()
        tables = chunk.hashes.tobytes() + chunk.offsets.tobytes() + chunk.flags
        body = name + bytes(-len(name) % 8) + tables + bytes(-len(tables) % 8)
        old = struct.pack(e + '4sHHIIII', b'OBTF', 2, chunk.scheme, 24 + len(body), len(name),
                          chunk.count, chunk.btf_size) + body
    chunk_file = tmp_path / 'chunk'
    chunk_file.write_bytes(old)
    run(need('objcopy'), '--update-section', f'{SECTION}={chunk_file}', src, obj)
    others = [linked.parent / 'anchor.o', linked.parent / 'clones_a.o', obj]
    relinked = tmp_path / 'relinked.o'
    run(need('ld'), '-r', '-o', relinked, *others)
    r = objbtf('link', '--output', tmp_path / 'out.btf', relinked, check=False)
    assert r.returncode == 1 and 'Traceback' not in r.stderr
    assert f'{chunk.name} (format {version})' in r.stderr and 'rebuild' in r.stderr


def test_cache_misses_when_only_function_facts_change(clones, tmp_path):
    """Weakening a symbol changes no type, only the object's function facts
    (its chunk): a link with --cache must not replay the last one, and gives
    the bytes of a link without it."""
    linked, _, _ = clones
    objs = [linked.parent / f'{n}.o' for n in ('anchor', 'clones_a', 'clones_b')]
    cache = tmp_path / 'cache'
    first = objbtf('link', '--cache', cache, '--output', tmp_path / 'first.btf', linked)
    assert 'replayed' not in first.stderr
    weakened = tmp_path / 'clones_b.o'
    run(need('objcopy'), '--weaken-symbol=hook', objs[2], weakened)
    encode(weakened)
    relinked = tmp_path / 'relinked.o'
    run(need('ld'), '-r', '-o', relinked, objs[0], objs[1], weakened)
    again = objbtf('link', '--cache', cache, '--output', tmp_path / 'again.btf', relinked)
    assert 'replayed' not in again.stderr
    objbtf('link', '--output', tmp_path / 'fresh.btf', relinked)
    assert (tmp_path / 'again.btf').read_bytes() == (tmp_path / 'fresh.btf').read_bytes()
    assert chunk_facts(weakened)['hook'] & FACT_WEAK


@pytest.mark.parametrize('exprs, aggregate, register', [
    ([b'\x55'], False, 0x55),                           # DW_OP_reg5 (rdi)
    ([b'\x91\x10', b'\x55'], False, -1),                # on the stack first, a register later
    ([b'\x75\x00\x9f'], False, 0x55),                   # DW_OP_breg5 0; DW_OP_stack_value
    ([b'\x75\x00'], False, -1),                         # an address, not a value
    ([b'\x31\x9f'], False, -1),                         # DW_OP_lit1: a constant
    ([b'\x53', b'\xa3\x01\x55\x9f'], False, 0x53),      # the first entry's register wins
    ([b'\x91\x10', b'\xa3\x01\x54\x9f'], False, 0x54),  # DW_OP_entry_value(rsi), any entry
    ([b'\x55\x93\x04\x91\x10\x93\x04'], False, 0x55),   # pieces of a small value: the first
    ([b'\x91\x10\x93\x08\x54\x93\x08'], True, 0x54),    # a wide struct's pieces: a register
    ([b'\x91\x10\x93\x08\x54\x93\x08'], False, -1),     # ... which a small value's first op is not
    ([b'\x31\x93\x08\x54\x93\x08'], True, -1),          # a constant piece first
])
def test_the_newest_pahole_s_parameter_register(exprs, aggregate, register):
    """dwarf_loader.c's parameter__decode_location: where a parameter
    arrives, or -1, which makes one that should take a register
    optimized out."""
    assert location_register(iter(exprs), aggregate) == register
