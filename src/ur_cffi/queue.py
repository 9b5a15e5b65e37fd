"""Queues and events: where work is submitted, and how its completion is observed exactly."""

from __future__ import annotations

import itertools
import sys
import threading
import time
import weakref
from time import perf_counter

from . import _checks, _durations, _forking, _handle, _interrupts, _waiting
from ._handle import _events, _live, _serials
from ._handle import collecting as _collecting
from ._interrupts import Lock, hold_back_in, section
from ._ur import ffi, lib
from .enums import (
    ur_event_info_t,
    ur_event_status_t,
    ur_profiling_info_t,
    ur_queue_flag_t,
    ur_result_t,
    ur_structure_type_t,
)
from .errors import ProfilingInfoNotAvailableError, URError, check
from .info import query

# Completion probes run in a polling loop: plain ints (cffi converts IntEnums slowly) and
# direct calls instead of info.query.
_EXECUTION_STATUS = int(ur_event_info_t.UR_EVENT_INFO_COMMAND_EXECUTION_STATUS)
_COMPLETE = int(ur_event_status_t.UR_EVENT_STATUS_COMPLETE)
_STATUS_SIZE = ffi.sizeof("ur_event_status_t")
_WINDOW_KERNELS = 64  # the kernels a queue's window notes before an Event.wait forgets them
_EVENT_HANDLE = ffi.typeof("ur_event_handle_t")
_event_release = lib.urEventRelease
_new_event = object.__new__
_flush = lib.urQueueFlush
_get_ident = threading.get_ident
_finish_calls = itertools.count()  # (tuples that differ: list.remove takes its own)
_finish = lib.urQueueFinish
_DIRECT_SECONDS = _durations.DIRECT_SECONDS


enqueue_lock = Lock()
"""Held around every enqueue.  UR's OpenCL adapter swaps an in-order queue's latest event
(release the old, retain the new) and sets a kernel's arguments without a lock of its own:
overlapping enqueues from two threads release an event twice, freeing it under its owner.
Also guards each queue's window of work (``_durations``)."""

raw_enqueue_lock = enqueue_lock._lock
"""The lock of :data:`enqueue_lock`, for code already inside an ``_interrupts.section``."""

recording: dict = {}
"""Queues being recorded into a ``ur_cffi.Graph``, each to its graph (``graph.py``): launches
and the commands of :func:`enqueue_command` submitted to them go into the graph instead."""


def enqueue_command(queue: Queue, function, args: tuple, wait_for, keep_alive: tuple,
                    blocking: bool, takes_time: bool = True, before: tuple = ()) -> Event:
    """Enqueue ``function(queue, *args, wait list, event)``; the Event keeps ``keep_alive``
    until the command completes and is waited for if ``blocking`` (interruptibly, unlike UR's
    own blocking copies).  ``takes_time=False``: the command does no work of its own (a
    barrier), so a wait for it need not be interruptible on its account (``_durations``).
    ``before``: ``(function, args)`` of commands enqueued first, under the same hold of the
    enqueue lock (so that a close cannot come between them), with the wait list and no event;
    the command itself then waits for nothing (it is the barrier after them: a barrier given
    a wait list waits for that list alone)."""
    graph = recording.get(queue) if recording else None  # (once: the whole operation goes
    if graph is not None:  # into this graph, even if its recording ends meanwhile; graph.py)
        return graph.record_operation(queue, function, args, wait_for, keep_alive, blocking,
                                      before)
    count, events = wait_list(wait_for, queue.context)
    out = ffi.new("ur_event_handle_t *")
    with section:  # Ctrl-C waits until the Event owns the command's event and memory
        try:
            with enqueue_lock:  # Queue.close takes it too: the handle stays valid meanwhile
                handle = queue.handle
                failed = function
                for failed, first_args in before:
                    result = failed(handle, *first_args, count, events, ffi.NULL)
                    if result:
                        lib.urQueueFinish(handle)  # those enqueued use keep_alive
                        break
                else:
                    failed = function
                    if before:
                        count, events = 0, ffi.NULL
                    result = function(handle, *args, count, events, out)
                if takes_time and not result:
                    queue._note_work(None, 1)
            if result:
                check(result, failed.__name__)
            event = (SeveralCommandsEvent if before else Event)._of(out[0], queue, keep_alive)
        except BaseException:
            adopt(out[0], keep_alive)
            raise
    if blocking:
        event.wait()
    return event


