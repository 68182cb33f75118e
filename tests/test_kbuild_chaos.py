"""A chaos build: a real Kbuild build with the integration, through the
resident server as builders run it (the other Kbuild tests run objbtf in
process, OBJBTF_RESIDENT=0), while the server and its workers are killed (``kill -9``) at random moments,
one client is killed mid-request, and the disk fills for a moment.  The
build either fails with an error that names the object, or finishes; either
way a quiet ``make`` after it gives BTF byte-identical to the quiet build's:
nothing half-written survives.

It rebuilds one directory of the CI tier's 6.1 tree (``CHAOS_DIR``), on a
tmpfs mounted over it for the run so that the disk can fill without
touching the machine's; ``make -k`` goes on after a failed object, so
that every event happens while it builds.  The seed is printed and taken from
OBJBTF_CHAOS_SEED when set: ``OBJBTF_CHAOS_SEED=N python3 -m pytest --tier
ci tests/test_kbuild_chaos.py`` replays a run's schedule (the moments are
the build's, so not to the millisecond).
"""
from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import is_root, run
from kbuild_tree import KernelBuild, objbtf_command, sections

#: The directory of the 6.1 tree whose objects the chaos build makes again.
CHAOS_DIR = 'kernel'
#: What happens, once each, in an order the seed shuffles.
EVENTS = ('server', 'worker', 'client', 'disk', 'server', 'worker')
#: The programs of a client: the C one Kbuild runs, and the Python one.
CLIENTS = {b'objbtf-client', b'objbtf'}
#: Seconds between two events, drawn uniformly.
PAUSE = (0.5, 2.0)
#: Seconds an event waits for a process to kill (a client lives for
#: milliseconds, between two compiles).
HUNT = 10.0
#: How long the disk stays full.
FULL_FOR = 1.0


def chaos_seed() -> int:
    return int(os.environ.get('OBJBTF_CHAOS_SEED') or random.SystemRandom().randrange(1 << 32))


def children(pid: int) -> list[int]:
    try:
        text = Path(f'/proc/{pid}/task/{pid}/children').read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def server_pids(build: Path) -> list[int]:
    """The pids of this tree's resident servers (``objbtf server status``)."""
    r = subprocess.run([objbtf_command(), 'server', 'status'], cwd=build, capture_output=True,
                       text=True)
    return [int(p) for p in re.findall(r'^pid=(\d+)', r.stdout, re.MULTILINE)]


def client_pids(build: Path) -> list[int]:
    """objbtf commands (clients) running in ``build``: not a server or worker."""
    out = []
    for proc in Path('/proc').iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / 'cmdline').read_bytes().split(b'\0')
            cwd = os.readlink(proc / 'cwd')
        except OSError:
            continue
        if cwd == str(build) and {os.path.basename(a) for a in argv[:2]} & CLIENTS \
                and b'encode' in argv:
            out.append(int(proc.name))
    return out


def kill(pids: list[int], rng: random.Random) -> int | None:
    """``kill -9`` one of ``pids``, chosen by ``rng``; which, or None."""
    for pid in rng.sample(pids, len(pids)):
        try:
            os.kill(pid, signal.SIGKILL)
            return pid
        except ProcessLookupError:
            continue
    return None


@contextmanager
def tmpfs_over(directory: Path, spare_mib: int) -> Iterator[None]:
    """``directory`` on a tmpfs of its size plus ``spare_mib``, with its
    files, until the end; then the directory as it was underneath."""
    if not is_root():
        pytest.fail('the chaos build mounts a tmpfs to fill: run the tests as root')
    used = sum(f.stat().st_size for f in directory.rglob('*') if f.is_file())
    saved = directory.with_name(directory.name + '.chaos-copy')
    shutil.copytree(directory, saved, symlinks=True)
    run('mount', '-t', 'tmpfs', '-o', f'size={used // 2**20 + spare_mib}m', 'tmpfs', directory)
    try:
        shutil.copytree(saved, directory, symlinks=True, dirs_exist_ok=True)
        yield
    finally:
        run('umount', directory)
        shutil.rmtree(saved)


