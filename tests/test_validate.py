"""The validator against the running kernel's verdict (BPF_BTF_LOAD).

Valid BTF from the real tools must pass both; then each rule is broken in a
copy of a valid blob, and the validator and the kernel must both reject it;
a set of near misses that the kernel accepts must pass both too.  Random
mutations of fields and bytes compare the two verdicts wholesale.
"""
from __future__ import annotations

import random
import struct
from typing import Callable

import pytest

from fixtures.btf import inputs
from objbtf.btf import Btf, BtfType, Enumerator, Kind, Member, Param, VarSecinfo, encode_btf
from objbtf.btf import BtfError, parse_btf
from objbtf.btf.header import BtfHeader
from objbtf.btf.kinds import FUNC_EXTERN, VAR_GLOBAL_EXTERN
from objbtf.btf.validate import Problem, first_problem, pointer_size, validate, validate_bytes
from objbtf.btf.writer import type_offsets, with_kind_layout

Mutation = Callable[[Btf, dict[str, int]], None]


_KNOWS_KIND_LAYOUT: list[bool] = []


def knows_kind_layout(load) -> bool:
    """Whether the running kernel reads the 32-byte header that locates a
    kind layout section (Linux 7.x), asked of it once with a valid blob
    that has one."""
    if not _KNOWS_KIND_LAYOUT:
        blob = with_kind_layout(encode_btf(inputs.zoo()[0]))
        assert validate_bytes(blob) == []
        _KNOWS_KIND_LAYOUT.append(load(blob).ok)
    return _KNOWS_KIND_LAYOUT[0]


def verdict_mismatch(blob: bytes, load) -> str | None:
    """Why our verdict on ``blob`` differs from the running kernel's, or None."""
    ours = validate_bytes(blob, kind_layout=knows_kind_layout(load))
    theirs = load(blob)
    if bool(ours) == (not theirs.ok):
        return None
    if ours:
        return f'we reject ({ours[0]}), the kernel accepts'
    return f'we accept, the kernel rejects: {theirs.log.strip().splitlines()[-1:]}'


def mutated(mutation: Mutation) -> Btf:
    btf, ids = inputs.zoo()
    mutation(btf, ids)
    return btf


def t(btf: Btf, ids: dict[str, int], key: str) -> BtfType:
    return btf.types[ids[key]]


# -- valid inputs ------------------------------------------------------------

def valid_inputs(tmp_path) -> dict[str, inputs.BtfInput]:
    found = dict(inputs.host_inputs(tmp_path))
    obj, bpf = inputs.bpf_object(tmp_path)
    fixed = tmp_path / 'tagged-fixed.btf'
    fixed.write_bytes(inputs.fixup_datasecs(bpf.raw, obj))
    found['bpf-fixed-up'] = inputs.BtfInput(fixed.read_bytes(), fixed)
    found['vmlinux'] = inputs.vmlinux()
    zoo_btf, _ = inputs.zoo()
    found['zoo'] = inputs.BtfInput(encode_btf(zoo_btf), tmp_path / 'zoo.btf')
    return found


def test_valid_inputs_pass_both(tmp_path, kernel_loader):
    for name, inp in valid_inputs(tmp_path).items():
        assert validate_bytes(inp.raw) == [], name
        assert validate(inp.parse()) == [], name
        verdict = kernel_loader(inp.raw)
        assert verdict.ok, f'{name}: {verdict.log[-400:]}'


def test_reencoded_inputs_pass_both(tmp_path, kernel_loader):
    """parse then encode keeps BTF valid (the writer lays out what the kernel expects)."""
    for name, inp in valid_inputs(tmp_path).items():
        blob = encode_btf(inp.parse())
        assert validate_bytes(blob) == [], name
        assert kernel_loader(blob).ok, name


def test_bpf_object_as_compiled_is_rejected_by_both(tmp_path, kernel_loader):
    """clang leaves DATASEC sizes at 0 for libbpf to fill in."""
    _, bpf = inputs.bpf_object(tmp_path)
    problems = validate_bytes(bpf.raw)
    assert problems and problems[0].kind == 'DATASEC' and 'size 0' in problems[0].message
    assert not kernel_loader(bpf.raw).ok


def test_split_inputs_pass(tmp_path):
    for name, inp in inputs.split_inputs(tmp_path).items():
        base = inp.base()
        assert validate_bytes(inp.raw, base) == [], name
        split = parse_btf(inp.raw, base)
        assert validate(split) == [], name
        assert next(split.own())[0] == base.next_id


def test_split_ids_and_names_continue_from_base(tmp_path):
    inp = inputs.split_inputs(tmp_path)['split-kitchen']
    base = inp.base()
    split = parse_btf(inp.raw, base)
    ptr = next(t for _, t in split.own() if t.kind is Kind.PTR)
    ptr.type = split.next_id + 5
    problem = first_problem(split)
    assert problem is not None and 'missing type' in problem.message, problem
    ptr.type = 1                              # a base type: fine
    assert validate(split) == []
    raw = bytearray(encode_btf(split))
    assert validate_bytes(bytes(raw), base) == []
    # own names start after the base's strings; the first type's name goes past them
    struct.pack_into('<I', raw, HEADER.size, base.strings.end + len(parts(bytes(raw))[1]))
    problems = validate_bytes(bytes(raw), base)
    assert problems and 'outside the string section' in problems[0].message, problems


