"""A process's confinement, read from /proc, so that the resident server runs
a command only for a client confined as the server itself is.

The server adopts a client's descriptors, directory, environment, umask,
affinity and niceness, but everything else a process inherits stays the
server's: its credentials, namespaces, root directory, cgroup,
``no_new_privs``, seccomp state, capabilities, LSM label and resource
limits.  A client whose confinement differs in any of these (``setpriv
--no-new-privs``, ``ulimit``, ``unshare``, another cgroup or container of
the same uid that sees the socket) runs its command itself instead.

Read once per connection, by the server while the worker it handed the
connection to reads the request: 80 µs to 280 µs for a client process
that just started, by the machine's load (``docs/resident-server.md``,
"Confinement").  The peer is pinned by a pidfd
(``SO_PEERPIDFD``, the process that connected, or ``pidfd_open`` on the
``SO_PEERCRED`` pid on kernels before 6.5): /proc/PID is opened, then the
pidfd must still show the process alive, so that what is read through that
directory is the peer's and not a process that reused its pid.  With
``pidfd_open`` the pid may have been reused before it was opened; the
start time (before the connection was accepted) narrows that window.
"""
from __future__ import annotations

import os
import re
import select
import socket
import sys
import time

#: getsockopt(SOL_SOCKET, SO_PEERPIDFD): a pidfd of the connecting process
#: (Linux 6.5); Python 3.11 has no name for it.
SO_PEERPIDFD = getattr(socket, 'SO_PEERPIDFD', 77)
#: The /proc/PID/status lines that make a confinement (a regular expression
#: finds them in a third of the time a split into lines takes).
STATUS_LINES = re.compile(
    rb'^(?:Uid|Gid|Groups|NoNewPrivs|Seccomp|Seccomp_filters|CapInh|CapPrm|CapEff|CapBnd|CapAmb):.*$',
    re.M)
#: What differs, named as a client says it (``describe``).
PARTS = ('credentials and no_new_privs, seccomp and capabilities', 'resource limits', 'cgroup',
         'namespaces', 'root directory', 'security label')


def _read(name: str, directory: int) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=directory)
    except OSError:
        return None
    try:
        return os.read(fd, 65536)
    except OSError:
        return None
    finally:
        os.close(fd)


def _status(text: bytes | None) -> list[bytes] | None:
    return None if text is None else STATUS_LINES.findall(text)


def _namespaces(directory: int, names: tuple[str, ...]) -> tuple[str, ...] | None:
    """The namespaces' ids ('mnt:[4026531841]'): a readlink each, through
    the ns directory (half the time of a stat through the magic links)."""
    try:
        ns = os.open('ns', os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=directory)
    except OSError:
        return None
    try:
        return tuple(os.readlink(n, dir_fd=ns) for n in names)
    except OSError:
        return None
    finally:
        os.close(ns)


def _root(directory: int) -> tuple[int, int] | None:
    try:
        st = os.stat('root', dir_fd=directory)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Confinement:
    """The confinement of this process, compared with a peer's."""

    def __init__(self) -> None:
        self.namespaces = tuple(sorted(os.listdir('/proc/self/ns')))
        directory = os.open('/proc/self', os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.own = self._of(directory)
        finally:
            os.close(directory)

    def _of(self, directory: int, label: bool = True) -> tuple:
        """In ``PARTS``' order; None for what cannot be read (the LSM label
        also without ``label``: when this process has none to read, no
        process has, and the read would cost a sixth of the check)."""
        return (_status(_read('status', directory)), _read('limits', directory),
                _read('cgroup', directory), _namespaces(directory, self.namespaces),
                _root(directory), _read('attr/current', directory) if label else None)

    def differs(self, conn: socket.socket, pid: int, accepted: float) -> str | None:
        """What of the peer of ``conn`` (``pid`` from SO_PEERCRED, its
        connection accepted at CLOCK_BOOTTIME ``accepted``) differs from this
        process's confinement, as ``PARTS`` names it; None if nothing does.
        A peer that cannot be pinned or read differs ('the process')."""
        pidfd, pinned = _pidfd(conn, pid)
        if pidfd is None:
            return 'the process'
        try:
            try:
                directory = os.open(f'/proc/{pid}', os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                return 'the process'
            try:
                # Alive now: /proc/PID is the pidfd's process (a pid is
                # reused only once its process was reaped).
                if select.select([pidfd], [], [], 0)[0] or not (
                        pinned or _started_before(directory, accepted)):
                    return 'the process'
                theirs = self._of(directory, label=self.own[-1] is not None)
            finally:
                os.close(directory)
        finally:
            os.close(pidfd)
        for part, mine, other in zip(PARTS, self.own, theirs):
            if mine != other:
                return part
        return None


def _pidfd(conn: socket.socket, pid: int) -> tuple[int | None, bool]:
    """A pidfd of the peer, and whether it is the very process that
    connected (SO_PEERPIDFD) rather than whichever has ``pid`` now."""
    try:
        return int.from_bytes(conn.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD, 4),
                              sys.byteorder), True
    except OSError:
        pass
    try:
        return (os.pidfd_open(pid) if pid > 0 else None), False
    except OSError:
        return None, False


#: Clock ticks, as /proc/PID/stat counts a process's start.
_TICKS = os.sysconf('SC_CLK_TCK')


def _started_before(directory: int, accepted: float) -> bool:
    """Whether the process of /proc/PID ``directory`` started before its
    connection was accepted (one that started after reused the peer's pid)."""
    stat = _read('stat', directory)
    try:
        start = int(stat.rsplit(b')', 1)[1].split()[19]) if stat else None
    except (IndexError, ValueError):
        return False
    return start is not None and start <= accepted * _TICKS + 1


def boottime() -> float:
    """Now on the clock /proc/PID/stat's start times count from."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)
