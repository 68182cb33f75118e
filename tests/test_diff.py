"""objbtf diff on hand-made pairs of gcc-compiled objects, against what
`bpftool btf dump` shows of each side."""
from __future__ import annotations

import json
import re
from pathlib import Path


from conftest import FIXTURES, need, objbtf, run

PAIR = FIXTURES / 'diff'
_HEAD = re.compile(r"^\[(\d+)\] (\w+) '([^']*)'(.*)$")
_ATTR = re.compile(r'(\w+)=([^\s,]+)')


class BpftoolDump:
    """bpftool's raw dump of one file, read back as an independent oracle:
    each side's functions, named types and variables, with their types
    resolved through the dump's own ids."""

    def __init__(self, path: Path, base: Path | None = None):
        cmd = [need('bpftool')] + (['-B', base] if base else []) + ['btf', 'dump', 'file', path]
        self.types: dict[int, tuple[str, str, dict, list]] = {}
        current = None
        for line in run(*cmd).stdout.splitlines():
            if line.startswith('\t'):
                current[3].append(line.strip())
                continue
            m = _HEAD.match(line)
            current = (m[2], m[3], dict(_ATTR.findall(m[4])), [])
            self.types[int(m[1])] = current

    def shape(self, type_id: int, depth: int = 0) -> str:
        """A type as kinds and names, down to the named types."""
        if type_id == 0 or type_id not in self.types or depth > 20:
            return 'void' if type_id == 0 else f'base#{type_id}'
        kind, name, attrs, items = self.types[type_id]
        if kind == 'FUNC_PROTO':
            return ('fn(' + ','.join(self.item(i, depth) for i in items) + ')->'
                    + self.shape(int(attrs['ret_type_id']), depth + 1))
        if kind == 'ARRAY':
            return f"{self.shape(int(attrs['type_id']), depth + 1)}[{attrs['nr_elems']}]"
        if name != '(anon)':
            return f'{kind} {name}'
        if 'type_id' in attrs:
            return f"{kind} {self.shape(int(attrs['type_id']), depth + 1)}"
        return f"{kind} {{{';'.join(self.item(i, depth) for i in items)}}}"

    def item(self, line: str, depth: int) -> str:
        """A member or parameter: its name, resolved type and offset."""
        m = re.match(r"'([^']*)' type_id=(\d+)(.*)", line)
        if m is None:
            return line
        return f'{m[1]}:{self.shape(int(m[2]), depth + 1)}{m[3]}'

    def section(self, which: str) -> dict:
        """key -> sorted descriptions, for 'functions', 'types' or 'variables'."""
        datasec = {}
        for kind, name, _, items in self.types.values():
            if kind == 'DATASEC':
                for i in items:
                    datasec[int(dict(_ATTR.findall(i))['type_id'])] = name
        out: dict = {}
        for type_id, (kind, name, attrs, items) in self.types.items():
            if which == 'functions' and kind == 'FUNC':
                key, desc = name, (attrs['linkage'], self.shape(int(attrs['type_id'])))
            elif which == 'variables' and kind == 'VAR':
                key, desc = name, (attrs['linkage'], self.shape(int(attrs['type_id'])),
                                   datasec.get(type_id))
            elif which == 'types' and kind not in ('FUNC', 'VAR', 'DATASEC', 'TYPE_TAG') \
                    and name != '(anon)':
                shape = self.shape(int(attrs['type_id'])) if 'type_id' in attrs else ''
                desc = (attrs.get('size'), attrs.get('nr_bits'), shape,
                        tuple(self.item(i, 0) for i in items))
                key = (kind, name)
            else:
                continue
            out.setdefault(key, []).append(desc)
        return {k: sorted(v) for k, v in out.items()}


def expected_changes(a: BpftoolDump, b: BpftoolDump, which: str) -> dict[str, set]:
    sa, sb = a.section(which), b.section(which)
    return {'added': set(sb) - set(sa), 'removed': set(sa) - set(sb),
            'changed': {k for k in set(sa) & set(sb) if sa[k] != sb[k]}}


def reported(doc: dict, which: str) -> dict[str, set]:
    def key(e):
        return (e['kind'], e['name']) if which == 'types' else e['name']
    return {what: {key(e) for e in doc[which][what]} for what in ('added', 'removed', 'changed')}


