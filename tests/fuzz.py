"""A seeded, bounded fuzzer for every objbtf command (in the spirit of
cilium/ebpf's fuzz_test.go): mutate real inputs, run a command on each, and
report what breaks objbtf's promises.

A finding is any of:
- a Python traceback (the command must print one line and exit 1);
- a hang (no result within ``TIMEOUT`` seconds);
- an exit status other than 0 or 1 (2 is for usage mistakes, and the
  fuzzer's command lines are always well formed);
- a failed command that modified its input, or an error message that is
  not one line naming the input;
- a command that exited 0 having written BTF that ``objbtf check``'s rules
  reject (encode's object, link's output), or that bpftool cannot read
  (when installed).

``link`` gets linked files (``ld -r`` and executable links of encoded
objects, some without their chunks), mutated anywhere, or where the link
trusts what it reads: a
chunk's hash copied over another (the robustness issue's silently wrong
link), offsets and flags.  The chunks' checksums catch those; so that the
fuzzer also reaches the merge behind them, some cases then make every
chunk's checksum match again ("re-signed").  The link trusts a re-signed
chunk by design (the checksum guards against damage, not forgery, and
every blob objbtf encode writes was checked), so such a case may write
BTF that the kernel's rules reject; every other promise holds for it.

``base`` is a module's link (``link --base``) on a mutated base: vmlinux's
BTF as raw BTF or as the object ``link -o base.o`` writes, half the time
with ``--base-index``, whose index file is missing or was made for the
base before it was mutated.  The module is an intact linked file.  The
link trusts a base as the link that wrote it checked it, so its output is
judged only when the mutated base still follows the kernel's rules; a
failure must be one line naming the base.

Each case runs in a forked child of this process, so a case costs a fork,
not an interpreter start, and one case's state cannot leak into the next.

The corpus is built from the test fixtures with real compilers (gcc and
clang, DWARF 4 and 5, compressed DWARF, a big-endian cross compiler when
installed), objects encoded by objbtf, ``ld -r`` links of encoded objects and
raw BTF.  Run it longer before a release:

    python3 tests/fuzz.py --cases 10000 --seed 1          # every command
    python3 tests/fuzz.py --cases 10000 --command link    # one command

The CI run (tests/test_fuzz.py) uses a few thousand cases (a few hundred
for link, whose cases cost more).
"""
from __future__ import annotations

import argparse
import os
import random
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

#: Every case in a forked child of this process, not in a resident server.
os.environ['OBJBTF_RESIDENT'] = '0'
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
C_FIXTURES = HERE / 'fixtures' / 'c'
COMMANDS = ('encode', 'check', 'dump', 'link', 'base')
#: Seconds before a case counts as a hang.  A real hang (a FIFO) never ends;
#: the limit leaves room for a slow case on a machine busy with kernel builds.
TIMEOUT = 60.0
#: The exit status a child uses for an exception that escaped objbtf.
TRACEBACK = 99
#: How a warning starts: a line of its own, that may precede an error's.
WARNING = 'objbtf link: warning: '

#: Byte patterns that break parsers more often than random bytes do.
INTERESTING = (0, 1, 0x7f, 0x80, 0xff, 0xffff, 0x7fffffff, 0x80000000, 0xffffffff)


@dataclass
class Seed:
    """One input of the corpus: a file and what a command may take it as."""
    name: str
    data: bytes
    kind: str          # 'object' (not yet encoded), 'encoded', 'linked' or 'raw'


@dataclass
class Finding:
    case: int
    command: str
    seed: str
    problem: str
    detail: str


# --- the corpus ---------------------------------------------------------------

COMPILES = (
    ('gcc', '-gdwarf-5'), ('gcc', '-gdwarf-4'), ('gcc', '-gz'), ('gcc', '-gz=zlib-gnu'),
    ('gcc', '-gbtf'),                           # GCC's own BTF beside DWARF
    ('gcc', '-m32'),                            # i386: REL relocations, 4-byte pointers
    ('clang', '-gdwarf-5'), ('clang', '-gdwarf-4'),
    ('s390x-linux-gnu-gcc', '-gdwarf-5'),      # big-endian, when installed
)

#: Fixtures a compile cannot build: i386 has no __int128 (kinds.c).
UNBUILDABLE = {'-m32': {'kinds.c'}}


