"""The content comparison the Kbuild tests make (btf_content.py), on known
differences: objbtf diff's hand-made pair, whose every change must be
reported, and the documented differences, which must not."""
from __future__ import annotations

from pathlib import Path

import pytest

from btf_content import same_prototype, unexplained
from conftest import encoded_c
from objbtf.btf import Btf
from objbtf.btf_file import load_btf_file


def encoded_btf(compiler: str, src: Path, features: str = 'default,global_var') -> Btf:
    """The BTF objbtf encodes into ``src`` compiled beside it."""
    return load_btf_file(str(encoded_c(compiler, src, src.with_suffix('.o'), features)))


def keys(found) -> set[tuple[str, str, str]]:
    return {(section, change, entry['name']) for section, change, entry in found}


def test_every_change_of_the_pair_is_reported(pair):
    """objbtf diff's pair (conftest), each side encoded with every variable."""
    before, after = (load_btf_file(str(side)) for side in pair)
    assert unexplained(before, before) == []
    found = keys(unexplained(before, after))
    assert found == {
        ('types', 'only pahole', 'removed_type'), ('types', 'only objbtf', 'added_type'),
        ('types', 'only objbtf', 'short int'),       # added_type's member
        ('types', 'differ', 'changed'), ('types', 'differ', 'colour'),
        ('variables', 'only pahole', 'removed_var'),
        ('variables', 'only pahole', 'removed_type_var'),
        ('variables', 'only objbtf', 'added_var'),
        ('variables', 'only objbtf', 'added_type_var'),
        ('variables', 'differ', 'changed_var'),
        ('functions', 'differ', 'changed_fn'),
    }
    # FUNCs one side lacks are the function rules' tests' to judge.
    assert ('functions', 'only pahole', 'removed_fn') not in found


def test_a_member_offset_or_an_enumerator_is_a_difference(tmp_path):
    """What the types section compares: one member moved, one enumerator's
    value, one bitfield's width."""
    variants = {'a': 'struct s { int x; int y : 3; }; enum e { E0 = 1 };',
                'moved': 'struct s { int x; int pad; int y : 3; }; enum e { E0 = 1 };',
                'value': 'struct s { int x; int y : 3; }; enum e { E0 = 2 };',
                'width': 'struct s { int x; int y : 4; }; enum e { E0 = 1 };'}
    btfs = {}
    for name, text in variants.items():
        src = tmp_path / f'{name}.c'
        src.write_text(text + '\nstruct s gs; enum e ge;\n')
        btfs[name] = encoded_btf('gcc', src)
    assert keys(unexplained(btfs['a'], btfs['moved'])) == {('types', 'differ', 's')}
    assert keys(unexplained(btfs['a'], btfs['value'])) == {('types', 'differ', 'e')}
    assert keys(unexplained(btfs['a'], btfs['width'])) == {('types', 'differ', 's')}


KFUNC_SOURCE = '''
#define __bpf_kfunc __attribute__((btf_decl_tag("bpf_kfunc")))
struct task { int pid; };
__bpf_kfunc int task_pid(struct task *t) { return t->pid; }
int plain(struct task *t) { return t->pid + 1; }
'''


def test_kfunc_tags_and_percpu_variables_are_the_documented_differences(tmp_path):
    """objbtf's kfunc DECL_TAGs and the percpu variables pahole 1.24 misses
    are explained; the same tag on another name, or another variable, is not."""
    plain, tagged = tmp_path / 'plain.c', tmp_path / 'tagged.c'
    plain.write_text(KFUNC_SOURCE.replace('__bpf_kfunc int', 'int') + 'int extra_var = 1;\n')
    tagged.write_text(KFUNC_SOURCE + 'int extra_var = 1;\nint other_var = 2;\n')
    features = 'default,global_var,decl_tag'
    btfs = {src.stem: encoded_btf('clang', src, features) for src in (plain, tagged)}
    tags = [t for _, t in btfs['tagged'].own() if t.kind.name == 'DECL_TAG']
    assert [t.name for t in tags] == ['bpf_kfunc'], 'clang wrote no DECL_TAG to compare'
    found = keys(unexplained(btfs['plain'], btfs['tagged'], percpu_vars={'other_var'}))
    assert found == set()
    found = keys(unexplained(btfs['plain'], btfs['tagged']))
    assert found == {('variables', 'only objbtf', 'other_var')}
    other = tmp_path / 'other.c'
    other.write_text(tagged.read_text().replace('"bpf_kfunc"', '"other_tag"'))
    found = keys(unexplained(btfs['plain'], encoded_btf('clang', other, features),
                             percpu_vars={'other_var'}))
    assert found == {('types', 'only objbtf', 'other_tag')}


@pytest.mark.parametrize('pfunct, ours, same', [
    ('inline long unsigned int native_save_fl(void);', 'long unsigned int native_save_fl(void)',
     True),
    ('void print_cpu(struct seq_file * m, int cpu);', 'void print_cpu(struct seq_file *m, int cpu)',
     True),
    ('void print_cpu(struct seq_file * m, int cpu);',
     'void print_cpu(struct seq_file *m, int cpu, u64 now)', False),
    # pfunct prints clang's btf_type_tag as a type named after its value
    ('int groups_to_user(user * grouplist, const struct group_info  * group_info);',
     'int groups_to_user(__tag(user) gid_t *grouplist, const struct group_info *group_info)', True),
    ('int groups_to_user(user * grouplist, const struct group_info  * group_info);',
     'int groups_to_user(__tag(user) sockptr_t dst, const struct group_info *src)', False),
])
def test_pfuncts_prototypes_read_as_objbtf_diffs(pfunct, ours, same):
    """How the inline-definition rule reads pfunct's C against objbtf diff's
    (the forms both printed for the reference kernel's gcc and clang builds)."""
    assert same_prototype(pfunct, ours) is same