def test_split_cannot_be_loaded(tmp_path, kernel_loader):
    inp = inputs.split_inputs(tmp_path)['split-kitchen']
    with pytest.raises(NotImplementedError, match='module'):
        kernel_loader(inp.raw, inp.base())


def test_the_running_kernels_vmlinux_follows_the_rules():
    """The running kernel's own BTF (what it accepts at boot) breaks no rule.
    How fast the check runs is for a benchmark, not a test."""
    btf = inputs.vmlinux().parse()
    assert validate(btf) == []


def test_problem_names_type_kind_and_name():
    btf, ids = inputs.zoo()
    btf.types[ids['node']].size = 8
    problem = first_problem(btf)
    assert isinstance(problem, Problem)
    assert str(problem) == (f"type [{ids['node']}] STRUCT 'node': "
                            "member 'val' offset 192 past the struct size 8")


def test_a_problem_is_one_line_whatever_the_names_it_quotes():
    """A member's name read from a damaged file may hold a newline: the
    message quotes it escaped, as it does the type's own name."""
    btf, ids = inputs.zoo()
    node = btf.types[ids['node']]
    node.items = (node.items[0]._replace(name='va\nl'), *node.items[1:])
    problem = first_problem(btf)
    assert problem is not None and problem.message.startswith("member 'va\nl'")
    assert str(problem) == (f"type [{ids['node']}] STRUCT 'node': "
                            "member 'va\\nl' name is not a valid identifier")


def _ending_in_a_pointer(long_size: int | None) -> Btf:
    """A struct of two pointers in 8 bytes, as i386 lays it out, beside a
    ``long`` of ``long_size`` bytes (none if None)."""
    btf = Btf()
    if long_size is not None:
        btf.add(BtfType(Kind.INT, 'long int', size=long_size, bits=8 * long_size))
    head = btf.next_id
    ptr = head + 1
    btf.add(BtfType(Kind.STRUCT, 'list_head', size=8,
                    items=(Member('next', ptr, 0), Member('prev', ptr, 32))))
    btf.add(BtfType(Kind.PTR, type=head))
    return btf


def test_pointers_have_the_size_of_the_targets_long():
    """The kernel checks pointer members with its own pointer size; raw
    BTF does not record the target's, so the check takes the size of its
    ``long`` (its base's first), 8 without one, unless told."""
    i386 = _ending_in_a_pointer(4)
    assert pointer_size(i386) == 4 and validate(i386) == []
    assert 'runs past the struct size 8' in str(first_problem(i386, ptr_size=8))
    assert validate_bytes(encode_btf(i386)) == []
    assert pointer_size(_ending_in_a_pointer(8)) == 8
    no_long = _ending_in_a_pointer(None)
    assert pointer_size(no_long) == 8 and validate(no_long)
    assert validate(no_long, ptr_size=4) == []
    split = Btf(base=i386)
    split.add(BtfType(Kind.PTR, type=2))
    assert pointer_size(split) == 4


# -- one broken rule at a time --------------------------------------------

def _set(key: str, **fields) -> Mutation:
    def mutate(b: Btf, ids: dict[str, int]) -> None:
        for field, value in fields.items():
            setattr(t(b, ids, key), field, value)
    return mutate


def _member(key: str, index: int, **fields) -> Mutation:
    def mutate(b: Btf, ids: dict[str, int]) -> None:
        s = t(b, ids, key)
        items = list(s.items)
        items[index] = items[index]._replace(
            **{k: ids.get(v, v) if isinstance(v, str) and k == 'type' else v
               for k, v in fields.items()})
        s.items = tuple(items)
    return mutate


def _items(key: str, make: Callable[[dict[str, int]], tuple]) -> Mutation:
    def mutate(b: Btf, ids: dict[str, int]) -> None:
        t(b, ids, key).items = make(ids)
    return mutate


def _point(key: str, target: str, field: str = 'type') -> Mutation:
    def mutate(b: Btf, ids: dict[str, int]) -> None:
        setattr(t(b, ids, key), field, ids[target])
    return mutate


def _append(*make: Callable[[Btf, dict[str, int]], BtfType]) -> Mutation:
    def mutate(b: Btf, ids: dict[str, int]) -> None:
        for f in make:
            b.add(f(b, ids))
    return mutate


def _all(*mutations: Mutation) -> Mutation:
    def mutate(b: Btf, ids: dict[str, int]) -> None:
        for m in mutations:
            m(b, ids)
    return mutate


