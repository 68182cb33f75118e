"""Compare objbtf's per-object BTF with ``pahole -J`` on the same object.

The comparison the encoder issue asks for: the same named types with the
same sizes and member counts, and the same counts per kind.  The one
difference objbtf makes on purpose is listed in the README: percpu
variables in ``.data..percpu..*`` subsections, which pahole run on a single
object cannot see (it only looks at the section named ``.data..percpu``).
"""
from __future__ import annotations

import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from objbtf.btf import Btf, Kind, parse_btf

PERCPU_SUBSECTION = '.data..percpu..'


def pahole_btf(obj: Path) -> Btf:
    """pahole 1.24's BTF for one object, as the kernel runs it (floats on)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / 'pahole.btf'
        subprocess.run(['pahole', '-J', '--btf_gen_floats', '--btf_encode_detached', str(out),
                        str(obj)], check=True, capture_output=True)
        return parse_btf(out.read_bytes())


def _named(btf: Btf) -> Counter:
    return Counter((t.kind.name, t.name, t.size, t.vlen) for _, t in btf.own()
                   if t.name and t.kind not in (Kind.VAR, Kind.DATASEC))


def _vars_by_section(btf: Btf) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for _, t in btf.own():
        if t.kind is Kind.DATASEC:
            out[t.name] = {btf[v.type].name for v in t.items}
    return out


def differences(ours: Btf, pahole: Btf) -> list[str]:
    """What differs beyond the documented percpu-subsection variables."""
    problems = []
    a, b = _named(ours), _named(pahole)
    if a != b:
        problems.append(f'named types only in objbtf: {sorted((a - b).elements())[:6]}; '
                        f'only in pahole: {sorted((b - a).elements())[:6]}')
    ka = Counter(t.kind.name for _, t in ours.own() if t.kind not in (Kind.VAR, Kind.DATASEC))
    kb = Counter(t.kind.name for _, t in pahole.own() if t.kind not in (Kind.VAR, Kind.DATASEC))
    if ka != kb:
        problems.append(f'kind counts differ: objbtf {dict(ka - kb)} pahole {dict(kb - ka)}')
    va, vb = _vars_by_section(ours), _vars_by_section(pahole)
    plain = {k: v for k, v in va.items() if not k.startswith(PERCPU_SUBSECTION)}
    if plain != vb:
        problems.append(f'variables differ outside percpu subsections: objbtf {plain} pahole {vb}')
    return problems


def extra_percpu_vars(ours: Btf) -> int:
    """How many VARs objbtf finds in percpu subsections (pahole finds none)."""
    return sum(len(v) for k, v in _vars_by_section(ours).items() if k.startswith(PERCPU_SUBSECTION))
