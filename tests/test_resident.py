"""The resident server, with real processes, real sockets and objects gcc
compiled: a make -j storm, killed clients, a killed server, two trees, two
users, a changed objbtf, idle exit, and output identical to in-process runs.

Every test gets its own runtime directory (XDG_RUNTIME_DIR), so its servers
are its own, and stops them at the end.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import C_FIXTURES, ROOT, cache_counts, cache_entries, compile_c, need, run
from objbtf.elf.reader import ElfFile
from objbtf.encode.cache import STATS

NATIVE = 'objbtf-client'
SERVER_LINE = re.compile(r'^objbtf-server pid=(\d+) requests=(\d+) user=(\d+\.\d+) sys=(\d+\.\d+)$')


class Tree:
    """A build tree whose objbtf commands run as a user's would, through
    the server unless told otherwise."""

    def __init__(self, path: Path, runtime: Path, **env: str):
        self.path = path
        self.env = {**os.environ, 'PYTHONPATH': str(ROOT), 'XDG_RUNTIME_DIR': str(runtime),
                    'OBJBTF_RESIDENT': '1', **env}
        self.env.pop('PYTHONDONTWRITEBYTECODE', None)

    def start(self, *args: str | os.PathLike, python: str = sys.executable,
              prefix: tuple[str, ...] = (), **env: str) -> subprocess.Popen:
        return subprocess.Popen([*prefix, python, '-m', 'objbtf', *map(str, args)], cwd=self.path,
                                env={**self.env, **env}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def run(self, *args: str | os.PathLike, **kw) -> subprocess.CompletedProcess:
        p = self.start(*args, **kw)
        out, err = p.communicate(timeout=120)
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    def native(self, program: Path | list, *args: str | os.PathLike,
               **env: str) -> subprocess.CompletedProcess:
        """Run the C client ``program`` (or another command line)."""
        command = program if isinstance(program, list) else [program]
        return subprocess.run([*command, *map(str, args)], cwd=self.path,
                              env={**self.env, **env}, capture_output=True, text=True, timeout=120)

    def servers(self) -> list[dict[str, str]]:
        r = self.run('server', 'status')
        return [dict(kv.split('=', 1) for kv in line.split()) for line in r.stdout.splitlines()
                if line.startswith('pid=')]

    def stop(self) -> str:
        return self.run('server', 'stop').stdout


@pytest.fixture
def runtime():
    """A short private runtime directory (socket paths must stay under 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix='objbtf-rt-', dir='/tmp'))
    os.chmod(path, 0o700)
    yield path
    for sock in (path / 'objbtf').glob('*.sock'):
        try:
            os.kill(_pid_of(sock), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    shutil.rmtree(path, ignore_errors=True)


def _pid_of(sock: Path) -> int:
    """The pid listening on ``sock``, from /proc/net/unix and /proc/*/fd."""
    inode = next(line.split()[6] for line in Path('/proc/net/unix').read_text().splitlines()[1:]
                 if line.endswith(str(sock)))
    for fd in Path('/proc').glob('[0-9]*/fd/*'):
        try:
            if os.readlink(fd) == f'socket:[{inode}]':
                return int(fd.parts[2])
        except OSError:
            continue
    raise ValueError(sock)


def alive(pid: int) -> bool:
    try:
        state = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != 'Z'


def parent(pid: int) -> int:
    return int(Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[1])


def running(tree: 'Tree') -> int:
    """How many commands the tree's one server is running."""
    [server] = tree.servers()
    return int(server['running'])


def wait_for(condition, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.fixture(scope='module')
def objects(tmp_path_factory) -> list[Path]:
    """The C fixtures at four optimisation levels (sixteen or more)."""
    d = tmp_path_factory.mktemp('objs')
    return [compile_c('gcc', src, d / f'{src.stem}{level}.o', f'-O{level}')
            for src in sorted(C_FIXTURES.glob('*.c')) for level in '0 1 2 s'.split()]


def populate(tree: Path, objects: list[Path], copies: int) -> list[str]:
    """``copies`` copies of each object under tree/N/; their relative paths."""
    names = []
    for n in range(copies):
        (tree / str(n)).mkdir(parents=True, exist_ok=True)
        for obj in objects:
            shutil.copyfile(obj, tree / str(n) / obj.name)
            names.append(f'{n}/{obj.name}')
    return names


def storm_makefile(tree: Path, names: list[str], objbtf: list[list[str]]) -> None:
    """A Makefile whose 64 targets each encode one object, the commands
    taking turns between the ``objbtf`` command lines given."""
    rules = [f'{name}.done:\n\t{shlex.join(objbtf[i % len(objbtf)])} encode {name} && touch $@\n'
             for i, name in enumerate(names)]
    (tree / 'Makefile').write_text('all: ' + ' '.join(f'{n}.done' for n in names) + '\n'
                                   + ''.join(rules))


def test_make_storm_of_64_clients_gives_in_process_bytes(tmp_path, runtime, objects):
    """make -j64 with no server yet: 64 clients at once (the installed
    command and the bare client in turns), one server starts and serves all
    64, and every object is byte for byte what make -j64 without the server
    writes."""
    served = Tree(tmp_path / 'served', runtime, OBJBTF_RESIDENT_IDLE='3600')
    local = Tree(tmp_path / 'local', runtime, OBJBTF_RESIDENT='0')
    names = populate(served.path, objects[:16], 4)
    populate(local.path, objects[:16], 4)
    assert len(names) == 64
    bare = shlex.split(served.run('server', 'command').stdout)
    for tree, commands in ((served, [[sys.executable, '-m', 'objbtf'], bare]),
                           (local, [[sys.executable, '-m', 'objbtf']])):
        storm_makefile(tree.path, names, commands)
        r = subprocess.run([need('make'), '-s', '-j64'], cwd=tree.path, env=tree.env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0 and r.stdout == '' and r.stderr == '', r.stderr
    for name in names:
        assert (served.path / name).read_bytes() == (local.path / name).read_bytes(), name
    [server] = served.servers()
    assert int(server['requests']) == 64
    assert len(list((runtime / 'objbtf').glob('*.sock'))) == 1
    served.stop()


def test_without_server_nothing_starts(tmp_path, runtime, objects):
    tree = Tree(tmp_path, runtime, OBJBTF_RESIDENT='0')
    [name] = populate(tmp_path, objects[:1], 1)
    assert tree.run('encode', name).returncode == 0
    assert not (runtime / 'objbtf').exists()


def test_cc_link_and_errors_match_in_process(tmp_path, runtime):
    """cc, link (with its summary) and the one-line errors: the same exit
    status, output and bytes through the server as in process."""
    results = {}
    for mode in ('1', '0'):
        tree = Tree(tmp_path / mode, runtime, OBJBTF_RESIDENT=mode)
        tree.path.mkdir()
        runs = []
        for src in ('counter_a', 'counter_b'):
            runs.append(tree.run('cc', '--', need('gcc'), '-g', '-O2', '-c', '-o', f'{src}.o',
                                 f'-fdebug-prefix-map={tree.path}=.', C_FIXTURES / f'{src}.c'))
        run(need('ld'), '-r', '-o', tree.path / 'linked.o', tree.path / 'counter_a.o',
            tree.path / 'counter_b.o')
        (tree.path / 'list').write_text('counter_a.o\ncounter_b.o\n')
        runs.append(tree.run('link', '--objects', 'list', 'linked.o', '-o', 'out.btf'))
        (tree.path / 'broken.o').write_bytes(b'\x7fELF' + bytes(60))
        runs.append(tree.run('encode', 'broken.o'))
        runs.append(tree.run('link', '--allow-missing', 'linked.o'))       # usage error: click
        runs.append(tree.run('encode', '--help'))
        runs.append(tree.run('cc', '--', 'sh', '-c', 'exit 3'))
        results[mode] = ([(r.returncode, r.stdout, r.stderr.replace(str(tree.path), 'TREE'))
                          for r in runs],
                         [(tree.path / f).read_bytes() for f in ('counter_a.o', 'counter_b.o',
                                                                  'out.btf', 'broken.o')])
        if mode == '1':
            assert int(tree.servers()[0]['requests']) == len(runs)
            tree.stop()
    assert results['1'] == results['0']
    statuses = [r[0] for r in results['1'][0]]
    assert statuses == [0, 0, 0, 1, 2, 0, 3]
    assert len(results['1'][0][3][2].splitlines()) == 1 and 'broken.o' in results['1'][0][3][2]
    assert 'objects' in results['1'][0][2][2]                   # the link's summary


def test_module_links_through_the_server_use_the_in_process_base_index(tmp_path, runtime):
    """A base index made in process serves the server's module links as it
    is (the same key: a server's workers import objbtf's compiled modules
    in another order, which once changed the key and rebuilt the index on
    every first link), and the split BTF is the same bytes."""
    tree = Tree(tmp_path, runtime)
    for src in ('counter_a', 'counter_b'):
        r = tree.run('cc', '--', need('gcc'), '-g', '-O2', '-c', '-o', f'{src}.o',
                     C_FIXTURES / f'{src}.c')
        assert r.returncode == 0, r.stderr
    run(need('ld'), '-r', '-o', tmp_path / 'base.o', tmp_path / 'counter_a.o')
    run(need('ld'), '-r', '-o', tmp_path / 'mod.ko', tmp_path / 'counter_b.o')
    assert tree.run('link', '-o', 'base.btf', 'base.o').returncode == 0
    index = tmp_path / 'base.index'

    def module_link(out: str, resident: str) -> bytes:
        r = tree.run('link', '--base', 'base.btf', '--base-index', index.name, '-o', out,
                     'mod.ko', OBJBTF_RESIDENT=resident)
        assert r.returncode == 0, r.stderr
        return (tmp_path / out).read_bytes()

    made = module_link('here.btf', '0')
    kept = (index.stat().st_ino, index.stat().st_mtime_ns)
    assert module_link('served.btf', '1') == made
    assert module_link('again.btf', '1') == made          # the worker's kept base
    assert (index.stat().st_ino, index.stat().st_mtime_ns) == kept
    assert int(tree.servers()[0]['requests']) >= 2
    tree.stop()


def big_object(tmp_path: Path) -> Path:
    """An object whose encoding takes a while: 12000 structs in one unit,
    about half a second of encode, so that a poll of ``server status``
    (about 0.1 s each) sees it at work; 3000 took 0.1 s, which a poll
    could miss."""
    src = tmp_path / 'big.c'
    lines = ['struct s0 { int a; };']
    for i in range(1, 12000):
        lines.append(f'struct s{i} {{ struct s{i - 1} *prev; long v{i}; char n[{i % 7 + 1}]; }};')
        lines.append(f'int f{i}(struct s{i} *p) {{ return p->n[0] + (int)p->v{i}; }}')
    src.write_text('\n'.join(lines) + '\n')
    return compile_c('gcc', src, tmp_path / 'big.o', '-O0')


def test_killed_client_leaves_no_half_written_object(tmp_path, runtime):
    """A client killed at any moment of its encode: the object is either
    untouched or completely encoded, no temporary file stays, and the
    server goes on serving."""
    tree = Tree(tmp_path / 't', runtime)
    tree.path.mkdir()
    original = big_object(tmp_path).read_bytes()
    reference = tmp_path / 'ref'
    reference.mkdir()
    (reference / 'big.o').write_bytes(original)
    assert Tree(reference, runtime, OBJBTF_RESIDENT='0').run('encode', 'big.o').returncode == 0
    encoded = (reference / 'big.o').read_bytes()
    target = tree.path / 'big.o'
    target.write_bytes(original)
    assert tree.run('encode', 'big.o').returncode == 0   # starts the server, warms the cache
    [server] = tree.servers()
    seen = set()
    for delay in (0.0, 0.0, 0.1, 0.2, 0.4, 0.8):
        target.write_bytes(original)
        p = tree.start('encode', 'big.o')
        assert wait_for(lambda: running(tree) == 1)                 # at work
        time.sleep(delay)
        p.kill()
        p.wait()
        assert wait_for(lambda: running(tree) == 0)
        now = target.read_bytes()
        assert now in (original, encoded), delay
        seen.add(now == encoded)
        assert [f.name for f in tree.path.iterdir()] == ['big.o']
    assert False in seen            # some child was stopped before writing its object
    assert tree.servers()[0]['pid'] == server['pid']
    target.write_bytes(original)
    assert tree.run('encode', 'big.o').returncode == 0 and target.read_bytes() == encoded
    tree.stop()


def test_killed_client_stops_its_compiler(tmp_path, runtime):
    """cc's compiler dies with its client, as under make's Ctrl-C, and its
    unfinished output is removed."""
    tree = Tree(tmp_path, runtime)
    out = tmp_path / 'out.o'
    out.write_bytes(b'unfinished')
    p = tree.start('cc', '--', 'sh', '-c', 'echo $$ > pid; exec sleep 60', 'x', '-o', 'out.o')
    assert wait_for(lambda: (tmp_path / 'pid').exists() and (tmp_path / 'pid').read_text())
    compiler = int((tmp_path / 'pid').read_text())
    assert alive(compiler)
    p.kill()
    assert wait_for(lambda: not alive(compiler))
    assert wait_for(lambda: not out.exists())
    tree.stop()


def test_killed_server_restarts_and_running_commands_finish(tmp_path, runtime, objects):
    """SIGKILL to the server: the command its child runs still returns its
    status, the next client starts a new server on the dead one's socket."""
    tree = Tree(tmp_path, runtime)
    names = populate(tmp_path, objects[:2], 1)
    assert tree.run('encode', names[0]).returncode == 0
    [old] = tree.servers()
    slow = tree.start('cc', '--', 'sh', '-c', 'sleep 1; exit 3')
    assert wait_for(lambda: tree.servers()[0]['running'] == '1')
    os.kill(int(old['pid']), signal.SIGKILL)
    assert wait_for(lambda: not alive(int(old['pid'])))
    assert Path(old['socket']).exists()                 # left behind by the killed server
    assert slow.wait(timeout=30) == 3
    r = tree.run('encode', names[1])
    assert r.returncode == 0 and r.stderr == ''
    [new] = tree.servers()
    assert new['pid'] != old['pid'] and new['socket'] == old['socket']
    tree.stop()


def test_two_trees_get_two_servers(tmp_path, runtime, objects):
    trees = [Tree(tmp_path / n, runtime) for n in 'ab']
    for tree in trees:
        [name] = populate(tree.path, objects[:1], 1)
        assert tree.run('encode', name).returncode == 0
    [a], [b] = (tree.servers() for tree in trees)
    assert a['pid'] != b['pid'] and a['socket'] != b['socket'] and a['code'] == b['code']
    assert trees[0].stop().startswith(f'stopped pid={a["pid"]}')
    [still] = trees[1].servers()
    assert (still['pid'], still['requests']) == (b['pid'], b['requests'])
    trees[1].stop()


#: Run as the other user: the client starts its server by executing its own
#: interpreter again (``client._spawn``), so the probe does too.
_REEXEC = ('import os, sys; '
           'os.execv(sys.executable, [sys.executable, "-P", "-c", "import objbtf.resident.client"])')


def interpreter_of(user: list[str], env: dict[str, str]) -> str:
    """A Python that ``user`` (a setpriv prefix) can run objbtf's client and
    server with: the tests' own, or, where other users cannot reach it (a
    pyenv under a 0700 /root), the system's, with objbtf from the checkout
    (env's PYTHONPATH)."""
    for python in dict.fromkeys((sys.executable, '/usr/bin/python3')):
        r = subprocess.run([*user, python, '-c', _REEXEC], env=env, capture_output=True,
                           text=True)
        if r.returncode == 0:
            return python
    pytest.fail(f'neither {sys.executable} nor /usr/bin/python3 runs objbtf as {user[1:]}: '
                f'{r.stderr[-500:]}')


def test_two_users_never_share_a_server(runtime, objects):
    """root and nobody in the same tree: one server each, in their own 0700
    directories; nobody cannot reach root's."""
    if os.geteuid() != 0:
        pytest.fail('this test switches users with setpriv: run it as root')
    setpriv = need('setpriv')
    tree = Path(tempfile.mkdtemp(prefix='objbtf-users-', dir='/tmp'))   # pytest's is root's only
    [name] = populate(tree, objects[:1], 1)
    shutil.chown(tree, 'nobody')
    for p in tree.rglob('*'):
        shutil.chown(p, 'nobody')
    env = {k: v for k, v in os.environ.items() if k != 'XDG_RUNTIME_DIR'}
    env.update(PYTHONPATH=str(ROOT), OBJBTF_RESIDENT='1')
    as_nobody = [setpriv, '--reuid=nobody', '--regid=nogroup', '--clear-groups']
    python = interpreter_of(as_nobody, env)

    def nobody_control(kind: str) -> list[dict]:
        r = subprocess.run([*as_nobody, python, '-c', 'from objbtf.resident.client import control; '
                            f'print(control({kind!r}))'], cwd=tree, env=env, capture_output=True,
                           text=True, check=True)
        return eval(r.stdout)
    try:
        r = subprocess.run([*as_nobody, python, '-m', 'objbtf', 'encode', name], cwd=tree,
                           env=env, capture_output=True, text=True)
        assert r.returncode == 0 and r.stderr == '', r.stderr
        [theirs] = nobody_control('status')
        runtime = Path(theirs['socket']).parent
        st = runtime.stat()
        assert runtime == Path('/tmp/objbtf-65534') and st.st_uid == 65534
        assert st.st_mode & 0o777 == 0o700
        assert Path(f'/proc/{theirs["pid"]}').stat().st_uid == 65534
        root_tree = Tree(tree, runtime)
        assert root_tree.run('encode', name).returncode == 0
        [ours] = root_tree.servers()
        assert ours['pid'] != str(theirs['pid']) and Path(f'/proc/{ours["pid"]}').stat().st_uid == 0
        assert theirs['requests'] == 1 and ours['requests'] == '1'
        probe = subprocess.run([*as_nobody, python, '-c', (
            'import socket, sys; s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n'
            'try: s.connect(sys.argv[1])\nexcept PermissionError: sys.exit(0)\nsys.exit(1)'),
            ours['socket']], capture_output=True, text=True)
        assert probe.returncode == 0, probe.stderr
        root_tree.stop()
    finally:
        nobody_control('stop')
        shutil.rmtree(tree)


def test_changed_objbtf_gets_a_new_server(tmp_path, runtime, objects):
    """A copy of objbtf edited between two commands: the second starts a new
    server (another code digest), the old one never serves again, through
    the Python client or the C one."""
    code = tmp_path / 'code'
    for package in ('objbtf', 'linkdedup'):
        shutil.copytree(ROOT / package, code / package,
                        ignore=shutil.ignore_patterns('__pycache__'))
    tree = Tree(tmp_path / 'tree', runtime, PYTHONPATH=str(code))
    names = populate(tree.path, objects[:3], 1)
    assert tree.run('encode', names[0]).returncode == 0
    [old] = tree.servers()
    assert old['root'] == str(code)
    with open(code / 'objbtf' / 'encode' / 'encoder.py', 'a') as f:
        f.write('\n# a new version\n')
    assert tree.run('encode', names[1]).returncode == 0
    assert tree.native(code / 'objbtf' / 'resident' / NATIVE, 'encode', names[2]).returncode == 0
    servers = {s['pid']: s for s in tree.servers()}
    assert len(servers) == 2 and servers[old['pid']]['requests'] == old['requests']
    new = next(s for pid, s in servers.items() if pid != old['pid'])
    assert new['code'] != old['code'] and new['requests'] == '2'
    tree.stop()


def test_c_client_reaches_the_python_clients_server(tmp_path, runtime, objects):
    """objbtf-client (what ``server command`` prints) computes the socket the
    Python client does: started by either, one server serves both, and
    their objects are the in-process bytes."""
    program = shlex.split(Tree(tmp_path, runtime).run('server', 'command').stdout)
    assert program == [str(ROOT / 'objbtf' / 'resident' / NATIVE)], 'objbtf-client is not built'
    served = Tree(tmp_path / 'served', runtime)
    local = Tree(tmp_path / 'local', runtime, OBJBTF_RESIDENT='0')
    names = populate(served.path, objects[:4], 1)
    populate(local.path, objects[:4], 1)
    assert served.native(program[0], 'encode', names[0]).returncode == 0   # starts it
    assert served.run('encode', names[1]).returncode == 0
    assert served.native(program[0], 'encode', names[2]).returncode == 0
    assert served.native(program[0], 'encode', '-q', names[3]).returncode == 0
    for name in names:
        assert local.run('encode', name).returncode == 0
        assert (served.path / name).read_bytes() == (local.path / name).read_bytes(), name
    [server] = served.servers()
    assert server['requests'] == '4'
    assert len(list((runtime / 'objbtf').glob('*.sock'))) == 1
    served.stop()


def _interpreter(program: Path) -> bool:
    """Whether ``program`` names a dynamic loader (a PT_INTERP header)."""
    from elftools.elf.elffile import ELFFile
    with open(program, 'rb') as f:
        return any(seg['p_type'] == 'PT_INTERP' for seg in ELFFile(f).iter_segments())


def _native_client():
    """objbtf/resident/native_client.py of this checkout, imported as
    setup.py imports it: outside its package."""
    sys.path.insert(0, str(ROOT / 'objbtf' / 'resident'))
    try:
        import native_client
    finally:
        sys.path.remove(str(ROOT / 'objbtf' / 'resident'))
    return native_client


def test_c_client_is_linked_statically_else_dynamically(tmp_path):
    """native_client.build links the client statically (Debian's libc6-dev
    has the static C library), and where the static link fails, as with
    no static libc, links it dynamically."""
    native_client = _native_client()
    (tmp_path / 'static').mkdir()
    assert not _interpreter(native_client.build(tmp_path / 'static'))
    nostatic = tmp_path / 'cc'
    nostatic.write_text('#!/bin/sh\nfor a; do [ "$a" = -static ] && exit 1; done\nexec gcc "$@"\n')
    nostatic.chmod(0o755)
    (tmp_path / 'dynamic').mkdir()
    built = native_client.build(tmp_path / 'dynamic', cc=str(nostatic))
    assert _interpreter(built)
    # it runs: with no objbtf three directories above it, it hands the
    # command to the Python client it cannot find there
    ran = subprocess.run([built, '--help'], capture_output=True, text=True, timeout=60)
    assert ran.returncode != 0, ran
    assert f'{tmp_path.parent}/objbtf/cli/entry_no_site.py' in ran.stderr, ran
    assert sorted(os.listdir(tmp_path / 'dynamic')) == [NATIVE]


def test_c_client_is_built_with_musl_where_installed(tmp_path, monkeypatch):
    """With musl-gcc installed (musl-tools, which scripts/install.sh
    installs) and no CC set, native_client.build compiles the client with
    it, statically: musl's start does not probe the CPU with cpuid as
    glibc's does.  A glibc program carries glibc's ABI note
    (.note.ABI-tag), a musl one none.  An explicit CC comes first."""
    musl = shutil.which('musl-gcc')
    if musl is None:
        pytest.fail('musl-gcc is not installed (Debian: musl-tools; scripts/install.sh)')
    native_client = _native_client()
    monkeypatch.setenv('CC', 'gcc')
    assert native_client.compilers() == ['gcc']
    monkeypatch.delenv('CC')
    assert native_client.compilers()[0] == musl
    (tmp_path / 'musl').mkdir()
    built = native_client.build(tmp_path / 'musl')
    assert not _interpreter(built)
    from elftools.elf.elffile import ELFFile
    with open(built, 'rb') as f:
        assert ELFFile(f).get_section_by_name('.note.ABI-tag') is None
    glibc = tmp_path / 'glibc'
    glibc.mkdir()
    with open(native_client.build(glibc, cc='gcc'), 'rb') as f:
        assert ELFFile(f).get_section_by_name('.note.ABI-tag') is not None
    ran = subprocess.run([built, '--help'], capture_output=True, text=True, timeout=60)
    assert ran.returncode != 0, ran
    assert f'{tmp_path.parent}/objbtf/cli/entry_no_site.py' in ran.stderr, ran


def test_the_encode_cache_is_the_one_each_clients_environment_names(tmp_path, runtime, objects):
    """Through the quick client as Kbuild runs it, a worker keeps encodes
    in the OBJBTF_CACHE_DIR of the client's environment, and a restored
    object is a hit there (the entry read, its time refreshed, not written
    anew) with the in-process bytes; a client without it keeps nothing."""
    program = shlex.split(Tree(tmp_path, runtime).run('server', 'command').stdout)
    cache = tmp_path / 'cache'
    tree = Tree(tmp_path / 'tree', runtime)
    local = Tree(tmp_path / 'local', runtime, OBJBTF_RESIDENT='0')
    names = populate(tree.path, objects[:2], 1)
    populate(local.path, objects[:2], 1)
    assert tree.native(program, 'encode', names[0], OBJBTF_CACHE_DIR=str(cache)).returncode == 0
    [entry] = cache_entries(cache)
    assert not (cache / STATS / 'hits').exists()                # a miss only
    assert cache_counts(cache) == (0, 1)
    os.utime(entry, ns=(0, 0))
    inode = entry.stat().st_ino
    shutil.copyfile(objects[0], tree.path / names[0])
    assert tree.native(program, 'encode', names[0], OBJBTF_CACHE_DIR=str(cache)).returncode == 0
    assert (entry.stat().st_ino, entry.stat().st_mtime > 0) == (inode, True)
    assert cache_counts(cache) == (1, 1)        # the worker counts as a process does
    assert tree.native(program, 'encode', names[1]).returncode == 0
    assert cache_entries(cache) == [entry] and cache_counts(cache) == (1, 1)
    for name in names:
        assert local.run('encode', name).returncode == 0
        assert (tree.path / name).read_bytes() == (local.path / name).read_bytes(), name
    [server] = tree.servers()
    assert server['requests'] == '3'
    tree.stop()


def debug_info_size(obj: Path) -> int:
    with ElfFile.open(str(obj)) as elf:
        return elf.section_by_name('.debug_info').size


def test_make_s_drop_dwarf_variable_reaches_the_worker(tmp_path, runtime, objects):
    """OBJBTF_DROP_DWARF=1 in a client's environment (make puts its command
    line's variables there) drops that object's DWARF as --drop-dwarf does
    in process; the next client's, without it, keeps its DWARF."""
    program = shlex.split(Tree(tmp_path, runtime).run('server', 'command').stdout)
    tree = Tree(tmp_path / 'tree', runtime)
    local = Tree(tmp_path / 'local', runtime, OBJBTF_RESIDENT='0')
    names = populate(tree.path, objects[:2], 1)
    populate(local.path, objects[:2], 1)
    assert tree.native(program, 'encode', names[0], OBJBTF_DROP_DWARF='1').returncode == 0
    assert tree.native(program, 'encode', names[1]).returncode == 0
    assert local.run('encode', '--drop-dwarf', names[0]).returncode == 0
    assert local.run('encode', names[1]).returncode == 0
    for name in names:
        assert (tree.path / name).read_bytes() == (local.path / name).read_bytes(), name
    assert [debug_info_size(tree.path / name) > 0 for name in names] == [False, True]
    [server] = tree.servers()
    assert server['requests'] == '2'
    tree.stop()


def test_server_command_start_leaves_a_warm_server_for_the_build(tmp_path, runtime, objects):
    """``server command --start`` (what Kbuild asks once per build that
    compiles) prints the same command as without it and returns without
    waiting for the server it starts (which would idle for 600 s: had the
    call waited for its end, ``run`` would time out).  An encode right after
    it, before that server can listen, waits on the start lock the server
    holds until it does, and is its first request: one server, no other
    started.  A second --start starts none; OBJBTF_RESIDENT=0 none at all."""
    tree = Tree(tmp_path, runtime, OBJBTF_RESIDENT_IDLE='600')
    plain = tree.run('server', 'command')
    assert tree.servers() == []
    [name] = populate(tmp_path, objects[:1], 1)
    started = tree.run('server', 'command', '--start')
    assert (started.returncode, started.stdout, started.stderr) == (0, plain.stdout, '')
    assert tree.native(shlex.split(plain.stdout), 'encode', name).returncode == 0
    [server] = tree.servers()
    assert server['requests'] == '1'
    assert tree.run('server', 'command', '--start').stdout == plain.stdout
    [again] = tree.servers()
    assert (again['pid'], again['requests']) == (server['pid'], '1')
    tree.stop()
    off = Tree(tmp_path / 'off', runtime, OBJBTF_RESIDENT='0')
    off.path.mkdir()
    assert off.run('server', 'command', '--start').stdout == plain.stdout
    time.sleep(1)
    assert off.servers() == [] and tree.servers() == []


def test_a_start_lock_never_released_delays_but_never_hangs(tmp_path, runtime, objects):
    """A server holds the start lock from its start until it listens; one
    hung before that (here: this test holding the lock) must not hang
    anything.  ``server command --start`` returns at once and starts
    nothing; an encode waits the client's START_TIMEOUT for the lock, then
    runs in process, with the in-process bytes."""
    import fcntl
    from objbtf.resident.client import START_TIMEOUT
    tree = Tree(tmp_path, runtime)
    local = Tree(tmp_path / 'local', runtime, OBJBTF_RESIDENT='0')
    [name] = populate(tmp_path, objects[:1], 1)
    populate(local.path, objects[:1], 1)
    (runtime / 'objbtf').mkdir(mode=0o700)
    with open(runtime / 'objbtf' / 'start.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = tree.run('server', 'command', '--start')
        assert started.returncode == 0 and started.stdout.strip()
        before = time.monotonic()
        assert tree.run('encode', name).returncode == 0
        assert time.monotonic() - before >= START_TIMEOUT
        assert tree.servers() == []
    assert local.run('encode', name).returncode == 0
    assert (tmp_path / name).read_bytes() == (local.path / name).read_bytes()


def test_c_client_hands_the_rest_to_python(tmp_path, runtime, objects):
    """What objbtf-client does not serve itself (help and usage errors,
    which need click; commands the server does not run; OBJBTF_RESIDENT=0;
    a missing file) ends as the Python client ends it: the same status and
    output."""
    tree = Tree(tmp_path, runtime)
    program = ROOT / 'objbtf' / 'resident' / NATIVE
    bare = [sys.executable, '-S', str(ROOT / 'objbtf' / 'cli' / 'entry_no_site.py')]
    [name] = populate(tmp_path, objects[:1], 1)
    for args, env in ((('encode', '--help'), {}), (('--version',), {}),
                      (('encode', '--no-such-option', name), {}), (('dump', name), {}),
                      (('encode', 'missing.o'), {}), (('encode', 'missing.o'), {'OBJBTF_RESIDENT': '0'}),
                      (('link',), {})):
        ours, python = tree.native(program, *args, **env), tree.native(bare, *args, **env)
        assert (ours.returncode, ours.stdout, ours.stderr) == \
            (python.returncode, python.stdout, python.stderr), args
    tree.stop()


def test_a_worker_serves_encodes_in_turn_and_retires_when_niced(tmp_path, runtime, objects):
    """Encodes one after another all go to one worker, which gives the
    in-process bytes every time; a client with a higher niceness has its
    command run at that niceness, after which the worker retires (it could
    not lower its niceness again)."""
    served = Tree(tmp_path / 'served', runtime)
    local = Tree(tmp_path / 'local', runtime, OBJBTF_RESIDENT='0')
    names = populate(served.path, objects, 1)
    populate(local.path, objects, 1)
    for name in names:
        assert served.run('encode', name).returncode == 0
        assert local.run('encode', name).returncode == 0
        assert (served.path / name).read_bytes() == (local.path / name).read_bytes(), name
    [server] = served.servers()
    assert (server['requests'], server['workers']) == (str(len(names)), '1')
    r = served.run('cc', '--', 'sh', '-c', 'nice > nice.txt', prefix=(need('nice'), '-n', '7'))
    assert r.returncode == 0 and (served.path / 'nice.txt').read_text() == '7\n'
    [server] = served.servers()
    assert server['workers'] == '0'
    served.stop()


def test_a_worker_takes_each_clients_environment_as_it_is():
    """A worker serves command after command in one process: each command
    sees its client's environment exactly, whatever the one before had
    (a variable added, changed, removed, and the first one again)."""
    code = """if True:
        import os, sys
        from objbtf.resident import server
        first = dict(os.environb)
        added = {**first, b'OBJBTF_T': b'1', b'OTHER_T': b'a'}
        changed = {**first, b'OBJBTF_T': b'2'}
        for environ in (added, changed, first, added, added):
            server._take_environment(dict(environ))
            if dict(os.environb) != environ or os.environ.get('OBJBTF_T') != (
                    environ.get(b'OBJBTF_T', b'').decode() or None):
                sys.exit(f'after {sorted(set(environ) ^ set(first))}: {dict(os.environb)}')
    """
    ran = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         env={**os.environ, 'PYTHONPATH': str(ROOT)}, timeout=60)
    assert ran.returncode == 0, ran.stderr


def test_idle_server_exits_and_logs_its_cpu(tmp_path, runtime, objects):
    log = tmp_path / 'server.log'
    tree = Tree(tmp_path, runtime, OBJBTF_RESIDENT_IDLE='2', OBJBTF_SERVER_LOG=str(log))
    [name] = populate(tmp_path, objects[:1], 1)
    assert tree.run('encode', name).returncode == 0
    assert wait_for(log.exists, timeout=60)
    [line] = log.read_text().splitlines()
    m = SERVER_LINE.match(line)
    assert m and m[2] == '1' and float(m[3]) + float(m[4]) > 0
    assert wait_for(lambda: not alive(int(m[1])))
    assert not list((runtime / 'objbtf').glob('*.sock'))


def test_stop_and_sigterm_log_and_end_the_server(tmp_path, runtime, objects):
    log = tmp_path / 'server.log'
    tree = Tree(tmp_path, runtime, OBJBTF_SERVER_LOG=str(log))
    [name] = populate(tmp_path, objects[:1], 1)
    assert tree.run('encode', name).returncode == 0
    [server] = tree.servers()
    assert tree.stop() == f'stopped pid={server["pid"]} requests=1\n'
    assert SERVER_LINE.match(log.read_text()) and wait_for(lambda: not alive(int(server['pid'])))
    r = tree.run('server', 'status')
    assert r.returncode == 1 and r.stdout.startswith('no objbtf server for ')
    assert tree.run('encode', name).returncode == 0
    [server] = tree.servers()
    os.kill(int(server['pid']), signal.SIGTERM)
    assert wait_for(lambda: len(log.read_text().splitlines()) == 2)
    assert SERVER_LINE.match(log.read_text().splitlines()[1])[1] == server['pid']


def test_a_malformed_request_ends_only_its_worker(tmp_path, runtime, objects):
    """A request the server cannot read (here a marshal cut short, with the
    four descriptors): the connection closes without a reply, the worker
    that read it exits, and the server goes on serving."""
    tree = Tree(tmp_path, runtime)
    names = populate(tmp_path, objects[:2], 1)
    assert tree.run('encode', names[0]).returncode == 0
    [server] = tree.servers()
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.connect(server['socket'])
        cwd = os.open(tmp_path, os.O_RDONLY)
        with open(os.devnull, 'rb') as null:
            socket.send_fds(sock, [b'R(\x07\x00\x00\x00i'], [null.fileno()] * 3 + [cwd])
        os.close(cwd)
        sock.settimeout(20)
        assert sock.recv(64) == b''
    assert wait_for(lambda: running(tree) == 0)
    assert tree.run('encode', names[1]).returncode == 0
    [after] = tree.servers()
    assert after['pid'] == server['pid'] and after['requests'] == '3'
    tree.stop()


def test_unsafe_runtime_directory_means_no_server(tmp_path, runtime, objects):
    """A runtime directory others may enter is not used; the command runs in
    process and works."""
    (runtime / 'objbtf').mkdir(mode=0o755)
    os.chmod(runtime / 'objbtf', 0o755)
    tree = Tree(tmp_path, runtime)
    [name] = populate(tmp_path, objects[:1], 1)
    r = tree.run('encode', name)
    assert r.returncode == 0 and r.stderr == ''
    assert list((runtime / 'objbtf').iterdir()) == []


def test_the_server_warms_what_commands_import(tmp_path):
    """After the server's imports (WARM), encoding an object and linking
    it import no more of objbtf: children start warm.  And every WARM
    module exists (the server skips a missing one silently)."""
    obj = compile_c('gcc', C_FIXTURES / 'counter_a.c', tmp_path / 'a.o')
    code = ('import sys\n'
            'from objbtf.resident.server import WARM\n'
            'for name in WARM: __import__(name)\n'
            'before = set(sys.modules)\n'
            'from objbtf.cli.options import parse_fast\n'
            'from objbtf.cli.commands import dispatch\n'
            'assert dispatch(parse_fast(["encode", "a.o"])) == 0\n'
            'import subprocess; subprocess.run(["ld", "-r", "-o", "l.o", "a.o"], check=True)\n'
            'assert dispatch(parse_fast(["link", "-q", "-o", "l.btf", "l.o"])) == 0\n'
            'print(sorted(n for n in set(sys.modules) - before if n.split(".")[0] in '
            '("objbtf", "linkdedup")))')
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=obj.parent,
                       env={**os.environ, 'PYTHONPATH': str(ROOT), 'OBJBTF_RESIDENT': '0'})
    assert r.returncode == 0, r.stderr
    assert r.stdout == '[]\n'


def test_a_killed_command_is_one_line_and_status_1(tmp_path, runtime):
    """The server's process for a command killed (say by the OOM killer):
    the client says so on one line, naming the command and its last
    argument (an encode's object), exits 1, and does not run it again."""
    tree = Tree(tmp_path, runtime)
    assert tree.run('cc', '--', 'true').returncode == 0
    [server] = tree.servers()
    p = tree.start('cc', '--', 'sh', '-c', 'echo $$ >> runs; exec sleep 60')
    assert wait_for(lambda: (tmp_path / 'runs').exists() and (tmp_path / 'runs').read_text())
    compiler = int((tmp_path / 'runs').read_text())
    command = parent(compiler)
    assert command != int(server['pid'])
    os.kill(command, signal.SIGKILL)
    os.kill(compiler, signal.SIGKILL)       # orphaned, it would hold the client's pipes
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1 and out == ''
    assert err.splitlines() == ['objbtf: cc echo $$ >> runs; exec sleep 60: the resident '
                                'server\'s process for this command ended without an exit status']
    assert (tmp_path / 'runs').read_text() == f'{compiler}\n'       # run once
    tree.stop()


#: A command whose client closes its connection; ClientGone is then dropped
#: once, as a C extension's PyErr_Clear drops an error a Python callback
#: raised, and the command goes on in Python.
DROPPED_ONCE = """
import socket, sys, time
from objbtf.resident import server
ours, client = socket.socketpair()
server._watch_client(ours)
try:
    client.close()
    time.sleep(1)
except server.ClientGone:
    pass
else:
    sys.exit('no ClientGone when the client left')
try:
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        pass
except server.ClientGone:
    print('raised again')
"""


def test_a_dropped_client_gone_is_raised_again():
    """A command whose client left stops even when something dropped the
    ClientGone that said so: it is raised again until the process ends."""
    r = subprocess.run([sys.executable, '-c', DROPPED_ONCE], capture_output=True, text=True,
                       env={**os.environ, 'PYTHONPATH': str(ROOT)})
    assert (r.returncode, r.stdout.strip()) == (0, 'raised again'), r.stderr
