"""ur_cffi's locks, free again in a forked child.

A thread of the parent that held one at ``os.fork()`` does not exist in the child, which would
wait for it forever on its first use of ur_cffi (which must raise ``ClosedError``) or at its
exit.  Every lock ur_cffi makes comes from here and is reinitialised in the child, in place
(``_at_fork_reinit``, as the standard library does for its own), so that every reference to
it sees the free lock."""

from __future__ import annotations

import os
import threading
import weakref

_made = weakref.WeakSet()


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


def _after_fork_in_child() -> None:
    for made in list(_made):
        made._at_fork_reinit()


os.register_at_fork(after_in_child=_after_fork_in_child)
