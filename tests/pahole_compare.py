"""Compare objbtf's per-object BTF with ``pahole -J`` on the same object.

The comparison the encoder issue asks for: the same named types with the
same sizes and member counts, and the same counts per kind.  Two
differences objbtf makes on purpose are listed in docs/pahole-differences.md:

- percpu variables in ``.data..percpu..*`` subsections, which pahole run on
  a single object cannot see (it only looks at the section named
  ``.data..percpu``);
- a FUNC for a function whose only symbols are compiler clones
  (``foo.constprop.0``, ``foo.isra.0``): pahole 1.31 and newer may keep
  it under the base name, pahole 1.24 (the oracle here) wants a symbol of
  that exact name.  The link decides on it (``linkdedup/functions.py``),
  and ``tests/test_link_kernel.py`` checks the result against the newest
  pahole.
"""
from __future__ import annotations

import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from btf_shapes import kind_counts
from objbtf.btf import Btf, Kind, parse_btf

PERCPU_SUBSECTION = '.data..percpu..'


def pahole_btf(obj: Path) -> Btf:
    """pahole 1.24's BTF for one object, as the kernel runs it (floats on)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / 'pahole.btf'
        subprocess.run(['pahole', '-J', '--btf_gen_floats', '--btf_encode_detached', str(out),
                        str(obj)], check=True, capture_output=True)
        return parse_btf(out.read_bytes())


def clone_only_functions(obj: Path) -> set[str]:
    """Names whose only function symbols in ``obj`` are clones: ``foo`` when
    there is a ``foo.constprop.0`` or ``foo.isra.0`` and no ``foo`` (the
    ``.cold`` and ``.part`` pieces are no functions).  Read with pyelftools,
    apart from objbtf's own ELF reader."""
    with open(obj, 'rb') as f:
        names = {s.name for sec in ELFFile(f).iter_sections()
                 if isinstance(sec, SymbolTableSection)
                 for s in sec.iter_symbols() if s['st_info']['type'] == 'STT_FUNC'}
    clones = {n.split('.', 1)[0] for n in names
              if '.' in n and '.cold' not in n and '.part' not in n}
    return clones - names


def _named(btf: Btf, skip: frozenset = frozenset((Kind.VAR, Kind.DATASEC))) -> Counter:
    return Counter((t.kind.name, t.name, t.size, t.vlen) for _, t in btf.own()
                   if t.name and t.kind not in skip)


def _vars_by_section(btf: Btf) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for _, t in btf.own():
        if t.kind is Kind.DATASEC:
            out[t.name] = {btf[v.type].name for v in t.items}
    return out


def differences(ours: Btf, pahole: Btf, obj: Path) -> list[str]:
    """What differs between objbtf's and pahole's BTF of ``obj`` beyond the
    two documented differences."""
    problems = []
    clones = clone_only_functions(obj)
    extra_funcs = {name for (kind, name, _, _) in _named(ours) if kind == 'FUNC'} & clones
    a = _named(ours) - Counter(k for k in _named(ours) if k[0] == 'FUNC' and k[1] in clones)
    b = _named(pahole)
    if a != b:
        problems.append(f'named types only in objbtf: {sorted((a - b).elements())[:6]}; '
                        f'only in pahole: {sorted((b - a).elements())[:6]}')
    ka, kb = kind_counts(ours), kind_counts(pahole)
    for counts in (ka, kb):        # compared by section below
        del counts['VAR'], counts['DATASEC']
    ka['FUNC'] -= len(extra_funcs)
    spare = ka['FUNC_PROTO'] - kb['FUNC_PROTO']
    if 0 <= spare <= len(extra_funcs):   # each such FUNC brings its FUNC_PROTO or shares one
        ka['FUNC_PROTO'] = kb['FUNC_PROTO']
    ka, kb = +ka, +kb
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