def _linker(compiler: str, flag: str) -> list[str]:
    """The ld command line for the objects of one compile."""
    if compiler == 's390x-linux-gnu-gcc':
        return ['s390x-linux-gnu-ld']
    return ['ld', '-m', 'elf_i386'] if flag == '-m32' else ['ld']


def _run(*cmd: str | os.PathLike, cwd: Path | None = None) -> None:
    subprocess.run([str(c) for c in cmd], check=True, capture_output=True, cwd=cwd)


def build_corpus(work: Path) -> list[Seed]:
    """Compile, encode and link the fixtures; every file becomes a seed."""
    seeds: list[Seed] = []
    sources = sorted(C_FIXTURES.glob('*.c'))
    for compiler, flag in COMPILES:
        if shutil.which(compiler) is None:
            continue
        objs = []
        for src in sources:
            if src.name in UNBUILDABLE.get(flag, ()):
                continue
            obj = work / f'{src.stem}.{compiler}{flag}.o'
            _run(compiler, '-g', '-O2', '-c', flag, '-o', obj, src)
            seeds.append(Seed(obj.name, obj.read_bytes(), 'object'))
            enc = work / f'enc.{obj.name}'
            shutil.copy(obj, enc)
            _run(sys.executable, '-m', 'objbtf', 'encode', '-q', enc.name, cwd=work)
            seeds.append(Seed(enc.name, enc.read_bytes(), 'encoded'))
            objs.append(enc)
        ld = _linker(compiler, flag)
        if shutil.which(ld[0]) and len(objs) > 1:
            linked = work / f'linked.{compiler}{flag}.o'
            # counter_a.c and counter_b.c define the same static, the point of them
            _run(*ld, '-r', '-o', linked, *objs)
            seeds.append(Seed(linked.name, linked.read_bytes(), 'linked'))
            raw = work / f'raw.{compiler}{flag}.btf'
            _run(sys.executable, '-m', 'objbtf', 'link', '-q', '-o', raw, linked)
            seeds.append(Seed(raw.name, raw.read_bytes(), 'raw'))
            base = work / f'base.{compiler}{flag}.o'
            _run(sys.executable, '-m', 'objbtf', 'link', '-q', '-o', base, linked)
            seeds.append(Seed(base.name, base.read_bytes(), 'base'))
            # As the kernel's vmlinux link: relocations applied, addresses in .BTF.
            exe = work / f'exe.{compiler}{flag}'
            _run(*ld, '-o', exe, '-e', '0', '--unresolved-symbols=ignore-all', *objs)
            seeds.append(Seed(exe.name, exe.read_bytes(), 'linked'))
    return seeds


#: Which seeds each command is fuzzed with.
TAKES = {'encode': ('object', 'encoded'), 'check': ('encoded', 'raw', 'linked'),
         'dump': ('encoded', 'raw', 'linked'), 'link': ('linked',), 'base': ('raw', 'base')}


# --- mutations --------------------------------------------------------------

def _sections(data: bytes) -> list[tuple[str, int, int]]:
    """(name, offset, size) of the ELF sections worth aiming at, or []."""
    try:
        from objbtf.elf.reader import ElfFile
        elf = ElfFile(data)
        return [(s.name, s.offset, s.size) for s in elf.sections
                if s.size and s.offset + s.size <= len(data) and s.type != 8]
    except Exception:
        return []


def _region(rng: random.Random, data: bytes) -> tuple[int, int]:
    """A region to mutate: often a section objbtf reads, else the whole file."""
    secs = _sections(data)
    wanted = [s for s in secs if s[0].startswith(('.BTF', '.rela.BTF', '.debug_info',
                                                  '.symtab', '.strtab', '.debug_str',
                                                  '.rela.debug_info', '.zdebug'))]
    if wanted and rng.random() < 0.8:
        _, off, size = rng.choice(wanted)
        return off, size
    if data[:4] == b'\x7fELF' and rng.random() < 0.1:
        return 0, min(64, len(data))                 # the ELF header
    return 0, len(data)


def mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
        off, size = _region(rng, bytes(buf))
        if size == 0:
            continue
        pos = off + rng.randrange(size)
        how = rng.randrange(6)
        if how == 0:
            buf[pos] ^= 1 << rng.randrange(8)
        elif how == 1:
            buf[pos] = rng.randrange(256)
        elif how == 2 and pos + 4 <= len(buf):
            order = '<' if rng.random() < 0.5 else '>'
            struct.pack_into(order + 'I', buf, pos, rng.choice(INTERESTING))
        elif how == 3 and pos + 8 <= len(buf):
            struct.pack_into('<Q', buf, pos, rng.choice((0, 2**63, 2**64 - 1, 2**32)))
        elif how == 4:
            del buf[pos:]                                          # truncate
        else:
            src = off + rng.randrange(size)
            n = rng.randrange(1, 64)
            buf[pos:pos + n] = buf[src:src + n]                    # copy a range over
    return bytes(buf)


