"""The FUNCs pahole 1.31 encodes, as fixtures recorded from real runs, since
CI cannot build pahole 1.31: for the reference kernel, and for the small
objects of tests/fixtures/functions (each a case of its function rules).

Record them again (after ../shared/tools/build-new-pahole.sh):

    python3 tests/pahole131_funcs.py /opt/pahole-new/bin/pahole \\
        /var/cache/objbtf/kernel-6.1/build

For the kernel it runs pahole with the kernel's own flags for 1.31 (6.1's
scripts/pahole-flags.sh, plus --btf_features=default as Makefile.btf passes
from 1.26 on) on the tree's pre-BTF vmlinux; for the small objects, on their
``ld -r`` (``build_clones``).  Each fixture has one line per FUNC: its name
and its prototype as ``objbtf diff`` prints it, under a header that gives
the command, the version and the input.
"""
from __future__ import annotations

import gzip
import subprocess
import sys
import tempfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / 'fixtures'
FIXTURE = FIXTURES / 'pahole-1.31' / 'vmlinux-6.1-funcs.txt.gz'
CLONES_FIXTURE = FIXTURES / 'pahole-1.31' / 'clones-funcs.txt'
#: The small objects, in link order (anchor.c first: see its comment).
CLONES = ('anchor', 'clones_a', 'clones_b')
CLONES_CFLAGS = ('-g', '-O2', '-c')
#: The kernel's flags for pahole 1.31 (6.1's pahole-flags.sh for >= 1.25).
FLAGS = ('-J', '-j', '--btf_features=default', '--btf_gen_floats', '-j', '--lang_exclude=rust',
         '--skip_encoding_btf_inconsistent_proto', '--btf_gen_optimized')
PRE_BTF_VMLINUX = '.tmp_vmlinux.btf'


def build_clones(out: Path, encode=None) -> Path:
    """tests/fixtures/functions compiled with gcc into ``out``, each object
    passed to ``encode(path)`` if given, and linked with ``ld -r``."""
    objs = []
    for name in CLONES:
        obj = out / f'{name}.o'
        subprocess.run(['gcc', *CLONES_CFLAGS, '-o', str(obj),
                        str(FIXTURES / 'functions' / f'{name}.c')], check=True)
        if encode is not None:
            encode(obj)
        objs.append(str(obj))
    linked = out / 'clones.o'
    subprocess.run(['ld', '-r', '-o', str(linked), *objs], check=True)
    return linked


def read_fixture(path: Path = FIXTURE) -> tuple[list[str], dict[str, list[str]]]:
    """(header lines, FUNC name -> its prototypes)."""
    header: list[str] = []
    funcs: dict[str, list[str]] = {}
    opener = gzip.open if path.suffix == '.gz' else open
    with opener(path, 'rt', encoding='utf-8') as f:
        for line in f:
            line = line.rstrip('\n')
            if line.startswith('#'):
                header.append(line)
                continue
            name, decl = line.split('\t')
            funcs.setdefault(name, []).append(decl)
    return header, funcs


def _run_pahole(pahole: str, flags: tuple[str, ...], target: str, cwd: Path):
    """(pahole's BTF of ``target``, the command as the header shows it)."""
    from objbtf.btf_file import load_btf_file
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / 'out.btf'
        cmd = [pahole, *flags, '--btf_encode_detached', str(raw), target]
        subprocess.run(cmd, cwd=cwd, check=True)
        shown = ' '.join('OUT' if c == str(raw) else c for c in cmd[1:])
        return load_btf_file(str(raw)), f'pahole {shown}'


def _write(out: Path, header: list[str], btf) -> None:
    from objbtf.diff import function_decls
    version = subprocess.run([header.pop(), '--version'], capture_output=True, text=True,
                             check=True).stdout.strip()
    gcc = subprocess.run(['gcc', '--version'], capture_output=True, text=True).stdout.splitlines()[0]
    header += [f'# pahole --version: {version} (dwarves tag v1.31, '
               '../shared/tools/build-new-pahole.sh); ' + gcc,
               '# one line per FUNC: name, a tab, its prototype as objbtf diff prints it']
    lines = [f'{name}\t{decl}' for name, decls in sorted(function_decls(btf).items())
             for decl in sorted(decls)]
    text = ('\n'.join(header + lines) + '\n').encode()
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == '.gz':
        with gzip.GzipFile(out, 'wb', mtime=0) as f:
            f.write(text)
    else:
        out.write_bytes(text)


def record(pahole: str, tree: Path) -> None:
    from collections import Counter
    btf, cmd = _run_pahole(pahole, FLAGS, PRE_BTF_VMLINUX, tree)
    kinds = Counter(t.kind.name for _, t in btf.own())
    release = (tree / 'include/config/kernel.release').read_text().strip()
    _write(FIXTURE, [
        '# FUNCs of pahole 1.31 on the reference kernel (tests/pahole131_funcs.py records it)',
        f'# command (in the build tree): {cmd}',
        f'# kernel: Linux {release}, ../shared/corpus/build-kernel.sh',
        '# types: ' + ', '.join(f'{k} {n}' for k, n in kinds.most_common()), pahole], btf)
    with tempfile.TemporaryDirectory() as tmp:
        linked = build_clones(Path(tmp))
        btf, cmd = _run_pahole(pahole, ('-J', '--btf_features=default'), linked.name, linked.parent)
    sources = ' '.join(f'tests/fixtures/functions/{n}.c' for n in CLONES)
    _write(CLONES_FIXTURE, [
        '# FUNCs of pahole 1.31 on the objects of tests/fixtures/functions',
        f'# objects: gcc {" ".join(CLONES_CFLAGS)} of {sources}, then ld -r -o clones.o',
        f'# command: {cmd}', pahole], btf)


if __name__ == '__main__':
    if len(sys.argv) != 3:
        sys.exit(f'usage: {sys.argv[0]} PAHOLE_1.31 KERNEL_BUILD_TREE')
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    record(sys.argv[1], Path(sys.argv[2]))
