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
  reject (encode's object, link's output).

Each case runs in a forked child of this process, so a case costs a fork,
not an interpreter start, and one case's state cannot leak into the next.

The corpus is built from the test fixtures with real compilers (gcc and
clang, DWARF 4 and 5, compressed DWARF, a big-endian cross compiler when
installed), objects encoded by objbtf, ``ld -r`` links of encoded objects and
raw BTF.  Run it longer before a release:

    python3 tests/fuzz.py --cases 10000 --seed 1          # every command
    python3 tests/fuzz.py --cases 10000 --command link    # one command

The CI run (tests/test_fuzz.py) uses a few thousand cases.
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
C_FIXTURES = HERE / 'fixtures' / 'c'
COMMANDS = ('encode', 'check', 'dump', 'link')
#: Seconds before a case counts as a hang.  A real hang (a FIFO) never ends;
#: the limit leaves room for a slow case on a machine busy with kernel builds.
TIMEOUT = 60.0
#: The exit status a child uses for an exception that escaped objbtf.
TRACEBACK = 99

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
    ('clang', '-gdwarf-5'), ('clang', '-gdwarf-4'),
    ('s390x-linux-gnu-gcc', '-gdwarf-5'),      # big-endian, when installed
)


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
            obj = work / f'{src.stem}.{compiler}{flag}.o'
            _run(compiler, '-g', '-O2', '-c', flag, '-o', obj, src)
            seeds.append(Seed(obj.name, obj.read_bytes(), 'object'))
            enc = work / f'enc.{obj.name}'
            shutil.copy(obj, enc)
            _run(sys.executable, '-m', 'objbtf', 'encode', '-q', enc.name, cwd=work)
            seeds.append(Seed(enc.name, enc.read_bytes(), 'encoded'))
            objs.append(enc)
        ld = 'ld' if compiler != 's390x-linux-gnu-gcc' else 's390x-linux-gnu-ld'
        if shutil.which(ld) and len(objs) > 1:
            linked = work / f'linked.{compiler}{flag}.o'
            # counter_a.c and counter_b.c define the same static, the point of them
            _run(ld, '-r', '-o', linked, *objs)
            seeds.append(Seed(linked.name, linked.read_bytes(), 'linked'))
            raw = work / f'raw.{compiler}{flag}.btf'
            _run(sys.executable, '-m', 'objbtf', 'link', '-q', '-o', raw, linked)
            seeds.append(Seed(raw.name, raw.read_bytes(), 'raw'))
    return seeds


#: Which seeds each command is fuzzed with.
TAKES = {'encode': ('object', 'encoded'), 'check': ('encoded', 'raw', 'linked'),
         'dump': ('encoded', 'raw', 'linked'), 'link': ('linked',)}


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
        from objbtf.entry import main
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


def _valid(path: Path) -> str | None:
    """None if the BTF written to ``path`` follows the kernel's rules, else why not."""
    from objbtf.btf.validate import validate_bytes
    from objbtf.btf_file import read_btf_bytes
    try:
        raw = read_btf_bytes(str(path))
    except Exception as err:          # no .BTF written: nothing to check
        return None if 'no .BTF' in str(err) else f'unreadable output: {err}'
    if not raw:
        return None
    problems = validate_bytes(raw)
    return str(problems[0]) if problems else None


def _command_line(command: str, target: str, out: str) -> list[str]:
    if command == 'link':
        return ['link', '-q', '-j', '1', '-o', out, target]
    if command == 'encode':
        return ['encode', '-q', target]
    return [command, target]


def judge(command: str, target: Path, out: Path, before: bytes,
          code: int | None, stderr: str) -> tuple[str, str] | None:
    """(problem, detail) when the case broke a promise, else None."""
    if code is None:
        return 'hang', stderr[-500:]
    if code == TRACEBACK or 'Traceback' in stderr:
        return 'traceback', stderr[-1500:]
    if code not in (0, 1):
        return f'exit status {code}', stderr[-500:]
    if code == 1:
        lines = stderr.strip().splitlines()
        if command != 'check' and (len(lines) != 1 or target.name not in lines[0]):
            return 'error message', stderr[-500:]
        if target.read_bytes() != before:
            return 'modified input', stderr[-500:]
        return None
    if command == 'encode':
        why = _valid(target)
        return ('wrote invalid BTF', why) if why else None
    if command == 'link':
        why = _valid(out) if out.exists() else 'exit 0 without output'
        return ('wrote invalid BTF', why) if why else None
    if target.read_bytes() != before:
        return 'modified input', ''
    return None


def fuzz(seeds: list[Seed], cases: int, seed: int, work: Path,
         commands: tuple[str, ...] = COMMANDS,
         progress: Callable[[int], None] | None = None) -> Iterator[Finding]:
    """Run ``cases`` cases per command; yield each finding."""
    rng = random.Random(seed)
    for command in commands:
        pool = [s for s in seeds if s.kind in TAKES[command]]
        if not pool:
            raise RuntimeError(f'no seed for {command}')
        for case in range(cases):
            s = rng.choice(pool)
            data = mutate(rng, s.data)
            target = work / f'case-{command}-{s.name}'
            out = work / 'out.btf'
            target.write_bytes(data)
            out.unlink(missing_ok=True)
            code, stderr = run_case(_command_line(command, target.name, out.name), work)
            verdict = judge(command, target, out, data, code, stderr)
            if verdict is not None:
                yield Finding(case, command, s.name, *verdict)
            target.unlink(missing_ok=True)
            if progress:
                progress(case)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--cases', type=int, default=1000, help='cases per command')
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--command', choices=COMMANDS, action='append')
    parser.add_argument('--keep', action='store_true', help='keep the work directory')
    parser.add_argument('-v', '--verbose', action='store_true',
                        help='print each finding\'s whole detail (the traceback)')
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    work = Path(tempfile.mkdtemp(prefix='objbtf-fuzz-'))
    seeds = build_corpus(work)
    findings = 0
    for f in fuzz(seeds, args.cases, args.seed, work, tuple(args.command or COMMANDS)):
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
