"""The resident server's client: hand one command to the build tree's server.

``encode`` and ``cc`` run once per object of a kernel build and ``link`` once
per module; starting Python and importing the encoder and the link costs
each of them more than most objects' encoding.  A resident server (``server``)
keeps those imports warm and forks a child per command.  This client sends
the command line, the environment, the umask, the CPU affinity and the
niceness, and its stdin, stdout, stderr and working directory as file
descriptors (SCM_RIGHTS), then waits for the exit status.  It starts the
server when there is none, and returns None, meaning "run it in this
process", whenever anything about the server fails.

One server per build tree, user and objbtf version: its socket lives in a
per-user directory (mode 0700, owned by the user, checked before use), named
after the working directory and a digest of objbtf's code and the
interpreter, so a changed objbtf gets a new server and never an old one.

Imports only built-in modules (posix, _socket, marshal, _blake2): ``import
os`` alone costs 6 ms here.  Started as ``python3 -S .../objbtf/cli/entry_no_site.py`` it
also skips site, which costs 10 to 40 ms with a few .pth files installed.
The quickest client is ``objbtf/resident/objbtf-client``, this one in C (client.c,
built at install: native_client.py), what ``objbtf server command`` prints
when it is there: it finds the same socket and sends the same request, and
hands every case it does not serve to the command line's entry
(``objbtf.cli.entry``), through this one.  What the two share is the
protocol (``protocol``).
"""
import marshal
import posix
from errno import EMSGSIZE
import sys
import _socket

from .protocol import (MAX_MESSAGE, MAX_SOCKET_PATH, NOT_CONFINED_AS_SERVER, PROTOCOL,
                       REPLY_CONFINED, REPLY_EXIT, REPLY_FALLBACK, REQUEST_RUN, REQUEST_STATUS,
                       REQUEST_STOP, REQUEST_TOO_BIG, ROOT, TOO_BIG, VERBOSE, code_digest,
                       runtime_dir, socket_path, tree_digest)

#: Seconds the first client waits for the server it started to listen.
START_TIMEOUT = 10.0


def enabled() -> bool:
    """OBJBTF_RESIDENT=0 turns the server off."""
    return posix.environ.get(b'OBJBTF_RESIDENT', b'1') != b'0'


def serve(argv: list[str]) -> int | None:
    """Run ``argv`` (a SERVED command) through the server; its exit status, or
    None when it must run in this process."""
    try:
        address = _address()
        if address is None:
            return None
        runtime, path, code = address
        for attempt in range(2):
            status = _request(path, argv)
            if status is not _NOT_SERVED:
                return status
            if attempt or not _start(runtime, path, code):
                return None
    except OSError:         # before the server took the command (see _request)
        return None
    return None


_NOT_SERVED = object()