def _typedef_chain(length: int, forward: bool) -> Mutation:
    """``length`` typedefs ending at int: each refers to the next id (forward) or previous."""
    def mutate(b: Btf, ids: dict[str, int]) -> None:
        first = b.next_id
        for i in range(length):
            if forward:
                target = first + i + 1 if i < length - 1 else ids['int']
            else:
                target = first + i - 1 if i else ids['int']
            b.add(BtfType(Kind.TYPEDEF, f'chain{i}', type=target))
    return mutate


def _late_datasec(size: int) -> Mutation:
    """A DATASEC whose VAR comes after it, so the kernel resolves the VAR on the way."""
    def mutate(b: Btf, ids: dict[str, int]) -> None:
        sec = b.add(BtfType(Kind.DATASEC, '.late', size=8))
        var = b.add(BtfType(Kind.VAR, 'late', type=ids['long']))
        b.types[sec].items = (VarSecinfo(var, 0, size),)
    return mutate


REJECTED: dict[str, Mutation] = {
    # names
    'bad name char': _set('node', name='no-de'),
    'name starts with a digit': _set('myint', name='1int'),
    'name on a PTR': _set('void_ptr', name='p'),
    'name on an ARRAY': _set('name16', name='arr'),
    'name on a CONST': _set('const_myint', name='c'),
    'name on a FUNC_PROTO': _set('proto', name='proto'),
    'anonymous TYPEDEF': _set('myint', name=''),
    'anonymous FWD': _set('opaque', name=''),
    'anonymous FUNC': _set('fn', name=''),
    'anonymous VAR': _set('counter', name=''),
    'anonymous DATASEC': _set('data', name=''),
    'DATASEC name not printable': _set('data', name='.da\x01ta'),
    'empty TYPE_TAG': _set('user_int', name=''),
    'empty DECL_TAG': _set('tag_var', name=''),
    'bad member name': _member('node', 1, name='na me'),
    'enumerator without a name': _items('color', lambda ids: (Enumerator('', 0),)),
    'bad enumerator name': _items('color', lambda ids: (Enumerator('a+b', 0),)),
    'name of 513 bytes': _set('node', name='n' * 513),
    'bad argument name': _items('proto', lambda ids: (Param('a b', ids['int']),)),
    # INT
    'INT bits > 128': _set('long', size=16, bits=129),
    'INT bits + offset > 128': _set('long', size=16, bits=120, bit_offset=16),
    'INT bits past its size': _set('int', bits=64),
    'INT encoding SIGNED|CHAR': _set('int', encoding=3),
    'INT kind_flag': _set('int', kflag=1),
    # FLOAT, ENUM
    'FLOAT size 3': _set('double', size=3),
    'FLOAT size 0': _set('double', size=0),
    'FLOAT kind_flag': _set('double', kflag=1),
    'ENUM size 3': _set('color', size=3),
    'ENUM size 0': _set('color', size=0),
    'ENUM size 16': _set('color', size=16),
    'ENUM64 size 3': _set('big', size=3),
    # STRUCT / UNION
    'member offset past the struct size': _member('bits', 3, bit_offset=72),
    'member offsets decrease': _member('bits', 4, bit_offset=8),
    'union member not at 0': _member('slot', 1, bit_offset=8),
    'member runs past the struct': _set('node', size=78),
    'member of type void': _member('slot', 0, type=0),
    'member is a FUNC_PROTO': _member('slot', 0, type='proto'),
    'member is a FUNC': _member('slot', 0, type='fn'),
    'member is a FWD': _member('slot', 0, type='opaque'),
    'member is a VAR': _member('slot', 0, type='counter'),
    'member is a typedef of void': _append(
        lambda b, ids: BtfType(Kind.TYPEDEF, 'nothing', type=0),
        lambda b, ids: BtfType(Kind.STRUCT, 'holds', size=4,
                               items=(Member('n', b.next_id - 1, 0),))),
    'member type out of range': _member('slot', 0, type=0x100000),
    'member type missing': _member('slot', 0, type=9999),
    'bitfield wider than its INT': _member('bits', 0, bitfield_size=33),
    'bitfield of a PTR': _items('bits', lambda ids: (Member('p', ids['void_ptr'], 0, 3),)),
    'bitfield of a FLOAT': _items('bits', lambda ids: (Member('p', ids['double'], 0, 3),)),
    'bitfield on a bitfield INT': _member('bits', 0, type='int3'),
    'enum bitfield wider than 32': _items('bits', lambda ids: (Member('c', ids['big'], 0, 33),)),
    'enum bitfield past the struct': _member('bits', 2, bit_offset=62),
    'kflag member not byte aligned': _member('bits', 3, bit_offset=17),
    'INT member bits past the struct': _member('legacy', 1, bit_offset=40),
    'PTR member not byte aligned': _member('node', 0, bit_offset=1),
    'FLOAT member misaligned': _member('node', 3, bit_offset=264),
    'struct member inside itself': _member('node', 2, type='node'),
    # ARRAY
    'ARRAY index void': _set('name16', index_type=0),
    'ARRAY element void': _set('name16', type=0),
    'ARRAY index a STRUCT': _point('name16', 'slot', 'index_type'),
    'ARRAY index a bitfield INT': _point('name16', 'int3', 'index_type'),
    'ARRAY index an ENUM': _point('name16', 'color', 'index_type'),
    'ARRAY of FUNC_PROTO': _point('name16', 'proto'),
    'ARRAY of bitfield INT': _point('name16', 'int3'),
    'ARRAY of FWD': _point('name16', 'opaque'),
    'ARRAY kind_flag': _set('name16', kflag=1),
    'ARRAY size overflows 32 bits': _all(_point('name16', 'long'),
                                         _set('name16', nelems=0x20000001)),
    'array of itself': _point('name16', 'name16'),
    # VAR / DATASEC
    'VAR of void': _set('counter', type=0),
    'VAR of a FUNC_PROTO': _point('counter', 'proto'),
    'VAR of a FWD': _point('counter', 'opaque'),
    'VAR extern': _set('counter', linkage=VAR_GLOBAL_EXTERN),
    'VAR kind_flag': _set('counter', kflag=1),
    'DATASEC entries unsorted': _items('data', lambda ids: (
        VarSecinfo(ids['buf'], 8, 16), VarSecinfo(ids['counter'], 0, 4))),
    'DATASEC entries overlap': _items('data', lambda ids: (
        VarSecinfo(ids['counter'], 0, 12), VarSecinfo(ids['buf'], 8, 16))),
    'DATASEC entry past its size': _items('data', lambda ids: (
        VarSecinfo(ids['buf'], 32, 16),)),
    'DATASEC entry of size 0': _items('data', lambda ids: (VarSecinfo(ids['counter'], 0, 0),)),
    'DATASEC entry smaller than its VAR': _items('data', lambda ids: (
        VarSecinfo(ids['counter'], 0, 2),)),
    'DATASEC entry not a VAR': _items('data', lambda ids: (VarSecinfo(ids['int'], 0, 4),)),
    'DATASEC entry void': _items('data', lambda ids: (VarSecinfo(0, 0, 4),)),
    'DATASEC size 0': _set('data', size=0),
    'DATASEC kind_flag': _set('data', kflag=1),
    # FUNC / FUNC_PROTO
    'FUNC of an INT': _point('fn', 'int'),
    'FUNC of a FUNC': _point('vfn', 'fn'),
    'FUNC extern': _set('fn', linkage=FUNC_EXTERN),
    'FUNC kind_flag': _set('fn', kflag=1),
    'FUNC with an unnamed argument': _point('fn', 'cb_proto'),
    'void argument not last': _items('proto', lambda ids: (
        Param('', 0), Param('a', ids['int']))),
    'named varargs marker': _items('vproto', lambda ids: (
        Param('fmt', ids['char_ptr']), Param('more', 0))),
    'FUNC_PROTO returns a VAR': _point('proto', 'counter'),
    'FUNC_PROTO returns a FWD': _point('proto', 'opaque'),
    'FUNC_PROTO argument a DATASEC': _items('proto', lambda ids: (Param('d', ids['data']),)),
    'FUNC_PROTO argument missing': _items('proto', lambda ids: (Param('d', 9999),)),
    'FUNC_PROTO kind_flag': _set('proto', kflag=1),
    # DECL_TAG, TYPE_TAG
    'DECL_TAG component_idx -2': _set('tag_struct', component_idx=-2),
    'DECL_TAG component of a VAR': _set('tag_var', component_idx=0),
    'DECL_TAG component of a TYPEDEF': _set('tag_typedef', component_idx=0),
    'DECL_TAG component past the members': _set('tag_member', component_idx=10),
    'DECL_TAG component past the arguments': _set('tag_arg', component_idx=2),
    'DECL_TAG on an INT': _point('tag_struct', 'int'),
    'DECL_TAG on a TYPE_TAG': _point('tag_struct', 'user_int'),
    'TYPE_TAG after CONST': _append(
        lambda b, ids: BtfType(Kind.TYPE_TAG, 'late', type=ids['int']),
        lambda b, ids: BtfType(Kind.CONST, type=b.next_id - 1),
        lambda b, ids: BtfType(Kind.PTR, type=b.next_id - 1)),
    # references
    'PTR to a missing type': _set('void_ptr', type=9999),
    'PTR type id out of range': _set('void_ptr', type=0x100000),
    'PTR to a VAR': _point('void_ptr', 'counter'),
    'PTR to a DECL_TAG': _point('void_ptr', 'tag_var'),
    'PTR to itself': _point('void_ptr', 'void_ptr'),
    'PTR kind_flag': _set('void_ptr', kflag=1),
    'typedef loop': _append(lambda b, ids: BtfType(Kind.TYPEDEF, 'a', type=b.next_id + 1),
                            lambda b, ids: BtfType(Kind.TYPEDEF, 'b', type=b.next_id - 1)),
    'CONST of itself': _point('const_myint', 'const_myint'),
    'typedef chain of 33': _typedef_chain(33, forward=True),
    'VAR of a typedef of void': _append(
        lambda b, ids: BtfType(Kind.TYPEDEF, 'nothing', type=0),
        lambda b, ids: BtfType(Kind.VAR, 'v', type=b.next_id - 1)),
    'FWD with a type': _set('opaque', type=1),
    'DATASEC entry checked when its VAR came first': _append(
        lambda b, ids: BtfType(Kind.VAR, 'early', type=ids['long']),
        lambda b, ids: BtfType(Kind.DATASEC, '.early', size=8,
                               items=(VarSecinfo(b.next_id - 1, 0, 2),))),
}

