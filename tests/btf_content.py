"""Two BTFs compared by content, and the differences from pahole that docs/pahole-differences.md
documents, listed once.

The comparison is ``objbtf diff``'s (objbtf/inspect/diff.py): every named type by
its declaration (members with their types, offsets and bitfield sizes,
sizes, enumerators, a typedef's target), every DECL_TAG by its target,
every FUNC by its prototype, every VAR by its declaration, linkage and
DATASEC, each by name, ids never mattering.  ``unexplained`` keeps what no
documented rule explains; every Kbuild test that compares objbtf's BTF with
pahole's on the same tree asserts that it is empty.

The documented differences (docs/pahole-differences.md), each with
the rule that derives it from the tree rather than a list of names:

- ``KFUNC_TAGS``: objbtf tags each kfunc with a ``bpf_kfunc`` (or
  ``bpf_fastcall``) DECL_TAG; pahole 1.24 tags none.
- percpu variables (``percpu_symbols``): objbtf keeps every percpu
  variable vmlinux's symbol table has, pahole 1.24 only those of
  ``.data..percpu`` proper.
- ``_without_tagged_copies``: where the BTF has type tags (clang), how
  many identical copies of a type dedup leaves, as long as objbtf leaves
  no more in all than pahole.
- ``explained_prototypes``: a function with a weak and a strong definition
  (the ``sys_ni.c`` stubs of the syscalls a config has): pahole takes the
  prototype of the definition it reads first, the weak one's, objbtf the
  strong one's, the code the linker kept; a function another unit defines
  inline, without a symbol, with another prototype: pahole may take that
  one's, objbtf records only the definitions with a symbol.
- FUNCs one side lacks: objbtf follows the newest pahole's function rules,
  which 1.24 lacks; which FUNCs each has is derived from the symbol table
  by the tests of the function rules (test_functions.py,
  test_link_kernel.py), so ``unexplained`` compares the prototypes of the
  FUNCs both have, and only those.  Against the newest pahole, objbtf has
  only the FUNCs of functions another unit defines inline with another
  prototype (``extra_funcs``).
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Set
from pathlib import Path

from conftest import need, run
from objbtf.btf import Btf, Kind
from objbtf.btf_file import load_btf_file
from objbtf.inspect.diff import Section, compare, diff_btf, function_decls
from objbtf.elf.consts import STB_WEAK, STT_FUNC, STT_OBJECT
from objbtf.elf.reader import ElfFile
from objbtf.btf.function_rules import function_key

#: The DECL_TAGs objbtf adds on kfuncs.
KFUNC_TAGS = ('bpf_kfunc', 'bpf_fastcall')


def kfunc_tag(entry: dict) -> bool:
    """A types-section entry only objbtf has: its kfunc DECL_TAGs."""
    return entry.get('kind') == 'DECL_TAG' and entry['name'] in KFUNC_TAGS


def _changed_only_by_kfunc_tags(entry: dict) -> bool:
    """A kfunc tag name pahole also uses (a DECL_TAG in the source): objbtf's
    list is pahole's plus tags on FUNCs."""
    if not kfunc_tag(entry):
        return False
    theirs, ours = entry['a'], entry['b']
    extra = list(ours)
    for decl in theirs:
        if decl not in extra:
            return False
        extra.remove(decl)
    return all(' on FUNC ' in decl for decl in extra)


def definitions(objs: Iterable[Path], names: Iterable[str]) -> dict[str, list[tuple[Path, int]]]:
    """name -> (object, binding) of each object that defines it."""
    out: dict[str, list[tuple[Path, int]]] = {n: [] for n in names}
    for obj in objs:
        with ElfFile.open(str(obj)) as elf:
            for sym in elf.symbols():
                if sym.type == STT_FUNC and sym.shndx and sym.name in out:
                    out[sym.name].append((obj, sym.bind))
    return out


#: The prefix of the aliases Linux 7.x gives the variables its
#: position-independent startup code uses (SYM_PIC_ALIAS: ``__pi_gdt_page``).
PIC_ALIAS = '__pi_'


def extra_funcs(theirs: dict[str, list[str]], ours: dict[str, list[str]],
                objs: list[Path]) -> tuple[list[str], set[str]]:
    """The FUNCs (``objbtf.inspect.diff.function_decls``) of the newest pahole's
    BTF (``theirs``) against objbtf's made from ``objs``: (what no
    documented rule explains: a FUNC of pahole's missing or with another
    prototype, or one only objbtf has that another unit does not define
    inline with another prototype; those that one does)."""
    diff = compare(theirs, ours)
    problems = [f'only pahole: {e["name"]}' for e in diff.removed]
    problems += [f'other prototype: {e["name"]}' for e in diff.changed]
    added = {e['name']: e['decls'] for e in diff.added}
    inline = {name for name, decls in added.items()
              if any(squash(p) != squash(decls[0]) for p in inline_prototypes(objs, name))}
    problems += [f'only objbtf: {name}' for name in sorted(added.keys() - inline)]
    return problems, inline


def percpu_symbols(path: Path) -> Counter:
    """(name, offset in .data..percpu) of each percpu variable of ``path``'s
    symbol table, counted (same-name statics of several objects); an alias
    ``__pi_X`` at the offset of ``X`` is the same variable, not another."""
    with ElfFile.open(str(path)) as elf:
        percpu = elf.section_by_name('.data..percpu')
        found = Counter((s.name, s.value - percpu.addr) for s in elf.symbols()
                        if s.shndx == percpu.index and s.type == STT_OBJECT and s.size)
    return Counter({(name, at): n for (name, at), n in found.items()
                    if not (name.startswith(PIC_ALIAS)
                            and (name[len(PIC_ALIAS):], at) in found)})


