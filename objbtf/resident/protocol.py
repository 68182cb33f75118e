"""The resident server's wire protocol and address, shared by the server
and both clients: the messages' constants, and where a tree's server
listens (the runtime directory, the digests of the tree and of the code).

Written so that C can follow it: the digests hash plain text, the request
is a marshal of bytes and ints, the replies are fixed bytes (``REPLY_*``).
The C client (``client.c``) gets these constants from here when it is built
(``native_client.build``), and computes the same digests.  Imports only
built-in modules, as the Python client does.
"""
import posix
import sys
from _blake2 import blake2b

#: Bumped whenever a message changes; part of the code digest anyway.
PROTOCOL = 3
#: The server's replies to a command: it runs, run it in the client, its exit
#: status (REPLY_EXIT and the status, 4 bytes little-endian, signed).
REPLY_OK = b'ok'
REPLY_FALLBACK = b'fallback'
REPLY_EXIT = b'exit'
#: The server's reply to a client not confined as the server is: run the
#: command in the client; what differs follows (``confinement.PARTS``).
REPLY_CONFINED = b'confined:'
#: The first byte of a client's message: run a command (then the marshalled
#: request), a server's status, stop the server, or say that a request was
#: larger than the socket takes (each of these three then ``(PROTOCOL,)``).
REQUEST_RUN = b'R'
REQUEST_STATUS = b'S'
REQUEST_STOP = b'Q'
REQUEST_TOO_BIG = b'T'
#: OBJBTF_VERBOSE=1 (any value but 0): a client says on one line why it ran
#: a command in process rather than through the server.
VERBOSE = 'OBJBTF_VERBOSE'
NOT_CONFINED_AS_SERVER = 'not confined as the server is'
TOO_BIG = 'the request is larger than the socket takes (the environment, mostly)'

#: Largest message (the environment is most of it).
MAX_MESSAGE = 1 << 20
#: Longest socket path AF_UNIX takes (sun_path is 108 bytes with its NUL).
MAX_SOCKET_PATH = 107
#: Length of "/objbtf/TREE-CODE.sock" below the runtime directory.
SOCKET_NAME = 46


def _root() -> str:
    """The directory that holds the objbtf and linkdedup packages."""
    here = __file__ if __file__.startswith('/') else posix.getcwd() + '/' + __file__
    return here.rsplit('/', 3)[0]


ROOT = _root()
PACKAGES = ('objbtf', 'linkdedup')


def runtime_dir() -> str | None:
    """The user's directory for server sockets, created 0700 and checked:
    a directory (not a link) owned by this user that no one else may enter.
    $XDG_RUNTIME_DIR/objbtf, else /tmp/objbtf-UID; None if it fails."""
    uid = posix.geteuid()
    xdg = posix.environ.get(b'XDG_RUNTIME_DIR', b'').decode(errors='surrogateescape')
    usable = xdg.startswith('/') and len(xdg) + SOCKET_NAME <= MAX_SOCKET_PATH
    path = f'{xdg}/objbtf' if usable and _private(xdg, uid) else f'/tmp/objbtf-{uid}'
    try:
        posix.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    return path if _private(path, uid) else None


def _private(path: str, uid: int) -> bool:
    try:
        st = posix.lstat(path)
    except OSError:
        return False
    return (st.st_mode & 0o170000) == 0o040000 and st.st_uid == uid and not st.st_mode & 0o077


def code_digest(root: str = ROOT) -> str:
    """Who would run the command: the interpreter, and each file of objbtf's
    packages under ``root`` by path, size, inode, mtime and ctime (any
    rewrite, reinstall or edit changes the ctime).  Stats, not contents: a
    client computes it on every call (0.25 to 1.3 ms)."""
    h = blake2b(digest_size=8)
    # OBJBTF_PURE picks the compiled modules' sources (objbtf/__init__.py).
    pure = int(posix.environ.get(b'OBJBTF_PURE', b'0') != b'0')
    h.update(f'{PROTOCOL}\0{sys.executable}\0{sys.version}\0{root}\0{pure}\n'
             .encode(errors='surrogateescape'))
    stack = [f'{root}/{p}' for p in PACKAGES]
    while stack:
        directory = stack.pop()
        try:
            entries = sorted(posix.scandir(directory), key=lambda e: e.name)
        except OSError:
            h.update(b'missing ' + directory.encode(errors='surrogateescape'))
            continue
        for e in entries:
            if e.name == '__pycache__':
                continue
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
                continue
            st = e.stat()
            h.update(f'{e.path}\0{st.st_size}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n'
                     .encode(errors='surrogateescape'))
    return h.hexdigest()


def tree_digest(cwd: str) -> str:
    """The tree, and the groups this user works with in it (the server runs
    commands with the groups of the client that started it)."""
    groups = ','.join(map(str, sorted(posix.getgroups())))
    key = f'{cwd}\0{posix.getegid()}\0{groups}'.encode(errors='surrogateescape')
    return blake2b(key, digest_size=8).hexdigest()


def socket_path(runtime: str, cwd: str, code: str) -> str:
    """TREE-CODE.sock: every server of a tree shares the TREE prefix."""
    return f'{runtime}/{tree_digest(cwd)}-{code}.sock'
