"""The C extensions know the kinds ``kinds.py`` knows, and the same of each.

The C code over BTF reads its kinds from ``objbtf/btf/_btf.h``: their
numbers, the words each adds after ``struct btf_type``, sets of kinds, and
the field iterator (which words hold type ids and string offsets).  This
test parses that header and every set or switch over kinds in the C
extensions, and checks them against ``KINDS``, so that a kind added to
``kinds.py`` and not to C, or changed in one and not the other, fails here.

A registry other than ``KINDS`` (a test's toy kinds, tests/test_toy_kind.py)
never reaches C: ``kinds.in_c`` is the one rule that routes it to Python.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from objbtf.btf.kinds import ENTRIES, KINDS, SIZE, TYPE, KindRegistry, in_c

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / 'objbtf' / 'btf' / '_btf.h'
#: Every C file that walks or tests kinds, and the header they share.
C_SOURCES = [ROOT / p for p in ('objbtf/btf/_blob.c', 'objbtf/btf/_dedup.c', 'linkdedup/_merge.c',
                                'objbtf/compiler_btf/_amend.c', 'objbtf/dwarf/_loader.c',
                                'objbtf/dwarf/_dies.c')]

#: A set of kinds a C file defines, and the kinds.py set it must equal.
DERIVED = {
    'SIZED': lambda: KINDS.sized,
    'SIZE_WORD': lambda: KINDS.sized,
    'MODIFIERS': lambda: KINDS.modifier,
    'ONE_REF': lambda: KINDS.one_ref,
    'STRUCTS': lambda: KINDS.composite,
    'ENUMS': lambda: KINDS.enums,
    'PRIMITIVE': lambda: KINDS.leaf,
    'NEVER_DEDUPED': lambda: KINDS.not_deduped,
    'HAS_VLEN': lambda: KINDS.has_vlen,
    'ZERO_WORD': lambda: frozenset(i.kind for i in KINDS if i.word not in (TYPE, SIZE)),
    'TYPE_WORD_REF': lambda: frozenset(i.kind for i in KINDS
                                       if i.word == TYPE and 'type' in i.refs),
    'ENTRY_TYPED': lambda: frozenset(KINDS.entry_type_at),
    'ENTRY_NAMED': lambda: frozenset(i.kind for i in KINDS if i.entry_name_at is not None),
}
#: Sets of kinds that are rules of their own (libbpf's dedup passes, the
#: kernel's verifier), not facts of the kinds: they need only name kinds.
RULES = {'CHAIN', 'GRAPH', 'WALKED', 'NEEDS_RESOLVE', 'SOURCE_ONLY', 'NO_SIZE',
         'DECL_TAG_TARGETS', 'REFERENCES', 'OWN_SIZE', 'PLAIN_REFERENCES'}


def c_text(path: Path) -> str:
    """``path`` without its comments."""
    return re.sub(r'/\*.*?\*/', ' ', path.read_text(), flags=re.S)


def c_kinds() -> list[str]:
    """The header's kind names, in number order (``K_LAST`` left out)."""
    body = re.search(r'enum\s*\{\s*(K_UNKN.*?)\}', c_text(HEADER), re.S).group(1)
    names = [n.strip() for n in body.split(',') if n.strip()]
    last = next(n for n in names if n.startswith('K_LAST'))
    assert last == f'K_LAST = {names[-2]}', 'K_LAST must be the last kind'
    return [n[2:] for n in names if not n.startswith('K_LAST')]


NUMBERS = {name: n for n, name in enumerate(c_kinds())}


def int_table(name: str, text: str | None = None) -> dict[str, int]:
    """The header's ``static const ... name[K_LAST + 1] = {[K_X] = n, ...}``, by kind name."""
    m = re.search(rf'\b{name}\[K_LAST \+ 1\]\s*=\s*\{{(.*?)\}};', text or c_text(HEADER), re.S)
    assert m, f'no table {name}'
    return {k: int(v) for k, v in re.findall(r'\[K_(\w+)\]\s*=\s*(-?\d+)', m.group(1))}


def kind_sets() -> dict[tuple[str, str], frozenset[str]]:
    """Every ``#define NAME`` over ``BIT(K_...)`` in the header and the C
    files, evaluated, by (file name, macro name): the header's first, whose
    sets the files use."""
    macros: dict[str, str] = {}
    found = {}
    for path in [HEADER, *C_SOURCES]:
        text = c_text(path).replace('\\\n', ' ')
        local = dict(macros)
        for name, body in re.findall(r'^#define (\w+)\s+(.*)$', text, re.M):
            if 'BIT(K_' not in body and not any(re.search(rf'\b{m}\b', body) for m in local):
                continue
            local[name] = body
            found[path.name, name] = frozenset(_evaluate(body, local))
        if path == HEADER:
            macros = local
    return found


