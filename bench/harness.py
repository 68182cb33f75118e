"""What every bench shares: turns, medians and ratios, doubts about noise, the record.

A bench measures two or more variants (the same work done two ways, two
checkouts, two tools) in turns, so that a slow or quick spell of the
machine falls on all of them alike: ``turn_order`` (A B, then B A, ...) or
``rotated`` (A B C, then B C A, ...) gives each turn's order.  Each turn
gives one ratio B/A of runs made minutes apart, so slow drifts of the
machine's speed cancel; the result is the median of those ratios, both
orders weighing alike (``paired_ratio``).  ``doubts`` says why it is not to
be trusted, when:

- there is a single turn: no spread to judge the difference by;
- there are two turns: in turns (A B, then B A) the second variant's two
  runs are next to each other, so a slow or quick spell of the machine
  between them is a difference both turns agree on.  Twice a two-turn
  kbuild run that this module called trustworthy was contradicted by
  builds of the same code within the hour;
- the turns disagree by more than the difference measured: the range of
  the ratios is at least their median's distance from 1;
- other processes kept more than OTHERS_LIMIT of the machine's CPUs busy
  on average during the runs (their CPU is /proc/stat's busy time less the
  benchmark's own: accounting.py).

``record`` appends a run's report to bench/RESULTS.md with its command,
date and machine.  Benches and tests share their other helpers through
the top-level folder ``testsupport/``, and never import each other.
"""
from __future__ import annotations

import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

RESULTS = Path(__file__).resolve().parent / 'RESULTS.md'
T = TypeVar('T')

#: Share of the machine's CPU time that others may use before a run is
#: called untrustworthy.
OTHERS_LIMIT = 0.05


@dataclass(frozen=True)
class Ratio:
    median: float
    low: float
    high: float
    turns: int

    def __str__(self) -> str:
        if self.turns == 1:
            return f'{self.median:.2f}'
        return f'{self.median:.2f} ({self.low:.2f}-{self.high:.2f})'


def paired_ratio(base: list[float], other: list[float],
                 orders: Sequence[int] | None = None) -> Ratio:
    """Median and range of other[i] / base[i] over the turns.

    ``orders``: the order each turn ran in (0: A B, 1: B A), when they
    alternate.  The median is then taken among the turns of each order and
    the two averaged, so that both orders weigh alike.  With an odd number
    of turns the plain median follows the order that ran once more, and a
    drift of the machine within a turn reads as a difference: a kbuild
    run's DWARF-less build turns gave 0.77, 0.96 and 0.76, a plain median
    of 0.77 where its two orders give 0.765 and 0.96."""
    turns = [(o / b, order) for b, o, order in
             zip(base, other, orders if orders is not None else [0] * len(base), strict=True)
             if b > 0]
    if not turns:
        raise ValueError('no turn with a non-zero baseline')
    ratios = [r for r, _ in turns]
    by_order = [[r for r, order in turns if order == k] for k in (0, 1)]
    if all(by_order):
        middle = sum(statistics.median(rs) for rs in by_order) / 2
    else:
        middle = statistics.median(ratios)
    return Ratio(middle, min(ratios), max(ratios), len(ratios))


def doubts(ratio: Ratio, others_share: float) -> list[str]:
    """Why ``ratio`` is not to be trusted; empty when it is.
    ``others_share``: other processes' CPU / (wall x CPUs) over the runs."""
    found = []
    if ratio.turns < 2:
        found.append('one turn only: no spread to judge the difference by')
    elif ratio.turns == 2:
        found.append('two turns only: the second variant ran twice in a row (A B B A), '
                     'so a spell of the machine there reads as a difference')
    if ratio.turns >= 2 and ratio.high - ratio.low >= abs(ratio.median - 1):
        found.append(f'the turns disagree ({ratio.low:.2f} to {ratio.high:.2f}) by more than '
                     f'the difference measured ({ratio.median:.2f})')
    if others_share > OTHERS_LIMIT:
        found.append(f'other processes used {100 * others_share:.0f}% of the machine\'s CPU '
                     f'(limit {100 * OTHERS_LIMIT:.0f}%)')
    return found


def turn_order(variants: Sequence[T], turn: int) -> list[T]:
    """The order the variants run in on ``turn``: as given on even turns,
    reversed on odd ones (A B, then B A), so that every two turns each pair
    ran in both orders."""
    return list(variants) if turn % 2 == 0 else list(variants)[::-1]


def rotated(variants: Sequence[T], turn: int) -> list[T]:
    """The order the variants run in on ``turn``, rotated by it (A B C,
    then B C A, then C A B): each variant takes each place in turn."""
    k = turn % len(variants)
    return [*variants[k:], *variants[:k]]


def orders(turns: int) -> list[int]:
    """The order of each of ``turns`` turns of ``turn_order`` (0: as given,
    1: reversed), as ``paired_ratio`` takes them."""
    return [turn % 2 for turn in range(turns)]


def pahole_version(pahole: str) -> str:
    """'pahole v1.31' of a bench's peer, which must run (else the bench ends,
    naming it)."""
    r = subprocess.run([pahole, '--version'], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f'{Path(sys.argv[0]).name}: the peer {pahole} does not run: {r.stderr.strip()}')
    return f'pahole {r.stdout.strip()}'


def machine() -> str:
    """The machine a run is made on: CPU model and count, kernel, Python."""
    model = ''
    try:
        with open('/proc/cpuinfo') as f:
            model = next((line.split(':', 1)[1].strip() for line in f
                          if line.startswith('model name')), '')
    except OSError:
        pass
    return (f'{model or platform.machine()}, {os.cpu_count()} CPUs, '
            f'Linux {platform.release()}, Python {platform.python_version()}')


def command_line() -> str:
    """The command that runs this bench as it runs now, from the checkout's top."""
    return shlex.join(['python3', f'bench/{Path(sys.argv[0]).name}', *sys.argv[1:]])


def record(title: str, report: str, note: str = '', results: Path = RESULTS,
           command: str | None = None, machine_state: str | None = None) -> None:
    """Append ``report`` under a dated ``title``, after the command line that
    made it (this process's own, unless ``command``), an optional ``note``
    and the machine (``machine()``, unless ``machine_state``)."""
    with open(results, 'a') as f:
        f.write(f'\n## {title}, {time.strftime("%Y-%m-%d %H:%M")}\n\n`{command or command_line()}`'
                f'{" " + note if note else ""}\n\nMachine: {machine_state or machine()}.'
                f'\n\n```\n{report}\n```\n')
