"""Pass 6, kfuncs: a ``bpf_kfunc`` DECL_TAG on the FUNC of every kfunc.

This is pahole's ``decl_tag_kfuncs`` (1.27 on, in its default set).  A FUNC
alone does not say whether BPF programs may call it; tools that read
vmlinux's BTF (recent bpftool, writing kfunc prototypes into vmlinux.h)
know a kfunc by this tag.

Where the kernel lists its kfuncs: ``.BTF_ids`` of the linked vmlinux.
``BTF_SET8_START(set)`` (``BTF_KFUNCS_START`` from 6.9 on) puts two labels,
``set`` and ``__BTF_ID__set8__set``, on a ``struct btf_id_set8`` header
(``u32 cnt; u32 flags``), and ``BTF_SET8_END`` sizes the second one over
header and pairs; each ``BTF_ID_FLAGS(func, NAME, FLAGS)`` in between adds
a local symbol ``__BTF_ID__func__NAME__<counter><line>`` on a pair
``{u32 id; u32 flags}``.  Before resolve_btfids runs, ``cnt`` and the ids
are 0, but the symbols, their sizes and the flag words are there.

pahole's rules, followed here:

- a kfunc set is a ``__BTF_ID__set8__*`` symbol of ``.BTF_ids`` whose
  header's flags have ``BTF_SET8_KFUNCS`` (1 << 0, kernel 6.9 on); its
  kfuncs are the ``__BTF_ID__func__*`` symbols inside the set's range;
- the tag is ``DECL_TAG 'bpf_kfunc'``, component_idx -1, on the kfunc's
  FUNC; a pair flag ``KF_FASTCALL`` (1 << 12, kernel 6.13) adds
  ``DECL_TAG 'bpf_fastcall'`` (pahole 1.28 on);
- a kfunc without a FUNC (the functions pass dropped it, or it is no
  function of vmlinux) gets no tag (pahole 1.30 on; 1.27 to 1.29 failed);
- with the ``attributes`` feature (pahole 1.30 on; Linux 7.x asks for it),
  the pointer a pair flag ``KF_ARENA_RET``, ``KF_ARENA_ARG1`` or
  ``KF_ARENA_ARG2`` (1 << 13 to 15, Linux 6.16) names, the return value or
  the first or second argument, points through a ``TYPE_TAG
  'address_space(1)'`` with kind_flag set (an attribute: BPF programs see
  arena memory there); the FUNC gets a FUNC_PROTO of its own with that
  pointer, as pahole encodes each kfunc's prototype anew.

Where objbtf differs: before 6.9, ``BTF_SET8_START`` left the header's
flags 0, so pahole tags nothing on such a kernel (the reference 6.1).  Yet
every set8 there is a kfunc set: set8 came in 6.0 for kfunc flags, 6.1's
ten are all registered with ``register_btf_kfunc_id_set``, and 6.9 marked
every kfunc set and made an unmarked one an error to register.  So on a
kernel that marks no set8, every set8 counts as a kfunc set, and its
functions get ``bpf_kfunc`` only: bit 12 of the pair flags meant nothing
before ``KF_FASTCALL``.  On a kernel that marks its sets, the file is read
as pahole reads it: an unmarked set8 there stays untagged.  A kfunc in
several sets gets the flags of all its pairs (pahole takes the last pair's).

Which kernel: vmlinux says it itself (some set8 marked or none).  A
module with a marked set8 is of a marking kernel too; one whose set8s are
all unmarked asks its base, vmlinux (``kernel_marks_sets``), and is read
as pahole reads it when the base cannot say (a raw BTF file).
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from objbtf.btf.kinds import Kind
from objbtf.btf.types import Btf, BtfType, Param
from objbtf.elf.errors import ElfError
from objbtf.elf.reader import ElfFile, Section, Symbol

BTF_IDS = '.BTF_ids'
SET8_PREFIX = '__BTF_ID__set8__'
FUNC_PREFIX = '__BTF_ID__func__'
SET8_KFUNCS = 1 << 0
KF_FASTCALL = 1 << 12
KF_ARENA_RET, KF_ARENA_ARG1, KF_ARENA_ARG2 = 1 << 13, 1 << 14, 1 << 15
KF_ARENA = KF_ARENA_RET | KF_ARENA_ARG1 | KF_ARENA_ARG2
KFUNC_TAG = 'bpf_kfunc'
FASTCALL_TAG = 'bpf_fastcall'
#: The attribute on the pointee of an arena pointer (pahole's BPF_ARENA_ATTR).
ARENA_ATTR = 'address_space(1)'


class Kfunc(NamedTuple):
    """What a kfunc's ``.BTF_ids`` pairs say of it."""
    tags: tuple[str, ...]       # the DECL_TAGs its FUNC gets
    arena: int = 0              # its KF_ARENA_* flags (a kernel that marks its sets)


#: kfunc name -> what its pairs say.
Kfuncs = dict[str, Kfunc]


class KfuncReport:
    """What the pass did: the kfuncs it tagged and those without a FUNC."""

    def __init__(self, tagged: list[str] | None = None, missing: list[str] | None = None):
        self.tagged = tagged or []
        self.missing = missing or []


