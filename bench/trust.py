"""Paired ratios between two alternating variants, and when to believe them.

Variants run in turns (A B, then B A, ...); each turn gives one ratio
B/A of runs made minutes apart, so slow drifts of the machine's speed
cancel.  The result is the median of those ratios; it is not to be
trusted when:

- there is a single turn: no spread to judge the difference by;
- there are two turns: in turns (A B, then B A) the second variant's two
  runs are next to each other, so a slow or quick spell of the machine
  between them is a difference both turns agree on.  Twice a two-turn
  kbuild run that this module called trustworthy was contradicted by
  builds of the same code within the hour (RESULTS.md, 2026-11-27 09:25
  against 08:21, and 11:55);
- the turns disagree by more than the difference measured: the range of
  the ratios is at least their median's distance from 1;
- other processes kept more than OTHERS_LIMIT of the machine's CPUs busy
  on average during the runs (their CPU is /proc/stat's busy time less the
  benchmark's own).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

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


def paired_ratio(base: list[float], other: list[float]) -> Ratio:
    """Median and range of other[i] / base[i] over the turns."""
    ratios = [o / b for b, o in zip(base, other, strict=True) if b > 0]
    if not ratios:
        raise ValueError('no turn with a non-zero baseline')
    return Ratio(statistics.median(ratios), min(ratios), max(ratios), len(ratios))


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
