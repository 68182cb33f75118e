"""The wall time of a kernel build on N CPUs, projected from one measured on J.

The model is written down in docs/benchmarks.md; this module computes it.
"""
from __future__ import annotations

from dataclasses import dataclass

#: The phases of a build, in order, as kbuild_bench.py cuts make's output.
PHASES = ('compile', 'link', 'modules')


@dataclass(frozen=True)
class Phase:
    """One phase of one build: wall and CPU seconds, and how many commands
    it ran (the most CPUs it could keep busy)."""
    wall: float
    cpu: float
    commands: int


def split(phase: Phase, jobs: int) -> tuple[float, float]:
    """(serial seconds, parallel CPU seconds) of a phase measured with
    ``jobs`` CPUs: the serial part kept one CPU busy, the parallel part
    all of them, so wall = s + q / jobs and CPU = s + q."""
    if jobs < 2:
        raise ValueError('a phase measured on one CPU says nothing of its parallel part')
    q = (phase.cpu - phase.wall) * jobs / (jobs - 1)
    q = min(max(q, 0.0), phase.cpu)
    return phase.cpu - q, q


def phase_wall(name: str, phase: Phase, jobs: int, cpus: int) -> float:
    """Projected wall seconds of one phase on ``cpus`` CPUs."""
    if name == 'link':
        return phase.wall                   # the serial chain: as measured
    serial, parallel = split(phase, jobs)
    return serial + parallel / max(1, min(cpus, phase.commands))


def build_wall(phases: dict[str, Phase], jobs: int, cpus: int) -> float:
    """Projected wall seconds of a whole build on ``cpus`` CPUs."""
    return sum(phase_wall(name, p, jobs, cpus) for name, p in phases.items())