ACCEPTED: dict[str, Mutation] = {
    'INT name with spaces and punctuation': _set('int', name='int (signed) !'),
    'FLOAT with any name': _set('double', name='long double?'),
    'dots anywhere in names': _set('node', name='.no.de.'),
    'name of 512 bytes': _set('node', name='n' * 512),
    'ENUM of size 2 and 8': _all(_set('color', size=8), _set('delta', size=2)),
    'ENUM64 of size 4': _set('big', size=4),
    'empty ENUM': _items('color', lambda ids: ()),
    'empty STRUCT': _items('bits', lambda ids: ()),
    'DATASEC entry bigger than its VAR': _items('data', lambda ids: (
        VarSecinfo(ids['counter'], 0, 8),)),
    'DATASEC name with spaces': _set('data', name='my data'),
    'TYPE_TAG kind_flag (attribute tags, Linux 6.13+)': _set('user_int', kflag=1),
    'DECL_TAG kind_flag (attribute tags, Linux 6.13+)': _set('tag_var', kflag=1),
    'typedef of void': _append(lambda b, ids: BtfType(Kind.TYPEDEF, 'nothing', type=0)),
    'CONST of a FWD, VOLATILE of void': _append(
        lambda b, ids: BtfType(Kind.CONST, type=ids['opaque']),
        lambda b, ids: BtfType(Kind.VOLATILE, type=0)),
    'PTR to a FUNC_PROTO through a typedef': _append(
        lambda b, ids: BtfType(Kind.TYPEDEF, 'fnty', type=ids['proto']),
        lambda b, ids: BtfType(Kind.PTR, type=b.next_id - 1)),
    'unnamed arguments when no FUNC uses the proto': _items('cb_proto', lambda ids: (
        Param('', ids['int']), Param('', ids['node_ptr']))),
    'varargs only': _items('cb_proto', lambda ids: (Param('', 0),)),
    'member at the end of the struct (flexible array)': _member('node', 9, bit_offset=640),
    'INT member at a bit offset (legacy bitfield)': _member('legacy', 1, bit_offset=29),
    'enum bitfield of an ENUM64': _items('bits', lambda ids: (Member('c', ids['big'], 0, 32),)),
    'typedef chain of 32': _typedef_chain(32, forward=True),
    'typedef chain of 40 defined backwards': _typedef_chain(40, forward=False),
    'pointer loop through a struct': _point('void_ptr', 'node'),
    'DATASEC entry too small, VAR resolved on the way (kernel quirk)': _late_datasec(2),
    'DATASEC with its VAR after it': _late_datasec(8),
    'DECL_TAG on a UNION member': _append(
        lambda b, ids: BtfType(Kind.DECL_TAG, 'on_union', type=ids['slot'], component_idx=1)),
}


