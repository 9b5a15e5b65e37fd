"""One owner per UR resource: released once, at ``close()``, ``with`` exit, collection or exit.

Every UR handle type and USM allocation derives from :class:`Resource`.  A registry entry per
owner holds what releases it and the owner's parents (a kernel's program, a queue's context),
so a parent is never released before its children.  Entries are released when their owner is
closed or collected (a weak reference's callback), and at loader teardown newest first.
``weakref.finalize`` would do the same at about 1.3 us per object; every launch makes an Event.
"""

from __future__ import annotations

import gc
import itertools
import os
import weakref
from collections import deque
from threading import get_ident

from . import _interrupts
from ._interrupts import section
from ._ur import ffi, lib
from .errors import check

# serial -> (weak reference to the owner, release function, its arguments, parents), in
# creation order, so teardown can release children before parents.  An Event's entry has no
# weak reference (None): Event.__del__ releases it, and it checks its entry instead.
_live: dict[int, tuple] = {}
_serials = itertools.count()

# serial -> handle of each Event that keeps no memory alive: the one resource every launch
# makes is owned this cheaply (queue.Event).  No owner or parents to record: events are
# children of queues and parents of nothing, so teardown releases them first.
_events: dict[int, object] = {}
_forked = False

release_count = 0
"""How many USM arrays, buffers and queues have been released (see :func:`note_release`)."""


def note_release() -> None:
    """Count a release that invalidates launches prepared with the released handle or
    address (``Kernel.launch`` reuses one while :data:`release_count` is unchanged)."""
    global release_count
    release_count += 1


def _after_fork_in_child() -> None:
    global _forked
    # Only what the parent created is foreign here; a child forked before any use starts fresh.
    _forked = _forked or bool(_live) or bool(_events)
    collecting[0] = None  # (forked by another thread while one collected: not this one's)
    after_collection.clear()  # the parent's to release
    for entry in _live.values():  # hot paths test only ``_handle is None``
        owner = entry[0]() if entry[0] is not None else None  # an Event's is None
        if owner is not None:
            owner._handle = None


os.register_at_fork(after_in_child=_after_fork_in_child)


class ClosedError(ValueError):
    """The object was closed (or its process forked) and its UR handle is gone."""


class _OwnerRef(weakref.ref):
    __slots__ = ("serial",)


def owns(handle) -> bool:
    """Whether some owner releases ``handle`` (a UR handle or USM pointer among its release
    arguments).  Scans the registry: for the rare paths that must find out after an
    interruption (Ctrl-C) whether an owner took a handle."""
    def same(arg) -> bool:
        return arg is handle or (type(arg) is type(handle) and arg == handle)

    return any(same(event) for event in list(_events.values())) or \
        any(any(same(arg) for arg in entry[2]) for entry in list(_live.values()))


def _release(serial: int) -> int:
    with section:  # a release is never cut in half by Ctrl-C (_interrupts)
        return _release_entry(serial)


def _release_entry(serial: int) -> int:
    entry = _live.pop(serial, None)
    if entry is None or _forked:  # a forked child must not release its parent's objects
        return 0
    return entry[1](*entry[2])


@_interrupts.hold_back_in  # a weak reference's callback
def _collected(owner_ref: _OwnerRef) -> None:
    if _live is None:  # the interpreter's end cleared this module (a forked child's end)
        return
    entry = _live.pop(owner_ref.serial, None)  # _release_entry, inlined: a hot path
    if entry is not None and not _forked:
        if collecting[0] is not None and collecting[0] == get_ident():  # in_collection(),
            defer(*entry[1:])  # inlined: a hot path (the entry's parents stay alive with it)
        else:
            entry[1](*entry[2])


# A garbage collection calls the weak references' callbacks of its garbage before the
# finalizers (``__del__``) of the same garbage, which may still use the owners: releases for
# owners that the collecting thread collects meanwhile wait in ``after_collection`` until it
# has ended.  (An owner that a finalizer keeps alive still has its handle released then, as a
# C extension's would; what a finalizer makes and drops waits too.)
collecting = [None]  # the id of the thread whose garbage collection runs now, or None
after_collection: deque = deque()  # (release function, its arguments, what stays alive)
# Release function -> what of it runs at once, with its arguments, where it waits (a queue's
# finish: other code waits for the queues it finds alive, or that its memory was used on).
at_collection: dict = {}


def in_collection() -> bool:
    """Whether this thread runs a garbage collection now."""
    return collecting[0] is not None and collecting[0] == get_ident()


def run_after_collection(release, *args) -> None:
    """``release(*args)`` now, or once the garbage collection this thread runs has ended."""
    if in_collection():
        defer(release, args)
    else:
        release(*args)


def defer(release, args: tuple, alive: tuple = ()) -> None:
    """Hold ``release(*args)`` back until the end of this thread's collection, and ``alive``
    with it."""
    note_release()  # now: a new object may take the owner's id before the release
    at_once = at_collection.get(release)
    if at_once is not None:
        at_once(*args)
    after_collection.append((release, args, alive))


@_interrupts.hold_back_in  # a release is never cut in half by Ctrl-C (_interrupts)
def _on_collection(phase: str, _info) -> None:
    if phase == "start":
        # Not None: the last one's "stop" never came (a callback before this one removed
        # itself from gc.callbacks then).
        failed = _release_deferred() if collecting[0] is not None else None
        collecting[0] = get_ident()
    else:
        collecting[0] = None
        failed = _release_deferred()
    if failed is not None:  # (the collector shows it)
        raise failed


