"""The resident server: one per build tree, user and objbtf version.

Started by the first client that finds none (``client._spawn``), in a session
of its own with stdio on /dev/null.  It listens on its socket, imports the
encoder and the link once, and forks a child per command: the child takes
the client's stdin, stdout, stderr and working directory (passed as file
descriptors), environment, umask, CPU affinity and niceness, runs the command
as ``entry.in_process`` would (the same table-driven parse and ``dispatch``;
what needs click goes back to the client, to run in process) and sends the
exit status.  If the client goes away, its child is interrupted as a killed
command would be (atomic writes leave no half-written file).

It exits after OBJBTF_RESIDENT_IDLE seconds (default 30) without a command,
on ``objbtf server stop`` or on SIGTERM; then, if the client that started it had
OBJBTF_SERVER_LOG set, it appends one line to that file:
``objbtf-server pid=P requests=N user=U sys=S``, its own CPU plus its
children's, since this CPU is not a child of make's.
"""
from __future__ import annotations

import gc
import marshal
import os
import resource
import select
import signal
import socket
import sys
import time

from . import implementation
from .client import MAX_MESSAGE, PROTOCOL, ROOT, code_digest, runtime_dir

IDLE_DEFAULT = 30.0
#: Modules every command's child would import: loaded once, before forking.
WARM = ('objbtf.commands', 'objbtf.options', 'objbtf.encode_file', 'linkdedup.objects',
        'linkdedup.pipeline', 'linkdedup.workers', 'subprocess', 'traceback')


class Server:
    def __init__(self, path: str, code: str):
        self.path = path
        self.code = code
        self.started = time.time()
        self.requests = 0
        self.children: set[int] = set()
        self.last_active = time.monotonic()
        self.terminated = False
        log = os.environ.get('OBJBTF_SERVER_LOG')
        self.log = os.path.abspath(log) if log else None
        self.idle = _seconds(os.environ.get('OBJBTF_RESIDENT_IDLE'), IDLE_DEFAULT)
        os.umask(0o077)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(path)
        self.listener.listen(socket.SOMAXCONN)
        self.inode = os.stat(path).st_ino

    def status(self) -> dict:
        return {'pid': os.getpid(), 'socket': self.path, 'code': self.code, 'root': ROOT,
                'modules': implementation().split()[0],    # compiled or pure
                'requests': self.requests, 'running': len(self.children),
                'uptime': round(time.time() - self.started, 1), 'idle_exit': self.idle}

    def loop(self) -> socket.socket | None:
        """Serve until idle or asked to stop; the stopper's connection, if any."""
        while not self.terminated:
            self._reap()
            if not self.children and time.monotonic() - self.last_active > self.idle:
                return None
            readable, _, _ = select.select([self.listener], [], [], 0.5)
            if not readable:
                continue
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            self.last_active = time.monotonic()
            stopper = self._take(conn)
            if stopper is not None:
                return stopper
        return None

    def terminate(self, _sig, _frame) -> None:
        """SIGTERM: stop as on ``objbtf server stop`` (the log line included)."""
        self.terminated = True

    def _take(self, conn: socket.socket) -> socket.socket | None:
        """Fork a child for a command; answer status; return a stop request."""
        _, uid, gid = _peer(conn)
        try:
            conn.settimeout(5.0)        # clients send right after connecting
            kind = conn.recv(1, socket.MSG_PEEK) if uid == os.geteuid() and gid == os.getegid() else b''
            conn.settimeout(None)
        except OSError:
            kind = b''
        if kind == b'R':
            try:
                child = os.fork()
            except OSError:             # the client sees no answer and runs it itself
                conn.close()
                return None
            if child == 0:
                self.listener.close()   # a killed server must leave no one listening
                _child(conn)            # never returns
            self.requests += 1
            self.children.add(child)
        elif kind == b'S':
            conn.recv(MAX_MESSAGE)
            self._reap()
            _send(conn, ('status', self.status()))
        elif kind == b'Q':
            conn.recv(MAX_MESSAGE)
            return conn
        conn.close()
        return None

    def _reap(self) -> None:
        while self.children:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self.last_active = time.monotonic()

    def shut(self, stopper: socket.socket | None) -> None:
        """Stop listening (the socket goes first, so new clients start a new
        server), finish the running commands, log the CPU, answer the stopper."""
        self._unlink()
        self.listener.close()
        while self.children:
            pid, _ = os.waitpid(-1, 0)
            self.children.discard(pid)
        if self.log:
            self._write_log()
        if stopper is not None:
            _send(stopper, ('stopped', self.status()))
            stopper.close()

    def _unlink(self) -> None:
        """Remove the socket file if it is still this server's (a new server
        may have replaced it after this one was given up for dead)."""
        import fcntl
        runtime = runtime_dir()
        if runtime is None:
            return
        lock = os.open(f'{runtime}/start.lock', os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.stat(self.path).st_ino == self.inode:
                os.unlink(self.path)
        except OSError:
            pass
        finally:
            os.close(lock)

    def _write_log(self) -> None:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        line = (f'objbtf-server pid={os.getpid()} requests={self.requests} '
                f'user={own.ru_utime + kids.ru_utime:.3f} sys={own.ru_stime + kids.ru_stime:.3f}\n')
        try:
            fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            with os.fdopen(fd, 'w') as f:
                f.write(line)
        except OSError:
            pass


def _seconds(text: str | None, default: float) -> float:
    try:
        return max(0.0, float(text)) if text else default
    except ValueError:
        return default


def _peer(conn: socket.socket) -> tuple[int, int, int]:
    """pid, uid and gid of the connecting process (SO_PEERCRED)."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return tuple(int.from_bytes(raw[i:i + 4], sys.byteorder) for i in (0, 4, 8))


def _send(conn: socket.socket, message: tuple) -> None:
    try:
        conn.send(marshal.dumps(message))
    except OSError:
        pass


class ClientGone(BaseException):
    """The client of this child went away: stop as a killed command would."""


def _child(conn: socket.socket) -> None:
    """In the forked child: become the client's command, run it, report."""
    status = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        request = _adopt(conn)
        if request is None:
            os._exit(1)
        from .options import parse_fast
        parsed = parse_fast(request)
        if parsed is None:
            _send(conn, ('fallback',))
            os._exit(0)
        _watch_client(conn)
        _send(conn, ('ok',))
        status = _run(parsed)
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGIO, signal.SIG_IGN)
        _send(conn, ('exit', status))
    except ClientGone:
        pass
    finally:
        os._exit(status)


