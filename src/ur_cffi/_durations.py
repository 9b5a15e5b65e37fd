"""Which waits are short: the main thread's waits block directly when the work they wait for
is expected to end within :data:`DIRECT_SECONDS`, and go the interruptible way otherwise.

An interruptible wait (``_waiting.wait``) polls, then hands the blocking call to a helper
thread, so that Ctrl-C raises at once.  That costs context switches, and on a CPU device
much more: the runtime's own blocking wait runs the kernel on the waiting thread, where a poll
leaves it to a worker thread that needs the core.  A short wait gains nothing from being
interruptible, so it should not pay for it.

What a queue waits for is its *window*: the launches made on it since its last completed
``finish`` (or wait for its latest command), each counted as work-items by kernel, graph
replays counted by graph (one item each; a graph's measure is forgotten when a launch in it
is updated), plus a count of other commands (copies, fills) under the key None.  A wait
blocks directly only if every entry is a launch of a kernel or a replay of a graph with a
measured time per item and their sum stays under :data:`DIRECT_SECONDS`.  Measured how:
when a wait completes a window, the time since its first command was enqueued is an upper
bound for all the work in it (none of it could start earlier, and the previous window had
completed), so each kernel in it is given that time divided by its work-items.  Upper
bounds err towards the interruptible way (host work between a launch and its wait counts as
the kernel's); an unknown kernel, an empty window (work the raw layer enqueued is not seen)
and any other command always take it.

What can still go wrong: a kernel whose time does not grow with its work-items (one that
loops on its data) may run longer than its measure; a Ctrl-C during such a direct wait then
raises when the wait returns.
"""

from __future__ import annotations

import math

DIRECT_SECONDS = 0.01
"""Work expected to end within this long is waited for by the plain blocking UR call."""


class Timing:
    """The measured seconds per work-item of one kernel, or per replay of one graph (``inf``
    until measured)."""

    __slots__ = ("per_item", "__weakref__")

    def __init__(self):
        self.per_item = math.inf


def expected_seconds(window: dict) -> float:
    """How long the work of ``window`` is expected to take; ``inf`` where unknown."""
    if not window:
        return math.inf
    try:
        return _expected(window.items())
    except RuntimeError:  # another thread's launch added to it (Device.synchronize reads
        return _expected(tuple(window.items()))  # every queue's): a copy made in one step


def _expected(items) -> float:
    total = 0.0
    for timing, count in items:  # a loop, not sum(): waits are a hot path
        if timing is None:
            return math.inf
        total += timing.per_item * count
    return total


def learn(window: dict, elapsed: float) -> None:
    """Give each kernel of a completed ``window`` its upper bound, ``elapsed`` seconds
    having passed since the window began (``Queue.finish`` does this inline for one kernel)."""
    try:
        _learn(window.items(), elapsed)
    except RuntimeError:  # changed by another thread: see expected_seconds
        _learn(tuple(window.items()), elapsed)


def _learn(items, elapsed: float) -> None:
    for timing, count in items:
        if timing is not None:
            timing.per_item = elapsed / count