@pytest.mark.parametrize('name', sorted(REJECTED))
def test_broken_rule_rejected_by_both(name, kernel_loader):
    btf = mutated(REJECTED[name])
    assert validate(btf), f'{name}: validate() finds no problem'
    blob = encode_btf(btf)
    assert validate_bytes(blob), f'{name}: validate_bytes() finds no problem'
    verdict = kernel_loader(blob)
    assert not verdict.ok, f'{name}: the kernel accepts it'


@pytest.mark.parametrize('name', sorted(ACCEPTED))
def test_near_miss_accepted_by_both(name, kernel_loader):
    btf = mutated(ACCEPTED[name])
    assert validate(btf) == [], name
    blob = encode_btf(btf)
    assert validate_bytes(blob) == [], name
    verdict = kernel_loader(blob)
    assert verdict.ok, f'{name}: the kernel rejects it: {verdict.log[-300:]}'


LINUX_6_1_ONLY: dict[str, Mutation] = {
    'DATASEC name with spaces': ACCEPTED['DATASEC name with spaces'],
    'TYPE_TAG kind_flag': ACCEPTED['TYPE_TAG kind_flag (attribute tags, Linux 6.13+)'],
    'DECL_TAG kind_flag': ACCEPTED['DECL_TAG kind_flag (attribute tags, Linux 6.13+)'],
}


@pytest.mark.parametrize('name', sorted(LINUX_6_1_ONLY))
def test_rules_relaxed_after_6_1(name):
    btf = mutated(LINUX_6_1_ONLY[name])
    assert validate(btf) == []
    assert validate(btf, linux_6_1=True)
    assert validate_bytes(encode_btf(btf), linux_6_1=True)