def test_every_section_as_bpftool_shows_the_two_sides(pair):
    before, after = pair
    r = objbtf('diff', '--format', 'json', before, after, check=False)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc['equal'] is False and (doc['a'], doc['b']) == (str(before), str(after))
    a, b = BpftoolDump(before), BpftoolDump(after)
    for which in ('functions', 'types', 'variables'):
        want = expected_changes(a, b, which)
        assert reported(doc, which) == want, which
        # The pair exercises each kind of change in each section.
        assert all(want.values()), (which, want)
    # ... and the pair is what its sources say it is.
    assert reported(doc, 'functions') == {'added': {'added_fn'}, 'removed': {'removed_fn'},
                                          'changed': {'changed_fn'}}
    assert reported(doc, 'variables') == {
        'added': {'added_var', 'added_type_var'},
        'removed': {'removed_var', 'removed_type_var'}, 'changed': {'changed_var'}}
    assert {'added': {('STRUCT', 'added_type')}, 'removed': {('STRUCT', 'removed_type')},
            'changed': {('STRUCT', 'changed'), ('ENUM', 'colour')}}.items() <= \
        {k: v - {('INT', 'short int')} for k, v in reported(doc, 'types').items()}.items()
    [changed_fn] = doc['functions']['changed']
    assert changed_fn['a'] == ['int changed_fn(int x)']
    assert changed_fn['b'] == ['long int changed_fn(int x, int y)']


def test_text_report(pair):
    before, after = pair
    r = objbtf('diff', before, after, check=False)
    assert r.returncode == 1 and r.stderr == ''
    lines = r.stdout.splitlines()
    heads = [line for line in lines if not line.startswith(('+', '-', '~', ' '))]
    assert heads == ['functions: 1 added, 1 removed, 1 changed',
                     'types: 2 added, 1 removed, 2 changed',
                     'variables: 2 added, 2 removed, 1 changed']
    assert '+ added_fn: int added_fn(const char *s)' in lines
    assert '- removed_fn: void removed_fn(void)' in lines
    at = lines.index('~ changed_fn')
    assert lines[at + 1:at + 3] == ['    - int changed_fn(int x)',
                                    '    + long int changed_fn(int x, int y)']
    assert '~ STRUCT changed' in lines
    assert '    + struct changed {int a @0; int added_member @32;} size 8' in lines
    assert '- removed_var: global long int removed_var in .data' in lines


def test_equal_btf_in_other_containers_and_order(pair, tmp_path):
    """The object against its own .BTF as a raw file: equal, exit 0, no output.
    And reversed: the same differences, seen from the other side."""
    before, after = pair
    raw = tmp_path / 'before.btf'
    run(need('objcopy'), '--dump-section', f'.BTF={raw}', before)
    r = objbtf('diff', before, raw, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (0, '', '')
    doc = json.loads(objbtf('diff', '--format', 'json', raw, before, check=False).stdout)
    assert doc['equal'] is True
    forward = json.loads(objbtf('diff', '--format', 'json', before, after, check=False).stdout)
    back = json.loads(objbtf('diff', '--format', 'json', after, before, check=False).stdout)
    for which in ('functions', 'types', 'variables'):
        assert back[which]['added'] == forward[which]['removed']
        assert back[which]['removed'] == forward[which]['added']
        assert [(e['a'], e['b']) for e in back[which]['changed']] == \
            [(e['b'], e['a']) for e in forward[which]['changed']]


def test_split_btf_with_base(pair, tmp_path):
    """Split BTF made by pahole on top of a base: --base reads both sides on
    it; what they add over the base is compared, as bpftool -B shows it."""
    before, after = pair
    base = before
    splits = []
    for side in (before, after):
        split = tmp_path / f'{side.stem}.split.btf'
        run(need('pahole'), '-J', '--btf_base', base, '--btf_encode_detached', split, side)
        splits.append(split)
    r = objbtf('diff', '--format', 'json', '--base', base, *splits, check=False)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    a, b = BpftoolDump(splits[0], base), BpftoolDump(splits[1], base)
    for which in ('functions', 'types'):
        assert reported(doc, which) == expected_changes(a, b, which), which
    assert 'added_fn' in reported(doc, 'functions')['added']
    assert objbtf('diff', '--base', base, splits[1], splits[1], check=False).returncode == 0


def test_errors_exit_2_naming_the_file(pair, tmp_path):
    before, _ = pair
    missing = tmp_path / 'missing.o'
    r = objbtf('diff', before, missing, check=False)
    assert r.returncode == 2 and r.stdout == ''
    assert r.stderr.splitlines() == [f'objbtf diff: {missing}: No such file or directory']
    junk = tmp_path / 'junk.btf'
    junk.write_bytes(b'not BTF at all')
    r = objbtf('diff', junk, before, check=False)
    assert r.returncode == 2 and r.stderr.startswith(f'objbtf diff: {junk}: ')
    assert len(r.stderr.splitlines()) == 1 and 'Traceback' not in r.stderr
    plain = tmp_path / 'plain.o'
    run(need('gcc'), '-c', '-o', plain, PAIR / 'before.c')
    r = objbtf('diff', plain, before, check=False)
    assert r.returncode == 2 and r.stderr.strip() == f'objbtf diff: {plain}: no .BTF section'
    assert objbtf('diff', '--format', 'yaml', before, before, check=False).returncode == 2
