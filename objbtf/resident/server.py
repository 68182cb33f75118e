"""The resident server: one per build tree, user and objbtf version.

Started by the first client that finds none (``client._spawn``), in a session
of its own with stdio on /dev/null.  It listens on its socket, imports the
encoder and the link once, and hands each command to a worker: a process
forked from it that serves one command after another (``WORKER_REQUESTS``
of them, at most one per CPU at a time).  The worker takes the client's
stdin, stdout, stderr and working directory (passed as file descriptors),
environment, umask, CPU affinity and niceness, runs the command as
``objbtf.cli.entry.in_process`` would (the same table-driven parse and ``dispatch``;
what needs click goes back to the client, to run in process), sends the
exit status and puts its stdio back on /dev/null.  A worker runs ``encode``
and a module's ``link`` itself (a fork per object cost about 6 ms of CPU,
its page faults mostly; and the worker keeps the indexed vmlinux of one
module link for the next, ``linkdedup.pipeline._last_base``); any other command, or one that raised its
niceness, in a child it forks, whose end changes nothing in the worker.
When every worker is busy, the server forks such a child itself.  If the
client goes away, its command is interrupted as a killed command would be
(atomic writes leave no half-written file) and the process that ran it
exits.

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
import stat
import sys
import time

from .. import implementation
from ..cli.options import Parsed, parse_fast
from ..source_digest import source_digest
from .confinement import Confinement, boottime
from .protocol import (MAX_MESSAGE, PROTOCOL, REPLY_CONFINED, REPLY_EXIT, REPLY_FALLBACK,
                       REPLY_OK, REQUEST_RUN, REQUEST_STATUS, REQUEST_STOP, REQUEST_TOO_BIG, ROOT,
                       code_digest, runtime_dir)

IDLE_DEFAULT = 30.0
#: The server's word to a worker on the client it just handed over, once it
#: compared their confinements (meanwhile the worker read the request):
#: serve it, or leave it to the client (then what differs).
VERDICT_SERVE = b'+'
VERDICT_CONFINED = b'-'
#: A worker exits after this many commands, or once it grew this large.
WORKER_REQUESTS = 500
WORKER_MAX_RSS_KB = 512 * 1024
#: Modules every command's child would import: loaded once, before forking.
WARM = ('objbtf.cli.commands', 'objbtf.cli.options', 'objbtf.encode.object_file',
        'linkdedup.objects', 'linkdedup.pipeline', 'linkdedup.workers', 'subprocess', 'traceback')


class Server:
    def __init__(self, path: str, code: str):
        self.path = path
        self.code = code
        self.started = time.time()
        self.requests = 0
        #: Commands left to their clients: not confined as this server is;
        #: larger than the socket takes.
        self.confined = 0
        self.too_big = 0
        self.confinement = Confinement()
        self.children: set[int] = set()
        #: Workers by pid: the server's end of each one's channel; the idle ones.
        self.workers: dict[int, socket.socket] = {}
        self.idle_workers: list[int] = []
        self.max_workers = os.cpu_count() or 1
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
                'requests': self.requests, 'confined': self.confined, 'too_big': self.too_big,
                'running': len(self.children) + self._busy_workers(),
                'workers': len(self.workers),
                'uptime': round(time.time() - self.started, 1), 'idle_exit': self.idle}

    def loop(self) -> socket.socket | None:
        """Serve until idle or asked to stop; the stopper's connection, if any."""
        while not self.terminated:
            self._reap()
            if (not self.children and not self._busy_workers()
                    and time.monotonic() - self.last_active > self.idle):
                return None
            channels = [c for pid, c in self.workers.items() if pid not in self.idle_workers]
            readable, _, _ = select.select([self.listener, *channels], [], [], 0.5)
            for channel in readable:
                if channel is not self.listener:
                    self._worker_done(channel)
            if self.listener not in readable:
                continue
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            accepted = boottime()
            self.last_active = time.monotonic()
            stopper = self._take(conn, accepted)
            if stopper is not None:
                return stopper
        return None

    def terminate(self, _sig, _frame) -> None:
        """SIGTERM: stop as on ``objbtf server stop`` (the log line included)."""
        self.terminated = True

    def _take(self, conn: socket.socket, accepted: float) -> socket.socket | None:
        """Fork a child for a command (unless its client is not confined as
        this server is: it then runs it itself); answer status; return a stop
        request.  ``accepted``: when ``conn`` was accepted (``boottime``)."""
        pid, uid, gid = _peer(conn)
        try:
            conn.settimeout(5.0)        # clients send right after connecting
            kind = conn.recv(1, socket.MSG_PEEK) if uid == os.geteuid() and gid == os.getegid() else b''
            conn.settimeout(None)
        except OSError:
            kind = b''
        if kind == REQUEST_RUN:
            worker = self._to_worker(conn)
            if worker is not None:
                # The worker reads the request meanwhile, and waits for this.
                differs = self.confinement.differs(conn, pid, accepted)
                try:
                    self.workers[worker].send(VERDICT_CONFINED + differs.encode() if differs
                                              else VERDICT_SERVE)
                except OSError:         # it exited: reaped later
                    pass
            elif differs := self.confinement.differs(conn, pid, accepted):
                conn.recv(MAX_MESSAGE)  # closed unread, the client would see a reset
                _send(conn, REPLY_CONFINED + differs.encode())
            else:
                try:
                    child = os.fork()
                except OSError:         # the client sees no answer and runs it itself
                    conn.close()
                    return None
                if child == 0:
                    self._forget()
                    _child(conn)        # never returns
                self.children.add(child)
            if differs:
                self.confined += 1
            else:
                self.requests += 1
        elif kind == REQUEST_STATUS:
            conn.recv(MAX_MESSAGE)
            self._reap()
            _send(conn, marshal.dumps(('status', self.status())))
        elif kind == REQUEST_STOP:
            conn.recv(MAX_MESSAGE)
            return conn
        elif kind == REQUEST_TOO_BIG:
            conn.recv(MAX_MESSAGE)
            self.too_big += 1
        conn.close()
        return None

    def _busy_workers(self) -> int:
        return len(self.workers) - len(self.idle_workers)

    def _to_worker(self, conn: socket.socket) -> int | None:
        """Hand ``conn`` to an idle worker, or to a new one if there is room;
        its pid, or None when every worker is busy (or none could start).
        The worker then waits for the verdict on the client's confinement."""
        while self.idle_workers or len(self.workers) < self.max_workers:
            pid = self.idle_workers.pop() if self.idle_workers else self._start_worker()
            if pid is None:
                return None
            try:
                socket.send_fds(self.workers[pid], [b'c'], [conn.fileno()])
                return pid
            except OSError:             # it exited (its end closed): reaped later
                self.workers.pop(pid).close()
        return None

    def _start_worker(self) -> int | None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            return None
        if pid == 0:
            try:
                ours.close()
                self._forget()
                _worker(theirs)
            finally:
                os._exit(0)             # never back into the server's loop
        theirs.close()
        self.workers[pid] = ours
        return pid

    def _forget(self) -> None:
        """In a new child: close what is the server's alone, so that a killed
        server leaves no one listening and each worker sees its channel end."""
        self.listener.close()
        for channel in self.workers.values():
            channel.close()

    def _worker_done(self, channel: socket.socket) -> None:
        """A busy worker's channel spoke: idle again, or gone."""
        pid = next((p for p, c in self.workers.items() if c is channel), None)
        if pid is None:
            return
        try:
            done = channel.recv(1) == b'i'
        except OSError:
            done = False
        if done:
            self.idle_workers.append(pid)
        else:
            self.workers.pop(pid).close()
        self.last_active = time.monotonic()

    def _reap(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            if pid in self.workers:
                self.workers.pop(pid).close()
                if pid in self.idle_workers:
                    self.idle_workers.remove(pid)
            self.last_active = time.monotonic()

    def shut(self, stopper: socket.socket | None) -> None:
        """Stop listening (the socket goes first, so new clients start a new
        server), finish the running commands, log the CPU, answer the stopper."""
        self._unlink()
        self.listener.close()
        for channel in self.workers.values():
            channel.close()             # each worker exits after its command
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
        self.children.clear()
        self.workers.clear()
        if self.log:
            self._write_log(self.log)
        if stopper is not None:
            _send(stopper, marshal.dumps(('stopped', self.status())))
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

    def _write_log(self, log: str) -> None:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        line = (f'objbtf-server pid={os.getpid()} requests={self.requests} '
                f'user={own.ru_utime + kids.ru_utime:.3f} sys={own.ru_stime + kids.ru_stime:.3f}\n')
        try:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
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
    pid, uid, gid = (int.from_bytes(raw[i:i + 4], sys.byteorder) for i in (0, 4, 8))
    return pid, uid, gid


def _send(conn: socket.socket, message: bytes) -> None:
    try:
        conn.send(message)
    except OSError:
        pass


def _status_bytes(status: int) -> bytes:
    """An exit status as REPLY_EXIT carries it (one out of range is 1)."""
    return (status if -(1 << 31) <= status < 1 << 31 else 1).to_bytes(4, 'little', signed=True)


class ClientGone(BaseException):
    """The client of this child went away: stop as a killed command would."""


#: Seconds between two raises of ClientGone once the client is gone.
GONE_AGAIN = 0.05


def _raise_client_gone(_sig, _frame) -> None:
    raise ClientGone


def _client_gone() -> None:
    """Raise ClientGone, and again every GONE_AGAIN seconds until the process
    ends: a C extension that meets an error while it runs Python code drops
    it to let its Python twin decide, this one too, and the command would
    then run to its end for nobody."""
    signal.signal(signal.SIGALRM, _raise_client_gone)
    signal.setitimer(signal.ITIMER_REAL, GONE_AGAIN, GONE_AGAIN)
    raise ClientGone


def _child(conn: socket.socket, parsed: Parsed | None = None) -> None:
    """In a child forked for one command: become the client's command (unless
    its worker did already and read it: ``parsed``), run it, report, exit."""
    status = 1
    try:
        _command_signals()
        if parsed is None:
            request = _adopt(conn)
            if request is None:
                return
            parsed = _parse(conn, request)
            if parsed is None:          # the client runs it
                status = 0
                return
        status = _serve(conn, parsed)
    except ClientGone:
        pass
    finally:
        os._exit(status)


def _command_signals() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _parse(conn: socket.socket, request: list[str]) -> Parsed | None:
    """The command line as the in-process path reads it; None when it needs
    click: then the client is told to run it in process."""
    parsed = parse_fast(request)
    if parsed is None:
        _send(conn, REPLY_FALLBACK)
    return parsed


def _serve(conn: socket.socket, parsed: Parsed) -> int:
    """Run an adopted command and send its exit status."""
    _watch_client(conn)
    _send(conn, REPLY_OK)
    status = _run(parsed)
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGIO, signal.SIG_IGN)
    _send(conn, REPLY_EXIT + _status_bytes(status))
    return status