def test_model_values_that_do_not_fit_the_format():
    for mutation in (_set('int', bits=300), _set('node', size=1 << 32), _set('int', kflag=2),
                     _member('node', 0, bitfield_size=3),
                     _items('color', lambda ids: (Enumerator('X', 1 << 32),))):
        assert validate(mutated(mutation))


# -- the header and raw fields ---------------------------------------------

HEADER = struct.Struct('<HBBIIIII')
HEADER_FIELDS = ('magic', 'version', 'flags', 'hdr_len', 'type_off', 'type_len',
                 'str_off', 'str_len')


def header(blob: bytes) -> dict[str, int]:
    return dict(zip(HEADER_FIELDS, HEADER.unpack_from(blob)))


def parts(blob: bytes) -> tuple[bytes, bytes]:
    """(type section, string section) of a blob laid out the usual way."""
    h = header(blob)
    body = blob[h['hdr_len']:]
    return (body[h['type_off']:h['type_off'] + h['type_len']],
            body[h['str_off']:h['str_off'] + h['str_len']])


def assemble(types: bytes, strings: bytes, body: bytes | None = None, extra: bytes = b'',
             **fields: int) -> bytes:
    """A blob: header (``extra`` bytes longer), then ``body`` (types + strings by default)."""
    values = dict(magic=0xeb9f, version=1, flags=0, hdr_len=HEADER.size + len(extra),
                  type_off=0, type_len=len(types), str_off=len(types), str_len=len(strings))
    values.update(fields)
    head = HEADER.pack(*(values[n] for n in HEADER_FIELDS))
    return head + extra + (types + strings if body is None else body)


def zoo_parts() -> tuple[bytes, bytes]:
    return parts(encode_btf(inputs.zoo()[0]))


def type_pos(btf: Btf, type_id: int) -> int:
    return HEADER.size + type_offsets(btf)[type_id - 1]


def raw_field(key: str, word: int, value: int | Callable[[int], int]) -> bytes:
    """The zoo blob with 32-bit word ``word`` of type ``key`` replaced."""
    btf, ids = inputs.zoo()
    out = bytearray(encode_btf(btf))
    pos = type_pos(btf, ids[key]) + 4 * word
    old = struct.unpack_from('<I', out, pos)[0]
    struct.pack_into('<I', out, pos, value(old) if callable(value) else value)
    return bytes(out)


def named_raw(key: str, name: bytes) -> bytes:
    """The zoo blob with type ``key`` renamed to raw bytes (no UTF-8 needed)."""
    btf, ids = inputs.zoo()
    types, strings = parts(encode_btf(btf))
    out = bytearray(assemble(types, strings + name + b'\0'))
    struct.pack_into('<I', out, type_pos(btf, ids[key]), len(strings))
    return bytes(out)


def _zoo(make: Callable[[bytes, bytes], bytes]) -> Callable[[], bytes]:
    return lambda: make(*zoo_parts())


RAW_REJECTED: dict[str, Callable[[], bytes]] = {
    'bad magic': _zoo(lambda ty, st: assemble(ty, st, magic=0x9feb)),
    'version 2': _zoo(lambda ty, st: assemble(ty, st, version=2)),
    'flags 1': _zoo(lambda ty, st: assemble(ty, st, flags=1)),
    'hdr_len 20': _zoo(lambda ty, st: assemble(ty, st, hdr_len=20)),
    'hdr_len past the data': _zoo(lambda ty, st: assemble(ty, st, hdr_len=1 << 20)),
    'longer header with non-zero bytes': _zoo(lambda ty, st: assemble(
        ty, st, extra=b'\0\0\0\1')),
    'gap between sections': _zoo(lambda ty, st: assemble(
        ty, st, ty + b'\0' * 4 + st, str_off=len(ty) + 4)),
    'sections overlap': _zoo(lambda ty, st: assemble(
        ty, st, str_off=len(ty) - 4, str_len=len(st) + 4)),
    'string section not last': _zoo(lambda ty, st: assemble(
        ty, st, st + ty, type_off=len(st), str_off=0)),
    'string section not NUL-terminated': _zoo(lambda ty, st: assemble(ty, st[:-1] + b'x')),
    'string section not starting with NUL': _zoo(lambda ty, st: assemble(ty, b'x' + st[1:])),
    'empty string section': _zoo(lambda ty, st: assemble(ty, b'')),
    'trailing bytes': _zoo(lambda ty, st: assemble(ty, st) + b'\0' * 4),
    'types after a 2-byte gap (unaligned)': _zoo(lambda ty, st: assemble(
        ty, st, b'\0\0' + ty + st, type_off=2, str_off=len(ty) + 2)),
    'no types': _zoo(lambda ty, st: assemble(b'', st)),
    'header only': _zoo(lambda ty, st: assemble(ty, st)[:HEADER.size]),
    'truncated type': _zoo(lambda ty, st: assemble(ty[:-6], st)),
    'info reserved bits': lambda: raw_field('int', 1, lambda v: v | 1 << 20),
    'kind 0': lambda: raw_field('int', 1, lambda v: v & 0x80ffffff),
    'kind 20': lambda: raw_field('int', 1, lambda v: v & 0x80ffffff | 20 << 24),
    'vlen on an INT': lambda: raw_field('int', 1, lambda v: v | 1),
    'vlen on a PTR': lambda: raw_field('void_ptr', 1, lambda v: v | 1),
    'INT data reserved bits': lambda: raw_field('int', 3, lambda v: v | 1 << 28),
    'ARRAY with a size': lambda: raw_field('name16', 2, 16),
    'name offset outside the strings': lambda: raw_field('node', 0, 1 << 20),
    'member name offset outside the strings': lambda: raw_field('node', 3, 1 << 20),
    'STRUCT name offset to an empty string': lambda: raw_field('node', 0, lambda v: v - 1),
    'argument name offset outside the strings': lambda: raw_field('proto', 3, 1 << 20),
    'UTF-8 letter in a name (a byte the kernel does not count)': lambda: named_raw(
        'node', 'café'.encode()),
    'DATASEC name with a control byte': lambda: named_raw('data', b'.da\x85ta'),
}

