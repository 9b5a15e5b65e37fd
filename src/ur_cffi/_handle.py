"""One owner per UR resource: released once, at ``close()``, ``with`` exit, collection or exit.

Every UR handle type and USM allocation derives from :class:`Resource`.  Its finalizer is a
``weakref.finalize`` whose arguments hold the parents (a kernel's program, a queue's
context), so a parent is never released before its children.  Finalizers still pending at
interpreter exit run newest first, before the loader is torn down.
"""

from __future__ import annotations

import itertools
import os
import weakref

from ._ur import ffi, lib
from .errors import check

# Pending finalizers in creation order, so teardown can release children before parents.
_live: dict[int, weakref.finalize] = {}
_serial = itertools.count()
_forked = False


def _after_fork_in_child() -> None:
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


class ClosedError(ValueError):
    """The object was closed (or its process forked) and its UR handle is gone."""


def _release(serial: int, release, args: tuple, parents: tuple) -> int:
    _live.pop(serial, None)
    if _forked:
        return 0  # a forked child must not release its parent process's objects
    return release(*args)


def release_all() -> None:
    """Release every resource still open, newest first (used at loader teardown)."""
    for serial in sorted(_live, reverse=True):
        finalizer = _live.get(serial)
        if finalizer is not None:
            finalizer()


class Resource:
    """Owns one UR handle or allocation and releases it exactly once."""

    __slots__ = ("_handle", "_finalizer", "__weakref__")
    _release_function: str = ""
    """The UR function that releases the handle, e.g. ``"urContextRelease"``."""

    def _own(self, handle, parents: tuple = (), release_args: tuple | None = None,
             release=None) -> None:
        """Take ownership of ``handle``, released by ``release(*release_args)``.

        The defaults are the class's ``_release_function`` and ``(handle,)``.  ``parents``
        stay alive until the release has run.
        """
        self._handle = handle
        serial = next(_serial)
        args = (handle,) if release_args is None else release_args
        release = release or getattr(lib, self._release_function)
        self._finalizer = _live[serial] = weakref.finalize(
            self, _release, serial, release, args, parents
        )

    @property
    def handle(self):
        """The raw UR handle (cdata); raises :class:`ClosedError` once closed."""
        handle = self._handle
        if handle is None or _forked or not self._finalizer.alive:
            raise ClosedError(f"{type(self).__name__} belongs to the parent process (forked)"
                              if _forked and handle is not None else
                              f"{type(self).__name__} is closed")
        return handle

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran or the handle was released (``loader.teardown()``)."""
        return self._handle is None or not self._finalizer.alive

    def close(self) -> None:
        """Release the UR handle now; closing twice is harmless."""
        if self._handle is None:
            return
        self._handle = None
        result = self._finalizer()
        if result:
            check(result, self._release_function)

    def __enter__(self):
        self.handle  # noqa: B018 - raises if already closed
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else hex(int(ffi.cast("uintptr_t", self._handle)))
        return f"<{type(self).__name__} {state}>"
