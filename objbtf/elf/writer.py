"""Rewrite a relocatable object with sections replaced, added or removed, atomically.

Layout: every section that is not rewritten keeps its bytes and its file
offset (the file is copied up to the end of the last such section); rewritten
and new sections follow in a fixed order (the section name table first, then
by index), then the section header table. So rewriting an object again with
the same sections gives the same bytes, and repeated rewrites do not grow the
file; the old bytes of a rewritten section name table stay behind as an
unreferenced hole.  When another rewritten section lay among the kept ones
(the compiler's own .BTF, which objbtf replaces), the kept sections are laid
out again one after the other instead, so that none of the old bytes stay.

Section indices never change except by appending, so symbols and relocations
that name sections stay valid.
"""
from __future__ import annotations

import errno
import os
import stat
import struct
from collections import namedtuple
from collections.abc import Iterable, Mapping, Sequence

from .consts import (ET_REL, SHF_COMPRESSED, SHF_INFO_LINK, SHN_LORESERVE, SHN_XINDEX,
                     SHT_NOBITS, SHT_NULL, SHT_PROGBITS, SHT_REL, SHT_RELA, SHT_STRTAB,
                     STT_SECTION)
from ..regular_files import file_identity
from .errors import ElfError, FileChanged
from .reader import ElfFile, Layout, Section
from .relocs import Arch, arch_for


class NewSection(namedtuple('NewSection', 'name data type flags addralign entsize link info',
                            defaults=(SHT_PROGBITS, 0, 1, 0, None, None))):
    """A section to add, or to replace the first section of the same name.

    link: None (0), 'symtab' (the symbol table's index) or an index.
    info: None (0), an int, or the name of a section (its index).
    """
    __slots__ = ()


class Reloc(namedtuple('Reloc', 'offset symbol_index type addend', defaults=(0,))):
    """One relocation to emit against the section it is listed under."""
    __slots__ = ()


_UINT = {2: 'H', 4: 'I', 8: 'Q'}   # struct codes by field width


class _Header:
    """A mutable section header."""
    __slots__ = ('name_offset', 'type', 'flags', 'addr', 'offset', 'size', 'link',
                 'info', 'addralign', 'entsize')

    def __init__(self, name_offset: int, type: int, flags: int, addr: int, offset: int,
                 size: int, link: int, info: int, addralign: int, entsize: int) -> None:
        self.name_offset, self.type, self.flags, self.addr, self.offset = \
            name_offset, type, flags, addr, offset
        self.size, self.link, self.info, self.addralign, self.entsize = \
            size, link, info, addralign, entsize

    @classmethod
    def of(cls, sec: Section) -> _Header:
        return cls(sec.name_offset, sec.type, sec.flags, sec.addr, sec.offset, sec.size,
                   sec.link, sec.info, sec.addralign, sec.entsize)

    def pack(self, layout: Layout) -> bytes:
        return layout.shdr.pack(self.name_offset, self.type, self.flags, self.addr,
                                self.offset, self.size, self.link, self.info,
                                self.addralign, self.entsize)


