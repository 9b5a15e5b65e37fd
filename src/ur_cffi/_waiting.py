"""Blocking UR waits that Ctrl-C can interrupt.

A C call blocked in ``urQueueFinish`` or ``urEventWait`` holds the main thread until it returns,
and Python runs signal handlers only between bytecodes, so a ``KeyboardInterrupt`` would wait
for the device.  In the main thread a wait first polls a cheap completion probe for up to a
millisecond (``SPIN_SECONDS``; short waits, the common case, stay on this thread), then hands
the blocking call to a helper thread and waits for that interruptibly.  A Ctrl-C then raises at
once; the helper goes on waiting, holding its own UR reference to the queue or events, so
closing them meanwhile cannot free them under the wait.  :func:`drain` waits for such helpers
(the loader's teardown calls it).

The GIL is released during every call into UR (cffi does so for each call), so other Python
threads run during a wait in any thread.

The polling costs time where the device shares the waiting thread's core: a CPU device's
runtime then needs a context switch to run the command, while its own blocking wait runs the
command on the waiting thread.  So queues skip this for work expected to be short
(``_durations``).  ``set_interruptible_waits(False)`` (or ``UR_CFFI_INTERRUPTIBLE_WAITS=0``)
makes every wait the plain blocking UR call, which Ctrl-C cannot cut short.
"""

from __future__ import annotations

import os
import threading
import time
from threading import get_ident

from . import _checks, _forking, _interrupts
from ._interrupts import section
from ._ur import lib
from .errors import check

INTERRUPTIBLE_ENV = "UR_CFFI_INTERRUPTIBLE_WAITS"

SPIN_SECONDS = 1e-3
"""How long the main thread polls before handing a wait to a helper thread."""

LIVENESS_SECONDS = 1.0
"""How often a wait for a helper checks that the helper thread is still alive."""

_helpers: dict[threading.Thread, threading.Event] = {}  # helpers whose wait still runs
_helpers_lock = _forking.lock()
_interruptible = None  # read from INTERRUPTIBLE_ENV by loader.init() (a bad value raises
# there, before any UR object exists, not in ``import ur_cffi``), if not set before


def set_interruptible_waits(enabled: bool) -> bool:
    """Whether waits in the main thread can be interrupted by Ctrl-C (the default) or are the
    plain blocking UR calls; returns the previous setting.  Not needed for speed: the default
    waits block directly on work measured short, and Ctrl-C then waits for the device."""
    global _interruptible
    enabled = _checks.flag("set_interruptible_waits", enabled)
    try:
        previous = interruptible_waits()
    except _checks.SwitchError:  # a malformed variable: this call decides instead
        previous = True
    _interruptible = enabled
    return previous


def interruptible_waits() -> bool:
    """The current setting of :func:`set_interruptible_waits`."""
    global _interruptible
    if _interruptible is None:
        _interruptible = _checks.env_flag(INTERRUPTIBLE_ENV, True)
    return _interruptible


def blocks_directly() -> bool:
    """Whether a wait here is the plain blocking UR call: waits are not interruptible, or this
    is not the main thread (only it handles signals, so nothing could interrupt anyway)."""
    return not _interruptible or get_ident() != _interrupts._main_ident


def _held(name: str, args: tuple) -> tuple[list, str, str]:
    """The handles a helper running UR wait ``name`` on ``args`` keeps a reference to, and the
    names of the UR functions that retain and release them."""
    if name == "urQueueFinish":
        return [args[0]], "urQueueRetain", "urQueueRelease"
    if name == "urEventWait":
        count, events = args
        return [events[i] for i in range(count)], "urEventRetain", "urEventRelease"
    return [], "", ""


