"""The kfuncs a linked file lists in ``.BTF_ids``, read with binutils
(``readelf -S``/``-s``, ``objcopy -O binary``) rather than objbtf's ELF
reader, by the rules docs/pahole-differences.md gives for the kfuncs pass.
"""
from __future__ import annotations

import re
import struct
import tempfile
from pathlib import Path

from conftest import need, run

SET8, FUNC = '__BTF_ID__set8__', '__BTF_ID__func__'
KFUNC_SET, FASTCALL = 1 << 0, 1 << 12


def _section(path: Path) -> tuple[int, int]:
    """(index, address) of .BTF_ids."""
    for line in run(need('readelf'), '-SW', path).stdout.splitlines():
        m = re.match(r'\s*\[\s*(\d+)\]\s+\.BTF_ids\s+\S+\s+([0-9a-f]+)', line)
        if m:
            return int(m[1]), int(m[2], 16)
    raise AssertionError(f'{path}: readelf shows no .BTF_ids')


def _symbols(path: Path, index: int) -> list[tuple[str, int, int]]:
    """(name, value, size) of the symbols readelf shows in section ``index``."""
    out = []
    for line in run(need('readelf'), '-sW', path).stdout.splitlines():
        f = line.split()
        if len(f) == 8 and f[6] == str(index):
            out.append((f[7], int(f[1], 16), int(f[2], 0)))
    return out


def _contents(path: Path) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        raw = Path(d) / 'btf_ids.bin'
        run(need('objcopy'), '-O', 'binary', '--only-section=.BTF_ids', path, raw)
        return raw.read_bytes()


def btf_ids_kfuncs(path: Path) -> tuple[dict[str, set[str]], bool]:
    """({kfunc: its DECL_TAG names}, whether some set is marked BTF_SET8_KFUNCS)."""
    index, addr = _section(path)
    data = _contents(path)
    symbols = _symbols(path, index)

    def flags(value: int) -> int:
        return struct.unpack_from('<I', data, value - addr + 4)[0]

    sets = [(value, value + size, flags(value)) for name, value, size in symbols
            if name.startswith(SET8)]
    marked = any(f & KFUNC_SET for *_, f in sets)
    kfunc_sets = [(lo, hi) for lo, hi, f in sets if f & KFUNC_SET or not marked]
    out: dict[str, set[str]] = {}
    for name, value, _ in symbols:
        m = re.fullmatch(FUNC + r'(.+)__\d+', name)
        if m and any(lo <= value < hi for lo, hi in kfunc_sets):
            tags = out.setdefault(m[1], {'bpf_kfunc'})
            if marked and flags(value) & FASTCALL:
                tags.add('bpf_fastcall')
    return out, marked


#: BTF_ID prefixes and the kind of the type each names.
ID_KINDS = {'func': 'FUNC', 'struct': 'STRUCT', 'union': 'UNION', 'typedef': 'TYPEDEF'}


def btf_ids_entries(path: Path) -> tuple[list[tuple[str, str, int]], list[list[int]]]:
    """What resolve_btfids wrote in ``path``'s .BTF_ids: ([(kind, name, id)] of
    every BTF_ID outside a set, [the ids of each set or set8]).  Sets are
    sorted by resolve_btfids, so only their contents as a whole say anything."""
    index, addr = _section(path)
    data = _contents(path)
    symbols = _symbols(path, index)

    def word(value: int) -> int:
        return struct.unpack_from('<I', data, value - addr)[0]

    sets = []
    for name, value, size in symbols:
        if name.startswith(SET8):
            sets.append((value, value + size, [word(at) for at in range(value + 8, value + size, 8)]))
        elif name.startswith('__BTF_ID__set__'):
            sets.append((value, value + size, [word(at) for at in range(value + 4, value + size, 4)]))
    single = []
    for name, value, _ in symbols:
        m = re.fullmatch(r'__BTF_ID__(\w+?)__(.+)__\d+', name)
        if m and m[1] in ID_KINDS and not any(lo <= value < hi for lo, hi, _ in sets):
            single.append((ID_KINDS[m[1]], m[2], word(value)))
    return single, [ids for *_, ids in sets]
