"""CPU and memory of everything a benchmark starts, objbtf's resident server included.

objbtf's resident server (objbtf/resident/server.py) is started by the first objbtf
command of a build tree, in a session of its own, and outlives it: it is no
child of make, and RUSAGE_CHILDREN would never see its CPU.  A benchmark
that calls ``become_subreaper()`` first gets every such orphan reparented to
itself (prctl PR_SET_CHILD_SUBREAPER), so that:

- ``tree_cpu()`` counts, at any moment, the CPU of every process the
  benchmark started, directly or not: those it reaped (RUSAGE_CHILDREN) and
  those still alive or not reaped yet (/proc/PID/stat: own time plus what
  each reaped).  A process reaped between two of its reads can be counted
  twice or not at all: an error of one process's CPU at most;
- ``settle_servers()`` stops the tree's servers (``objbtf server stop``, run
  in the tree), reaps them, so that their CPU joins RUSAGE_CHILDREN, and
  checks it against what each server wrote to OBJBTF_SERVER_LOG when it
  exited (``objbtf-server pid=P requests=N user=U sys=S``);
- ``PeakMemory`` samples the proportional set size (PSS) summed over the
  same processes: forked workers share pages, which the largest process's
  max RSS would leave out and a sum of RSS would count twice.

Before resident landed there is no server: ``server_supported`` says so and
the rest finds no orphan.
"""
from __future__ import annotations

import ctypes
import os
import re
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
TICK = os.sysconf('SC_CLK_TCK')
SERVER_LOG_LINE = re.compile(r'objbtf-server pid=(\d+) requests=(\d+) user=([\d.]+) sys=([\d.]+)')
#: Seconds a stopped server gets to exit before it is killed.
SERVER_EXIT_TIMEOUT = 30.0