def wait(blocking_call, name: str, *args, probe=None) -> None:
    """Run ``blocking_call(*args)`` (UR's ``urQueueFinish``, ``urEventWait`` or
    ``urDeviceWaitExp``; a root device needs no reference while a helper waits) and check its
    result; in the main thread, unless waits are set not to be interruptible, a Ctrl-C
    interrupts it with ``KeyboardInterrupt``.

    ``probe()``, if given, is called only when the wait polls, and returns ``is_done()``, which
    reports completion without blocking (making it may cost an enqueue, so a blocking wait
    never does), or None where it cannot make one: the wait then polls nothing.  After an
    interrupt the objects stay usable: waiting again, or closing them, waits for the device
    as usual.
    """
    if blocks_directly():
        check(blocking_call(*args), name)
        return
    if probe is not None and (is_done := probe()) is not None:
        deadline = time.perf_counter() + SPIN_SECONDS
        while not is_done():
            if time.perf_counter() > deadline:
                break
            # The device may be runtime threads on this very core (a CPU device, or a
            # one-core affinity mask): a poll that never yields would starve them.
            os.sched_yield()
        else:
            check(blocking_call(*args), name)
            return
    handles, retain_name, release_name = _held(name, args)
    outcome, held, finished = [], [], threading.Event()
    owner = ["caller"]  # who gives the references back: "caller", then "helper" once it runs
    thread = None  # the helper's

    def give_back():
        while held:
            getattr(lib, release_name)(held.pop())
        with _helpers_lock:
            _helpers.pop(thread, None)

    def run():  # (the helper sets ``finished`` after it)
        threading.current_thread().name = f"ur_cffi {name}"
        with _helpers_lock:
            if owner[0] != "caller":  # the caller gave up on it (below) and gave them back
                return
            owner[0] = "helper"
        try:
            outcome.append(blocking_call(*args))
        finally:
            give_back()

    def give_back_unless_running():
        with _helpers_lock:
            if owner[0] == "helper":
                return
            owner[0] = "nobody"
        give_back()

    # Ctrl-C waits until the helper runs (or not at all): one arriving inside the hand-off
    # would otherwise give the references back under a helper that waits on with them.
    with section:
        try:
            for handle in handles:
                check(getattr(lib, retain_name)(handle), retain_name)
                held.append(handle)
            helper = _idle_helper()
            thread = helper.thread
            with _helpers_lock:
                _helpers[thread] = finished
            helper.hand(run, finished.set)
        except (RuntimeError, MemoryError):  # no thread to be had (address space exhausted)
            give_back_unless_running()
            started = owner[0] == "helper"
        except BaseException:
            # (Another signal's handler may raise inside the hand-off or after it: the
            # helper may run, and wait, with the references.)
            give_back_unless_running()
            raise
        else:
            started = True
    if not started:
        check(blocking_call(*args), name)
        return
    _wait_for(thread, finished)  # a signal interrupts this; the helper then keeps waiting
    if not outcome:  # the helper died before it could wait (no memory for its stack, say)
        give_back()
        check(blocking_call(*args), name)
        return
    check(outcome[0], name)


class _Helper:
    """A daemon thread that runs the blocking waits handed to it, one at a time, kept for the
    next once its wait has returned: Intel's CPU runtime keeps memory for good for each thread
    that ever called it (about 60 bytes), so a new thread for each wait grew without end."""

    __slots__ = ("thread", "_work", "_handed")

    def __init__(self):
        self._work = None
        self._handed = threading.Lock()
        self._handed.acquire()
        self.thread = threading.Thread(target=self._serve, name="ur_cffi wait", daemon=True)

    def hand(self, work, then) -> None:
        """Have the thread run ``work()``, then be idle again, then call ``then()`` (a caller
        told its wait is done finds the helper idle for its next)."""
        self._work = (work, then)
        self._handed.release()

    def _serve(self) -> None:
        while True:
            self._handed.acquire()
            (work, then), self._work = self._work, None
            try:
                work()
            finally:
                self.thread.name = "ur_cffi wait"  # (work names it after its wait)
                with _helpers_lock:
                    _idle.append(self)
                then()


_idle: list[_Helper] = []  # helpers whose last wait has returned
os.register_at_fork(after_in_child=_idle.clear)  # (their threads are the parent's)


def helper_threads() -> set[threading.Thread]:
    """The threads of the helpers, waiting or idle."""
    with _helpers_lock:
        return set(_helpers) | {helper.thread for helper in _idle}


def _idle_helper() -> _Helper:
    """A helper with nothing to do, started if new; ``RuntimeError`` (or ``MemoryError``)
    where no thread can be started."""
    with _helpers_lock:
        while _idle:
            helper = _idle.pop()
            if helper.thread.is_alive():
                return helper
    helper = _Helper()
    helper.thread.start()
    return helper


def _wait_for(helper: threading.Thread, finished: threading.Event) -> None:
    # Not helper.join(): a join that a KeyboardInterrupt cuts short marks the thread stopped
    # although it runs on (CPython's bpo-45274 handling), so later joins would not wait.
    while not finished.wait(LIVENESS_SECONDS):
        if not helper.is_alive():
            return


def drain() -> None:
    """Wait until every wait that a ``KeyboardInterrupt`` left running in a helper thread has
    returned and dropped its references."""
    with _helpers_lock:
        helpers = list(_helpers.items())
    for helper, finished in helpers:
        _wait_for(helper, finished)


def pending() -> int:
    """How many interrupted waits are still running in helper threads."""
    with _helpers_lock:
        return len(_helpers)

