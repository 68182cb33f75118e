"""Pass 8 (encode) with --split-vars: the non-percpu variables as split BTF of their own.

With every variable encoded (``global_var``), vmlinux's BTF would grow by
thousands of VARs.  The design proposed upstream ships them apart instead:
vmlinux's BTF keeps the percpu DATASEC only, and a second, split BTF on top
of it carries the other DATASECs, their VARs and those VARs' DECL_TAGs.
"""
from __future__ import annotations

from objbtf.btf.kinds import Kind
from objbtf.btf.reader import parse_btf
from objbtf.btf.types import Btf
from objbtf.btf.writer import encode_btf

PERCPU = '.data..percpu'


def split_variables(final: Btf) -> tuple[bytes, bytes, int]:
    """(base BTF, split BTF on top of it, variables moved) from ``final``."""
    moving = _moving(final)
    kept = [(i, t) for i, t in final.own() if i not in moving]
    new_id = {old: k for k, (old, _) in enumerate(kept, 1)}
    base = Btf(byteorder=final.byteorder)
    for _, t in kept:
        t = t.copy()
        t.remap(lambda r: new_id[r] if r else 0)
        base.add(t)
    base_raw = encode_btf(base)
    parsed_base = parse_btf(base_raw)
    split = Btf(base=parsed_base, byteorder=final.byteorder)
    start = parsed_base.next_id
    for k, old in enumerate(sorted(moving)):
        new_id[old] = start + k
    for old in sorted(moving):
        t = final[old].copy()
        t.remap(lambda r: new_id[r] if r else 0)
        split.add(t)
    vars_moved = sum(1 for i in moving if final[i].kind is Kind.VAR)
    return base_raw, encode_btf(split), vars_moved


def _moving(final: Btf) -> set[int]:
    """Ids of the non-percpu DATASECs, their VARs and the VARs' DECL_TAGs."""
    moving: set[int] = set()
    for i, t in final.own():
        if t.kind is Kind.DATASEC and t.name != PERCPU:
            moving.add(i)
            moving.update(v.type for v in t.items)
    for i, t in final.own():
        if t.kind is Kind.DECL_TAG and t.type in moving:
            moving.add(i)
    return moving