def weak_and_strong(objs: Iterable[Path], names: Iterable[str]) -> set[str]:
    """Those of ``names`` that the objects define both weak and strong."""
    return {name for name, defs in definitions(objs, names).items()
            if {bind == STB_WEAK for _, bind in defs} == {True, False}}


def obj_decls(obj: Path, name: str) -> list[str]:
    """The prototypes of ``name``'s FUNCs in ``obj``'s BTF."""
    return function_decls(load_btf_file(str(obj))).get(name, [])


def inline_prototypes(objs: Iterable[Path], name: str) -> list[str]:
    """pfunct's prototypes of ``name`` in the objects that mention it but
    have no function symbol of it (it is inline there)."""
    needle = b'\0' + name.encode() + b'\0'
    out = []
    for obj in objs:
        if needle not in obj.read_bytes():
            continue
        with ElfFile.open(str(obj)) as elf:
            if any(function_key(s.name) == name for s in elf.symbols() if s.type == STT_FUNC):
                continue
        for line in run(need('pfunct'), '-P', obj).stdout.splitlines():
            if re.search(rf'[ *]{re.escape(name)}\(', line):
                out.append(line)
    return out


def squash(decl: str) -> str:
    """A prototype without spaces, ';', 'inline' and linkage, to compare
    pfunct's C with objbtf diff's."""
    decl = re.sub(r'^(global|extern) ', '', decl.strip().removeprefix('inline '))
    return re.sub(r'\s+|;', '', decl)


def parameter_names(decl: str) -> list[str]:
    """The names of a prototype's parameters (the identifier that ends each)."""
    params = decl[decl.index('(') + 1:decl.rindex(')')]
    return [re.findall(r'\w+', p)[-1] for p in params.split(',') if re.findall(r'\w+', p)]


def same_prototype(pfunct: str, ours: str) -> bool:
    """Whether pfunct's C prototype is objbtf diff's: equal once squashed, or,
    where objbtf diff shows type tags (``__tag(user) gid_t *p``, which pfunct
    prints as a type of their own: ``user * p``), with the same parameter names."""
    if '__tag(' in ours:
        return parameter_names(pfunct) == parameter_names(ours)
    return squash(pfunct) == squash(ours)


def explained_prototypes(objs: list[Path], changed: list[dict]) -> set[str]:
    """The FUNCs of ``changed`` (objbtf diff's entries, pahole's prototypes
    in 'a', objbtf's in 'b') whose prototypes differ by a documented rule:
    a weak and a strong definition (objbtf takes the strong one's), or
    pahole's prototype is that of a unit where the function is inline,
    without a symbol (objbtf's objects record only the functions they have
    symbols of)."""
    names = [e['name'] for e in changed]
    out = weak_and_strong(objs, names)
    for e in changed:
        if e['name'] not in out and len(e['a']) == 1:
            if any(same_prototype(p, e['a'][0]) for p in inline_prototypes(objs, e['name'])):
                out.add(e['name'])
    return out


#: One difference: (section, change, entry): section of objbtf diff, change
#: 'only pahole', 'only objbtf' or 'differ', entry as objbtf diff has it.
Difference = tuple[str, str, dict]


def has_type_tags(btf: Btf) -> bool:
    """Whether ``btf`` has TYPE_TAGs (clang's ``__rcu``, ``__user``...)."""
    return any(t.kind is Kind.TYPE_TAG for _, t in btf.own())


def _without_tagged_copies(changed: list[dict]) -> list[dict]:
    """``changed`` less the entries whose declarations differ only in how
    many identical copies dedup left, when objbtf left no more copies in
    all than pahole: units that disagree on a pointer's type tag (clang
    tags an ``__rcu`` pointer in some units and not in others) leave dedup
    several copies of the types around it, as many as the order in which
    it meets the units gives.  Any other difference stays."""
    copies = [e for e in changed if set(e['a']) == set(e['b'])]
    if sum(len(e['b']) for e in copies) > sum(len(e['a']) for e in copies):
        return changed
    return [e for e in changed if set(e['a']) != set(e['b'])]


def unexplained(theirs: Btf, ours: Btf, percpu_vars: Set[str] = frozenset(),
                objects: list[Path] | None = None) -> list[Difference]:
    """The differences from ``theirs`` (pahole's) to ``ours`` (objbtf's)
    that no documented rule explains.  ``percpu_vars``: the percpu
    variables of the tree's symbol table (objbtf may add those);
    ``objects``: the objects both were made from, which explain the
    prototypes of the FUNCs both have that differ (``explained_prototypes``).
    Which FUNCs each has is the function rules' tests' to check."""
    sections: dict[str, Section] = diff_btf(theirs, ours)
    types, variables = sections['types'], sections['variables']
    out: list[Difference] = []
    out += [('types', 'only pahole', e) for e in types.removed]
    out += [('types', 'only objbtf', e) for e in types.added if not kfunc_tag(e)]
    changed = [e for e in types.changed if not _changed_only_by_kfunc_tags(e)]
    if has_type_tags(theirs):
        changed = _without_tagged_copies(changed)
    out += [('types', 'differ', e) for e in changed]
    out += [('variables', 'only pahole', e) for e in variables.removed]
    out += [('variables', 'only objbtf', e) for e in variables.added
            if e['name'] not in percpu_vars]
    out += [('variables', 'differ', e) for e in variables.changed]
    changed = sections['functions'].changed
    explained = explained_prototypes(objects, changed) if objects is not None else set()
    out += [('functions', 'differ', e) for e in changed if e['name'] not in explained]
    return out


def named_types(btf: Btf) -> int:
    """How many named types of the types section ``btf`` has: a comparison
    over fewer than a few is no comparison."""
    return sum(1 for _, t in btf.own() if t.name and t.kind not in (Kind.FUNC, Kind.VAR))