RAW_ACCEPTED: dict[str, Callable[[], bytes]] = {
    'longer header, zero-filled': _zoo(lambda ty, st: assemble(ty, st, extra=b'\0' * 8)),
    'INT data bits 8-15 (unused, not checked)': lambda: raw_field(
        'int', 3, lambda v: v | 0xff00),
    'INT name offset to an empty string': lambda: raw_field('int', 0, lambda v: v - 1),
    'Latin-1 letters in a name': lambda: named_raw('node', 'café'.encode('latin-1')),
    'DATASEC name with Latin-1 punctuation': lambda: named_raw('data', b'.d\xa7ta'),
    'name offset into the middle of a string': lambda: raw_field('node', 0, lambda v: v + 1),
}


@pytest.mark.parametrize('name', sorted(RAW_REJECTED))
def test_raw_rule_rejected_by_both(name, kernel_loader):
    blob = RAW_REJECTED[name]()
    assert validate_bytes(blob, kind_layout=knows_kind_layout(kernel_loader)), \
        f'{name}: validate_bytes() finds no problem'
    assert not kernel_loader(blob).ok, f'{name}: the kernel accepts it'


@pytest.mark.parametrize('name', sorted(RAW_ACCEPTED))
def test_raw_near_miss_accepted_by_both(name, kernel_loader):
    blob = RAW_ACCEPTED[name]()
    assert validate_bytes(blob, kind_layout=knows_kind_layout(kernel_loader)) == [], name
    verdict = kernel_loader(blob)
    assert verdict.ok, f'{name}: the kernel rejects it: {verdict.log[-300:]}'


# -- the kind layout section (Linux 7.x, pahole's "layout") ------------------

def test_a_kind_layout_blob_passes_where_the_kernel_knows_the_header():
    """with_kind_layout: a 32-byte header, the zoo's types, libbpf's table of
    the kinds (``struct btf_layout``: info and entry sizes), its strings; the
    same types read back; refused by a kernel before 7.x, whose header is
    24 bytes, as by 6.18's ("Unsupported btf_header")."""
    plain = encode_btf(inputs.zoo()[0])
    blob = with_kind_layout(plain)
    h = BtfHeader.read(blob)
    assert (h.hdr_len, h.layout_off, h.layout_len) == (32, h.type_len, 4 * len(Kind))
    assert h.str_off == h.type_len + h.layout_len and h.size == len(blob)
    assert h.kind_layout(blob)[4 * Kind.STRUCT:4 * Kind.STRUCT + 2] == bytes([0, 12])
    assert h.kind_layout(blob)[4 * Kind.INT:4 * Kind.INT + 2] == bytes([4, 0])
    assert [t.key() for _, t in parse_btf(blob).own()] == \
        [t.key() for _, t in parse_btf(plain).own()]
    assert validate_bytes(blob) == []
    [problem] = validate_bytes(blob, kind_layout=False)
    assert 'bytes past the 24' in problem.message
    assert validate_bytes(blob, linux_6_1=True)


@pytest.mark.parametrize('change, message', [
    (lambda b: struct.pack_into('<I', b, 28, 84), 'overlaps'),      # into the strings
    (lambda b: struct.pack_into('<I', b, 28, 0), 'gap of 80 bytes'),  # no section there
    (lambda b: struct.pack_into('<I', b, 24, 1 << 20), 'gap of 80 bytes'),
])
def test_a_damaged_kind_layout_section_is_refused(change, message):
    """btf_check_sec_info with three sections: they tile what follows the
    header, in the kernel's order of checks (a gap before an overlap)."""
    blob = bytearray(with_kind_layout(encode_btf(inputs.zoo()[0])))
    change(blob)
    problems = validate_bytes(bytes(blob))
    assert problems and message in problems[0].message, problems