class _Plan:
    """The new section table: headers, indices by name, and the new contents."""

    def __init__(self, elf: ElfFile) -> None:
        self.elf = elf
        self.headers = [_Header.of(s) for s in elf.sections]
        self.index: dict[str, int] = {}
        for sec in elf.sections:
            self.index.setdefault(sec.name, sec.index)
        self.payload: dict[int, bytes] = {}
        self._names: bytearray | None = None    # the name table, once it grows

    def name_offset(self, name: str) -> int:
        """Offset of ``name`` in the section name table, appending it if absent
        (any occurrence of name + NUL will do, also as a suffix of a longer name)."""
        shstrndx = self.elf.shstrndx
        if shstrndx == 0:
            raise ElfError('the object has no section name table')
        table: bytes | bytearray | None = self._names
        if table is None:
            table = self.elf.section_data(self.elf.sections[shstrndx])
        key = name.encode('utf-8', 'surrogateescape') + b'\0'
        pos = table.find(key)
        if pos >= 0:
            return pos
        if self._names is None:
            self._names = bytearray(table)
        pos = len(self._names)
        self._names += key
        self.payload[shstrndx] = bytes(self._names)
        return pos

    def put(self, name: str, data: bytes) -> _Header:
        """The header of section ``name`` (appended if new) with ``data`` as contents."""
        idx = self.index.get(name)
        if idx is None:
            idx = self.index[name] = len(self.headers)
            self.headers.append(_Header(self.name_offset(name), SHT_PROGBITS,
                                        0, 0, 0, 0, 0, 0, 1, 0))
        self.payload[idx] = data
        return self.headers[idx]

    def section_index(self, name: str, why: str) -> int:
        idx = self.index.get(name)
        if idx is None:
            raise ElfError(f'{why}: there is no section {name}')
        return idx

    def symtab_index(self) -> int:
        symtab = self.elf.symtab()
        if symtab is None:
            raise ElfError('the object has no symbol table')
        return symtab.index


def rewrite_object(path: str, elf: ElfFile, sections: Sequence[NewSection],
                   relocs: Mapping[str, Sequence[Reloc]] | None = None,
                   emptied: Iterable[int] = ()) -> None:
    """Replace or add ``sections`` in the relocatable object at ``path``
    (already read as ``elf``), with relocation sections built from ``relocs``
    (target section name -> relocations), and empty the sections whose
    indices are ``emptied`` (no bytes, not compressed, index kept) with
    their relocation sections.

    A replaced section keeps its index. Its old relocation section, if any,
    is replaced by the new relocations or emptied (size 0, index kept).
    For REL ABIs the addends are written into the target's data, so targets
    of relocations must then be among ``sections``. The file is replaced
    atomically; on error it is left untouched. ``elf`` is stale afterwards.
    """
    _check_rewritable(path, elf)
    relocs = relocs or {}
    plan = _Plan(elf)
    names = [s.name for s in sections]
    if len(set(names)) != len(names):
        raise ElfError('the same section is given twice')
    _check_unambiguous(elf, [*names, *(f'{r}{t}' for t in relocs for r in ('.rela', '.rel'))])
    for new in sections:
        _check_new(elf, new)
        hdr = plan.put(new.name, bytes(new.data))
        hdr.type, hdr.flags, hdr.addralign, hdr.entsize = \
            new.type, new.flags, new.addralign, new.entsize
    for new in sections:
        hdr = plan.headers[plan.index[new.name]]
        hdr.link, hdr.info = _resolve_link(plan, new), _resolve_info(plan, new)
    _plan_relocs(plan, set(names), list(dict.fromkeys([*names, *relocs])), relocs)
    for idx in emptied:
        _empty(plan, idx)
    _emit(path, elf, plan.headers, plan.payload)


def _empty(plan: _Plan, idx: int) -> None:
    """Section ``idx`` and its relocation section keep their headers, with
    no bytes; an emptied section is not compressed (a compressed one
    starts with a header saying how long it was)."""
    rel = plan.elf.reloc_section_for(idx)
    for i in (idx,) if rel is None else (idx, rel.index):
        plan.payload[i] = b''
        plan.headers[i].flags &= ~SHF_COMPRESSED


def _check_rewritable(path: str, elf: ElfFile) -> None:
    if elf.e_type != ET_REL:
        raise ElfError(f'not a relocatable object (e_type {elf.e_type})')
    if elf.e_phnum:
        raise ElfError('a relocatable object with program headers is not supported')
    if not elf.sections:
        raise ElfError('the object has no section headers')
    _check_unchanged(path, elf)


