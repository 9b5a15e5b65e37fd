"""Interleaved measurement: every method in every round, so drift hits all of them alike.

The machine's speed drifts by up to 3x for seconds at a time, so absolute figures from
different moments do not compare; ratios taken within one round do.  Each round takes a few
samples of each method in turn (the starting method rotates), keeps each method's median, and
the reported figure is the median of those round medians.  It is computed twice, over the first
and the second half of the rounds, to show how much a figure moves.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    unit: str  # "ns" or "us" per unit of work, or "GB/s"
    count: int  # units of work per timed sample
    samples: int  # timed samples per method per round
    nbytes: int = 0  # bytes moved per unit, for "GB/s"

    def figure(self, seconds_per_unit: float) -> float:
        """A time per unit in the workload's display unit."""
        if self.unit == "GB/s":
            return self.nbytes / seconds_per_unit / 1e9
        return seconds_per_unit * (1e9 if self.unit == "ns" else 1e6)


def measure(methods, workloads, rounds: int, log=print) -> dict[str, dict[str, list[float]]]:
    """Seconds per unit of work: ``{workload: {method: [round median, ...]}}``.

    One untimed round first warms every path (caches, page faults, lazy initialisation).
    """
    times = {w.name: {m.name: [] for m in methods if w.name in m.ops} for w in workloads}
    for round_index in range(-1, rounds):
        started = time.perf_counter()
        for workload in workloads:
            runners = [(m.name, m.ops[workload.name]) for m in methods if workload.name in m.ops]
            shift = max(round_index, 0) % len(runners)
            runners = runners[shift:] + runners[:shift]
            samples = {name: [] for name, _ in runners}
            for _ in range(workload.samples):
                for name, run in runners:
                    begin = time.perf_counter_ns()
                    run(workload.count)
                    samples[name].append((time.perf_counter_ns() - begin) * 1e-9 / workload.count)
            if round_index >= 0:
                for name, values in samples.items():
                    times[workload.name][name].append(statistics.median(values))
        label = "warm-up round" if round_index < 0 else f"round {round_index + 1}/{rounds}"
        log(f"  {label}: {time.perf_counter() - started:.1f} s")
    return times


def halves(values: list[float]) -> tuple[list[float], list[float], list[float]]:
    """All rounds, the first half and the second half."""
    middle = len(values) // 2
    return values, values[:middle] or values, values[middle:] or values


def median_of(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def ratios(times: dict[str, list[float]], method: str, reference: str) -> list[float] | None:
    """Per-round time ratios ``method / reference`` (both measured in the same round)."""
    if method not in times or reference not in times:
        return None
    return [a / b for a, b in zip(times[method], times[reference])]