def _release_deferred() -> BaseException | None:
    """Run the releases that waited for a collection, one taken at a time (another thread's
    teardown may take some; an exception between taking one and running it loses that one
    alone); returns the first that failed, if one did (the others still run)."""
    failed = None
    while after_collection and not _forked:
        try:
            release, args, _alive = after_collection.popleft()
        except IndexError:  # another thread took the last
            break
        try:
            release(*args)
        except BaseException as error:  # (SystemExit from a signal handler, say)
            failed = failed or error
    return failed


gc.callbacks.insert(0, _on_collection)  # first: a callback that removes itself skips the next



def live_owners(kind: type | tuple) -> list:
    """The open resources of ``kind`` (a class, or a tuple of them) that are still referenced."""
    owners = (entry[0]() for entry in list(_live.values()) if entry[0] is not None)
    return [owner for owner in owners if isinstance(owner, kind)]


def abandon_all() -> None:
    """Drop every entry without releasing it, keeping what each holds alive (a DLPack
    producer's memory, parents) until the interpreter's end: the process's end frees the
    rest.  At exit, while other threads may still be inside UR on any object; the releases
    of the interpreter's end would also wait for locks those threads held as it stopped them."""
    _abandoned.append((dict(_live), dict(_events), tuple(after_collection)))
    _live.clear()
    _events.clear()
    after_collection.clear()


_abandoned: list = []


def release_all(enqueue_lock, closed_first: tuple = ()) -> None:
    """Release every resource still open, newest first (children before their parents), and
    mark its owner closed, under ``enqueue_lock``: an enqueue of another thread either made
    its call before or finds the object closed.  Owners of the ``closed_first`` types (the
    queues, which every enqueue reads) are all closed before anything is released, so that
    no enqueue checked before the teardown reaches memory released meanwhile."""
    with enqueue_lock:
        for owner in live_owners(closed_first):
            owner._handle = None
    with section:
        if in_collection():  # a teardown inside this thread's collection: its releases
            collecting[0] = None  # run now, children first
        failed = _release_deferred()
        while _events:
            _, handle = _events.popitem()
            if not _forked:
                lib.urEventRelease(handle)
    for serial in sorted(_live, reverse=True):
        entry = _live.get(serial)
        if entry is None:
            continue
        owner = entry[0]() if entry[0] is not None else None  # an Event's is None
        if owner is not None:
            with enqueue_lock:
                owner._handle = None
        _release(serial)
    if failed is not None:
        raise failed


class Resource:
    """Owns one UR handle or allocation and releases it exactly once."""

    __slots__ = ("_handle", "_serial", "__weakref__")
    _release_function: str = ""
    """The UR function that releases the handle, e.g. ``"urContextRelease"``."""

    def _own(self, handle, parents: tuple = (), release_args: tuple | None = None,
             release=None) -> weakref.ref:
        """Take ownership of ``handle``, released by ``release(*release_args)``; returns the
        registry's weak reference to ``self``.  Called in the same ``_interrupts.section`` as
        the UR call that made the handle: a Ctrl-C between the two would leak it.

        The defaults are the class's ``_release_function`` and ``(handle,)``.  ``parents``
        stay alive until the release has run.
        """
        self._handle = handle
        self._serial = serial = next(_serials)
        owner_ref = _OwnerRef(self, _collected)
        owner_ref.serial = serial
        _live[serial] = (owner_ref, release or getattr(lib, self._release_function),
                         (handle,) if release_args is None else release_args, parents)
        return owner_ref

    @property
    def handle(self):
        """The raw UR handle (cdata); raises :class:`ClosedError` once closed."""
        handle = self._handle
        if handle is None or _forked:
            raise ClosedError(f"{type(self).__name__} belongs to the parent process (forked)"
                              if _forked else f"{type(self).__name__} is closed")
        return handle

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran or the handle was released (``loader.teardown()``)."""
        return self._handle is None

    _close_lock = None
    """A lock :meth:`close` drops the handle under (a queue's: the enqueue lock, so that an
    enqueue that read the handle has made its call before the release)."""

    def close(self) -> None:
        """Release the UR handle now; closing twice is harmless."""
        if self._handle is None:
            return
        with section:
            if self._close_lock is None:
                self._handle = None
            else:
                with self._close_lock:
                    self._handle = None
            result = _release_entry(self._serial)
        if result:
            check(result, self._release_function)

    def __enter__(self):
        self.handle  # noqa: B018 - raises if already closed
        return self

    def __copy__(self):
        raise TypeError(f"a {type(self).__name__} owns its UR handle alone and cannot be copied; "
                        "share the object itself")

    def __deepcopy__(self, memo):
        self.__copy__()

    def __reduce_ex__(self, protocol):
        hint = " (to_numpy() gives its data)" if hasattr(self, "to_numpy") else ""
        raise TypeError(f"a {type(self).__name__} holds a UR handle of this process and cannot "
                        f"be pickled{hint}")

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        handle = getattr(self, "_handle", None)  # (unset where __init__ failed)
        if handle is None or self.closed:
            state = "closed"
        elif isinstance(handle, ffi.CData):
            state = hex(int(ffi.cast("uintptr_t", handle)))
        else:
            state = "open"  # an allocator pool without a UR pool: its handle is its key
        return f"<{type(self).__name__} {state}>"