def wait_list(wait_for, context=None) -> tuple[int, object]:
    """``(count, ur_event_handle_t[])`` for UR's wait-list arguments (None: no events); raises
    on a non-Event or, given ``context``, an event of another context."""
    if wait_for is None:
        return 0, ffi.NULL
    if isinstance(wait_for, Event):
        wait_for = (wait_for,)
    elif not isinstance(wait_for, (list, tuple)):
        raise TypeError(f"wait_for takes an Event or a list or tuple of Events, not "
                        f"{type(wait_for).__name__} {wait_for!r}")
    if not wait_for:
        return 0, ffi.NULL
    handles = []
    for index, event in enumerate(wait_for):
        if not isinstance(event, Event):
            raise TypeError(f"wait_for takes Event objects, not {type(event).__name__}")
        if context is not None and event.queue.context is not context:
            raise ValueError(f"wait_for: {event!r} belongs to another context")
        try:
            handles.append(event.handle)
        except _handle.ClosedError as error:
            raise _handle.ClosedError(f"wait_for[{index}]: {error}") from None
    return len(handles), ffi.new("ur_event_handle_t[]", handles)


# Dropped Events whose command may still use the memory they keep alive: (handle, memory).
# Released once complete, checked whenever an Event is made, and waited for at teardown;
# never waited for in a finalizer, which may run right after a Ctrl-C cut a wait short.
_orphans: list = []
_orphans_lock = _forking.lock(reentrant=True)  # (a collection while it is held may drop an Event)


def _complete(handle) -> bool:
    status = ffi.new("ur_event_status_t *")
    result = lib.urEventGetInfo(handle, _EXECUTION_STATUS, _STATUS_SIZE, status, ffi.NULL)
    return result != 0 or status[0] == _COMPLETE  # an error: the command will not run


def _release_when_complete(handle, keep_alive) -> int:
    if _complete(handle):
        return lib.urEventRelease(handle)
    with _orphans_lock:
        _orphans.append((handle, keep_alive))
    return 0


def adopt(handle, keep_alive: tuple = ()) -> None:
    """Own ``handle``, the event of a command just enqueued, if an interruption (Ctrl-C) came
    before an :class:`Event` took it: it is released once its command completes, and
    ``keep_alive`` (memory the command uses) is held until then."""
    if handle != ffi.NULL and not _handle.owns(handle):
        _release_when_complete(handle, keep_alive)


def release_after_barrier(queue, keep_alive: tuple) -> None:
    """Hold ``keep_alive`` until the work submitted to ``queue`` so far has completed: after a
    barrier's event, or, where the enqueue lock is taken (another thread's enqueue, or this
    thread's, which a collection interrupted), after one that :func:`release_orphans` puts
    later.  ``queue`` may be the :class:`QueueRef` of a queue gone or closing whose release is
    still finishing it: held until that finish has returned.  A queue closed meanwhile was
    finished: nothing more to hold."""
    if len(_orphans) > _ORPHANS_LOOKED_AT:  # (launches without Events look at none)
        release_orphans()
    if type(queue) is QueueRef or not raw_enqueue_lock.acquire(blocking=False):
        with _orphans_lock:
            _orphans.append((None, (queue, keep_alive)))
        return
    try:
        handle = raw_barrier(queue, keep_event=True, locked=True)
    except URError:
        handle = None  # (a queue in error: nothing to wait for there)
    finally:
        raw_enqueue_lock.release()
    if handle is not None:
        _release_when_complete(handle, keep_alive)


_ORPHANS_LOOKED_AT = 64
"""How many dropped Events and held imports :func:`release_after_barrier` lets wait for the
next Event or finish before it looks at them itself."""


def release_orphans(wait: bool = False) -> None:
    """Release dropped Events whose commands completed (all of them, waiting, if ``wait``),
    and what :func:`release_after_barrier` holds."""
    if _handle._forked:  # the parent's events: not this process's to touch
        return
    with _orphans_lock:
        pending = _orphans[:]
        del _orphans[:len(pending)]  # not those a collection during the copy added
    for handle, keep_alive in pending:
        if handle is None:  # release_after_barrier's: (queue or QueueRef, what it holds)
            target, held = keep_alive
            if type(target) is not QueueRef and target._handle is None:
                target = target.ref  # closed, or closing: until its release's finish returned
                keep_alive = (target, held)
            if type(target) is QueueRef:  # a queue gone or closing, finished by its release
                if wait:  # (a teardown: until that finish has returned, in its thread)
                    with _finished:
                        _finished.wait_for(lambda target=target: target.finished)
                elif not target.finished:
                    with _orphans_lock:
                        _orphans.append((None, keep_alive))
            elif wait:  # (a teardown: its queue's work first)
                retained_handle = retained(target)
                if retained_handle is not None:
                    lib.urQueueFinish(retained_handle)
                    lib.urQueueRelease(retained_handle)
            else:
                release_after_barrier(target, held)
            continue
        if wait:
            lib.urEventWait(1, ffi.new("ur_event_handle_t[1]", [handle]))
        if wait or _complete(handle):
            lib.urEventRelease(handle)
        else:
            with _orphans_lock:
                _orphans.append((handle, keep_alive))