def fill(directory: Path, seconds: float) -> int:
    """Fill ``directory``'s file system for ``seconds``; the bytes taken."""
    filler = directory / '.chaos-filler'
    taken = 0
    try:
        with open(filler, 'wb') as f:
            block = b'\0' * 2**20
            while True:
                try:
                    taken += f.write(block)
                    f.flush()
                except OSError:
                    break
        time.sleep(seconds)
    finally:
        filler.unlink(missing_ok=True)
    return taken


class Chaos(threading.Thread):
    """The events of ``EVENTS`` in the seed's order, a pause before each,
    while the build runs; ``log`` says what each did."""

    def __init__(self, build: Path, seed: int):
        super().__init__(daemon=True)
        self.build, self.rng = build, random.Random(seed)
        self.events = self.rng.sample(EVENTS, len(EVENTS))
        self.log: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        for event in self.events:
            if self.done.wait(self.rng.uniform(*PAUSE)):
                return
            self.log.append(f'{time.monotonic() - start:6.1f}s {event}: {self.act(event)}')

    def act(self, event: str) -> str:
        """Do ``event``, waiting up to HUNT seconds for what it kills."""
        if event == 'disk':
            return f'{fill(self.build / CHAOS_DIR, FULL_FOR)} bytes for {FULL_FOR}s'
        deadline = time.monotonic() + HUNT
        while time.monotonic() < deadline:
            pid = kill(self.targets(event), self.rng)
            if pid is not None:
                return f'killed {pid}'
            time.sleep(0.01)
        return 'nothing to kill'

    def targets(self, event: str) -> list[int]:
        if event == 'client':
            return client_pids(self.build)
        servers = server_pids(self.build)
        return servers if event == 'server' else [c for s in servers for c in children(s)]


@pytest.mark.kernel
@pytest.mark.relinks
def test_a_build_survives_killed_servers_clients_and_a_full_disk(kbuild_6_1: KernelBuild,
                                                                 capsys):
    tree, seed = kbuild_6_1, chaos_seed()
    with capsys.disabled():
        print(f'\nchaos build: OBJBTF_CHAOS_SEED={seed}')
    build = tree.build
    modules = tree.modules()
    clean = sections(build / 'vmlinux')['.BTF'][0]
    clean_kos = {ko: sections(ko)['.BTF'][0] for ko in modules}
    with tmpfs_over(build / CHAOS_DIR, spare_mib=64):
        objects = list((build / CHAOS_DIR).rglob('*.o'))
        assert len(objects) > 10
        for obj in objects:
            obj.unlink()
        chaos = Chaos(build, seed)
        chaos.start()
        try:
            r = subprocess.run(['make', '-C', str(tree.src), f'O={build}',
                                f'-j{os.cpu_count() or 2}', '-k', f'OBJBTF={objbtf_command()}',
                                *tree.make_args, 'vmlinux', 'modules'],
                               env={**os.environ, 'OBJBTF_RESIDENT': '1'},
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        finally:
            chaos.done.set()
            chaos.join()
            subprocess.run([objbtf_command(), 'server', 'stop'], cwd=build, capture_output=True)
        story = f'seed {seed}:\n' + '\n'.join(chaos.log) + '\n' + r.stderr[-3000:]
        with capsys.disabled():
            print('\n'.join(chaos.log), f'make: exit {r.returncode}', sep='\n')
        # Every event happened, and hit something, while the build ran.
        assert len(chaos.log) == len(EVENTS) and 'nothing' not in story, story
        if r.returncode != 0:
            errors = [line for line in r.stderr.splitlines() if '***' in line]
            assert any(re.search(rf'\b{CHAOS_DIR}/\S+\.o\b', line) for line in errors), story
            objbtf_said = [line for line in r.stderr.splitlines() if line.startswith('objbtf')]
            assert all(re.search(r'\S+\.o\b', line) for line in objbtf_said), story
        tree.make('vmlinux', 'modules')
        assert sections(build / 'vmlinux')['.BTF'][0] == clean, story
        assert {ko: sections(ko)['.BTF'][0] for ko in modules} == clean_kos, story
