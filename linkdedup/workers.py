"""``-j``: work over the link's blobs, shared among forked processes, and
work beside the link's own (``Background``).

The workers are forked, so each starts with what the link has already read
(the mapped file, its blobs and chunks) without copying or pickling any of
it; only a worker's result crosses back, pickled through a pipe.  The work
is cut into contiguous shards of about equal size, one per process (the
link's own process takes the first), and the results come back in shard
order, so the output cannot depend on the number of workers.
"""
from __future__ import annotations

import os
import pickle
import signal
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

from objbtf.errors import ObjbtfError

T = TypeVar('T')


class WorkerError(ObjbtfError):
    """A worker ended without a result."""


def default_jobs() -> int:
    """The CPUs this process may run on (its affinity, as a cgroup or
    taskset leaves it), like ``make -j`` and ``pahole -j`` take them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:           # not Linux
        return os.cpu_count() or 1


def shards(sizes: Sequence[int], jobs: int) -> list[range]:
    """``range(len(sizes))`` cut into at most ``jobs`` contiguous, non-empty
    ranges of about equal total size."""
    total = sum(sizes)
    jobs = max(1, min(jobs, len(sizes)))
    out: list[range] = []
    start = done = 0
    for i, size in enumerate(sizes):
        done += size
        if len(out) < jobs - 1 and done * jobs >= total * (len(out) + 1) and i + 1 < len(sizes):
            out.append(range(start, i + 1))
            start = i + 1
    out.append(range(start, len(sizes)))
    return out


def run_sharded(task: Callable[[range], T], sizes: Sequence[int], jobs: int,
                min_share: int = 1) -> list[T]:
    """``task(shard)`` for each shard of ``shards(sizes, jobs)``, the first in
    this process and the others in forked ones; the results in shard order.
    No shard is given less than ``min_share`` of the total size, below which
    a process costs more than it saves.  An exception in a worker is raised
    here again."""
    parts = shards(sizes, min(jobs, sum(sizes) // min_share))
    if len(parts) == 1 or not hasattr(os, 'fork'):
        return [task(r) for r in parts]
    pending: list[Background[T]] = []
    try:
        for r in parts[1:]:
            pending.append(Background(partial(task, r)))
        return [task(parts[0])] + [work.result() for work in pending]
    finally:
        for work in pending:
            work.abandon()


class Background(Generic[T]):
    """``task()`` in a forked process while this one goes on with other
    work; ``result()`` waits for what it returned (or raises what it
    raised), ``abandon()`` stops it if its result is not wanted.  Without
    ``fork`` (or where the system has none), ``task()`` runs here and now."""

    def __init__(self, task: Callable[[], T], fork: bool = True):
        self._pending: tuple[int, int] | None = None
        self._value: tuple[bool, Any] | None = None
        if fork and hasattr(os, 'fork'):
            self._pending = _fork(task)
        else:
            self._value = True, task()

    def result(self) -> T:
        if self._value is None:
            assert self._pending is not None
            pending, self._pending = self._pending, None
            try:
                self._value = True, _collect(*pending)
            except Exception as err:
                self._value = False, err
        ok, value = self._value
        if not ok:
            raise value
        return value

    def abandon(self) -> None:
        if self._pending is not None:
            _abandon(*self._pending)
            self._pending = None


def _fork(task: Callable[[], T]) -> tuple[int, int]:
    """A process that runs ``task()`` and writes (ok, result or
    exception) to the pipe whose reading end is returned with its pid."""
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        raise
    if pid:
        os.close(w)
        return pid, r
    code = 1
    try:
        os.close(r)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            payload = pickle.dumps((True, task()), pickle.HIGHEST_PROTOCOL)
        except Exception as err:          # raised in the parent
            payload = pickle.dumps((False, _picklable(err)), pickle.HIGHEST_PROTOCOL)
        with os.fdopen(w, 'wb') as out:
            out.write(payload)
        code = 0
    finally:
        os._exit(code)     # never back into the parent's code, nor its exit handlers


def _picklable(err: Exception) -> Exception:
    try:
        pickle.dumps(err)
        return err
    except Exception:
        return WorkerError(f'{type(err).__name__}: {err}')


def _collect(pid: int, fd: int) -> Any:
    """The result of the worker ``pid``, read from ``fd``: what its task returned."""
    with os.fdopen(fd, 'rb') as src:
        payload = src.read()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code or not payload:
        how = f'signal {-code}' if code < 0 else f'exit code {code}'
        raise WorkerError(f'a link worker (pid {pid}) ended with {how} and no result')
    ok, value = pickle.loads(payload)
    if not ok:
        raise value
    return value


def _abandon(pid: int, fd: int) -> None:
    """Stop a worker whose result is no longer wanted (the link failed)."""
    os.close(fd)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)