def _chunks(data: bytes) -> tuple[list, list, int, int, str] | None:
    """(chunks, blobs, file offset of .BTF.objbtf, of .BTF, byte order) of a
    linked file, or None when it has not both intact."""
    try:
        from objbtf.btf.chunk import SECTION, split_chunks
        from objbtf.elf.reader import ElfFile
        from linkdedup.concat import split_blobs
        elf = ElfFile(data)
        csec, bsec = elf.section_by_name(SECTION), elf.section_by_name('.BTF')
        chunks = split_chunks(elf.section_data(csec), elf.byteorder)
        blobs = split_blobs(elf.section_data(bsec))
        return chunks, blobs, csec.offset, bsec.offset, elf.byteorder
    except Exception:
        return None


def mutate_chunk(rng: random.Random, data: bytes) -> bytes:
    """What the link trusts in a chunk, changed: one hash copied over
    another (the issue's silently wrong link), two offsets swapped, a
    flag set or cleared."""
    found = _chunks(data)
    if found is None:
        return data
    chunks, _, at, _, order = found
    typed = [c for c in chunks if c.usable and c.count > 1]
    if not typed:
        return data
    c = rng.choice(typed)
    buf = bytearray(data)
    tables = at + c.position + 24 + _padded(len(os.fsencode(c.name))) + 8
    i, j = rng.sample(range(c.count), 2)
    how = rng.randrange(3)
    if how == 0:
        buf[tables + 8 * j:tables + 8 * j + 8] = buf[tables + 8 * i:tables + 8 * i + 8]
    elif how == 1:
        o = tables + 8 * c.count
        buf[o + 4 * i:o + 4 * i + 4], buf[o + 4 * j:o + 4 * j + 4] = \
            buf[o + 4 * j:o + 4 * j + 4], buf[o + 4 * i:o + 4 * i + 4]
    else:
        buf[tables + 12 * c.count + i] ^= 1
    return bytes(buf)


def resign(data: bytes) -> bytes:
    """Every chunk's checksum made to match its blob as it now is."""
    found = _chunks(data)
    if found is None:
        return data
    chunks, blobs, at, _, order = found
    buf = bytearray(data)
    blob_data = iter(b.data for b in blobs)
    for c in chunks:
        if not c.usable:
            continue
        crc = c.checksum_with(next(blob_data, b'') if c.has_btf else b'')
        if crc is not None:
            field = at + c.position + 24 + _padded(len(os.fsencode(c.name)))
            buf[field:field + 4] = crc.to_bytes(4, order)
    return bytes(buf)


def _padded(n: int) -> int:
    return n + (-n % 8)


def mutate_linked(rng: random.Random, data: bytes) -> tuple[bytes, bool]:
    """A mutated linked file, and whether its chunks were re-signed; or,
    sometimes, one whose chunks the link cannot find (its section renamed),
    so that it hashes and checks the blobs itself."""
    if rng.random() < 0.1:
        return mutate(rng, data.replace(b'.BTF.objbtf\0', b'.BTF.objbtX\0', 1)), False
    if rng.random() < 0.3:
        data = mutate_chunk(rng, data)
    if rng.random() < 0.7:
        data = mutate(rng, data)
    if rng.random() < 0.4:
        return resign(data), True
    return data, False


# --- running one case ---------------------------------------------------------

