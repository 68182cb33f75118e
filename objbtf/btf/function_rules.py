"""Which functions get a FUNC, by pahole 1.31's rules (btf_encoder.c), and
the newest pahole's for GCC's optimized clones.

pahole decides on the whole vmlinux.  objbtf decides in two steps: each
object's encoder emits a FUNC for every function definition whose name is
the *key* of one of the object's function symbols (the name before the
first '.', so ``foo.constprop.0`` and ``foo.isra.0`` give ``foo``; ``.cold``
and ``.part`` pieces are no functions), and records in its
``.BTF.objbtf`` chunk the facts only DWARF knows (``FACT_*`` below).  The
link, which has the final symbol table, applies the rest
(``linkdedup/functions.py``).  Both steps compare prototypes with
``prototype``.
"""
from __future__ import annotations

from .kinds import Kind
from .types import Btf, BtfType

#: A parameter arrives in another register than its place says (pahole's
#: unexpected_reg; not counted when a parameter is a struct, which may take
#: several registers).
FACT_UNEXPECTED_REG = 1
#: A packed struct is passed by value on the stack (uncertain_parm_loc).
FACT_UNCERTAIN_LOC = 2
#: The object's own definitions of the name have different prototypes.
FACT_INCONSISTENT = 4
#: The object's symbol of that name is weak: another object may override it.
FACT_WEAK = 8
#: A concrete instance lists its parameters in another order than the
#: function does (pahole's reordered_parm): GCC moves the parameters it
#: optimized out of a clone behind the others.
FACT_REORDERED = 16
#: The definition at a ``.constprop`` or ``.isra`` clone's symbol has a
#: parameter optimized out, so the clone's registers need not be the
#: prototype's (the newest pahole's "optimized parameters", dwarves fb8328e).
FACT_OPTIMIZED_CLONE = 32
#: Facts that make pahole leave the function out.
DROPPING_FACTS = (FACT_UNEXPECTED_REG | FACT_UNCERTAIN_LOC | FACT_INCONSISTENT | FACT_REORDERED
                  | FACT_OPTIMIZED_CLONE)

STT_FUNC, STB_WEAK = 2, 2
_SKIPPED = (Kind.CONST, Kind.VOLATILE, Kind.RESTRICT, Kind.TYPE_TAG)


def function_key(symbol: str) -> str | None:
    """The function a symbol is (the name before the first '.'), or None for
    the pieces that are no function: ``.cold`` (the cold part of a split
    function) and ``.part`` (a partly inlined body), anywhere after the
    first '.' as compilers combine them (``foo.isra.0.cold``)."""
    dot = symbol.find('.')
    if dot < 0:
        return symbol
    suffix = symbol[dot:]
    if '.cold' in suffix or '.part' in suffix:
        return None
    return symbol[:dot]


def is_optimized_clone(symbol: str) -> bool:
    """Whether a symbol is one of GCC's clones that may take other
    parameters than its function: ``.constprop`` or ``.isra`` after the
    first '.' (btf_encoder.c's str_contains_optimized_fn_suffix)."""
    dot = symbol.find('.')
    return dot >= 0 and ('.constprop' in symbol[dot:] or '.isra' in symbol[dot:])


def function_keys(symbols) -> tuple[set[str], set[str]]:
    """(keys of the function symbols, keys whose own symbol is weak)."""
    keys: set[str] = set()
    weak: set[str] = set()
    for s in symbols:
        if s.type != STT_FUNC or not s.name:
            continue
        key = function_key(s.name)
        if key is None:
            continue
        keys.add(key)
        if s.bind == STB_WEAK and key == s.name:
            weak.add(key)
    return keys, weak


def shallow(btf: Btf, type_id: int, depth: int = 0) -> str:
    """A type as pahole compares it across compile units: base types,
    typedefs and aggregates by name, const and volatile ignored (the same
    struct may not yet be one type before dedup)."""
    if type_id == 0:
        return 'void'
    t = btf[type_id]
    while t.kind in _SKIPPED and depth < 32:
        if t.type == 0:
            return 'void'
        t = btf[t.type]
        depth += 1
    k = t.kind
    if k is Kind.PTR:
        return '*' + (shallow(btf, t.type, depth + 1) if depth < 32 else '?')
    if k is Kind.ARRAY:
        return f'{shallow(btf, t.type, depth + 1)}[{t.nelems}]'
    if k is Kind.FUNC_PROTO:
        return 'fn'
    if k in (Kind.STRUCT, Kind.FWD):
        return ('union ' if t.fwd_union else 'struct ') + t.name
    if k is Kind.UNION:
        return 'union ' + t.name
    if k in (Kind.ENUM, Kind.ENUM64):
        return 'enum ' + t.name
    return t.name


def prototype(btf: Btf, proto: BtfType) -> tuple[str, ...]:
    """A FUNC_PROTO as pahole compares it: return and parameter types."""
    return (shallow(btf, proto.type),) + tuple(shallow(btf, p.type) for p in proto.items)


def encode_facts(facts: dict[str, int]) -> bytes:
    """The facts table of a chunk: for each name with facts, in name order,
    a flag byte and the name, NUL-terminated."""
    return b''.join(bytes((flags,)) + name.encode() + b'\0'
                    for name, flags in sorted(facts.items()) if flags)


def decode_facts(data: bytes) -> dict[str, int]:
    """The inverse of ``encode_facts``; ValueError if it is malformed."""
    out: dict[str, int] = {}
    pos = 0
    while pos < len(data):
        end = data.index(b'\0', pos + 1)
        out[data[pos + 1:end].decode()] = data[pos]
        pos = end + 1
    return out
