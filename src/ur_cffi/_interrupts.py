"""Ctrl-C held back across the few steps that must not be cut: an enqueue and the taking of
its event, an allocation and its owner, a release.

Python raises ``KeyboardInterrupt`` at whatever bytecode the main thread runs when the signal
is handled, also between a lock's acquire and the ``try`` that releases it, or between a UR
call that made an event and the object that owns it.  Inside :func:`section` the SIGINT
handler only notes the signal; the interrupt is raised as the outermost section ends, when the
lock is free and every handle has its owner.  In the functions marked :func:`hold_back_in`
(callbacks, and the hot paths: a launch, a USM array's allocation and release, where a
section's bookkeeping would cost every call) it is sent again a few milliseconds later
instead, found from the interrupted frame's callers only when a signal comes.  Waits are in
neither, so Ctrl-C still interrupts them at once.

The handler is installed on first use from the main thread, over Python's own
(``signal.default_int_handler``) or whatever callable handler was set; a handler set later
replaces it, and then interrupts are no longer held back.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import weakref
from threading import get_ident

from . import _forking

# Only the main thread handles signals, so only its sections are counted: other threads'
# sections cost one ``get_ident()`` comparison.
_main_ident = threading.main_thread().ident
_depth = 0  # sections the main thread is in
_pending = False  # a SIGINT came inside one
_installed = None  # None: not yet; False: nothing to hold back; else (ours, the one before)


def _after_fork_in_child() -> None:
    global _main_ident, _depth, _pending, resend, _swallow
    if threading.get_ident() != _main_ident:  # (the main thread that forked is in its sections)
        _main_ident, _depth = threading.get_ident(), 0
    _pending, resend, _swallow = False, None, 0


os.register_at_fork(after_in_child=_after_fork_in_child)


_holding_back: set = set()
"""Code objects of :func:`hold_back_in`'s functions."""

_HOLDING_BACK_DEPTH = 12

# The standard library's weak collections (ur_cffi's registries of queues, sub-devices, Triton
# contexts...) drop a dead entry in a callback, where a KeyboardInterrupt would be printed and
# lost: held back there too.
_holding_back.update(collection._remove.__code__ for collection in (
    weakref.WeakSet(), weakref.WeakKeyDictionary(), weakref.WeakValueDictionary())
    if hasattr(collection, "_remove"))


def hold_back_in(function):
    """Hold Ctrl-C back in ``function`` (a decorator): a SIGINT handled while it, or code it
    called (up to 12 frames down), runs is sent again a moment later from a helper thread
    instead of raising there.  For weak references' callbacks, where an exception would be
    printed and dropped, and for hot paths (a launch, a USM array's allocation and release)
    that a :data:`section`'s bookkeeping would slow down: it costs nothing until a signal
    comes, but needs the handler in place (:func:`install`)."""
    _holding_back.add(function.__code__)
    return function


def install() -> None:
    """Put the handler in place now (from the main thread), where :func:`hold_back_in` code
    may run before any :data:`section` did."""
    if _installed is None and get_ident() == _main_ident:
        _install()


def _held_back(frame) -> bool:
    """Whether ``frame`` or one of its callers is :func:`hold_back_in` code."""
    for _ in range(_HOLDING_BACK_DEPTH):
        if frame is None:
            return False
        if frame.f_code in _holding_back:
            return True
        frame = frame.f_back
    return False


def _handler(signum, frame):
    global _pending, _swallow, resend
    if resend is not None and resend.sent:  # (this is it, or comes right after: either way
        resend = None  # the held-back interrupt is here)
    if _swallow:  # a re-sent SIGINT whose interrupt deliver_held() raised already
        _swallow -= 1
    elif _depth:
        _pending = True
    elif _held_back(frame):
        _send_again_soon()
    else:
        _installed[1](signum, frame)


class _Resend(threading.Timer):
    """SIGINT sent again in a moment; ``sent`` once it is on its way."""

    def __init__(self):
        super().__init__(0.005, self._send)
        self.daemon = True
        self.sent = False
        self._withdrawn = False
        self._deciding = _forking.lock()  # sent, or withdrawn: one or the other

    def _send(self) -> None:
        with self._deciding:
            if self._withdrawn:
                return
            self.sent = True
        os.kill(os.getpid(), signal.SIGINT)

    def withdraw(self) -> bool:
        """Send nothing from now on; whether the SIGINT is on its way already."""
        with self._deciding:
            self._withdrawn = True
            self.cancel()
            return self.sent


resend = None
"""The :class:`_Resend` of a SIGINT held back in :func:`hold_back_in` code, until it goes."""
_swallow = 0  # re-sent SIGINTs to ignore


@hold_back_in  # its own timer's SIGINT may come before the timer thread has started
def _send_again_soon() -> None:
    """Send SIGINT again in a moment, from another thread: the main thread is where it must
    not raise (:func:`hold_back_in`)."""
    global resend
    resend = _Resend()
    resend.start()


def deliver_held() -> None:
    """Raise the interrupt held back in :func:`hold_back_in` code now, instead of its
    re-sent SIGINT: for callers of that code, once it has returned (a loop of launches would
    otherwise take every re-sent SIGINT inside the next launch).  Callers look at
    :data:`resend` first: ``if _interrupts.resend is not None``."""
    global resend, _swallow
    held = resend
    if held is None or get_ident() != _main_ident or not _installed or \
            signal.getsignal(signal.SIGINT) is not _handler:
        return
    resend = None
    if held.withdraw():  # on its way: the handler lets it go
        _swallow += 1
    _installed[1](signal.SIGINT, None)  # raises KeyboardInterrupt, as Ctrl-C would


def _install() -> None:
    """Put :func:`_handler` in front of the current SIGINT handler (main thread only)."""
    global _installed
    current = signal.getsignal(signal.SIGINT)
    if current is _handler:
        return
    if not callable(current):  # SIG_IGN or SIG_DFL: no KeyboardInterrupt to hold back
        _installed = False
        return
    signal.signal(signal.SIGINT, _handler)
    _installed = (_handler, current)


class _Section:
    """A context manager whose body a SIGINT does not interrupt (see the module's text)."""

    __slots__ = ()

    def __enter__(self):
        global _depth
        if get_ident() == _main_ident:
            if _installed is None:
                _install()
            _depth += 1

    def __exit__(self, *exc_info):
        global _depth, _pending
        if get_ident() == _main_ident and _depth:  # (0: entered before a fork made this
            _depth -= 1                            # thread the main one)
            if _pending and not _depth:
                _pending = False
                _deliver(sys._getframe(1))


def _deliver(frame) -> None:
    """Raise the held-back interrupt in ``frame``, or send it again if that is in
    :func:`hold_back_in` code."""
    if not _installed or signal.getsignal(signal.SIGINT) is not _handler:
        return
    if _held_back(frame):
        _send_again_soon()
    else:
        _installed[1](signal.SIGINT, None)  # raises KeyboardInterrupt, as Ctrl-C would


section = _Section()
"""``with section:`` holds back Ctrl-C until the block ends."""


class Lock:
    """A lock whose ``with`` block is a :data:`section`: Ctrl-C can neither leave it held nor
    cut the work done under it in half.  ``reentrant`` makes it an ``RLock``."""

    __slots__ = ("_lock",)

    def __init__(self, reentrant: bool = False):
        self._lock = _forking.lock(reentrant)

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