def _connect(path: str):
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET | _socket.SOCK_CLOEXEC)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def _request(path: str, argv: list[str]):
    """The command's exit status; None to run it here; _NOT_SERVED when no
    server took it (none there, or one shutting down)."""
    sock = _connect(path)
    if sock is None:
        return _NOT_SERVED
    try:
        umask = posix.umask(0o022)
        posix.umask(umask)
        args = [a.encode(errors='surrogateescape') for a in ('objbtf', *argv)]
        message = marshal.dumps((PROTOCOL, 'run', args, dict(posix.environ), umask,
                                 sorted(posix.sched_getaffinity(0)),
                                 posix.getpriority(posix.PRIO_PROCESS, 0)))
        cwd = posix.open('.', posix.O_PATH | posix.O_DIRECTORY | posix.O_CLOEXEC)
        fds = b''.join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2, cwd))
        try:
            sock.sendmsg([REQUEST_RUN + message], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        except OSError as err:
            if err.errno != EMSGSIZE:
                return _NOT_SERVED
            _say(argv[0], TOO_BIG)
            try:                        # counted in the server's status
                sock.send(REQUEST_TOO_BIG + marshal.dumps((PROTOCOL,)))
            except OSError:
                pass
            return None
        finally:
            posix.close(cwd)
        # A signal that would kill this process kills it, quietly, like a
        # C program: the closed socket then stops the server's child.
        import _signal                  # type: ignore[import-not-found]  # signal.py imports enum
        _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
        try:
            reply = _receive(sock)
            if reply is None:
                return _NOT_SERVED           # never started: the server went away
            if reply == REPLY_FALLBACK:
                return None
            if reply.startswith(REPLY_CONFINED):
                what = reply[len(REPLY_CONFINED):].decode(errors='replace')
                _say(argv[0], f'{NOT_CONFINED_AS_SERVER} ({what})')
                return None
            done = _receive(sock)
        finally:
            _signal.signal(_signal.SIGINT, _signal.default_int_handler)
        if done is None or len(done) != 8 or not done.startswith(REPLY_EXIT):
            what = ' '.join(argv[:1] + argv[1:][-1:])    # the file of encode and link
            print(f'objbtf: {what}: the resident server\'s process for this command '
                  'ended without an exit status', file=sys.stderr)
            return 1
        return int.from_bytes(done[4:], 'little', signed=True)
    finally:
        sock.close()


def _say(command: str, why: str) -> None:
    """With OBJBTF_VERBOSE, say why ``command`` runs in this process."""
    if posix.environ.get(VERBOSE.encode(), b'0') != b'0':
        print(f'objbtf: {command}: run in this process, not by the resident server: {why}',
              file=sys.stderr)


def _receive(sock) -> bytes | None:
    """One message, or None at the end of the connection."""
    try:
        data = sock.recv(MAX_MESSAGE)
    except OSError:
        return None
    return data or None


def control(kind: str) -> list[dict]:
    """Ask every server of this tree (any objbtf version) for 'status' or
    to 'stop'; their answers.  Stopping waits until each has exited."""
    runtime = runtime_dir()
    if runtime is None:
        return []
    prefix = tree_digest(posix.getcwd()) + '-'
    answers = []
    for entry in sorted(posix.scandir(runtime), key=lambda e: e.name):
        if not (entry.name.startswith(prefix) and entry.name.endswith('.sock')):
            continue
        sock = _connect(entry.path)
        if sock is None:
            continue
        try:
            sock.send((REQUEST_STATUS if kind == 'status' else REQUEST_STOP)
                      + marshal.dumps((PROTOCOL,)))
            reply = _receive(sock)
        except OSError:
            continue
        finally:
            sock.close()
        if reply is not None:
            answers.append(marshal.loads(reply)[1])
    return answers


def prestart() -> None:
    """Start the server of the tree in the working directory, unless one
    listens or the server is off, and return without waiting for it.

    For ``objbtf server command --start``, which Kbuild asks once per build
    before it compiles anything: the server's start (an interpreter and the
    imports, 60 to 80 ms) then overlaps make's walk of the tree instead of
    delaying the first object's encode, which in a rebuild after one edit is
    on the build's critical path.  The server holds the start lock until it
    listens (``_start``), so a client that comes sooner waits for it rather
    than starting another."""
    if not enabled():
        return
    try:
        address = _address()
        if address is not None:
            _start(*address, wait=False)
    except OSError:         # as in serve: the build runs without the server
        return


def _address() -> tuple[str, str, str] | None:
    """(runtime directory, socket path, code digest) of the server of the
    tree in the working directory; None when there can be none."""
    runtime = runtime_dir()
    if runtime is None:
        return None
    code = code_digest()
    path = socket_path(runtime, posix.getcwd(), code)
    if len(path.encode(errors='surrogateescape')) > MAX_SOCKET_PATH:
        return None
    return runtime, path, code


def _start(runtime: str, path: str, code: str, wait: bool = True) -> bool:
    """Start the server for ``path`` unless another client just did; whether
    one listens now (or, without ``wait``, whether one was started or was
    there).  Clients take turns through a lock, so a ``make -j`` storm
    starts one server.  Without ``wait``, the server inherits the lock and
    releases it once it listens."""
    lock = posix.open(f'{runtime}/start.lock',
                      posix.O_RDWR | posix.O_CREAT | posix.O_NOFOLLOW | posix.O_CLOEXEC, 0o600)
    try:
        if not _take_lock(lock, START_TIMEOUT if wait else 0.0):
            return False
        probe = _connect(path)
        if probe is not None:
            probe.close()
            return True
        try:
            posix.unlink(path)              # a dead server's socket
        except FileNotFoundError:
            pass
        if not wait:
            _spawn(path, code, lock)
            return True
        ready_r, ready_w = posix.pipe()
        try:
            _spawn(path, code, ready_w)
        finally:
            posix.close(ready_w)
        return _ready(ready_r)
    except OSError:
        return False
    finally:
        posix.close(lock)


def _take_lock(lock: int, timeout: float) -> bool:
    """Whether the start lock was taken within ``timeout`` seconds.  A
    server holds it from its start until it listens: one that hangs before
    must not hang every client (they then run their commands in process),
    nor make, for which ``prestart`` does not wait at all."""
    import fcntl
    import select
    pause, waited = 0.001, 0.0
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if waited >= timeout:
                return False
        select.select([], [], [], pause)
        waited += pause
        pause = min(pause * 2, 0.05)


def _spawn(path: str, code: str, signal_fd: int) -> None:
    """Start the server (``objbtf.resident.server.main``) in a session of its own,
    stdio on /dev/null, every descriptor closed but ``signal_fd``, which it
    closes once it listens on ``path`` (writing b'1' first if it is a pipe)."""
    argv = [sys.executable, '-P', '-c',
            'import sys; sys.path.insert(0, sys.argv[1]); '
            'from objbtf.resident.server import main; main(sys.argv[2:])',
            ROOT, path, code, str(signal_fd)]
    pid = posix.fork()
    if pid == 0:
        try:
            posix.setsid()
            null = posix.open('/dev/null', posix.O_RDWR)
            for fd in (0, 1, 2):
                posix.dup2(null, fd)
            posix.set_inheritable(signal_fd, True)
            posix.closerange(3, signal_fd)
            posix.closerange(signal_fd + 1, 1 << 16)
            posix.execv(sys.executable, argv)
        finally:
            posix._exit(127)


def _ready(ready_r: int) -> bool:
    """Whether the server said on the pipe ``ready_r`` that it listens."""
    import select
    try:
        readable, _, _ = select.select([ready_r], [], [], START_TIMEOUT)
        return bool(readable) and posix.read(ready_r, 1) == b'1'
    finally:
        posix.close(ready_r)