def _check_unchanged(path: str, elf: ElfFile) -> None:
    """FileChanged if ``path`` is no longer the file ``elf`` was read from
    as it was then (another writer's new file, or the same one rewritten)."""
    st = os.stat(path)
    if st.st_size != len(elf.data) or elf.identity not in (None, file_identity(st)):
        raise FileChanged('the file changed since it was read')


def _check_unambiguous(elf: ElfFile, names: list[str]) -> None:
    """ElfError if the object has two sections of a name to be written: which
    one is the section to replace is then anyone's guess (libbpf reads the
    last .BTF, a rewrite would replace the first)."""
    wanted = set(names)
    found: dict[str, list[int]] = {}
    for sec in elf.sections:
        if sec.name in wanted:
            found.setdefault(sec.name, []).append(sec.index)
    for name, indexes in found.items():
        if len(indexes) > 1:
            raise ElfError(f'sections {" and ".join(map(str, indexes))} are both named {name}')


def _check_new(elf: ElfFile, new: NewSection) -> None:
    if not new.name or '\0' in new.name:
        raise ElfError(f'bad section name {new.name!r}')
    existing = elf.section_by_name(new.name)
    if existing is not None and existing.index == elf.shstrndx:
        raise ElfError(f'cannot replace the section name table {new.name}')
    if new.addralign & (new.addralign - 1):
        raise ElfError(f'section {new.name}: alignment {new.addralign} is not a power of two')


def _resolve_link(plan: _Plan, new: NewSection) -> int:
    if new.link is None:
        return 0
    if new.link == 'symtab':
        return plan.symtab_index()
    if not isinstance(new.link, int) or not 0 <= new.link < len(plan.headers):
        raise ElfError(f'section {new.name}: bad link {new.link!r}')
    return new.link


def _resolve_info(plan: _Plan, new: NewSection) -> int:
    if isinstance(new.info, str):
        return plan.section_index(new.info, f'info of section {new.name}')
    return new.info or 0


def _plan_relocs(plan: _Plan, explicit: set[str], targets: list[str],
                 relocs: Mapping[str, Sequence[Reloc]]) -> None:
    """Replace, add or empty the relocation section of each target."""
    elf = plan.elf
    arch = arch_for(elf) if any(relocs.values()) else None
    for target in targets:
        entries = relocs.get(target) or ()
        tidx = plan.section_index(target, 'relocations')
        old = elf.reloc_section_for(tidx) if tidx < len(elf.sections) else None
        if old is not None and old.name in explicit:
            if entries:
                raise ElfError(f'{old.name} is given both as a section and as relocations')
            continue
        if not entries:
            if old is not None:
                plan.payload[old.index] = b''
            continue
        assert arch is not None
        name = old.name if old is not None else arch.reloc_section_name(target)
        if name in explicit:
            raise ElfError(f'{name} is given both as a section and as relocations')
        data = _encode_relocs(plan, arch, tidx, target, entries)
        hdr = plan.put(name, data)
        layout = elf.layout
        hdr.type = SHT_RELA if arch.rela else SHT_REL
        hdr.flags, hdr.addralign = SHF_INFO_LINK, layout.word
        hdr.entsize = (layout.rela if arch.rela else layout.rel).size
        hdr.link, hdr.info = plan.symtab_index(), tidx


def _target_size(plan: _Plan, tidx: int) -> int:
    if tidx in plan.payload:
        return len(plan.payload[tidx])
    sec = plan.elf.sections[tidx]
    return sec.size if sec.type == SHT_NOBITS else len(plan.elf.section_data(sec))


