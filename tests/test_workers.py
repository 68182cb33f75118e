"""linkdedup/workers.py: -j's shards and forked workers."""
from __future__ import annotations

import os
import signal

import pytest

from linkdedup.workers import Background, WorkerError, run_sharded, shards


@pytest.mark.parametrize('sizes', [[1] * 10, [5, 1, 1, 1, 1, 1], [100, 1, 1, 100], [3], []])
@pytest.mark.parametrize('jobs', [1, 2, 3, 8])
def test_shards_cover_everything_once_in_order(sizes, jobs):
    parts = shards(sizes, jobs)
    assert [i for r in parts for i in r] == list(range(len(sizes)))
    assert 1 <= len(parts) <= max(1, min(jobs, len(sizes)))
    assert all(len(r) for r in parts) or sizes == []


def test_shards_are_about_equal_in_size():
    sizes = [7, 3, 9, 1, 4, 6, 2, 8, 5, 5] * 20
    parts = shards(sizes, 4)
    totals = [sum(sizes[i] for i in r) for r in parts]
    assert len(parts) == 4
    assert max(totals) - min(totals) <= 2 * max(sizes)


def test_each_shard_runs_in_its_own_process_and_results_keep_their_order():
    results = run_sharded(lambda r: (list(r), os.getpid()), [1] * 9, 3)
    assert [i for items, _ in results for i in items] == list(range(9))
    pids = [pid for _, pid in results]
    assert pids[0] == os.getpid() and len(set(pids)) == 3


def test_small_work_stays_in_this_process():
    results = run_sharded(lambda r: os.getpid(), [1] * 9, 3, min_share=5)
    assert len(results) == 1 and results == [os.getpid()]


def test_a_workers_exception_is_raised_again():
    def task(r: range) -> int:
        if r.start:
            raise ValueError(f'shard at {r.start}')
        return 0
    with pytest.raises(ValueError, match='shard at'):
        run_sharded(task, [1] * 4, 2)


def test_a_worker_killed_is_an_error_that_says_so():
    def task(r: range) -> int:
        if r.start:
            os.kill(os.getpid(), signal.SIGKILL)
        return 0
    with pytest.raises(WorkerError, match='signal 9'):
        run_sharded(task, [1] * 4, 2)


def test_an_error_here_stops_the_workers():
    """The first shard fails in this process: the others are not left running."""
    def task(r: range) -> int:
        if not r.start:
            raise KeyError('here')
        signal.pause()
        return 0
    with pytest.raises(KeyError):
        run_sharded(task, [1] * 4, 2)
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)


def test_background_work_runs_in_its_own_process_while_this_one_goes_on():
    r, w = os.pipe()

    def task() -> tuple[bytes, int]:
        signal.alarm(10)      # run here, it would wait for ever: the alarm ends it
        return os.read(r, 5), os.getpid()
    work = Background(task)
    os.write(w, b'go on')              # the worker waits for this process
    assert work.result()[0] == b'go on' and work.result()[1] != os.getpid()


def test_background_work_not_forked_runs_here_and_now():
    ran: list[int] = []
    work = Background(lambda: ran.append(os.getpid()) or 7, fork=False)
    assert ran == [os.getpid()] and work.result() == 7


def test_background_works_exception_is_raised_at_each_result():
    def task() -> int:
        raise ValueError('beside')
    work = Background(task)
    for _ in range(2):
        with pytest.raises(ValueError, match='beside'):
            work.result()


def test_background_work_abandoned_is_stopped():
    work = Background(signal.pause)
    work.abandon()
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)
