"""The kfuncs a linked file lists in ``.BTF_ids``, read with binutils
(``readelf -S``/``-s``, ``objcopy -O binary``) rather than objbtf's ELF
reader, by the rules the README gives for the kfuncs pass.
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