def _in_worker(parsed: Parsed) -> bool:
    """Whether a worker runs the command itself: an object's encode or a
    module's link (with --base), short and leaving nothing behind; not cc
    (its compiler) nor vmlinux's link (its memory would stay)."""
    return parsed.command == 'encode' or (parsed.command == 'link'
                                          and parsed.values.get('base_path') is not None)


def _worker(channel: socket.socket) -> None:
    """A worker's life: serve the connections the server hands over on
    ``channel`` one at a time, saying b'i' when idle again, until the server
    closes it or this worker should not serve another (or its client went
    away mid-command: ClientGone).  Its caller then ends the process."""
    _command_signals()
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    for served in range(1, WORKER_REQUESTS + 1):
        _, fds, _, _ = socket.recv_fds(channel, 1, 1)
        if not fds:
            return                      # the server closed the channel
        conn = socket.socket(fileno=fds[0])
        request = _adopt(conn)
        verdict = channel.recv(MAX_MESSAGE)
        if verdict != VERDICT_SERVE:    # or the server is gone
            _send(conn, REPLY_CONFINED + (verdict[len(VERDICT_CONFINED):] or b'the process'))
            request = None
        parsed = _parse(conn, request) if request is not None else None
        if parsed is not None:
            if not _in_worker(parsed) or os.getpriority(os.PRIO_PROCESS, 0) != nice:
                _in_child(conn, parsed)
            else:
                _serve(conn, parsed)
        conn.close()
        _release()
        if (served == WORKER_REQUESTS or os.getpriority(os.PRIO_PROCESS, 0) != nice
                or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > WORKER_MAX_RSS_KB):
            return                      # never idle first: it would be handed one more
        channel.send(b'i')