def _adopt(conn: socket.socket) -> list[str] | None:
    """Take the client's descriptors and settings; its argv (without the
    program name), or None if the request is not one this server reads."""
    message, ancillary, flags, _ = conn.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(4 * 4))
    fds = [int.from_bytes(data[i:i + 4], sys.byteorder)
           for level, kind, data in ancillary
           if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
           for i in range(0, len(data) - 3, 4)]
    if len(fds) != 4 or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or message[:1] != b'R':
        return None
    version, _, argv, environ, umask, cpus, nice = marshal.loads(message[1:])
    if version != PROTOCOL:
        return None
    for fd in (0, 1, 2):
        os.dup2(fds[fd], fd)
    os.fchdir(fds[3])
    for fd in fds:
        os.close(fd)
    _take_environment(environ)
    os.umask(umask)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:
        pass
    if nice > os.getpriority(os.PRIO_PROCESS, 0):
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    sys.argv = argv
    return argv[1:]


def _take_environment(environ: dict[bytes, bytes]) -> None:
    """Make the process environment the client's, changing only what
    differs (a fork's every write copies a page)."""
    env = os.environb
    for name in [n for n in env if n not in environ]:
        del env[name]
    for name, value in environ.items():
        if env.get(name) != value:
            env[name] = value


def _watch_client(conn: socket.socket) -> None:
    """Raise ClientGone when the client's end of ``conn`` closes (SIGIO)."""
    def gone(_sig, _frame):
        try:
            if conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b'':
                raise ClientGone
        except BlockingIOError:
            pass
        except OSError:
            raise ClientGone from None
    signal.signal(signal.SIGIO, gone)
    import fcntl
    fcntl.fcntl(conn.fileno(), fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(conn.fileno(), fcntl.F_SETFL, fcntl.fcntl(conn.fileno(), fcntl.F_GETFL) | os.O_ASYNC)
    gone(signal.SIGIO, None)        # it may have left already


def _run(parsed) -> int:
    """``dispatch`` as the in-process path runs it, exceptions included."""
    from .commands import dispatch
    try:
        return dispatch(parsed)
    except SystemExit as done:
        code = done.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except ClientGone:
        raise
    except KeyboardInterrupt:
        return 130
    except Exception:               # what Python itself would print, in process
        import traceback
        traceback.print_exc()
        return 1


def main(args: list[str]) -> None:
    """The server's process, as ``client._spawn`` starts it: PATH CODE READY_FD."""
    path, code, ready = args[0], args[1], int(args[2])
    if code_digest() != code:       # the client saw other code than this is
        os._exit(1)
    server = Server(path, code)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, server.terminate)
    os.write(ready, b'1')
    os.close(ready)
    os.chdir('/')
    for name in WARM:
        try:
            __import__(name)
        except ImportError:         # the child imports it then, and reports the error
            pass
    if code_digest() != code:       # changed while importing: never serve it
        server.shut(None)
        os._exit(1)
    gc.collect()
    gc.freeze()                     # children share these pages instead of copying them
    server.shut(server.loop())
    os._exit(0)
