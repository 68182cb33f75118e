"""Pass 11, stamp: a file that changes only when what modules take from vmlinux changes.

A module's split BTF depends on vmlinux's BTF: its type ids follow the
base's, its names may be the base's strings, its types refer to the
base's.  It does not depend on where vmlinux's variables landed, which
is all that changes in most relinks (an edit to a function body: the link
cache replays the last link with its DATASECs placed anew).  Stock Kbuild
redoes every module's BTF whenever vmlinux is newer; with objbtf a module
is linked with its BTF, so that would relink every module.

``objbtf link --types-stamp FILE`` writes a digest of the output BTF with
the DATASECs' sizes and entries left out (where the variables are, and in
which order), and of the one other fact a module link reads from vmlinux
(whether it marks kfunc sets, ``kfuncs.BtfIds.marks_sets``); it leaves
FILE as it is, its time included, when the digest is the one already
there.  Kbuild's modules then depend on FILE instead of vmlinux: a relink
that changed no type relinks no module, and the modules' BTF, made
against the same types and strings, fits the new vmlinux as it fitted the
old one.
"""
from __future__ import annotations

import sys
from array import array
from hashlib import blake2b

from objbtf.btf.header import BtfHeader
from objbtf.btf.kinds import KINDS, TYPE_HEAD_LEN, Kind
from objbtf.elf.writer import write_atomically

_DATASEC = int(Kind.DATASEC)
_HEAD = TYPE_HEAD_LEN // 4
# Each kind's record in 32-bit words, by kind number: the head and fixed
# part, and per entry (``KindInfo.extra_len``, unrolled for the walk below
# over every type of vmlinux).  The link checked its output: no kind here
# is unknown.
_FIXED_WORDS = [_HEAD + (k.fixed_len // 4 if k else 0) for k in KINDS.by_number]
_ENTRY_WORDS = [(k.extra_len(1) - k.extra_len(0)) // 4 if k else 0 for k in KINDS.by_number]


def types_digest(raw: bytes, marks_sets: bool | None) -> str:
    """The digest of the BTF blob ``raw`` as modules see it: every byte but
    the DATASECs' size words and entries, which are zeroed (a module's
    types never refer to a DATASEC)."""
    h = BtfHeader.read(raw)
    start = h.hdr_len + h.type_off
    words = array('I', raw[start:start + h.type_len])
    if h.order != sys.byteorder:
        words.byteswap()
    fixed, per_entry = _FIXED_WORDS, _ENTRY_WORDS
    w, end = 0, len(words)
    while w < end:
        info = words[w + 1]
        number = (info >> 24) & 0x1f
        after = w + fixed[number] + per_entry[number] * (info & 0xffff)
        if number == _DATASEC:
            words[w + 2] = 0
            words[w + _HEAD:after] = array('I', bytes(4 * (after - w - _HEAD)))
        w = after
    digest = blake2b(digest_size=32)
    digest.update(raw[:start])
    digest.update(words.tobytes())
    digest.update(raw[start + h.type_len:])
    digest.update(repr(marks_sets).encode())
    return digest.hexdigest()


def stamp_types(path: str, raw: bytes, marks_sets: bool | None) -> None:
    """Write ``path`` for the output BTF ``raw`` of a link of a vmlinux that
    ``marks_sets`` (``kfuncs.BtfIds.marks_sets``), unless it holds that digest
    already."""
    line = f'{types_digest(raw, marks_sets)}\n'.encode()
    try:
        with open(path, 'rb') as f:
            if f.read() == line:
                return
    except OSError:
        pass
    write_atomically(path, [line])
