"""The resident server serves only clients confined as it is: a client with
lower resource limits, ``no_new_privs``, another mount namespace or another
cgroup runs its command itself, so that its compiler runs confined as its
caller meant; with OBJBTF_VERBOSE it says so on one line, both clients
alike, and ``server status`` counts it.  A request larger than the socket
takes is said and counted the same way.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import socket
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, need
from objbtf.resident import confinement as confinement_module
from objbtf.resident.confinement import Confinement, boottime
from test_resident import NATIVE, Tree, objects, populate, runtime  # noqa: F401  (fixtures)

LINE = ('objbtf: cc: run in this process, not by the resident server: '
        'not confined as the server is ({})\n')


def probe(tree: Tree, shell: str, prefix: tuple[str, ...] = (), **env: str) -> tuple[str, str]:
    """``objbtf cc -- sh -c SHELL`` through the tree's server (started
    unconfined first): what the command wrote to out.txt, and stderr."""
    started = tree.run('cc', '--', 'true')
    assert started.returncode == 0 and tree.servers(), started.stderr
    r = tree.run('cc', '--', 'sh', '-c', f'{shell} > out.txt', prefix=prefix, **env)
    assert r.returncode == 0, r.stderr
    return (tree.path / 'out.txt').read_text(), r.stderr


def confined_count(tree: Tree) -> int:
    [server] = tree.servers()
    return int(server['confined'])


def test_lower_limits_keep_the_compiler_confined(tmp_path, runtime):
    tree = Tree(tmp_path, runtime, OBJBTF_VERBOSE='1')
    out, err = probe(tree, 'ulimit -n', prefix=(need('prlimit'), '--nofile=64:64'))
    assert out == '64\n'
    assert err == LINE.format('resource limits')
    assert confined_count(tree) == 1
    out, err = probe(tree, 'ulimit -n')             # the same limits: served
    assert out != '64\n' and err == '' and confined_count(tree) == 1
    tree.stop()


def test_no_new_privs_keeps_the_compiler_confined(tmp_path, runtime):
    tree = Tree(tmp_path, runtime, OBJBTF_VERBOSE='1')
    out, err = probe(tree, 'grep NoNewPrivs /proc/self/status',
                     prefix=(need('setpriv'), '--no-new-privs'))
    assert out == 'NoNewPrivs:\t1\n'
    assert err == LINE.format('credentials and no_new_privs, seccomp and capabilities')
    assert confined_count(tree) == 1
    tree.stop()


def test_the_c_client_says_and_does_what_the_python_client_does(tmp_path, runtime):
    program = ROOT / 'objbtf' / 'resident' / NATIVE
    if not os.access(program, os.X_OK):
        pytest.fail('objbtf-client is not built (python -m objbtf.resident.native_client)')
    tree = Tree(tmp_path, runtime, OBJBTF_VERBOSE='1')
    probe(tree, 'true')
    r = tree.native([need('setpriv'), '--no-new-privs', str(program)],
                    'cc', '--', 'sh', '-c', 'grep NoNewPrivs /proc/self/status > out.txt')
    assert r.returncode == 0
    assert (tmp_path / 'out.txt').read_text() == 'NoNewPrivs:\t1\n'
    assert r.stderr == LINE.format('credentials and no_new_privs, seccomp and capabilities')
    assert confined_count(tree) == 1
    tree.stop()


def test_another_mount_namespace_keeps_the_compiler_in_it(tmp_path, runtime):
    if os.geteuid() != 0:
        pytest.skip('unshare -m needs root (or a user namespace, which changes more)')
    tree = Tree(tmp_path, runtime, OBJBTF_VERBOSE='1')
    out, err = probe(tree, 'readlink /proc/self/ns/mnt', prefix=(need('unshare'), '-m'))
    assert out != os.readlink('/proc/self/ns/mnt') + '\n'
    assert err == LINE.format('namespaces')
    assert confined_count(tree) == 1
    tree.stop()


def _child_cgroup() -> Path | None:
    """A new cgroup this process may move a process into: a child of its
    own cgroup v2, else of its v1 pids hierarchy; None if it cannot."""
    name = f'objbtf-test-{uuid.uuid4().hex[:8]}'
    for line in Path('/proc/self/cgroup').read_text().splitlines():
        number, controllers, path = line.split(':', 2)
        if number == '0' and Path('/sys/fs/cgroup/cgroup.procs').exists():
            base = Path('/sys/fs/cgroup') / path.lstrip('/')
        elif controllers == 'pids':
            base = Path('/sys/fs/cgroup/pids') / path.lstrip('/')
        else:
            continue
        try:
            (base / name).mkdir()
        except OSError:
            continue
        return base / name
    return None


def test_another_cgroup_keeps_the_compiler_in_it(tmp_path, runtime):
    group = _child_cgroup()
    if group is None:
        pytest.skip('no cgroup here this test may create (neither a writable cgroup v2 '
                    'nor a v1 pids hierarchy; needs root or a delegated cgroup)')
    try:
        tree = Tree(tmp_path, runtime, OBJBTF_VERBOSE='1')
        enter = ('sh', '-c', f'echo $$ > {shlex.quote(str(group / "cgroup.procs"))} && exec "$@"',
                 'sh')
        out, err = probe(tree, 'cat /proc/self/cgroup', prefix=enter)
        assert group.name in out
        assert err == LINE.format('cgroup')
        assert confined_count(tree) == 1
        tree.stop()
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:     # its last process is still exiting
                time.sleep(0.1)


def test_an_environment_over_the_sockets_limit_is_said_and_counted(tmp_path, runtime, objects):
    tree = Tree(tmp_path, runtime, OBJBTF_VERBOSE='1')
    [name] = populate(tmp_path, objects[:1], 1)
    assert tree.run('encode', name).returncode == 0
    big = {f'BIG{i}': 'x' * 100_000 for i in range(4)}     # one variable takes 128 KB at most
    r = tree.run('encode', name, **big)
    assert r.returncode == 0
    assert r.stderr == ('objbtf: encode: run in this process, not by the resident server: '
                        'the request is larger than the socket takes (the environment, mostly)\n')
    [server] = tree.servers()
    assert (server['too_big'], server['requests']) == ('1', '1')
    program = ROOT / 'objbtf' / 'resident' / NATIVE
    if os.access(program, os.X_OK):
        native = tree.native(program, 'encode', name, **big)
        assert (native.returncode, native.stderr) == (0, r.stderr)
        [server] = tree.servers()
        assert server['too_big'] == '2'
    tree.stop()


def test_a_peer_confined_as_this_process_is_the_same_and_a_gone_one_differs(monkeypatch):
    """The check itself: this process against itself; a pid whose process
    is gone (or started after the connection) is never trusted."""
    confinement = Confinement()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        assert confinement.differs(ours, os.getpid(), boottime()) is None
        # Without SO_PEERPIDFD (before Linux 6.5): pidfd_open and the start time.
        monkeypatch.setattr(confinement_module, 'SO_PEERPIDFD', -1)
        assert confinement.differs(ours, os.getpid(), boottime()) is None
        assert confinement.differs(ours, os.getpid(), boottime() - 3600) == 'the process'
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        assert confinement.differs(ours, pid, boottime()) == 'the process'


def test_a_worker_is_never_idle_after_its_last_command():
    """After WORKER_REQUESTS commands a worker exits without saying it is
    idle: said, the server would hand it one more command, lost."""
    code = """if True:
        import os, socket
        from objbtf.resident import server
        server.WORKER_REQUESTS = 2
        server._adopt = lambda conn: None
        server._release = lambda: None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        if os.fork() == 0:
            ours.close()
            server._worker(theirs)
            os._exit(0)
        theirs.close()
        said = []
        for _ in range(2):
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            socket.send_fds(ours, [b'c'], [a.fileno()])
            ours.send(server.VERDICT_SERVE)
            said.append(ours.recv(1))
        print(said)
    """
    ran = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         env={**os.environ, 'PYTHONPATH': str(ROOT)}, timeout=60)
    assert ran.stdout == "[b'i', b'']\n", ran.stderr


def test_without_proc_both_clients_run_the_command(tmp_path, runtime, objects):
    """In a mount namespace without /proc (as a chroot or a minimal
    container may be): the C client finds its installation by the path it
    was run by, no server starts (it could not check its clients), and the
    command runs in process, writing without /proc, the bytes it writes
    with it."""
    if os.geteuid() != 0:
        pytest.skip('unmounting /proc in a new mount namespace needs root')
    program = ROOT / 'objbtf' / 'resident' / NATIVE
    if not os.access(program, os.X_OK):
        pytest.fail('objbtf-client is not built (python -m objbtf.resident.native_client)')
    local = Tree(tmp_path / 'local', runtime, OBJBTF_RESIDENT='0')
    [name] = populate(local.path, objects[:1], 1)
    assert local.run('encode', name).returncode == 0
    for client in ([str(program)], [sys.executable, '-m', 'objbtf']):
        tree = Tree(tmp_path / client[-1].rsplit('/', 1)[-1], runtime)
        populate(tree.path, objects[:1], 1)
        r = tree.native([need('unshare'), '-m', 'sh', '-c', 'umount -l /proc && exec "$@"', 'sh',
                         *client], 'encode', name)
        assert (r.returncode, r.stderr) == (0, ''), client
        assert (tree.path / name).read_bytes() == (local.path / name).read_bytes(), client
        assert sorted(p.name for p in (tree.path / name).parent.iterdir()) == [Path(name).name]