def _encode_relocs(plan: _Plan, arch: Arch, tidx: int, target: str,
                   entries: Sequence[Reloc]) -> bytes:
    """The bytes of the relocation section; for REL, the addends are patched
    into the target's new data in plan.payload."""
    elf, layout = plan.elf, plan.elf.layout
    nsyms = len(elf.symbols())
    size = _target_size(plan, tidx)
    if not arch.rela and tidx not in plan.payload:
        raise ElfError(f'{target}: REL relocations put their addends in the section '
                       f'data, so the section must be rewritten too')
    buf = bytearray(plan.payload[tidx]) if not arch.rela else None
    st = layout.rela if arch.rela else layout.rel
    out = []
    for r in entries:
        rtype = arch.types.get(r.type)
        where = f'relocation at 0x{r.offset:x} of {target}'
        if rtype is None:
            raise ElfError(f'{where}: unsupported {arch.type_name(r.type)}')
        if not 0 <= r.symbol_index < nsyms:
            raise ElfError(f'{where}: symbol {r.symbol_index} out of range '
                           f'(the symbol table has {nsyms})')
        if r.offset < 0 or r.offset + rtype.width > size:
            raise ElfError(f'{where}: outside the {size}-byte section')
        info = r.symbol_index << layout.sym_shift | r.type
        if buf is None:
            bits = 8 * layout.word                # r_addend is signed
            _check_addend(r.addend, -(1 << bits - 1), 1 << bits - 1, where)
            out.append(st.pack(r.offset, info, r.addend))
        else:
            bits = 8 * rtype.width                # a signed or an unsigned field
            _check_addend(r.addend, -(1 << bits - 1) if bits else 0, 1 << bits, where)
            if bits:
                struct.pack_into(layout.prefix + _UINT[rtype.width], buf, r.offset,
                                 r.addend & ((1 << bits) - 1))
            out.append(st.pack(r.offset, info))
    if buf is not None:
        plan.payload[tidx] = bytes(buf)
    return b''.join(out)


def _check_addend(addend: int, low: int, high: int, where: str) -> None:
    if not low <= addend < high:
        raise ElfError(f'{where}: addend {addend} does not fit in [{low}, {high})')


def section_symbol_index(elf: ElfFile, section_index: int) -> int | None:
    """Index of an STT_SECTION symbol of section ``section_index``, or None.

    Adding one is not supported: local symbols must precede global ones, so a
    new section symbol would renumber every global symbol and with it every
    relocation in the object. Compilers emit section symbols for the
    sections that relocations refer to, which is what BTF needs.
    """
    return next((s.index for s in elf.symbols()
                 if s.type == STT_SECTION and s.shndx == section_index), None)


def remove_sections(path: str, elf: ElfFile, names: Iterable[str]) -> bool:
    """Remove the named sections and their relocation sections; False if none exist.

    Only sections at the end of the section table can go (as rewrite_object
    appends them), since removing others would renumber sections; ElfError
    if another section or a symbol refers to a removed one.
    """
    _check_rewritable(path, elf)
    doomed: set[int] = set()
    for name in names:
        sec = elf.section_by_name(name)
        if sec is not None:
            rel = elf.reloc_section_for(sec.index)
            doomed.update([sec.index] if rel is None else [sec.index, rel.index])
    if not doomed:
        return False
    keep = len(elf.sections) - len(doomed)
    if doomed != set(range(keep, len(elf.sections))):
        raise ElfError('only sections at the end of the section table can be removed')
    _check_unreferenced(elf, keep)
    _emit(path, elf, [_Header.of(s) for s in elf.sections[:keep]], {})
    return True


def _check_unreferenced(elf: ElfFile, keep: int) -> None:
    """No kept section or symbol may refer to a section index >= keep."""
    if elf.shstrndx >= keep:
        raise ElfError('cannot remove the section name table')
    for sec in elf.sections[:keep]:
        info_is_index = sec.type in (SHT_REL, SHT_RELA) or sec.flags & SHF_INFO_LINK
        if sec.link >= keep or (info_is_index and sec.info >= keep):
            raise ElfError(f'section {sec.name} refers to a removed section')
    if any(keep <= s.shndx < SHN_LORESERVE for s in elf.symbols()):
        raise ElfError('a symbol is defined in a removed section')


