"""ur_cffi's locks, free again in a forked child.

A thread of the parent that held one at ``os.fork()`` does not exist in the child, which would
wait for it forever on its first use of ur_cffi (which must raise ``ClosedError``) or at its
exit.  Every lock ur_cffi makes comes from here and is reinitialised in the child, in place
(``_at_fork_reinit``, as the standard library does for its own), so that every reference to
it sees the free lock.  Those the forking thread may hold itself stay held, for it to let go:
a reentrant lock it owns, and, where it forks from inside ur_cffi's own code (a signal
handler or a finalizer that forks), every plain lock held at the fork."""

from __future__ import annotations

import os
import sys
import threading
import weakref

_made = weakref.WeakSet()
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_forked_inside = [False]  # whether the forking thread was in ur_cffi's code at the fork


def lock(reentrant: bool = False):
    """A new ``threading.Lock`` (``RLock`` if ``reentrant``)."""
    made = threading.RLock() if reentrant else threading.Lock()
    _made.add(made)
    return made


def condition() -> threading.Condition:
    """A new ``threading.Condition`` (over an ``RLock``)."""
    made = threading.Condition()
    _made.add(made)
    return made


def _before_fork() -> None:
    frame = sys._getframe(1)
    while frame is not None and not frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    _forked_inside[0] = frame is not None


def _after_fork_in_child() -> None:
    for made in list(_made):
        if getattr(made, "_is_owned", None) is not None:  # an RLock, a Condition
            if made._is_owned():
                continue
        elif _forked_inside[0] and made.locked():
            continue
        made._at_fork_reinit()


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