def _child(argv: list[str], cwd: Path, err_fd: int) -> None:
    """Run objbtf's entry point in this forked child; never returns."""
    os.chdir(cwd)
    os.dup2(err_fd, 2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    # Under pytest sys.stderr is its capture, not fd 2: write to the fds.
    sys.stdout = open(1, 'w', closefd=False)
    sys.stderr = open(2, 'w', closefd=False)
    code = 0
    try:
        sys.argv = ['objbtf', *argv]
        from objbtf.cli.entry import main
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = TRACEBACK
    try:
        sys.stderr.flush()
        sys.stdout.flush()
    except BaseException:
        pass
    os._exit(code)


def run_case(argv: list[str], cwd: Path, timeout: float = TIMEOUT) -> tuple[int | None, str]:
    """(exit status or None on a hang, stderr) of objbtf ``argv`` in ``cwd``."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _child(argv, cwd, w)
    os.close(w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    with os.fdopen(r, 'rb', buffering=0) as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return None, b''.join(chunks).decode(errors='replace')
            ready, _, _ = select.select([pipe], [], [], left)
            if ready:
                chunk = pipe.read(65536)
                if not chunk:
                    break
                chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return code, b''.join(chunks).decode(errors='replace')


def _valid(path: Path, base: Path | None = None, source: Path | None = None) -> str | None:
    """None if the BTF written to ``path`` (split on ``base``'s, if given)
    follows the kernel's rules, else why not.  Pointers have the size that
    ``path``'s ELF class gives, else ``source``'s (the input of a link that
    wrote raw BTF), as ``objbtf check`` takes it."""
    from objbtf.btf.validate import validate_bytes
    from objbtf.btf_file import load_btf_file, pointer_size_of, read_btf_bytes
    try:
        raw = read_btf_bytes(str(path))
    except Exception as err:          # no .BTF written: nothing to check
        return None if 'no .BTF' in str(err) else f'unreadable output: {err}'
    if not raw:
        return None
    ptr_size = pointer_size_of(str(path)) or (pointer_size_of(str(source)) if source else 0)
    problems = validate_bytes(raw, load_btf_file(str(base)) if base else None, ptr_size=ptr_size)
    if problems:
        return str(problems[0])
    return _bpftool_refuses(path, base)


#: bpftool, the other oracle a written output must satisfy (libbpf and libelf
#: read it); the judge uses it when installed.
BPFTOOL = shutil.which('bpftool')


def _bpftool_refuses(path: Path, base: Path | None = None) -> str | None:
    """Why ``bpftool btf dump file`` cannot read ``path`` (split on
    ``base``), or None."""
    if BPFTOOL is None:
        return None
    r = subprocess.run([BPFTOOL, *(['--base-btf', str(base)] if base else []),
                        'btf', 'dump', 'file', str(path)], capture_output=True,
                       text=True, errors='replace', timeout=TIMEOUT)
    if r.returncode:
        return f'bpftool: {(r.stderr.strip().splitlines() or ["exit " + str(r.returncode)])[-1]}'
    return None


def _base_valid(base: Path) -> bool:
    """Whether a (mutated) base still follows the kernel's rules: only then
    is a module's link on it judged by what it wrote."""
    from objbtf.btf.validate import validate_bytes
    from objbtf.btf_file import read_btf_bytes
    try:
        return not validate_bytes(read_btf_bytes(str(base)))
    except Exception:
        return False


def base_case(rng: random.Random, seed: Seed, target: Path, work: Path) -> list[str]:
    """The command line of a module's link on ``target``, the mutated base
    ``seed``: the module is the intact linked file the base was made from;
    half the time with ``--base-index``, missing or made for ``seed`` as
    it was."""
    config = seed.name.split('.', 1)[1].rsplit('.', 1)[0]
    module = f'linked.{config}.o'
    argv = ['link', '-q', '-j', '1', '--base', target.name, '-o', 'out.btf']
    index = work / 'case.idx'
    index.unlink(missing_ok=True)
    if rng.random() < 0.5:
        if rng.random() < 0.5:
            made = work / f'index.{seed.name}'
            if not made.exists():
                intact = work / f'intact.{seed.name}'
                intact.write_bytes(seed.data)
                _run(sys.executable, '-m', 'objbtf', 'link', '-q', '--base', intact.name,
                     '--base-index', made.name, '-o', 'intact.btf', module, cwd=work)
            shutil.copyfile(made, index)
        argv += ['--base-index', index.name]
    return [*argv, module]


#: Where link writes: raw BTF, an object to link in (.btf.vmlinux.bin.o),
#: or the linked file itself.
LINK_OUTPUTS = ('out.btf', 'out.o', None)


def _command_line(command: str, target: str, out: str) -> list[str]:
    if command == 'link':
        return ['link', '-q', '-j', '1', *(['-o', out] if out != target else []), target]
    if command == 'encode':
        return ['encode', '-q', target]
    return [command, target]


def judge(command: str, target: Path, out: Path, before: bytes,
          code: int | None, stderr: str, trusted: bool = False,
          module: Path | None = None) -> tuple[str, str] | None:
    """(problem, detail) when the case broke a promise, else None.
    ``trusted``: the input's chunks were re-signed, which the link trusts:
    its output is not judged.  ``module``: what a ``base`` case linked."""
    if code is None:
        return 'hang', stderr[-500:]
    if code == TRACEBACK or 'Traceback' in stderr:
        return 'traceback', stderr[-1500:]
    if code not in (0, 1):
        return f'exit status {code}', stderr[-500:]
    if code == 1:
        lines = [line for line in stderr.strip().splitlines()
                 if not line.startswith(WARNING)]
        if command != 'check' and (len(lines) != 1 or target.name not in lines[0]):
            return 'error message', stderr[-500:]
        if target.read_bytes() != before:
            return 'modified input', stderr[-500:]
        return None
    if command == 'encode':
        why = _valid(target)
        return ('wrote invalid BTF', why) if why else None
    if command == 'link':
        why = _valid(out, source=target) if out.exists() else 'exit 0 without output'
        return ('wrote invalid BTF', why) if why and not (trusted and out.exists()) else None
    if command == 'base':
        if not out.exists():
            return 'exit 0 without output', ''
        why = _valid(out, target, source=module) if _base_valid(target) else None
        return ('wrote invalid BTF', why) if why else None
    if target.read_bytes() != before:
        return 'modified input', ''
    return None


def fuzz(seeds: list[Seed], cases: int, seed: int, work: Path,
         commands: tuple[str, ...] = COMMANDS,
         progress: Callable[[int], None] | None = None,
         save: Path | None = None) -> Iterator[Finding]:
    """Run ``cases`` cases per command; yield each finding, whose input is
    written to ``save`` (if given) as COMMAND-CASE-SEED."""
    rng = random.Random(seed)
    for command in commands:
        pool = [s for s in seeds if s.kind in TAKES[command]]
        if not pool:
            raise RuntimeError(f'no seed for {command}')
        for case in range(cases):
            s = rng.choice(pool)
            data, trusted = (mutate_linked(rng, s.data) if command == 'link'
                             else (mutate(rng, s.data), False))
            target = work / f'case-{command}-{s.name}'
            out = work / 'out.btf'
            if command == 'link':
                where = rng.choice(LINK_OUTPUTS)
                out = target if where is None else work / where
            target.write_bytes(data)
            if out != target:
                out.unlink(missing_ok=True)
            argv = (base_case(rng, s, target, work) if command == 'base'
                    else _command_line(command, target.name, out.name))
            code, stderr = run_case(argv, work)
            verdict = judge(command, target, out, data, code, stderr, trusted,
                            work / argv[-1] if command == 'base' else None)
            if verdict is not None:
                if save is not None:
                    (save / f'{command}-{case}-{s.name}').write_bytes(data)
                yield Finding(case, command, s.name + (' (re-signed)' if trusted else ''),
                              *verdict)
            target.unlink(missing_ok=True)
            if progress:
                progress(case)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--cases', type=int, default=1000, help='cases per command')
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--command', choices=COMMANDS, action='append')
    parser.add_argument('--keep', action='store_true', help='keep the work directory')
    parser.add_argument('--work', type=Path, metavar='DIR',
                        help='work in DIR, created (default: a new temporary directory). '
                             'The compilers record it and the current directory in the '
                             'corpus, so a seed gives the same cases again only from the same '
                             'checkout and directory, in a work directory of the same name')
    parser.add_argument('--save', type=Path, metavar='DIR',
                        help="write each finding's input to DIR (COMMAND-CASE-SEED), to run "
                             'the command on it again')
    parser.add_argument('-v', '--verbose', action='store_true',
                        help='print each finding\'s whole detail (the traceback)')
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.work:
        args.work.mkdir(parents=True)
    work = args.work or Path(tempfile.mkdtemp(prefix='objbtf-fuzz-'))
    seeds = build_corpus(work)
    findings = 0
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
    for f in fuzz(seeds, args.cases, args.seed, work, tuple(args.command or COMMANDS),
                  save=args.save):
        findings += 1
        detail = f.detail.strip()
        print(f'[{f.command} case {f.case} seed {f.seed}] {f.problem}: '
              + (detail if args.verbose else (detail.splitlines() or [''])[-1]))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(f'{findings} findings in {args.cases} cases per command (seed {args.seed})')
    return 1 if findings else 0


if __name__ == '__main__':
    sys.exit(main())