def _emit(path: str, elf: ElfFile, headers: list[_Header], payload: dict[int, bytes]) -> None:
    """Lay out and write the new file (see the module docstring)."""
    layout = elf.layout
    ehdr_size = layout.ehdr.size
    kept = [h for i, h in enumerate(headers)
            if i not in payload and h.type not in (SHT_NULL, SHT_NOBITS)]
    fixed_end = max([ehdr_size] + [h.offset + h.size for h in kept])
    packed = any(i != elf.shstrndx and i < len(elf.sections) and elf.sections[i].size
                 and elf.sections[i].type != SHT_NOBITS and elf.sections[i].offset < fixed_end
                 for i in payload)
    with memoryview(elf.data) as view:
        if packed:
            head, pos = _packed(view, kept, ehdr_size)
        else:
            head, pos = [view[ehdr_size:fixed_end]], fixed_end
        try:
            _write(path, elf, headers, payload, head, pos)
        finally:
            for chunk in head:
                chunk.release()


def _write(path: str, elf: ElfFile, headers: list[_Header], payload: dict[int, bytes],
           head: list[memoryview], pos: int) -> None:
    """Write the header, ``head`` (the kept sections' bytes, up to ``pos``),
    the new sections and the section header table."""
    layout = elf.layout
    tail: list[bytes] = []
    shstrndx = elf.shstrndx
    order = sorted(payload, key=lambda i: (i != shstrndx, i))
    for idx in order:
        hdr, data = headers[idx], payload[idx]
        pad = -pos % max(hdr.addralign, 1)
        hdr.offset, hdr.size = pos + pad, len(data)
        if hdr.type != SHT_NOBITS:
            tail += [b'\0' * pad, data]
            pos += pad + len(data)
    pad = -pos % layout.word
    shoff = pos + pad
    count = len(headers)
    headers[0].size = count if count >= SHN_LORESERVE else 0
    headers[0].link = shstrndx if shstrndx >= SHN_LORESERVE else 0
    fields = list(layout.ehdr.unpack_from(elf.data))
    fields[6] = shoff
    fields[12] = count if count < SHN_LORESERVE else 0
    fields[13] = shstrndx if shstrndx < SHN_LORESERVE else SHN_XINDEX
    table = b''.join(h.pack(layout) for h in headers)
    write_atomically(path, [layout.ehdr.pack(*fields), *head, *tail, b'\0' * pad, table])


def _packed(view: memoryview, kept: list[_Header], start: int) -> tuple[list[memoryview], int]:
    """The kept sections' bytes laid out from ``start`` in their order in the
    file, each at its alignment (their headers get the new offsets), and
    where the next byte goes."""
    chunks: list[memoryview] = []
    pos = start
    for hdr in sorted(kept, key=lambda h: h.offset):
        pad = -pos % max(hdr.addralign, 1)
        chunks += [memoryview(b'\0' * pad), view[hdr.offset:hdr.offset + hdr.size]]
        hdr.offset = pos + pad
        pos += pad + hdr.size
    return chunks, pos


TEMP_PREFIX, TEMP_SUFFIX = '.objbtf-', '.tmp'
#: The largest pid Linux hands out (PID_MAX_LIMIT): a temporary's pid field
#: above it was not written by objbtf.
PID_MAX = 1 << 22
#: Where a descriptor of this process has a name that linkat(2) follows.
PROC_FD = '/proc/self/fd'
#: OBJBTF_FSYNC=1 (any value but 0): each atomic write reaches the disk
#: before its rename, and the rename after it (fsync of the file, then of
#: its directory), so that a power loss leaves the old file or the new one
#: on any file system.  Off by default: a kernel build writes thousands of
#: objects it can write again, and an fsync each would cost more than their
#: encode on a disk (and ext4's default, auto_da_alloc, already starts
#: writing a file renamed over another before the rename commits).
FSYNC_VARIABLE = 'OBJBTF_FSYNC'