class BtfIds:
    """A linked file's ``.BTF_ids``: its symbols, and its set8s with their
    flags, read once for the kfuncs and for ``marks_sets``."""

    def __init__(self, elf: ElfFile, sec: Section):
        self.words = _Words(elf, sec)
        self.symbols = elf.section_symbols(sec)
        self.sets = [(s, self.words.flags(s)) for s in self.symbols
                     if s.name.startswith(SET8_PREFIX)]

    @classmethod
    def read(cls, elf: ElfFile) -> BtfIds | None:
        """``elf``'s, or None without the section."""
        sec = elf.section_by_name(BTF_IDS)
        return None if sec is None else cls(elf, sec)

    def marks_sets(self) -> bool | None:
        """Whether the kernel marks its kfunc sets ``BTF_SET8_KFUNCS`` (6.9
        on); None if it cannot say, without a set8."""
        return any(flags & SET8_KFUNCS for _, flags in self.sets) if self.sets else None


def find_kfuncs(ids: BtfIds | None,
                base_marks: Callable[[], bool | None] | None = None) -> Kfuncs:
    """The kfuncs the ``.BTF_ids`` ``ids`` lists; {} without that section.
    ``base_marks`` (for a module): whether its kernel marks its kfunc sets,
    asked only when the module's own set8s do not say."""
    if ids is None:
        return {}
    marked = bool(ids.marks_sets())
    if ids.sets and not marked and base_marks is not None:
        marked = base_marks() is not False
    ranges = [(s.value, s.value + s.size) for s, flags in ids.sets
              if flags & SET8_KFUNCS or not marked]
    flags_of: dict[str, int] = {}
    for s in ids.symbols:
        name = func_name(s.name)
        if name is not None and any(start <= s.value < end for start, end in ranges):
            flags_of[name] = flags_of.get(name, 0) | ids.words.flags(s)
    return {name: Kfunc(_tags(flags, marked), flags & KF_ARENA if marked else 0)
            for name, flags in flags_of.items()}


def kernel_marks_sets(path: str) -> bool | None:
    """``BtfIds.marks_sets`` of the kernel ``path`` (vmlinux); None if it
    cannot say: no ELF file (a raw BTF base), no ``.BTF_ids`` or no set8
    in it."""
    try:
        with ElfFile.open(path) as elf:
            ids = BtfIds.read(elf)
            return None if ids is None else ids.marks_sets()
    except (OSError, ElfError):
        return None


def func_name(symbol: str) -> str | None:
    """NAME of a ``__BTF_ID__func__NAME__<digits>`` symbol, else None."""
    if not symbol.startswith(FUNC_PREFIX):
        return None
    name, sep, suffix = symbol[len(FUNC_PREFIX):].rpartition('__')
    return name if sep and name and suffix.isdigit() else None


def _tags(flags: int, marked: bool) -> tuple[str, ...]:
    if marked and flags & KF_FASTCALL:
        return (KFUNC_TAG, FASTCALL_TAG)
    return (KFUNC_TAG,)


def _arena_pointer(btf: Btf, ptr_id: int) -> int:
    """A new PTR to ``ARENA_ATTR`` on what ``ptr_id`` points to; ``ptr_id``
    itself when it is no pointer (pahole fails there; no kfunc does it)."""
    ptr = btf[ptr_id]
    if ptr.kind is not Kind.PTR:
        return ptr_id
    tag = btf.add(BtfType(Kind.TYPE_TAG, ARENA_ATTR, type=ptr.type, kflag=1))
    return btf.add(BtfType(Kind.PTR, type=tag))


def _mark_arena_pointers(btf: Btf, func: BtfType, arena: int) -> None:
    """``func``'s own FUNC_PROTO, with the pointers ``arena`` names
    through ``_arena_pointer``, in pahole's order: return value, first and
    second argument."""
    proto = btf[func.type]
    ret = _arena_pointer(btf, proto.type) if arena & KF_ARENA_RET else proto.type
    params = list(proto.items)
    for index, flag in enumerate((KF_ARENA_ARG1, KF_ARENA_ARG2)):
        if arena & flag and index < len(params):
            params[index] = Param(params[index].name, _arena_pointer(btf, params[index].type))
    func.type = btf.add(BtfType(Kind.FUNC_PROTO, type=ret, items=tuple(params)))


class _Words:
    """The ``.BTF_ids`` section, read as the 8-byte records its symbols label."""

    def __init__(self, elf: ElfFile, sec: Section):
        self.sec = sec
        self.data = elf.section_data(sec)
        self.order = elf.layout.prefix

    def flags(self, sym: Symbol) -> int:
        """The second u32 of the record at ``sym``: a set8 header's or a pair's flags."""
        at = sym.value - self.sec.addr
        if at < 0 or at + 8 > len(self.data):
            raise ElfError(f'{BTF_IDS}: symbol {sym.name} at {sym.value:#x} lies outside the '
                           f'section ({self.sec.addr:#x}, {len(self.data)} bytes)')
        return struct.unpack_from(self.order + 'I', self.data, at + 4)[0]


def tag_kfuncs(btf: Btf, kfuncs: Kfuncs, attributes: bool = False) -> KfuncReport:
    """Add the DECL_TAGs of ``kfuncs`` to every FUNC of their names, and with
    ``attributes`` their arena attributes; the functions pass has run, so a
    dropped function has no FUNC left to tag."""
    func = Kind.FUNC
    funcs = [(type_id, t.name) for type_id, t in btf.own() if t.kind is func and t.name in kfuncs]
    for type_id, name in funcs:
        if attributes and kfuncs[name].arena:
            _mark_arena_pointers(btf, btf[type_id], kfuncs[name].arena)
        for tag in kfuncs[name].tags:
            btf.add(BtfType(Kind.DECL_TAG, tag, type=type_id, component_idx=-1))
    tagged = sorted({name for _, name in funcs})
    return KfuncReport(tagged, sorted(set(kfuncs) - set(tagged)))