def become_subreaper() -> None:
    """Orphans of this process's descendants are reparented to it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f'prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}')


def _processes() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds of the process and of the children it reaped)."""
    procs = {}
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open(f'/proc/{name}/stat', 'rb') as f:
                data = f.read()
        except OSError:                     # gone meanwhile
            continue
        fields = data[data.rindex(b')') + 2:].split()
        # state ppid ... utime(11) stime cutime cstime(14)
        procs[int(name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / TICK)
    return procs


def _descendants(procs: dict[int, tuple[int, float]], root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found


def tree_cpu() -> float:
    """CPU seconds (user + system) so far of every process this one started."""
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    procs = _processes()
    alive = sum(procs[pid][1] for pid in _descendants(procs, os.getpid()))
    return reaped.ru_utime + reaped.ru_stime + alive


def subtree_cpu(pid: int) -> float:
    """CPU seconds so far of process ``pid`` (with the children it reaped)
    and of its living descendants, to the clock tick (/proc)."""
    procs = _processes()
    if pid not in procs:
        raise ProcessLookupError(f'process {pid} is gone')
    return procs[pid][1] + sum(procs[p][1] for p in _descendants(procs, pid))


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def machine_cpu() -> float:
    """CPU seconds the whole machine has been busy (/proc/stat)."""
    with open('/proc/stat') as f:
        user, nice, system, _idle, _iowait, irq, softirq = map(int, f.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / TICK


@dataclass(frozen=True)
class CpuMark:
    """The machine's busy CPU and this process tree's (``tree_cpu`` plus
    this process's own) at one moment, for ``others_since``."""
    machine: float
    ours: float


def cpu_mark() -> CpuMark:
    return CpuMark(machine_cpu(), tree_cpu() + own_cpu())


def others_since(mark: CpuMark) -> float:
    """CPU seconds other processes than this one and its descendants kept
    the machine busy since ``mark``: what makes a run untrustworthy
    (harness.py)."""
    now = cpu_mark()
    return (now.machine - mark.machine) - (now.ours - mark.ours)


def others_share(others: float, wall: float) -> float:
    """``others`` CPU seconds as a share of the machine over ``wall`` seconds."""
    return max(0.0, others) / (wall * len(os.sched_getaffinity(0)))


def orphans() -> list[int]:
    """This process's children that it did not start itself: with no
    subprocess running, daemons of its descendants, reparented to it."""
    return [pid for pid, (ppid, _) in _processes().items() if ppid == os.getpid()]


def server_supported(objbtf: list[str], env: dict[str, str]) -> bool:
    """Whether this objbtf has a resident server (``objbtf server``)."""
    return subprocess.run([*objbtf, 'server', '--help'], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def run_rusage(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, float, str]:
    """(exit status, CPU seconds, stderr) of ``cmd``."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    err = proc.stderr.read().decode(errors='replace')
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime, err


@dataclass
class Servers:
    """What happened to the resident servers of one measured run."""
    reaped: dict[int, float] = field(default_factory=dict)   # pid -> CPU by wait4
    logged: dict[int, tuple[int, float]] = field(default_factory=dict)  # pid -> (requests, CPU)
    stop_cpu: float = 0.0           # the stop command's own CPU, not the run's
    problems: list[str] = field(default_factory=list)

    @property
    def cpu(self) -> float:
        return sum(self.reaped.values())

    @property
    def requests(self) -> int:
        return sum(n for n, _ in self.logged.values())

    def as_dict(self) -> dict:
        return {'processes': len(self.reaped), 'cpu': round(self.cpu, 3),
                'logged_cpu': round(sum(c for _, c in self.logged.values()), 3),
                'requests': self.requests, 'problems': self.problems}


def stop_servers(objbtf: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """Run ``objbtf server stop`` in ``cwd``: (its CPU, the complaint if it failed)."""
    status, cpu, err = run_rusage([*objbtf, 'server', 'stop'], cwd, env)
    return cpu, '' if status == 0 else f'objbtf server stop exited {status}: {err.strip()[-200:]}'


def settle_servers(objbtf: list[str] | None, cwd: Path, env: dict[str, str],
                   log: Path | None) -> Servers:
    """After a measured run: stop the servers of the tree in ``cwd`` (when
    ``objbtf`` has them), reap every orphan (killing one that does not exit
    within SERVER_EXIT_TIMEOUT), and check each reaped server's CPU against
    its line in ``log``."""
    result = Servers()
    pending = orphans()
    if objbtf is not None:
        result.stop_cpu, problem = stop_servers(objbtf, cwd, env)
        if problem:
            result.problems.append(problem)
        pending = sorted(set(pending) | set(orphans()))
    deadline = time.monotonic() + SERVER_EXIT_TIMEOUT
    while pending:
        for pid in list(pending):
            try:
                done, status, usage = os.wait4(pid, os.WNOHANG)
            except ChildProcessError:
                pending.remove(pid)
                continue
            if done:
                result.reaped[pid] = usage.ru_utime + usage.ru_stime
                pending.remove(pid)
        if pending and time.monotonic() > deadline:
            for pid in pending:
                result.problems.append(f'pid {pid} did not exit after the build: killed')
                os.kill(pid, signal.SIGKILL)
            deadline = float('inf')
        if pending:
            time.sleep(0.05)
    if log is not None and log.exists():
        for m in SERVER_LOG_LINE.finditer(log.read_text()):
            pid = int(m.group(1))
            result.logged[pid] = (int(m.group(2)), float(m.group(3)) + float(m.group(4)))
    result.problems += _disagreements(result)
    return result


def _disagreements(servers: Servers) -> list[str]:
    """Servers whose logged CPU the reaping did not account for."""
    problems = []
    for pid, (_, logged) in servers.logged.items():
        if pid not in servers.reaped:
            problems.append(f'server pid {pid} ({logged:.1f} s logged) was not reaped by the '
                            'bench: its CPU is missing from the figures')
        elif abs(servers.reaped[pid] - logged) > max(0.5, 0.05 * logged):
            problems.append(f'server pid {pid}: {servers.reaped[pid]:.1f} s reaped, '
                            f'{logged:.1f} s logged')
    for pid in servers.reaped:
        if pid not in servers.logged:
            problems.append(f'orphan pid {pid} ({servers.reaped[pid]:.1f} s) wrote no server log line')
    return problems


class PeakMemory:
    """Largest PSS summed over this process's descendants, sampled every
    ``interval`` seconds by a thread while the ``with`` block runs (MB)."""

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak_mb(self) -> int:
        return self.peak_kb // 1024

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            total = 0
            for pid in _descendants(_processes(), os.getpid()):
                try:
                    with open(f'/proc/{pid}/smaps_rollup', 'rb') as f:
                        for line in f:
                            if line.startswith(b'Pss:'):
                                total += int(line.split()[1])
                                break
                except OSError:
                    pass
            self.peak_kb = max(self.peak_kb, total)


class Run:
    """One run of a command (in ``cwd``, with ``env``): wall and CPU
    seconds, peak PSS and max RSS (MB).  A failed command ends the bench."""

    def __init__(self, cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None):
        start = time.monotonic()
        with PeakMemory() as memory:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    cwd=cwd, env=env)
            err = proc.stderr.read()
            _, status, usage = os.wait4(proc.pid, 0)
        self.wall = time.monotonic() - start
        if status != 0:
            sys.exit(f'{shlex.join(cmd)} failed: {err.decode(errors="replace")[-500:]}')
        self.cpu = usage.ru_utime + usage.ru_stime
        self.pss = memory.peak_mb
        self.rss = usage.ru_maxrss // 1024


class Summary:
    """Medians of wall and CPU, largest memory, over a command's runs."""

    def __init__(self, runs: list[Run]):
        self.runs = runs
        self.wall = statistics.median(r.wall for r in runs)
        self.cpu = statistics.median(r.cpu for r in runs)
        self.pss = max(r.pss for r in runs)
        self.rss = max(r.rss for r in runs)

    def __str__(self) -> str:
        return (f'{self.wall:.2f} s, CPU {self.cpu:.2f} s, peak PSS {self.pss} MB '
                f'(largest process {self.rss} MB)')


def interleaved(n: int, cmds: list[list[str]], cwd: Path | None = None,
                env: dict[str, str] | None = None) -> list[Summary]:
    """Each command's summary, the commands run in turns n times (A B A B):
    load from elsewhere on the machine then falls on all of them alike."""
    runs: list[list[Run]] = [[] for _ in cmds]
    for _ in range(n):
        for i, cmd in enumerate(cmds):
            runs[i].append(Run(cmd, cwd, env))
    return [Summary(r) for r in runs]