def _temp_name(base: str, attempt: int) -> str:
    """``.objbtf-BASE.PID.N.tmp``: the pid tells a later run whether its
    writer is gone (see ``remove_stale_temporaries``)."""
    return f'{TEMP_PREFIX}{base}.{os.getpid()}.{attempt}{TEMP_SUFFIX}'


def remove_stale_temporaries(dir_fd: int) -> None:
    """Remove the temporary files that killed objbtf processes left in the
    directory ``dir_fd``: those whose writer's pid no longer runs.  A process does it at its first write there (``_cleaned``).
    A name whose pid field is not a pid is left alone.

    Writing goes to an unnamed O_TMPFILE file, which a killed process
    cannot leave behind; it gets a name only for the instant before the
    rename (and on file systems without O_TMPFILE, or without /proc, for
    the whole write).
    """
    try:
        entries = [e.name for e in os.scandir(dir_fd)
                   if e.name.startswith(TEMP_PREFIX) and e.name.endswith(TEMP_SUFFIX)]
    except OSError:
        return
    for name in entries:
        parts = name[:-len(TEMP_SUFFIX)].rsplit('.', 2)
        if (len(parts) != 3 or not (parts[1].isascii() and parts[1].isdigit())
                or not 0 < int(parts[1]) < PID_MAX or _alive(int(parts[1]))):
            continue
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:           # EPERM: it runs, as another user
        return True
    return True


def _open_temporary(dir_fd: int, base: str) -> tuple[int, str | None]:
    """(fd, name): an unnamed file in the directory ``dir_fd`` (name None)
    where the file system has O_TMPFILE and /proc is there to name it, else
    a new file opened exclusively.

    Not the tempfile module: importing it (and random with it) costs 10 ms on
    a path that runs once per object of a kernel build.
    """
    if _proc_fd_usable():
        try:
            return os.open('.', os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600,
                           dir_fd=dir_fd), None
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    for attempt in range(100):
        tmp = _temp_name(base, attempt)
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                           0o600, dir_fd=dir_fd), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f'no free temporary name next to {base}')


#: Whether PROC_FD is there (a chroot or a minimal container may have no
#: /proc): asked once a process.
_proc_fd: bool | None = None


def _proc_fd_usable() -> bool:
    global _proc_fd
    if _proc_fd is None:
        _proc_fd = os.path.isdir(PROC_FD)
    return _proc_fd


