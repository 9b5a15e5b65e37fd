"""Ctrl-C held back across the few steps that must not be cut: an enqueue and the taking of
its event, an allocation and its owner, a release.

Python raises ``KeyboardInterrupt`` at whatever bytecode the main thread runs when the signal
is handled, also between a lock's acquire and the ``try`` that releases it, or between a UR
call that made an event and the object that owns it.  Inside :func:`section` the SIGINT
handler only notes the signal; the interrupt is raised as the outermost section ends, when the
lock is free and every handle has its owner.  Waits are never inside a section, so Ctrl-C
still interrupts them at once.

The handler is installed on first use from the main thread, over Python's own
(``signal.default_int_handler``) or whatever callable handler was set; a handler set later
replaces it, and then interrupts are no longer held back.
"""

from __future__ import annotations

import os
import signal
import threading

_local = threading.local()
_state = {"installed": None, "pending": False}
_main = threading.main_thread()


_callbacks: set = set()
"""Code objects Python runs as callbacks (see :data:`callback_section`)."""


def _handler(signum, frame):
    if getattr(_local, "depth", 0):
        _state["pending"] = True
        return
    caller = frame
    for _ in range(3):
        if caller is None:
            break
        if caller.f_code in _callbacks:
            _send_again_soon()
            return
        caller = caller.f_back
    _state["installed"][1](signum, frame)


def _send_again_soon() -> None:
    """Send SIGINT again in a moment, from another thread: the main thread is in a callback,
    where an exception would be dropped."""
    timer = threading.Timer(0.005, os.kill, (os.getpid(), signal.SIGINT))
    timer.daemon = True
    timer.start()


def _install() -> None:
    """Put :func:`_handler` in front of the current SIGINT handler (main thread only)."""
    if threading.current_thread() is not _main:
        return
    current = signal.getsignal(signal.SIGINT)
    if current is _handler:
        return
    if not callable(current):  # SIG_IGN or SIG_DFL: no KeyboardInterrupt to hold back
        _state["installed"] = False
        return
    signal.signal(signal.SIGINT, _handler)
    _state["installed"] = (_handler, current)


class _Section:
    """A context manager whose body a SIGINT does not interrupt (see the module's text).

    ``quiet``: for code Python runs as a callback (a weak reference's), where an exception is
    printed and dropped: the held-back SIGINT is sent again from a helper thread instead, so
    that it interrupts the code the callback ran in."""

    __slots__ = ("quiet",)

    def __init__(self, quiet: bool = False):
        self.quiet = quiet

    def __enter__(self):
        if _state["installed"] is None:
            _install()
        _local.depth = getattr(_local, "depth", 0) + 1

    def __exit__(self, *exc_info):
        _local.depth -= 1
        if _state["pending"] and not _local.depth and threading.current_thread() is _main:
            _state["pending"] = False
            installed = _state["installed"]
            if not installed or signal.getsignal(signal.SIGINT) is not _handler:
                return
            if self.quiet:
                _send_again_soon()
            else:
                installed[1](signal.SIGINT, None)  # raises KeyboardInterrupt, as Ctrl-C would


section = _Section()
"""``with section:`` holds back Ctrl-C until the block ends."""

callback_section = _Section(quiet=True)
""":data:`section` for weak-reference callbacks."""


class Lock:
    """A lock whose ``with`` block is a :data:`section`: Ctrl-C can neither leave it held nor
    cut the work done under it in half.  ``reentrant`` makes it an ``RLock``."""

    __slots__ = ("_lock",)

    def __init__(self, reentrant: bool = False):
        self._lock = threading.RLock() if reentrant else threading.Lock()

    def __enter__(self):
        section.__enter__()
        self._lock.acquire()

    def __exit__(self, *exc_info):
        self._lock.release()
        section.__exit__()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """``threading.Lock.acquire`` (outside a section: for checks, not for work)."""
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        """``threading.Lock.release``."""
        self._lock.release()