def test_big_endian_blob_is_read_in_its_byte_order():
    btf, _ = inputs.zoo()
    btf.byteorder = 'big'
    assert validate_bytes(encode_btf(btf)) == []


# -- random mutations: the two verdicts must always agree -----------------

INTERESTING = [0, 1, 2, 3, 4, 7, 8, 9, 15, 16, 31, 32, 33, 63, 64, 127, 128, 129, 255,
               0xffff, 0xfffff, 0x100000, 0xffffff, 1 << 24, 0x7fffffff, 0xffffffff]
NAMES = ['', 'x', 'a b', '.x', '9x', 'int', 'x' * 513]


def mutate_randomly(rng: random.Random, btf: Btf) -> None:
    """Set one field of one type (or of one of its items) to an interesting value."""
    target = btf.types[rng.randrange(1, len(btf.types))]
    type_ids = list(range(len(btf.types) + 2))
    field = rng.choice(['size', 'type', 'kflag', 'encoding', 'bit_offset', 'bits',
                        'index_type', 'nelems', 'linkage', 'component_idx', 'name', 'item'])
    if field == 'item' and target.items:
        target.items = mutate_item(rng, target, type_ids)
    elif field == 'name':
        target.name = rng.choice(NAMES)
    elif field in ('type', 'index_type'):
        setattr(target, field, rng.choice(type_ids))
    elif field == 'component_idx':
        target.component_idx = rng.choice([-2, -1, 0, 1, 2, 5])
    elif field == 'kflag':
        target.kflag ^= 1
    elif field in ('encoding', 'bits', 'bit_offset'):
        setattr(target, field, rng.choice(INTERESTING[:19 if field != 'encoding' else 9]))
    elif field != 'item':
        setattr(target, field, rng.choice(INTERESTING))


def mutate_item(rng: random.Random, target: BtfType, type_ids: list[int]) -> tuple:
    items = list(target.items)
    i = rng.randrange(len(items))
    item = items[i]
    field = rng.choice(item._fields)
    if field == 'name':
        value = rng.choice(NAMES)
    elif field == 'type':
        value = rng.choice(type_ids)
    elif field == 'value':
        value = rng.choice([-1, 0, 1, 1 << 31])
    else:
        value = rng.choice(INTERESTING[:20] if field == 'bitfield_size' else INTERESTING)
    items[i] = item._replace(**{field: value})
    return tuple(items)


def fits(btf: Btf) -> bool:
    """Whether the binary format holds every value of ``btf`` (encoding loses nothing)."""
    try:
        again = parse_btf(encode_btf(btf))
    except (struct.error, BtfError):
        return False
    return all(a.key() == b.key() for (_, a), (_, b) in zip(btf.own(), again.own()))


def field_mutations(rng: random.Random, count: int):
    """``count`` copies of the zoo, each with one or two fields set to
    interesting values that the format can hold."""
    made = 0
    while made < count:
        btf, _ = inputs.zoo()
        for _ in range(rng.choice([1, 1, 2])):
            mutate_randomly(rng, btf)
        if fits(btf):
            made += 1
            yield btf


def test_random_field_mutations_agree_with_the_kernel(kernel_loader):
    rng = random.Random(1)
    mismatches, tried = [], 600
    for btf in field_mutations(rng, tried):
        blob = encode_btf(btf)
        if bool(validate(btf)) != bool(validate_bytes(blob)):
            mismatches.append(f'model and bytes disagree: {validate(btf)} / {validate_bytes(blob)}')
        why = verdict_mismatch(blob, kernel_loader)
        if why:
            mismatches.append(f'{why}\n  changed: {list(changed_types(btf))}')
    assert not mismatches, f'{len(mismatches)} of {tried}:\n' + '\n'.join(mismatches[:10])


def changed_types(btf: Btf):
    for (type_id, before), (_, after) in zip(inputs.zoo()[0].own(), btf.own()):
        if before.key() != after.key():
            yield type_id, after


@pytest.mark.parametrize('source', ['zoo', 'gcc-objcopy', 'bpf-fixed-up'])
def test_random_byte_mutations_agree_with_the_kernel(source, tmp_path, kernel_loader):
    blob = valid_inputs(tmp_path)[source].raw
    rng = random.Random(source)
    mismatches = []
    for n in range(500):
        out = bytearray(blob)
        for _ in range(rng.choice([1, 1, 2, 3])):
            pos = rng.randrange(len(out)) if rng.random() < 0.7 else rng.randrange(24)
            out[pos] = rng.choice([0, 1, 0x7f, 0x80, 0xff, out[pos] ^ 1 << rng.randrange(8)])
        why = verdict_mismatch(bytes(out), kernel_loader)
        if why:
            mismatches.append(f'#{n}: {why}')
    assert not mismatches, f'{len(mismatches)} of 500:\n' + '\n'.join(mismatches[:10])