def _release_event(serial: int) -> None:
    """Release the UR event of the Event numbered ``serial`` (a dropped one's)."""
    handle = _events.pop(serial, None)
    if handle is None:  # one with memory to keep, or closed already
        _handle._release_entry(serial)
    elif not _handle._forked:
        _event_release(handle)


class Event(_handle.Resource):
    """The completion of one enqueued command.  Keeps its queue alive, and the memory the
    command reads or writes (``keep_alive``) until the command has completed, even if this
    object is dropped first."""

    __slots__ = ("queue",)
    _release_function = "urEventRelease"

    def __init__(self, handle, queue: Queue, keep_alive: tuple = ()):
        """Own ``handle``, the caller's reference to the event of a command enqueued on
        ``queue`` with the raw layer; ``keep_alive``: objects to hold until it completes."""
        if not isinstance(handle, ffi.CData) or ffi.typeof(handle) is not _EVENT_HANDLE or \
                handle == ffi.NULL:
            raise TypeError(f"Event takes a non-null ur_event_handle_t, not {handle!r}")
        if not isinstance(queue, Queue):  # before the handle is taken
            raise TypeError(f"Event's queue must be the ur_cffi Queue of its command, not "
                            f"{type(queue).__name__} {queue!r}")
        if _handle.owns(handle) or any(handle == orphan for orphan, _ in list(_orphans)):
            raise ValueError(f"Event: handle {handle!r} is owned already (by an Event, which "
                             "releases it): use that Event; Event() takes a reference no "
                             "ur_cffi object holds")
        _check_event_queue(handle, queue)
        self._take(handle, queue, keep_alive)

    @classmethod
    def _of(cls, handle, queue: Queue, keep_alive: tuple = ()) -> Event:
        """The Event of a command ur_cffi has just enqueued, ``handle`` its new event."""
        event = _new_event(cls)
        event._take(handle, queue, keep_alive)
        return event

    def _take(self, handle, queue: Queue, keep_alive: tuple) -> None:
        if _orphans:
            release_orphans()
        # (program._launch makes a launch's Event without this call: keep the two alike.)
        # Every launch makes one, so it is owned more cheaply than other resources: in
        # _handle._events (with memory to keep: in the registry, with no weak reference),
        # released by __del__.  ``self.queue`` keeps the queue alive, and UR keeps it for the
        # event's own reference.
        self._handle = handle
        self._serial = serial = next(_serials)
        if keep_alive:
            _live[serial] = (None, _release_when_complete, (handle, keep_alive), ())
        else:
            _events[serial] = handle
        self.queue = queue
        queue._last_event = serial

    @hold_back_in
    def __del__(self):
        try:
            serial = self._serial
        except AttributeError:  # __init__ did not get as far
            return
        if _collecting[0] is not None and _collecting[0] == _get_ident():
            # (_handle.in_collection(), inlined: a hot path.)  Other finalizers of the same
            # garbage may wait for it.
            _handle.defer(_release_event, (serial,))
        else:
            _release_event(serial)

    def close(self) -> None:
        """Release the UR event now (its command still runs); closing twice is harmless."""
        if self._handle is None:
            return
        with section:
            self._handle = None
            handle = _events.pop(self._serial, None)
            if handle is None:
                result = _handle._release_entry(self._serial)
            else:
                result = 0 if _handle._forked else _event_release(handle)
        if result:
            check(result, "urEventRelease")

    @property
    def handle(self):
        """The raw UR handle (cdata); raises :class:`ClosedError` once closed (also by
        ``loader.teardown()``)."""
        handle, serial = self._handle, self._serial
        if handle is None or _handle._forked or (serial not in _events and serial not in _live):
            raise _handle.ClosedError("Event belongs to the parent process (forked)"
                                      if _handle._forked else "Event is closed")
        return handle

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran or the handle was released (``loader.teardown()``)."""
        return self._handle is None or (self._serial not in _events
                                        and self._serial not in _live)

    def wait(self) -> None:
        """Block until the command completes; raises its error if it failed."""
        handle = ffi.new("ur_event_handle_t[1]", [self.handle])
        queue = self.queue
        if queue._last_event == self._serial and not queue.out_of_order:
            queue._wait_for_window(lib.urEventWait, "urEventWait", (1, handle), self._probe)
        else:
            _waiting.wait(lib.urEventWait, "urEventWait", 1, handle, probe=self._probe)
            if len(queue._window) > _WINDOW_KERNELS:
                # A queue only such waits end kept an entry per Kernel object launched on it:
                # its next finish is left unpredicted (interruptible) instead.
                queue._window = {None: 1}

    def _probe(self):
        return self._is_done

    def _is_done(self) -> bool:
        status = ffi.new("ur_event_status_t *")
        result = lib.urEventGetInfo(self.handle, _EXECUTION_STATUS, _STATUS_SIZE,
                                    status, ffi.NULL)
        if result:
            check(result, "urEventGetInfo")
        return status[0] == _COMPLETE

    @property
    def status(self) -> ur_event_status_t:
        """``UR_EVENT_STATUS_QUEUED``, ``SUBMITTED``, ``RUNNING``, ``COMPLETE`` or ``ERROR``."""
        return query("urEventGetInfo", self.handle,
                     ur_event_info_t.UR_EVENT_INFO_COMMAND_EXECUTION_STATUS)

    def profiling(self, prop: ur_profiling_info_t) -> int:
        """A profiling timestamp in ns; raises ``ProfilingInfoNotAvailableError`` unless the
        queue was created with ``profiling=True`` and the command has reached that point (an
        end before the command ended: :attr:`elapsed_ns` waits first)."""
        _check_profiling_info(prop)
        if not self.queue.profiling:
            self.handle  # noqa: B018 - raises ClosedError
            raise ProfilingInfoNotAvailableError(
                int(ur_result_t.UR_RESULT_ERROR_PROFILING_INFO_NOT_AVAILABLE), "Event.profiling",
                f"{prop.name}: the Event's queue was made without profiling=True")
        return query("urEventGetProfilingInfo", self.handle, prop)

    @property
    def start_ns(self) -> int:
        """When the command started on the device, in ns (profiling queues only)."""
        return self.profiling(ur_profiling_info_t.UR_PROFILING_INFO_COMMAND_START)

    @property
    def end_ns(self) -> int:
        """When the command ended on the device, in ns (profiling queues only)."""
        return self.profiling(ur_profiling_info_t.UR_PROFILING_INFO_COMMAND_END)

    @property
    def elapsed_ns(self) -> int:
        """``end_ns - start_ns``, waiting for the command first."""
        self.wait()
        return self.end_ns - self.start_ns


class SeveralCommandsEvent(Event):
    """The Event of an operation UR runs as several commands (a strided copy: one per block of
    rows), which is a barrier after them: it waits as their Event, but has no timestamps of
    theirs (the barrier's would time nothing), so :meth:`profiling` raises."""

    __slots__ = ()
    _untimed = ("this Event stands for several copy commands (a strided copy), whose barrier "
                "has no timestamps of theirs; time a contiguous copy, or the copy with host "
                "clocks")

    def profiling(self, prop: ur_profiling_info_t) -> int:
        """Raises ``ProfilingInfoNotAvailableError``: several commands have no one timestamp."""
        _check_profiling_info(prop)
        raise ProfilingInfoNotAvailableError(
            int(ur_result_t.UR_RESULT_ERROR_PROFILING_INFO_NOT_AVAILABLE), "Event.profiling",
            self._untimed)


class ReplayEvent(SeveralCommandsEvent):
    """The Event of a ``Graph`` replay: it waits for the whole replay, but its timestamps are
    of no command that spans it (one by one, the last command's; a command buffer's, on the
    OpenCL CPU runtime, about 160 ns for a 14 ms replay), so :meth:`profiling` raises."""

    __slots__ = ()
    _untimed = ("a graph replay's Event has no timestamps of the whole replay (one by one it is "
                "the last command's; the OpenCL CPU runtime's command-buffer event spans "
                "nanoseconds); time it between barriers: queue.barrier() before and after, "
                "on a profiling queue")


def _check_event_queue(handle, queue: Queue) -> None:
    """Raise ``ValueError`` where the UR event ``handle`` is not of ``queue``'s context or, where
    the event names a queue, of ``queue`` (waits on it would pass the wait list's context
    check, and UR answered ``UR_RESULT_ERROR_UNKNOWN``)."""
    context = query("urEventGetInfo", handle, ur_event_info_t.UR_EVENT_INFO_CONTEXT)
    if context != queue.context.handle:
        raise ValueError(f"Event: handle {handle!r} is an event of another context than its "
                         f"queue's ({queue!r}): give the Queue it was enqueued on")
    of_queue = query("urEventGetInfo", handle, ur_event_info_t.UR_EVENT_INFO_COMMAND_QUEUE)
    if of_queue != ffi.NULL and of_queue != queue.handle:
        raise ValueError(f"Event: handle {handle!r} is an event of another queue than "
                         f"{queue!r}: give the Queue it was enqueued on")


def _check_profiling_info(prop) -> None:
    if not isinstance(prop, ur_profiling_info_t):
        raise TypeError(f"profiling takes a ur_profiling_info_t, not {type(prop).__name__} "
                        f"{prop!r}")


class QueueRef(weakref.ref):
    """A weak reference to a queue (``Queue.ref``) that also tells, once the queue object is
    gone, whether its release has finished the UR queue (``finished``): a queue dropped
    without ``close()`` is finished by its collection, while other threads run.  ``handle``:
    the UR queue until its release (set and cleared under ``handles_lock``, its device's
    ``queue_handles_lock``: :func:`retained` takes it)."""

    __slots__ = ("finished", "unfinished", "handle", "handles_lock")

    def finishing(self) -> bool:
        """Whether the queue's work may still run while nothing can order other work after
        it: a thread is closing the queue, or its collection has yet to finish it."""
        queue = self()
        return not self.finished if queue is None else bool(queue._closers)


def note_queue(refs: list, queue: Queue) -> None:
    """Add ``queue``'s :class:`QueueRef` to ``refs`` (the queues some memory was used on) if
    it is not there, dropping those of queues gone and finished: they order nothing, and an
    array used on a queue after queue (a graph's own, a replay's) kept them all, scanned at
    each use.  The list is changed in place (others hold it)."""
    if not any(ref() is queue for ref in refs):
        refs[:] = [ref for ref in refs if ref() is not None or not ref.finished]
        refs.append(queue.ref)


def _finish_then_release(handle, handles_lock, ref: QueueRef) -> int:
    _handle.note_release()
    try:
        result = lib.urQueueFinish(handle)
        queue = ref()
        if queue is not None:  # close(), not a collection: others may be using the handle
            _wait_for_calls_in_progress(queue)
        with handles_lock:  # Device.queue_handles_lock: others retain it under the lock
            ref.handle = None  # first: a signal handler after the release may retain it
            release = lib.urQueueRelease(handle)
    finally:
        _note_finished(ref)
    return result or release


def _finish_at_collection(handle, _handles_lock, ref: QueueRef) -> None:
    """A collected queue's finish, at once where its release waits for the end of the
    collection (``_handle.at_collection``)."""
    lib.urQueueFinish(handle)
    _note_finished(ref)


_finished = _forking.condition()  # (reentrant: a collection under it may finish a queue)
"""Notified as each queue's release has finished it (``QueueRef.finished``)."""


def _note_finished(ref: QueueRef) -> None:
    ref.finished = True
    ref.unfinished.discard(ref)
    with _finished:
        _finished.notify_all()


_handle.at_collection[_finish_then_release] = _finish_at_collection

_CALLS_POLL_SECONDS = 0.0002


def _wait_for_calls_in_progress(queue: Queue) -> None:
    """Wait until the finishes of ``queue`` and the flushes (of any queue) that other threads
    are in now have returned: they may have read the handle before close() dropped it (the
    queue is finished: they return soon).  Calls begun later find it closed, and this
    thread's own (a close from a signal handler, during a finish) cannot be waited for.

    A finish is noted in ``queue._finishers`` (a ``(thread id, call number)`` tuple); a
    flush takes microseconds, and noting each one would double its cost, so a release looks at
    the threads' frames instead.  (A profile or trace hook deeper than two frames under a
    flush hides it.)
    """
    me = threading.get_ident()
    waited = [call for call in tuple(queue._finishers) if call[0] != me]  # (one step: others
    # remove theirs meanwhile)
    waited += [frame for frame in _frames_elsewhere() if frame.f_code is _FLUSH_CODE]
    while waited:
        time.sleep(_CALLS_POLL_SECONDS)
        running = {id(call) for call in tuple(queue._finishers)}
        running.update(id(frame) for frame in _frames_elsewhere())
        waited = [call for call in waited if id(call) in running]


def _frames_elsewhere(depth: int = 3) -> list:
    """The innermost ``depth`` frames of every other thread (a flush's, or what it calls: the
    closed handle's ClosedError).  Not this thread's: held by the caller, its own frame would
    make a cycle that kept its callers' locals (arrays) until a collection."""
    frames = sys._current_frames()
    del frames[threading.get_ident()]
    found = []
    for frame in frames.values():
        for _ in range(depth):
            if frame is None:
                break
            found.append(frame)
            frame = frame.f_back
    return found


def retained(queue: Queue | QueueRef):
    """``queue``'s handle with a reference of the caller's own (to give back with
    ``urQueueRelease``), or None if it is closed: for code that uses a queue another thread
    may close meanwhile.  Of a :class:`QueueRef`: its dropped queue's, until the release."""
    if type(queue) is QueueRef:
        lock, attribute = queue.handles_lock, "handle"
    else:
        lock, attribute = queue.device.queue_handles_lock, "_handle"
    with lock:
        handle = getattr(queue, attribute)
        result = lib.urQueueRetain(handle) if handle is not None else 0
    if handle is not None:
        check(result, "urQueueRetain")
    return handle


def _done() -> bool:
    return True


FINISH_LOCK_SECONDS = 0.5
"""How long :func:`finish_barrier` waits for the enqueue lock before it gives up."""


def finish_barrier(queue: Queue) -> Event | bool | None:
    """What finishing an out-of-order ``queue`` waits for: a barrier after everything
    submitted to it so far, enqueued under the enqueue lock; None if another thread closed the
    queue (so finished it); False if the lock stays taken for ``FINISH_LOCK_SECONDS`` (this
    thread may hold it: a finish from a signal handler or finalizer run inside an enqueue),
    where the caller finishes with ``urQueueFinish`` instead.  ``urQueueFinish`` there, while
    another thread launched on the queue, crashed Intel's CPU runtime (SIGSEGV in seconds)."""
    with section:
        handle = raw_finish_barrier(queue)
        return handle if not handle else Event._of(handle, queue)


def raw_finish_barrier(queue: Queue):
    """:func:`finish_barrier`'s event handle (the caller's to release), None or False."""
    if not raw_enqueue_lock.acquire(timeout=FINISH_LOCK_SECONDS):
        return False
    try:
        return raw_barrier(queue, keep_event=True, locked=True)
    finally:
        raw_enqueue_lock.release()


def raw_barrier(queue: Queue, wait_count: int = 0, waits=ffi.NULL, keep_event: bool = False,
                locked: bool = False):
    """Enqueue a barrier on ``queue`` (raw: no Event object, not recorded by a Graph); its
    event handle if ``keep_event``.  Nothing (None) if another thread closed the queue: a
    closed queue was finished, so there is nothing to wait for.  ``locked``: the caller holds
    the enqueue lock."""
    handle = retained(queue)
    if handle is None:
        return None
    out = ffi.new("ur_event_handle_t *") if keep_event else ffi.NULL
    try:
        if locked:
            result = lib.urEnqueueEventsWaitWithBarrier(handle, wait_count, waits, out)
        else:
            with enqueue_lock:
                result = lib.urEnqueueEventsWaitWithBarrier(handle, wait_count, waits, out)
        if wait_count and not result:
            queue._note_work(None, 1)  # it waits for other queues' work (_durations)
    finally:
        lib.urQueueRelease(handle)
    check(result, "urEnqueueEventsWaitWithBarrier")
    return out[0] if keep_event else None


class Queue(_handle.Resource):
    """A UR queue on one device of a context: in order unless asked otherwise.

    ``close()``, leaving its ``with`` block, or collection finishes it, then releases it.
    """

    __slots__ = ("_context", "_device", "_flags", "_last_event", "_window", "_window_start",
                 "_pools", "_closers", "_finishers", "_in_order_untimed", "_out_of_order",
                 "ref", "triton_scratch")
    _release_function = "urQueueRelease"
    # An enqueue reads the handle and makes its call under the enqueue lock: one racing a
    # close either enqueues before the release or finds the queue closed (not released).
    _close_lock = raw_enqueue_lock

    def __init__(self, context, device=None, *, out_of_order: bool = False,
                 profiling: bool = False):
        """Create a queue on ``device`` (default: the context's first device)."""
        from .context import Context
        from .device import Device

        if not isinstance(context, Context):
            raise TypeError(f"context must be a ur_cffi Context, not {type(context).__name__} "
                            f"{context!r}")
        out_of_order = _checks.flag("Queue: out_of_order", out_of_order)
        profiling = _checks.flag("Queue: profiling", profiling)
        device = context.devices[0] if device is None else device
        if not any(device is known for known in context.devices):
            if not isinstance(device, Device):
                raise TypeError(f"Queue: device must be a ur_cffi Device of the context, not "
                                f"{type(device).__name__} {device!r}")
            raise ValueError(f"Queue: device {device!r} (handle {device.handle!r}) is not one "
                             f"of the context's devices (handles "
                             f"{[known.handle for known in context.devices]!r})")
        flags = ur_queue_flag_t(0)
        if out_of_order:
            flags |= ur_queue_flag_t.UR_QUEUE_FLAG_OUT_OF_ORDER_EXEC_MODE_ENABLE
        if profiling:
            flags |= ur_queue_flag_t.UR_QUEUE_FLAG_PROFILING_ENABLE
        properties = ffi.new("ur_queue_properties_t *",
                             {"stype": ur_structure_type_t.UR_STRUCTURE_TYPE_QUEUE_PROPERTIES,
                              "flags": flags})
        out = ffi.new("ur_queue_handle_t *")
        self._context, self._device, self._flags = context, device, flags
        # A marker enqueued after a command completes with it, and no timestamps are asked
        # for: a launch may leave its event to one made later (ur_cffi.triton's last_event).
        self._in_order_untimed = not (out_of_order or profiling)
        self._out_of_order = bool(out_of_order)  # read by every copy: not from the flags
        self._last_event = None  # the registry serial of the latest command's Event
        # The work enqueued since the last completed wait, and when the first of it was.
        self._window, self._window_start = {}, 0.0
        self._pools: dict = {}  # kind of USM -> its pool (allocator.pool_for keeps it)
        self.triton_scratch: list = []  # ur_cffi.triton.cuda.scratch's shared memory, to close()
        self._closers: set = set()  # the threads inside close()
        # A note for each finish() in progress: a release waits for them (they may have
        # read the handle before a close() of another thread dropped it).
        self._finishers: list = []
        _interrupts.install()  # launches hold Ctrl-C back without a section
        self.ref = ref = QueueRef(self)
        ref.finished, ref.unfinished, ref.handle = False, device._unfinished, None
        ref.handles_lock = device.queue_handles_lock
        with section:
            check(lib.urQueueCreate(context.handle, device.handle, properties, out),
                  "urQueueCreate")
            ref.handle = out[0]
            self._own(out[0], parents=(context, device),
                      release_args=(out[0], device.queue_handles_lock, ref),
                      release=_finish_then_release)
            # (In the section: a Ctrl-C as it ended left an owned queue its device did not
            # know, whose release then discarded its never-hashed weak reference: TypeError.)
            with device.queues_lock:
                device._queues.add(self)
                device._unfinished.add(ref)

    def close(self) -> None:
        """Finish the queue, then release it; closing twice is harmless.  Finished while still
        open: the allocator orders reuse of memory after the queue that last used it only
        while that queue is open (a closed queue is idle), and the finish is interruptible.
        Meanwhile :attr:`closing` is true."""
        if self._handle is None or _handle._forked:
            super().close()
            return
        me = threading.get_ident()
        if any(call[0] == me for call in tuple(self._finishers)):
            raise RuntimeError("close() of a queue this thread is finishing (from a signal "
                               "handler or a finalizer inside its finish()): the finish would "
                               "go on with the released queue; close it after the finish")
        try:
            self._note_closer(True)
            try:
                if self._window_start or self._window:
                    self.finish()
                else:  # Nothing ur_cffi enqueued, ever: no probe's barrier (Intel's CPU
                    # runtime keeps about 10 KiB for each queue that ever made an event),
                    # interruptible all the same (raw-layer or dpctl work may be long).
                    self._wait_for_window(_finish, "urQueueFinish", (self.handle,), None)
            except (URError, _handle.ClosedError):
                pass  # closed by another thread meanwhile, or the release's finish reports it
            super().close()
            self.triton_scratch = []  # (each array holds the queue: they go now, not with it)
        finally:
            self._note_closer(False)

    @hold_back_in  # Ctrl-C comes before or after the note; the finally undoes what was noted
    def _note_closer(self, inside: bool) -> None:
        with self.device.queues_lock:
            if inside:
                self._closers.add(threading.get_ident())
            else:
                self._closers.discard(threading.get_ident())

    @property
    def closing(self) -> bool:
        """Whether a thread is inside :meth:`close` (finishing the queue before releasing
        it)."""
        return bool(self._closers)

    context = _checks.read_only("Queue", "context", "the Context its UR queue was made in")
    device = _checks.read_only("Queue", "device", "the Device its UR queue was made on")
    flags = _checks.read_only("Queue", "flags", "the ur_queue_flag_t its UR queue was made "
                              "with (out_of_order, profiling)")

    @property
    def out_of_order(self) -> bool:
        """Whether commands may run out of submission order."""
        return self._out_of_order

    @property
    def profiling(self) -> bool:
        """Whether the queue's events carry profiling timestamps."""
        return bool(self.flags & ur_queue_flag_t.UR_QUEUE_FLAG_PROFILING_ENABLE)

    def finish(self) -> None:
        """Block until every command submitted to this queue has completed."""
        finishers, call = self._finishers, (_get_ident(), next(_finish_calls))
        try:
            finishers.append(call)  # before the handle is read (_wait_for_calls_in_progress)
            handle, window = self._handle, self._window
            if handle is None:
                self.handle  # noqa: B018 - raises ClosedError
            if self._out_of_order:
                self._finish_out_of_order(handle)
                return
            if len(window) == 1:
                # The usual case, _wait_for_window's work inlined: one kernel, measured short.
                # Emptied in place: every line here delays the wait, which on the CPU device
                # runs the kernel itself if it comes before a worker thread has taken it.
                try:
                    timing, items = window.popitem()
                except KeyError:  # another thread's finish took it: wait as for the rest
                    timing = items = None
                if timing is not None and timing.per_item * items < _DIRECT_SECONDS:
                    start = self._window_start
                    result = _finish(handle)
                    if result:
                        window[None] = 1
                        check(result, "urQueueFinish")
                    timing.per_item = (perf_counter() - start) / items
                    return
                if items is not None:
                    window[timing] = window.get(timing, 0) + items
            self._wait_for_window(_finish, "urQueueFinish", (handle,), self._probe)
        finally:
            try:
                finishers.remove(call)
            except ValueError:  # a Ctrl-C came before the note
                pass
            if _orphans:  # what dropped Events and closed imports held: done now?
                release_orphans()

    def _finish_out_of_order(self, handle) -> None:
        """:meth:`finish` of an out-of-order queue: a wait for :func:`finish_barrier`'s event,
        or ``urQueueFinish`` where that gives up (probing nothing: a probe takes the lock
        too)."""
        barrier = finish_barrier(self)
        if barrier is None:
            self.handle  # noqa: B018 - raises ClosedError (another thread closed it)
        if barrier is False:
            self._wait_for_window(_finish, "urQueueFinish", (handle,), None)
            return
        try:
            self._wait_for_window(lib.urEventWait, "urEventWait",
                                  (1, ffi.new("ur_event_handle_t[1]", [barrier.handle])),
                                  barrier._probe)
        finally:
            barrier.close()

    def _wait_for_window(self, blocking_call, name: str, args: tuple, probe) -> None:
        """Wait with ``blocking_call(*args)`` for everything enqueued so far: the plain
        blocking call where this thread cannot be interrupted or the work is expected to be
        short (``_durations``), else an interruptible wait.  Learns how long the work took."""
        window, self._window, start = self._window, {}, self._window_start
        try:
            if _durations.expected_seconds(window) < _durations.DIRECT_SECONDS or \
                    _waiting.blocks_directly():
                result = blocking_call(*args)
                if result:
                    check(result, name)
            else:
                _waiting.wait(blocking_call, name, *args, probe=probe)
        except BaseException:
            self._window[None] = 1  # the work may still run: the next wait cannot predict it
            raise
        elapsed = perf_counter() - start
        _durations.learn(window, elapsed)

    def _note_work(self, timing, items: int) -> None:
        """Add a command to the window (``_durations``): ``items`` work-items of the kernel
        ``timing`` measures, or (None, 1) one that nothing measures.  Called with the
        enqueue lock held; the launch paths do this inline."""
        window = self._window
        if not window:
            self._window_start = perf_counter()
        window[timing] = window.get(timing, 0) + items

    def _probe(self):
        """A cheap completion check for :meth:`finish`: the status of a barrier enqueued now
        (only waits that may be long poll, so its enqueue costs little).

        Not ``UR_QUEUE_INFO_EMPTY``: the OpenCL adapter answers it from state that another
        thread's enqueue changes under it (invalid events, crashes).  Enqueued on the queue
        itself even while a Graph records it: the wait is for the queue's own work.  None (no
        probe) while the enqueue lock is taken: this thread may hold it (a finish from a signal
        handler run inside an enqueue waited for good).
        """
        with section:
            if not raw_enqueue_lock.acquire(blocking=False):
                return None
            try:
                handle = raw_barrier(self, keep_event=True, locked=True)
            finally:
                raw_enqueue_lock.release()
            return Event._of(handle, self)._is_done if handle is not None else _done

    def flush(self) -> None:
        """Submit everything queued so far to the device without waiting."""
        try:
            result = _flush(self._handle)  # (a release waits: _wait_for_calls_in_progress)
        except TypeError:  # no handle: closed, or inherited across fork()
            self.handle  # noqa: B018 - raises ClosedError
            raise
        if result:
            check(result, "urQueueFlush")

    def barrier(self, wait_for=()) -> Event:
        """A barrier: later commands start after ``wait_for`` (default: everything before)."""
        return enqueue_command(self, lib.urEnqueueEventsWaitWithBarrier, (), wait_for, (),
                               blocking=False, takes_time=bool(wait_for))

    def __repr__(self) -> str:
        kind = "out-of-order" if self.out_of_order else "in-order"
        return f"<Queue {kind} on {self.device!r}{' closed' if self.closed else ''}>"


_FLUSH_CODE = Queue.flush.__code__