def _name_temporary(fd: int, dir_fd: int, base: str) -> str:
    """Give the unnamed file ``fd`` a temporary name in ``dir_fd``, for the rename."""
    # linkat(AT_SYMLINK_FOLLOW) on /proc/self/fd/N, as open(2) documents;
    # os.link calls plain link(2) unless a directory fd is given.
    fds = os.open(PROC_FD, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for attempt in range(100):
            tmp = _temp_name(base, attempt)
            try:
                os.link(str(fd), tmp, src_dir_fd=fds, dst_dir_fd=dir_fd, follow_symlinks=True)
                return tmp
            except FileExistsError:
                continue
    finally:
        os.close(fds)
    raise FileExistsError(f'no free temporary name next to {base}')


def write_atomically(path: str, chunks: list[bytes | memoryview]) -> None:
    """Write a temporary file next to ``path`` with its mode (a new file gets
    the usual 0666 less the umask), then rename it over.  A process killed
    at any point leaves either the old file or the new one, and nothing
    that the next write in the directory does not remove.  An OSError
    names ``path``, whatever failed (the directory, the temporary file, a
    write without a name: a full disk).  A symbolic link ``path`` is
    written through (its target is replaced)."""
    try:
        directory, base = os.path.split(os.path.realpath(path))
        dir_fd = os.open(directory or '.', os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if directory not in _cleaned:
                remove_stale_temporaries(dir_fd)
                _cleaned.add(directory)
            write_atomically_at(dir_fd, base, chunks)
        finally:
            os.close(dir_fd)
    except OSError as err:
        if err.filename == path:
            raise
        raise OSError(err.errno, err.strerror or str(err), path) from None


#: The directories this process has rid of dead writers' temporaries: once
#: each is enough.  A resident worker writes hundreds of objects into a few
#: dozen directories, and scanning one of a kernel tree takes 0.05 to 0.2 ms;
#: what a writer killed later leaves is removed by the next process.
_cleaned: set[str] = set()


def write_atomically_at(dir_fd: int, name: str, chunks: list[bytes | memoryview]) -> None:
    """``write_atomically`` of the file ``name`` in the directory ``dir_fd``,
    never following a symbolic link: one planted at ``name`` is replaced,
    not written through (the encode cache's entries).  Raises OSError."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    mode = stat.S_IMODE(st.st_mode) if st and stat.S_ISREG(st.st_mode) else 0o666 & ~_umask()
    durable = os.environ.get(FSYNC_VARIABLE, '0') not in ('', '0')
    fd, tmp = _open_temporary(dir_fd, name)
    try:
        with os.fdopen(fd, 'wb') as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fchmod(f.fileno(), mode)
            if durable:
                os.fsync(f.fileno())
            if tmp is None:
                tmp = _name_temporary(f.fileno(), dir_fd, name)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        if durable:
            os.fsync(dir_fd)
    except BaseException:
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def new_object(like: ElfFile, sections: Sequence[NewSection]) -> bytes:
    """A relocatable object holding only ``sections``, for ``like``'s machine.

    The kind of file ``objcopy --only-section`` makes: the link step writes
    the final BTF this way for the kernel to link in (``.btf.vmlinux.bin.o``).
    """
    layout = like.layout
    word = layout.word
    names = b'\0' + b''.join(s.name.encode() + b'\0' for s in sections) + b'.shstrtab\0'
    body = bytearray()
    headers = [_Header(0, SHT_NULL, 0, 0, 0, 0, 0, 0, 0, 0)]
    pos = layout.ehdr.size
    name_at = 1
    for s in sections:
        pad = -pos % max(s.addralign, 1)
        body += b'\0' * pad
        pos += pad
        headers.append(_Header(name_at, s.type, s.flags, 0, pos, len(s.data), 0, 0,
                               s.addralign, s.entsize))
        body += s.data
        pos += len(s.data)
        name_at += len(s.name) + 1
    headers.append(_Header(name_at, SHT_STRTAB, 0, 0, pos, len(names), 0, 0, 1, 0))
    body += names
    pos += len(names)
    pad = -pos % word
    body += b'\0' * pad
    shoff = pos + pad
    ident = like.data[:16]
    ehdr = layout.ehdr.pack(ident, ET_REL, like.machine, 1, 0, 0, shoff, 0,
                            layout.ehdr.size, 0, 0, layout.shdr.size, len(headers),
                            len(headers) - 1)
    return ehdr + bytes(body) + b''.join(h.pack(layout) for h in headers)


def replace_in_place(path: str, elf: ElfFile, name: str, data: bytes) -> None:
    """Overwrite section ``name`` of a linked file with smaller contents.

    Offsets and segments stay as they are; the section header's size
    shrinks and the rest of the old contents is zeroed.  The link step uses
    this to put the final BTF where the per-object BTF was.
    """
    _check_unchanged(path, elf)
    sec = elf.section_by_name(name)
    if sec is None:
        raise ElfError(f'no {name} section to replace')
    if len(data) > sec.size:
        raise ElfError(f'new {name} ({len(data)} bytes) is larger than the old ({sec.size})')
    headers = [_Header.of(s) for s in elf.sections]
    headers[sec.index].size = len(data)
    table = b''.join(h.pack(elf.layout) for h in headers)
    buf = bytearray(elf.data)
    buf[sec.offset:sec.offset + sec.size] = data + bytes(sec.size - len(data))
    buf[elf.e_shoff:elf.e_shoff + len(table)] = table
    write_atomically(path, [bytes(buf)])
