"""objbtf link --types-stamp: a file that changes only when the types modules
depend on do, so that Kbuild relinks modules only then."""
from __future__ import annotations

from pathlib import Path

from conftest import FIXTURES, need, objbtf, run
from linkdedup.stamp import types_digest
from objbtf.btf import Kind, parse_btf
from objbtf.btf.types import BtfType, VarSecinfo
from objbtf.btf.writer import encode_btf
from test_link import link_relocatable, units  # noqa: F401 (a fixture)

UNITS = FIXTURES / 'dedup'


def stamped_link(linked: Path, stamp: Path, out: Path, *more: str) -> tuple[bytes, int]:
    """(the stamp's bytes, its mtime in ns) after one link with --types-stamp."""
    objbtf('link', '--types-stamp', stamp, *more, '--output', out, linked)
    return stamp.read_bytes(), stamp.stat().st_mtime_ns


def test_a_relink_whose_variables_moved_leaves_the_stamp_alone(units, tmp_path):  # noqa: F811
    """The objects in another order: the percpu variables move and the BTF
    differs, in its DATASEC only; replayed from the cache or linked in
    full, the stamp keeps its bytes and its time."""
    stamp, cache = tmp_path / 'types', tmp_path / 'cache'
    forward = link_relocatable(tmp_path, units, 'fwd.o')
    first, when = stamped_link(forward, stamp, tmp_path / 'a.btf', '--cache', str(cache))
    assert len(first) == 65 and first.endswith(b'\n')
    backward = link_relocatable(tmp_path, list(reversed(units)), 'bwd.o')
    for more in (('--cache', str(cache)), ()):
        again, then = stamped_link(backward, stamp, tmp_path / 'b.btf', *more)
        assert (again, then) == (first, when)
    assert (tmp_path / 'a.btf').read_bytes() != (tmp_path / 'b.btf').read_bytes()


def test_a_new_type_rewrites_the_stamp(units, tmp_path):  # noqa: F811
    stamp = tmp_path / 'types'
    first, _ = stamped_link(link_relocatable(tmp_path, units, 'old.o'), stamp, tmp_path / 'a.btf')
    extra = tmp_path / 'extra.h'
    extra.write_text('struct added_by_test { int a; long b; };\n'
                     'struct added_by_test *added_by_test_fn(void) { return 0; }\n')
    objbtf('cc', '--', need('gcc'), '-g', '-O2', '-c', '-include', extra, '-o', units[1],
           UNITS / 'unit_b.c')
    again, _ = stamped_link(link_relocatable(tmp_path, units, 'new.o'), stamp, tmp_path / 'b.btf')
    assert again != first
    assert "STRUCT 'added_by_test'" in run(need('bpftool'), 'btf', 'dump', 'file',
                                           tmp_path / 'b.btf').stdout


def test_the_digest_leaves_out_only_where_the_variables_are(units, tmp_path):  # noqa: F811
    """Moving, resizing or reordering a DATASEC's entries keeps the digest;
    any other change to a type, a name, or the kernel's kfunc-set marks
    changes it."""
    out = tmp_path / 'a.btf'
    objbtf('link', '--output', out, link_relocatable(tmp_path, units, 'all.o'))
    raw = out.read_bytes()
    btf = parse_btf(raw)
    digest = types_digest(raw, None)
    [(ds_id, ds)] = [(i, t) for i, t in btf.own() if t.kind is Kind.DATASEC
                     and t.name == '.data..percpu']
    assert len(ds.items) >= 2
    moved = [VarSecinfo(v.type, v.offset + 64, v.size) for v in reversed(ds.items)]
    btf.types[ds_id] = BtfType(Kind.DATASEC, ds.name, size=ds.size + 128, items=tuple(moved))
    assert encode_btf(btf) != raw and types_digest(encode_btf(btf), None) == digest
    assert types_digest(raw, True) != digest
    [struct] = [t for _, t in btf.own() if t.kind is Kind.STRUCT and t.name == 'device'][:1]
    struct.name = 'devices'
    assert types_digest(encode_btf(btf), None) != digest


def test_the_stamp_is_for_vmlinux_only(units, tmp_path):  # noqa: F811
    linked = link_relocatable(tmp_path, units, 'all.o')
    r = objbtf('link', '--types-stamp', tmp_path / 's', '--base', linked,
               '-o', tmp_path / 'o.btf', linked, check=False)
    assert r.returncode == 1 and '--types-stamp is for vmlinux' in r.stderr
    assert not (tmp_path / 's').exists()