def _in_child(conn: socket.socket, parsed: Parsed) -> None:
    """Run an adopted command in a child of this worker; wait for it."""
    try:
        pid = os.fork()
    except OSError:
        return                          # no status: the client reports it
    if pid == 0:
        _child(conn, parsed)
    os.waitpid(pid, 0)


def _release() -> None:
    """Between a worker's commands: its stdio back on /dev/null (a client's
    pipe must not stay open here) and its directory back to /."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    os.chdir('/')


def _adopt(conn: socket.socket) -> list[str] | None:
    """Take the client's descriptors and settings; its argv (without the
    program name), or None if the request is not one this server reads."""
    message, ancillary, flags, _ = conn.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(4 * 4))
    fds = [int.from_bytes(data[i:i + 4], sys.byteorder)
           for level, kind, data in ancillary
           if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
           for i in range(0, len(data) - 3, 4)]
    whole = len(fds) == 4 and not flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC)
    fields = marshal.loads(message[1:]) if whole and message[:1] == REQUEST_RUN else None
    if fields is None or fields[0] != PROTOCOL:
        for fd in fds:
            os.close(fd)
        return None
    _, _, argv, environ, umask, cpus, nice = fields
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
    sys.argv = [os.fsdecode(a) for a in argv]
    return sys.argv[1:]


#: The environment a worker last took, as a plain dict: the commands of one
#: build mostly share theirs, and comparing two dicts takes microseconds where
#: reading ``os.environb`` name by name took 0.14 ms a command (for 140
#: variables).  Nothing a command runs changes the environment.
_taken: dict[bytes, bytes] | None = None


def _take_environment(environ: dict[bytes, bytes]) -> None:
    """Make the process environment the client's, changing only what
    differs (a fork's every write copies a page)."""
    global _taken
    if _taken is None:
        _taken = dict(os.environb)
    if environ == _taken:
        return
    env = os.environb
    for name in [n for n in _taken if n not in environ]:
        env.pop(name, None)
    for name, value in environ.items():
        if _taken.get(name) != value:
            env[name] = value
    _taken = environ


def _watch_client(conn: socket.socket) -> None:
    """Raise ClientGone when the client's end of ``conn`` closes (SIGIO)."""
    def gone(_sig, _frame):
        try:
            if conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b'':
                _client_gone()
        except BlockingIOError:
            pass
        except OSError:
            _client_gone()
    signal.signal(signal.SIGIO, gone)
    import fcntl
    fcntl.fcntl(conn.fileno(), fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(conn.fileno(), fcntl.F_SETFL, fcntl.fcntl(conn.fileno(), fcntl.F_GETFL) | os.O_ASYNC)
    gone(signal.SIGIO, None)        # it may have left already


def _run(parsed) -> int:
    """``dispatch`` as the in-process path runs it, exceptions included."""
    from ..cli.commands import dispatch
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
    """The server's process, as ``client._spawn`` starts it: PATH CODE FD,
    FD closed once it listens: the pipe a client waits on, or the start lock
    that ``client.prestart`` handed over."""
    path, code, ready = args[0], args[1], int(args[2])
    if code_digest() != code:       # the client saw other code than this is
        os._exit(1)
    server = Server(path, code)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, server.terminate)
    if stat.S_ISFIFO(os.fstat(ready).st_mode):     # a client waits on this pipe
        os.write(ready, b'1')
    os.close(ready)                 # or this is the start lock, held until now
    os.chdir('/')
    for name in WARM:
        try:
            __import__(name)
        except ImportError:         # the child imports it then, and reports the error
            pass
    source_digest('objbtf')         # the encode cache's key: read once, not per worker
    if code_digest() != code:       # changed while importing (or read): never serve it
        server.shut(None)
        os._exit(1)
    gc.collect()
    gc.freeze()                     # children share these pages instead of copying them
    server.shut(server.loop())
    os._exit(0)