def _evaluate(body: str, macros: dict[str, str]) -> set[str]:
    """The kinds a C set expression of BIT(K_X), |, & and ~ holds."""
    expr = re.sub(r'BIT\(K_(\w+)\)', lambda m: f'(1 << {NUMBERS[m.group(1)]})', body)
    for _ in range(8):
        expr = re.sub(r'\b([A-Z][A-Z_]+)\b',
                      lambda m: f'({macros[m.group(1)]})' if m.group(1) in macros else m.group(1),
                      expr)
        expr = re.sub(r'BIT\(K_(\w+)\)', lambda m: f'(1 << {NUMBERS[m.group(1)]})', expr)
    value = eval(expr, {'__builtins__': {}})      # only numbers and operators are left
    return {name for name, n in NUMBERS.items() if value >> n & 1}


def names(kinds) -> frozenset[str]:
    return frozenset(k.name for k in kinds)


def test_the_header_numbers_every_kind_of_kinds_py_and_no_other():
    assert c_kinds() == [i.name for i in KINDS], \
        'objbtf/btf/_btf.h enum and kinds.py KINDS differ: a kind added to one only?'
    assert [i.number for i in KINDS] == list(range(len(KINDS.infos)))


def test_the_header_sizes_what_follows_each_kind_as_kinds_py():
    fixed, entry = int_table('fixed_words'), int_table('entry_words')
    for info in KINDS:
        assert fixed.get(info.name, 0) == len(info.fixed), info.name
        assert entry.get(info.name, 0) == (len(info.entry) if info.vlen == ENTRIES else 0), \
            info.name


def test_the_field_iterator_finds_the_type_ids_and_names_kinds_py_names():
    """_btf.h's ref_word/name_word: the size-or-type word, the fixed words
    named ``type``/``index_type`` (first, in that order), and the entries'
    ``type`` and ``name_off`` words."""
    fixed_refs, entry_type = int_table('fixed_ref_words'), int_table('entry_type_word')
    for info in KINDS:
        in_fixed = [f for f in info.refs if f in info.fixed]
        assert info.fixed[:len(in_fixed)] == tuple(in_fixed), info.name
        assert fixed_refs.get(info.name, 0) == len(in_fixed), info.name
        if info.entry_type_at is not None:
            assert entry_type.get(info.name, 0) == info.entry_type_at, info.name
        assert info.entry_name_at in (None, 0), 'name_word takes an entry name as its first word'
        assert set(info.refs) <= {'type', *in_fixed}, info.name


@pytest.mark.parametrize('key', sorted(kind_sets()), ids=lambda k: f'{k[0]}:{k[1]}')
def test_each_c_set_of_kinds_is_the_one_kinds_py_derives(key):
    found = kind_sets()[key]
    name = key[1]
    if name in RULES:
        assert found, f'{name} names no kind'
        return
    assert name in DERIVED, (f'{key[0]} defines {name}, a set of kinds: add it to DERIVED '
                             f'(what kinds.py says it is) or to RULES')
    assert found == names(DERIVED[name]()), f'{key[0]}: {name}'


def test_every_kind_a_c_file_names_is_a_kind_of_kinds_py():
    known = {i.name for i in KINDS} | {'LAST'}
    for path in [HEADER, *C_SOURCES]:
        used = set(re.findall(r'\bK_([A-Z0-9_]+)\b', c_text(path)))
        assert used <= known, f'{path.name}: {sorted(used - known)}'


def test_the_c_switches_over_kinds_name_each_kind_once():
    for path in C_SOURCES:
        text = c_text(path)
        for m in re.finditer(r'switch \([^)]*kind[^)]*\) \{', text):
            body, depth = [], 0
            for i in range(m.end() - 1, len(text)):
                depth += {'{': 1, '}': -1}.get(text[i], 0)
                if not depth:
                    body = re.findall(r'case K_(\w+):', text[m.end():i])
                    break
            assert len(body) == len(set(body)), f'{path.name}: {body}'
            assert set(body) <= set(NUMBERS), path.name


def test_only_the_kernel_registry_runs_in_c():
    """Any other registry, even one of the same kinds, goes to Python."""
    assert in_c(KINDS)
    assert not in_c(KindRegistry(list(KINDS)))
