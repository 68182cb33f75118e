"""dump_btf against bpftool's raw dump, byte for byte, on BTF from the real tools."""
from __future__ import annotations

import subprocess

import pytest

from conftest import need
from fixtures.btf import inputs
from objbtf.btf import VarSecinfo, encode_btf
from objbtf.btf.dump import dump_btf
from objbtf.btf.kinds import FUNC_EXTERN, VAR_GLOBAL_EXTERN


def bpftool_dump(inp: inputs.BtfInput) -> list[str]:
    cmd = [need('bpftool')]
    if inp.base_path is not None:
        cmd += ['-B', str(inp.base_path)]
    cmd += ['btf', 'dump', 'file', str(inp.path)]
    out = subprocess.run(cmd, capture_output=True, check=True).stdout
    return out.decode('utf-8', 'replace').splitlines()


def assert_same_dump(inp: inputs.BtfInput) -> None:
    expected = bpftool_dump(inp)
    ours = list(dump_btf(inp.parse()))
    for n, (want, got) in enumerate(zip(expected, ours), 1):
        assert got == want, f'line {n} differs:\n bpftool: {want!r}\n objbtf:  {got!r}'
    assert len(ours) == len(expected), f'{len(ours)} lines, bpftool prints {len(expected)}'


@pytest.mark.parametrize('variant', sorted(inputs.HOST_VARIANTS))
def test_pahole_output(tmp_path, variant):
    assert_same_dump(inputs.host_input(tmp_path, variant))


def test_bpf_object_with_tags(tmp_path):
    _, inp = inputs.bpf_object(tmp_path)
    lines = bpftool_dump(inp)
    kinds = {line.split()[1] for line in lines if line.startswith('[')}
    assert {'DECL_TAG', 'TYPE_TAG', 'VAR', 'DATASEC'} <= kinds
    assert_same_dump(inp)


def test_every_kind_and_encoding_is_covered(tmp_path):
    """The inputs above exercise every kind and every variant of the text."""
    _, bpf = inputs.bpf_object(tmp_path)
    text = '\n'.join(bpftool_dump(inputs.host_input(tmp_path, 'gcc-objcopy'))
                     + bpftool_dump(bpf))
    for needle in ('] INT ', '] PTR ', '] ARRAY ', '] STRUCT ', '] UNION ', '] ENUM ',
                   '] ENUM64 ', '] TYPEDEF ', '] VOLATILE ', '] CONST ', '] RESTRICT ',
                   '] FUNC ', '] FUNC_PROTO ', '] VAR ', '] DATASEC ', '] FLOAT ',
                   '] DECL_TAG ', '] TYPE_TAG ', 'encoding=SIGNED size', 'encoding=UNSIGNED',
                   'LL\n', 'ULL\n', 'linkage=static', 'linkage=global', ', linkage=static',
                   ', linkage=global', 'bitfield_size=', "'(anon)' type_id=0",
                   'component_idx=-1', 'component_idx=0', 'encoding=BOOL', 'nr_elems=0'):
        assert needle in text + '\n', f'no {needle!r} in the dumps'


def test_zoo_with_unusual_values(tmp_path):
    """Values no compiler emits still print as bpftool prints them."""
    btf, ids = inputs.zoo()
    btf.types[ids['int']].encoding = 3            # UNKN
    btf.types[ids['fn']].linkage = FUNC_EXTERN
    btf.types[ids['vfn']].linkage = 7             # (unknown)
    btf.types[ids['counter']].linkage = VAR_GLOBAL_EXTERN
    btf.types[ids['buf']].linkage = 9             # (unknown)
    btf.types[ids['data']].items += (VarSecinfo(0, 40, 1), VarSecinfo(btf.next_id + 3, 41, 1))
    path = tmp_path / 'zoo.btf'
    path.write_bytes(encode_btf(btf))
    inp = inputs.BtfInput(path.read_bytes(), path)
    text = '\n'.join(bpftool_dump(inp))
    for needle in ('encoding=UNKN', 'linkage=extern', 'linkage=(unknown)', "(UNKNOWN '(anon)')",
                   'fwd_kind=union', "val=-1\n", 'val=1099511627776LL'):
        assert needle in text + '\n', needle
    assert_same_dump(inp)


def test_vmlinux():
    assert_same_dump(inputs.vmlinux())


def test_fwd_and_split_on_small_base(tmp_path):
    inp = inputs.split_inputs(tmp_path)['split-kitchen']
    assert any("FWD 'task_struct' fwd_kind=struct" in line for line in bpftool_dump(inp))
    assert_same_dump(inp)


def test_split_on_vmlinux(tmp_path):
    inp = inputs.split_inputs(tmp_path)['split-vmlinux']
    first = bpftool_dump(inp)[0]
    assert first.startswith(f'[{inp.base().next_id}] '), first
    assert_same_dump(inp)


@pytest.mark.parametrize('module', [p.name for p in inputs.kernel_modules()] or ['(none)'])
def test_kernel_module(module):
    """Module BTF is split on vmlinux; this kernel may have no modules at all."""
    if module == '(none)':
        assert not inputs.kernel_modules()
        return
    assert_same_dump(inputs.BtfInput((inputs.VMLINUX.parent / module).read_bytes(),
                                     inputs.VMLINUX.parent / module, inputs.VMLINUX))
