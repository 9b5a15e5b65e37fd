"""A stream-ordered caching allocator for USM arrays, after PyTorch's and CuPy's.

A freed array's memory goes back to the pool of its context, device and kind of USM instead of
to ``urUSMFree``; a later allocation of the same rounded size takes it from there:

- on the same in-order queue at once, without waiting: every command that used the memory was
  submitted before any command of the new owner, and the queue runs them in that order;
- on another queue (or an out-of-order one), ordered by events, still without a host wait: a
  barrier on the queue it was freed on, and a barrier on the new queue that waits for it;
- host and shared memory, which the host reads and writes directly (``np.asarray``), only
  once the work submitted before its free has completed (an event recorded at the free,
  queried without waiting), as PyTorch's host allocator does.

A free never waits for the allocator's lock or the enqueue lock (a collection can free an
array anywhere, a launch holding the enqueue lock included): where either is held, the free
is kept and done by the allocator's next call (an allocation, ``memory_stats``,
``empty_cache``, or the release of a pool).

Nothing here finishes a queue, except :func:`empty_cache` (and so running out of memory),
which waits for the queues that last used the cached memory before ``urUSMFree``.  An array
used by commands on a queue other than its own is ordered after them only if told so with
``array.record_queue(other)`` (PyTorch's ``record_stream``): its free then records an event on
each such queue, and the next owner waits for those too.  (An asynchronous copy's Event keeps
its memory alive by itself.)

Where the device supports UR's own USM pools (``UR_DEVICE_INFO_USM_POOL_SUPPORT``, see
``_compat.usm_pool``) the memory comes from a ``urUSMPoolCreate`` pool; the CPU device of
the tests has none, and allocates with ``urUSM*Alloc`` directly.
"""

from __future__ import annotations

import os
import sys
import weakref
from time import perf_counter

from . import _checks, _compat, _forking, _handle, _interrupts, _waiting
from ._ur import ffi, lib
from .enums import ur_queue_flag_t, ur_result_t
from .errors import URError, by_result, check
from .queue import (_complete, note_queue, raw_barrier, raw_enqueue_lock, raw_finish_barrier,
                    recording, retained)

_NULL = ffi.NULL
_SMALL = 1 << 20
_SIZE_MAX = (1 << 64) - 1
_OUT_OF_MEMORY = frozenset(int(r) for r in (
    ur_result_t.UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY,
    ur_result_t.UR_RESULT_ERROR_OUT_OF_HOST_MEMORY,
    ur_result_t.UR_RESULT_ERROR_OUT_OF_RESOURCES))
_LIMIT_RESULT = ur_result_t.UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY
_OUT_OF_ORDER = int(ur_queue_flag_t.UR_QUEUE_FLAG_OUT_OF_ORDER_EXEC_MODE_ENABLE)
_int_and = int.__and__  # on an IntFlag without enum's Python-level operator

_lock = _forking.lock(reentrant=True)  # every pool's lists and the counters below
_pools: dict = {}  # (id(context), id(device) or 0, kind) -> _Pool
_totals = {"reserved": 0, "limit": None}
_returned: list = []  # (pool, block, queue) given back, (pool, None, None) released, later
# Each pool's counters: the fewest kept per allocation and free; memory_stats adds the others.
_POOL_STATS = ("reserved_bytes", "ur_allocations", "ur_frees", "oom_retries",
               "cross_queue_reuses")  # and, as attributes (every allocation and free counts
_HOT_STATS = ("allocated_bytes", "cache_hits", "frees")  # them), these
# Bytes in use and their high-water mark, of every pool: a peak is not a sum of pools' peaks.
_usage = [0, 0]
_released: dict = {}  # id(pool) -> pool taken out (its context closed) with memory still in use
_lingering: list = []  # released pools holding blocks whose last work is still running
_lingering_looked = 0.0  # when the allocation path last looked at them (perf_counter)
_LINGERING_INTERVAL = 0.01  # s: at most that often, whatever the allocations in between
_per_context = weakref.WeakKeyDictionary()  # Context -> [in use, peak, counters of pools gone]
_COUNTERS = tuple(name for name in _HOT_STATS + _POOL_STATS
                  if not name.endswith("_bytes"))  # counts that only grow
_retired = dict.fromkeys(_COUNTERS, 0)  # the counters of pools gone, for memory_stats()


def rounded(nbytes: int, largest: int = _SIZE_MAX) -> int:
    """The size of block an allocation of ``nbytes`` takes: multiples of 512 bytes below
    1 MiB (CuPy's granularity), of 128 KiB above, but not past ``largest`` (the device's
    largest allocation, which ``nbytes`` itself may reach)."""
    if nbytes < _SMALL:
        return max((nbytes + 511) & ~511, 512)
    size = min((nbytes + (1 << 17) - 1) & ~((1 << 17) - 1), _SIZE_MAX)  # (UR refuses that)
    return nbytes if size > largest >= nbytes else size


class EmptyCacheFirst(Exception):
    """Raised by :meth:`_Pool.take`, having taken nothing, where the allocation needs the
    cache emptied: the caller empties it (:func:`empty_cache`) outside the code that holds
    back Ctrl-C and takes again with ``emptied=True``, so that the wait for the cached
    blocks' work is interruptible and made without ``_lock``: under it every other thread's
    allocation waited for that work too."""


class Block:
    """One USM allocation: its address, rounded size, and, while cached, the queue that last
    used it (its ``Queue.ref``) and for host and shared memory the event of its free; in use,
    other queues its array was used on (``USMArray.record_queue``), and once cached, their
    events at the free (``waits``)."""

    __slots__ = ("pointer", "address", "size", "queue_ref", "event", "used_on", "waits")

    def __init__(self, pointer, size: int):
        self.pointer, self.address, self.size = pointer, int(ffi.cast("uintptr_t", pointer)), size
        self.queue_ref = self.event = self.used_on = self.waits = None


def _queue_of(block: Block):
    """The still-open queue that last used ``block``, or None (closed queues were finished;
    see :func:`_finishing` for one that is closing or being collected)."""
    queue = block.queue_ref() if block.queue_ref is not None else None
    return queue if queue is not None and queue._handle is not None else None


def _events_of(block: Block) -> list:
    """The events ``block``'s next owner waits for: its free's, and other queues' work."""
    return ([block.event] if block.event is not None else []) + (block.waits or [])


def _finishing(block: Block) -> bool:
    """Whether the queue that last used ``block`` is being closed or collected, its work not
    yet finished: no barrier can order other work after it, so the block waits."""
    return block.queue_ref is not None and block.queue_ref.finishing()


class _Pool(_handle.Resource):
    """The cached blocks of one context, device and kind of USM; released (cached memory freed)
    when its context object is collected, at :func:`empty_cache`, or at teardown."""

    __slots__ = ("context_ref", "context_handle", "device", "kind", "key", "_free", "_ur_pool",
                 "_device_memory", "stats", "context_usage", "allocated_bytes", "cache_hits",
                 "frees")
    _release_function = "urUSMFree"

    def __init__(self, context, device, kind: str, key, context_usage: list):
        self.device, self.kind, self.key = device, kind, key
        self.context_usage = context_usage  # the context's, shared (_per_context)
        self._device_memory = kind == "device"
        self._free: dict[int, list[Block]] = {}
        self.stats = dict.fromkeys(_POOL_STATS, 0)
        self.allocated_bytes = self.cache_hits = self.frees = 0
        self._ur_pool = _compat.usm_pool(context.handle, device.handle) \
            if kind != "host" else None
        self.context_handle = context.handle  # each block holds a reference on it
        if self._ur_pool is not None:
            # And so does a UR pool: a context destroyed before its pool destroys the pool
            # with it, and the pool's own release then frees it again (CUDA adapter: glibc
            # aborts with "double free", seen on the H200).
            check(lib.urContextRetain(context.handle), "urContextRetain")
        self.context_ref = weakref.ref(context, self._context_collected)
        self._own(self._ur_pool if self._ur_pool is not None else key, release_args=(self,),
                  release=_Pool._release_all)

    @_interrupts.hold_back_in  # a weak reference's callback
    def _context_collected(self, _ref) -> None:
        if _lock is None:  # at interpreter exit, module globals gone: teardown releases it
            return
        _handle.run_after_collection(self._release_for_collected_context)

    def _release_for_collected_context(self) -> None:
        if not _lock.acquire(blocking=False):  # see give_back
            _returned.append((self, None, None))
            return
        try:
            _release_pools([self])
        finally:
            _lock.release()

    # -- taking and giving back ------------------------------------------------------------

    def take(self, queue, nbytes: int, array=None, emptied: bool = False) -> Block:
        """A block of at least ``nbytes`` usable by commands on ``queue`` submitted from now on
        (call where Ctrl-C is held back: ``_interrupts``); the shape and dtype of ``array``
        (the USMArray it is for) are named in errors.  Raises :class:`EmptyCacheFirst`, having
        taken nothing, where the cache must be emptied for it, unless ``emptied``."""
        size = 512 if nbytes <= 512 else (nbytes + 511) & ~511 if nbytes < _SMALL \
            else rounded(nbytes, queue.device.max_mem_alloc_size)  # (small sizes inlined)
        _lock.acquire()  # not ``with``: a hot path, and Ctrl-C is held back here
        try:
            if _returned or _lingering and \
                    perf_counter() - _lingering_looked > _LINGERING_INTERVAL:
                _give_back_returned(blocking=True)  # (no finalizer allocates, nor a launch
                # under the enqueue lock)
            # The common case first: the newest block was freed on this in-order queue.  (Popped,
            # not peeked: a collection here may give another block back onto the list.)
            blocks = self._free.get(size)
            block = blocks.pop() if blocks else None
            ref = block.queue_ref if block is not None else None
            if ref is None or ref() is not queue or not self._device_memory or \
                    block.waits is not None or _int_and(queue._flags, _OUT_OF_ORDER) or \
                    recording and queue in recording:
                if block is not None:
                    blocks.append(block)
                # While a graph records the queue, the array is the graph's, which replays on
                # any queue: only memory that nothing uses any more (as for host memory).
                completed = bool(recording and queue in recording)
                block = self._cached(queue, size, completed)
                if block is None and size >= _SMALL:
                    block = self._cached_larger(queue, size, completed)
            if block is None:
                block = self._allocate(queue, size, array, emptied)
            else:
                self.cache_hits += 1
            size = block.size
            self.allocated_bytes += size
            usage = self.context_usage
            in_use = usage[0] = usage[0] + size
            if in_use > usage[1]:
                usage[1] = in_use
            in_use = _usage[0] = _usage[0] + size
            if in_use > _usage[1]:
                _usage[1] = in_use
        finally:
            _lock.release()
        return block

    def _cached(self, queue, size: int, completed: bool = False) -> Block | None:
        """A cached block of ``size`` bytes for ``queue``: ordered after its last use there,
        or, with ``completed`` (and for host and shared memory), one whose work is done."""
        blocks = self._free.get(size)
        if not blocks:
            return None
        if self.kind != "device" or completed:  # (the host may touch it at once)
            for i in range(len(blocks) - 1, -1, -1):
                candidate = blocks[i]
                if candidate.event is None and _finishing(candidate):
                    continue  # freed while its queue was being closed: done once that is
                if candidate.event is None and (last := _queue_of(candidate)) is not None:
                    if self.kind == "device":
                        # (While recording.)  Done if a barrier there completes at once; its
                        # event is not kept on the block, whose reuse as device memory reads
                        # no event.
                        probe = raw_barrier(last, keep_event=True)
                        done = probe is None or _complete(probe)
                        if probe is not None:
                            lib.urEventRelease(probe)
                        if not done:
                            continue
                    else:  # a close that was interrupted: done once a barrier enqueued now is
                        candidate.event = raw_barrier(last, keep_event=True)
                events = _events_of(candidate)
                if all(map(_complete, events)):
                    block = blocks.pop(i)
                    _release_events(events)
                    block.event = block.waits = None
                    return block
            return None
        for i in range(len(blocks) - 1, -1, -1):  # the newest block freed on this queue
            ref = blocks[i].queue_ref
            if ref is not None and ref() is queue and not _int_and(queue._flags, _OUT_OF_ORDER):
                block = blocks.pop(i)
                break
        else:
            # Not a block of a queue that another thread is closing: ordering after it would
            # enqueue a barrier there, which the CUDA adapter holds until the close's finish
            # has returned (a host wait).  Closed, the queue is idle and its blocks free.
            for i in range(len(blocks) - 1, -1, -1):
                if not _finishing(blocks[i]):
                    block = blocks.pop(i)
                    break
            else:
                return None
            self._order_after_last_use(block, queue)
        if block.waits is not None:  # used on other queues too: wait for their work as well
            waits, block.waits = block.waits, None
            try:
                raw_barrier(queue, len(waits), ffi.new("ur_event_handle_t[]", waits))
            finally:
                _release_events(waits)
            queue._last_event = None
        return block

    def _cached_larger(self, queue, size: int, completed: bool) -> Block | None:
        """A cached block of more than ``size`` bytes but at most twice that, the smallest
        first: sizes that vary (a batch's, a sequence's) then reuse what was freed instead of
        caching a block of every size they take.  (Not split: PyTorch's and CuPy's allocators
        split large blocks; here an array may hold up to twice its bytes.)"""
        free = self._free.copy()  # (a collection in this loop may give a block back to a
        # new size; copied at once: building a list of its items can start a collection)
        for larger in sorted(cached for cached, blocks in free.items()
                             if size < cached <= 2 * size and blocks):
            block = self._cached(queue, larger, completed)
            if block is not None:
                return block
        return None

    def _order_after_last_use(self, block: Block, queue) -> None:
        """Make commands submitted to ``queue`` from now on run after every command submitted
        to the queue that last used ``block`` (no host wait)."""
        last = _queue_of(block)
        if last is None:
            return
        self.stats["cross_queue_reuses"] += 1
        if last is queue:  # out of order: a barrier orders what follows after what came before
            raw_barrier(queue)
        else:
            event = raw_barrier(last, keep_event=True)
            if event is not None:
                try:
                    raw_barrier(queue, 1, ffi.new("ur_event_handle_t[1]", [event]))
                finally:
                    lib.urEventRelease(event)
        queue._last_event = None  # Queue.finish's probe: the latest command has no Event

    def _allocate(self, queue, size: int, array, emptied: bool) -> Block:
        detail = f"shape {array.shape} of {array.dtype}: " if array is not None else ""
        limit = _totals["limit"]
        if limit is not None and _totals["reserved"] + size > limit:
            if not emptied:  # (the caller empties the cache, then takes again)
                self.stats["oom_retries"] += 1
                raise EmptyCacheFirst
            raise by_result[_LIMIT_RESULT](
                _LIMIT_RESULT, "ur_cffi's memory limit",
                f"{detail}{size} bytes more would pass the limit of {limit} bytes "
                f"({_totals['reserved']} in use; ur_cffi.set_memory_limit); "
                f"{_ALLOCATE[self.kind]} was not called")
        out = ffi.new("void **")
        result = self._ur_allocate(queue, size, out)
        if result in _OUT_OF_MEMORY and not emptied:  # the cache emptied, it is tried once more
            self.stats["oom_retries"] += 1
            raise EmptyCacheFirst
        if result:
            check(result, _ALLOCATE[self.kind],
                  f"{detail}{size} bytes; the device's largest allocation is "
                  f"{queue.device.max_mem_alloc_size}")
        context = queue.context.handle
        # USM memory has no reference count: the block holds its context for urUSMFree
        # (freeing after the context's release crashes the CPU runtime).
        result = lib.urContextRetain(context)
        if result:
            lib.urUSMFree(context, out[0])
            check(result, "urContextRetain")
        self.stats["ur_allocations"] += 1
        self.stats["reserved_bytes"] += size
        _totals["reserved"] += size
        block = Block(out[0], size)
        block.queue_ref = None
        return block

    def _ur_allocate(self, queue, size: int, out) -> int:
        context, pool = queue.context.handle, self._ur_pool or _NULL
        if self.kind == "device":
            return lib.urUSMDeviceAlloc(context, queue.device.handle, _NULL, pool, size, out)
        if self.kind == "host":
            return lib.urUSMHostAlloc(context, _NULL, pool, size, out)
        return lib.urUSMSharedAlloc(context, queue.device.handle, _NULL, pool, size, out)

    def give_back(self, block: Block, queue) -> None:
        """Cache ``block``, last used on ``queue`` (no wait; see the module's text).  Kept in
        ``_returned`` for the allocator's next call where that would wait for a lock."""
        if not _lock.acquire(False):
            _returned.append((self, block, queue))
            return
        try:
            if _returned:
                _give_back_returned()
            if not self._give_back(block, queue):
                _returned.append((self, block, queue))
        finally:
            _lock.release()

    def _give_back(self, block: Block, queue, blocking: bool = False) -> bool:
        """:meth:`give_back` with ``_lock`` held; False, having done nothing, where it would
        enqueue a barrier while another thread, or this one (a collection inside a launch
        brought it here), holds the enqueue lock, unless ``blocking`` (ordinary code, which
        may wait for it), or on another queue (``record_queue``) that a thread is closing.
        The barriers are enqueued under the lock taken here: a free never waits for it."""
        open_queue = queue._handle is not None  # a closed queue was finished: nothing uses it
        if block.used_on is None and self._device_memory and self._handle is not None:
            # the usual case: nothing to record
            waits = event = None
        else:
            events = self._events_at_free(block, queue, open_queue, blocking)
            if events is None:
                return False
            waits, event = events
        self.frees += 1
        self.allocated_bytes -= block.size
        self.context_usage[0] -= block.size
        _usage[0] -= block.size
        # A queue that a thread is closing may still run work (its release's finish has yet
        # to return): the block waits for that close (_finishing), as a closed queue's need not.
        block.queue_ref = queue.ref if open_queue or queue.closing else None
        block.used_on, block.waits, block.event = None, waits, event
        if self._handle is None:  # this pool was released: freed once its work is done
            self._free.setdefault(block.size, []).append(block)
            _free_done(self)
            return True
        blocks = self._free.get(block.size)
        if blocks is None:
            blocks = self._free[block.size] = []
        blocks.append(block)
        return True

    def _events_at_free(self, block: Block, queue, open_queue: bool, blocking: bool):
        """``(waits, event)`` for :meth:`_give_back`: the events of the other queues'
        (``record_queue``) work so far, and for host and shared memory an event of the work so
        far on ``queue``; None where that would wait for a lock or a close (see there)."""
        others = []
        if block.used_on is not None:  # record_queue: each other queue's work so far
            if any(ref.finishing() for ref in block.used_on):
                return None  # kept until that close or collection has finished it
            others = list({id(q): q for q in (ref() for ref in block.used_on)
                           if q is not None and q._handle is not None and q is not queue}
                          .values())
        # Host and shared memory: an event of the work so far, which the next owner's host
        # access waits for (and any kind given back to a released pool: its free waits for
        # it without a host wait, _free_done); none on a queue another thread is closing (its
        # barrier would wait for the close in the CUDA adapter): such a block waits for the
        # close (_cached).
        own = ((not self._device_memory or self._handle is None) and open_queue
               and not queue.closing)
        waits = event = None
        if others or own:
            if blocking:
                raw_enqueue_lock.acquire()
            elif not raw_enqueue_lock.acquire(blocking=False):
                return None
            try:
                waits = [e for e in (raw_barrier(q, keep_event=True, locked=True) for q in others)
                         if e is not None] or None
                if own:
                    event = raw_barrier(queue, keep_event=True, locked=True)
            finally:
                raw_enqueue_lock.release()
        return waits, event

    # -- emptying ---------------------------------------------------------------------------

    def empty(self) -> int:
        """Free every cached block (after the queues that last used them finish); returns
        the first failing result or 0."""
        with _lock:
            if _returned:
                _give_back_returned()
            blocks = []
            cached, self._free = self._free, {}  # taken out at once: a collection in the loop
            for size, sized in cached.items():  # may give a block back (to the new dict)
                for block in sized:  # a collected queue's still finishing: nothing to wait on
                    if _finishing(block):
                        self._free.setdefault(size, []).append(block)
                    else:
                        blocks.append(block)
            return _free_blocks(self, blocks)

    def _release_all(self) -> int:
        result = self.empty()
        return self._release_ur_pool() or result

    def renew_ur_pool(self) -> int:
        """Release the UR pool for a new one if none of its memory is in use (``_lock``
        held); returns the first failing result or 0."""
        if self._ur_pool is None or self._handle is None or self._holds_ur_memory():
            return 0
        fresh = _compat.usm_pool(self.context_handle, self.device.handle)
        if fresh is None:
            return 0
        result = lib.urContextRetain(self.context_handle)
        if result:
            lib.urUSMPoolRelease(fresh)
            return result
        old, self._ur_pool = self._ur_pool, fresh
        self._handle = fresh  # (the registry releases the pool through _release_all)
        return self._release_ur_pool_handle(old)

    def _release_ur_pool(self) -> int:
        """Release the UR pool once none of its memory is in use (UR wants a pool's
        allocations freed before the pool): at the pool's release, or at the last block
        given back after it."""
        with _lock:  # a release (any thread) and a block given back after it may both come
            if self._ur_pool is None or self._holds_ur_memory():
                return 0
            ur_pool, self._ur_pool = self._ur_pool, None
        return self._release_ur_pool_handle(ur_pool)

    def _holds_ur_memory(self) -> bool:
        """Whether memory of the UR pool is in use or cached here, not yet freed (a block
        kept for a queue that is being closed, or given back during an ``empty()``): UR
        refuses to free it once the pool is released (INVALID_VALUE on the CUDA adapter)."""
        return bool(self.allocated_bytes) or any(self._free.values())

    def _release_ur_pool_handle(self, ur_pool) -> int:
        result = lib.urUSMPoolRelease(ur_pool)
        return lib.urContextRelease(self.context_handle) or result




def forget_unused_exports() -> None:
    """Give back the memory of DLPack capsules dropped unconsumed (numpy refusing device
    memory drops its capsule), which only the next export or import would look at."""
    interop = sys.modules.get("ur_cffi.interop")
    if interop is not None:
        interop._forget_unused_capsules()


def _release_events(events) -> None:
    for event in events:
        lib.urEventRelease(event)


def record_queue(block, queue) -> None:
    """Note that ``block``'s array is used on ``queue`` too (``USMArray.record_queue``)."""
    with _lock:
        if block.used_on is None:
            block.used_on = []
        note_queue(block.used_on, queue)


def _give_back_returned(blocking: bool = False) -> None:
    """Do the frees kept in ``_returned`` (``_lock`` held); ``blocking``: from code that may
    wait for the enqueue lock (no finalizer can have brought it here)."""
    pending = _returned[:]
    del _returned[:len(pending)]  # others only append meanwhile: removing takes _lock
    if _handle._forked:  # the parent's memory and queues: not this process's to touch
        return
    with _interrupts.section:
        if _lingering and perf_counter() - _lingering_looked > _LINGERING_INTERVAL:
            _free_lingering()
        for index, (pool, block, queue) in enumerate(pending):
            try:
                if block is None:
                    _release_pools([pool])
                elif not pool._give_back(block, queue, blocking):
                    _returned.append((pool, block, queue))
            except BaseException:
                _returned.extend(pending[index + 1:])  # done by a later call
                raise


def give_back_kept() -> None:
    """Do the frees kept for later (see the module's text) now: ``loader.teardown`` calls it
    before releasing what is left."""
    with _interrupts.section, _lock:
        _give_back_returned(blocking=True)
        _free_lingering(waiting=True)


def _free_lingering(waiting: bool = False) -> int:
    """:func:`_free_done` for every released pool that still holds blocks (``_lock`` held);
    returns the first failing result or 0."""
    global _lingering_looked
    _lingering_looked = perf_counter()
    result = 0
    for pool in _lingering[:]:
        result = _free_done(pool, waiting) or result
    return result


def _free_done(pool: _Pool, waiting: bool = False) -> int:
    """Free the blocks of released ``pool`` whose work has completed (``waiting``: all but
    those of a queue another thread is closing, after their work), and retire it once it holds
    none and has no memory in use (``_lock`` held); returns the first failing result or 0."""
    cached, pool._free = pool._free, {}  # taken out at once: a collection in this loop may
    # give a block back to this pool, and free what it finds (nested)
    done = []
    for size, blocks in cached.items():
        for block in blocks:
            events = _events_of(block)
            if not _finishing(block) and (waiting or all(map(_complete, events))):
                done.append(block)
            else:
                pool._free.setdefault(size, []).append(block)
    result = _free_blocks(pool, done)
    kept = bool(pool._free)
    if kept:
        if pool not in _lingering:
            _lingering.append(pool)
        return result
    if pool in _lingering:
        _lingering.remove(pool)
    result = pool._release_ur_pool() or result
    if not pool.allocated_bytes:
        _retire(pool)
    return result


def _free_blocks(pool: _Pool, blocks: list[Block]) -> int:
    """``urUSMFree`` each block once the work submitted before its free has completed."""
    finished, result = set(), 0
    for block in blocks:
        queue = _queue_of(block) if block.event is None else None  # (the event: its work)
        handle = retained(queue) if queue is not None and id(queue) not in finished else None
        if handle is not None:
            finished.add(id(queue))
            barrier = queue.out_of_order and raw_finish_barrier(queue)  # (see there)
            if barrier:
                result = lib.urEventWait(1, ffi.new("ur_event_handle_t[1]", [barrier])) or \
                    result
                lib.urEventRelease(barrier)
            else:
                result = lib.urQueueFinish(handle) or result
            lib.urQueueRelease(handle)
        events = _events_of(block)
        if events:
            lib.urEventWait(len(events), ffi.new("ur_event_handle_t[]", events))
            _release_events(events)
            block.event = block.waits = None
        result = lib.urUSMFree(pool.context_handle, block.pointer) or result
        lib.urContextRelease(pool.context_handle)
        _totals["reserved"] -= block.size
        pool.stats["reserved_bytes"] -= block.size
        pool.stats["ur_frees"] += 1
    if blocks:  # launches prepared with an address in them check it again
        _handle.note_release()
    return result


_ALLOCATE = {"device": "urUSMDeviceAlloc", "host": "urUSMHostAlloc",
             "shared": "urUSMSharedAlloc"}


def pool_for(queue, kind: str) -> _Pool:
    """The pool that serves ``kind`` USM allocations on ``queue``'s context and device (kept
    on the queue too, by kind: every allocation asks)."""
    pool = queue._pools.get(kind)
    if pool is not None and pool._handle is not None:  # not released at teardown
        return pool
    context = queue.context
    device = queue.device
    key = (id(context), id(device) if kind != "host" else 0, kind)
    pool = _pools.get(key)
    if pool is None or pool.context_ref() is not context or pool._handle is None:
        with _lock:
            pool = _pools.get(key)  # again: another thread's first allocation made it
            if pool is None or pool.context_ref() is not context or pool._handle is None:
                if pool is not None and pool._handle is None:  # released by a teardown
                    _take_out(pool)
                    _free_done(pool)
                usage = _per_context.get(context)
                if usage is None:
                    usage = _per_context[context] = [0, 0, dict.fromkeys(_COUNTERS, 0)]
                pool = _pools[key] = _Pool(context, device, kind, key, usage)
    queue._pools[kind] = pool
    return pool


def empty_cache() -> None:
    """Free all cached (unused) USM memory of every pool, waiting first for the queues that
    last used it (PyTorch's ``torch.cuda.empty_cache``).  Memory in use stays.

    A UR pool keeps what ``urUSMFree`` gives back (the CUDA adapter's does): one with no
    memory in use is released for a new one, which returns its memory to the device."""
    if _handle._forked:
        raise _handle.ClosedError("the cached memory belongs to the parent process (forked)")
    forget_unused_exports()
    _wait_for_cached_work(None)
    with _lock:
        _give_back_returned(blocking=True)
        pools = list(_pools.values())
        result = 0
        with _interrupts.section:  # (a pool's blocks, taken out at once, are freed or lost)
            for pool in pools:
                result = pool.empty() or result
                result = pool.renew_ur_pool() or result
            result = _free_lingering(waiting=True) or result
    check(result, "urUSMFree")


def _wait_for_cached_work(pools: list | None) -> None:
    """Wait for the work that the frees of the cached blocks of ``pools`` (None: all) wait
    for, interruptibly and without ``_lock`` (it waited under the lock, deaf to Ctrl-C, and
    every allocation with it)."""
    queues, events = {}, []
    try:
        with _lock:  # (pools of closed contexts too: their blocks wait for their work)
            for pool in list(_pools.values()) + _lingering if pools is None else pools:
                # Copies: a collection in the loop may give a block back (a new size).
                for blocks in list(pool._free.values()):
                    for block in list(blocks):
                        if block.event is None and (queue := _queue_of(block)) is not None:
                            queues[id(queue)] = queue
                        for event in _events_of(block):
                            if lib.urEventRetain(event) == 0:
                                events.append(event)
        for queue in queues.values():
            try:
                queue.finish()
            except (URError, _handle.ClosedError):
                pass  # closed meanwhile (then finished), or its error: the free reports it
        if events:
            try:
                _waiting.wait(lib.urEventWait, "urEventWait", len(events),
                              ffi.new("ur_event_handle_t[]", events))
            except URError:
                pass  # a command that failed: its memory is freed all the same
    finally:
        _release_events(events)


def _pools_of(context) -> list:
    with _lock:
        return [pool for pool in _pools.values() if pool.context_ref() is context]


def wait_for_cached_work_of(context) -> None:
    """Wait for the work the frees of ``context``'s cached memory wait for, interruptibly and
    without the allocator's lock (:func:`release_pools_of` then frees it without a wait)."""
    _wait_for_cached_work(_pools_of(context))


def release_pools_of(context) -> None:
    """Release the pools of ``context``, which is being closed: its cached memory is freed
    (memory still in use is freed when given back), and its UR pools give back the references
    they hold on it."""
    _release_pools(_pools_of(context))


def _release_pools(pools) -> None:
    """Take ``pools`` out of the allocator and release each (every one, even if one fails;
    the first failure is raised)."""
    with _lock:
        for pool in pools:
            _take_out(pool)
    failure = None
    for pool in pools:
        try:
            pool.close()
        except URError as error:
            failure = failure or error
        finally:
            with _interrupts.section, _lock:  # blocks kept for a closing queue: freed later
                _free_done(pool)
    if failure is not None:
        raise failure


def _take_out(pool: _Pool) -> None:
    """Take ``pool`` out of the allocator (``_lock`` held); its counters stay in the
    statistics: in ``_released`` until its memory comes back (:func:`_retire`)."""
    registered = _pools.get(pool.key) is pool  # (a pool of a collected context's id may
    if registered:  # have taken its place already)
        del _pools[pool.key]
    if pool._handle is not None or registered:  # (registered, no handle: a teardown's)
        _released[id(pool)] = pool


def _retire(pool: _Pool) -> None:
    """Take a released pool with no memory in use out of the statistics, keeping its
    counters in the totals of every pool and of its context."""
    with _lock:
        if _released.pop(id(pool), None) is not None:
            of_context = pool.context_usage[2]
            for name in _COUNTERS:
                count = pool.stats[name] if name in pool.stats else getattr(pool, name)
                _retired[name] += count
                of_context[name] += count


def memory_stats(context=None) -> dict:
    """Counters of the caching allocator, summed over the pools of ``context`` (default: all):
    ``allocated_bytes`` (in use), ``cached_bytes`` (freed, kept for reuse),
    ``reserved_bytes`` (both), ``peak_allocated_bytes``, ``allocations`` (those served:
    ``cache_hits`` + ``ur_allocations``), ``cache_hits``,
    ``frees``, ``ur_allocations``, ``ur_frees``, ``oom_retries``, ``cross_queue_reuses``,
    and ``limit_bytes`` (None: no limit).  Frees kept for later are done first, so that the
    counters include them."""
    from .context import Context

    if context is not None and not isinstance(context, Context):
        raise TypeError(f"memory_stats takes a ur_cffi Context or None, not "
                        f"{type(context).__name__} {context!r}")
    if _handle._forked:
        raise _handle.ClosedError("the allocator's memory belongs to the parent process "
                                  "(forked)")
    forget_unused_exports()
    with _interrupts.section, _lock:
        _give_back_returned(blocking=True)
        _free_lingering()  # (the allocation path looks at them every 10 ms only)
        pools = [pool for pool in (*_pools.values(), *_released.values())
                 if context is None or pool.context_ref() is context]
        totals = dict.fromkeys(_HOT_STATS + _POOL_STATS, 0)
        if context is None:
            totals.update(_retired)
        elif context in _per_context:
            totals.update(_per_context[context][2])
        for pool in pools:
            for name, value in pool.stats.items():
                totals[name] += value
            for name in _HOT_STATS:
                totals[name] += getattr(pool, name)
        totals["peak_allocated_bytes"] = _usage[1] if context is None else \
            _per_context[context][1] if context in _per_context else 0
    totals["cached_bytes"] = totals["reserved_bytes"] - totals["allocated_bytes"]
    totals["allocations"] = totals["cache_hits"] + totals["ur_allocations"]
    totals["limit_bytes"] = _totals["limit"]
    return totals



def set_memory_limit(nbytes: int | None) -> None:
    """Cap the USM memory the allocator holds (in use and cached, every pool) at ``nbytes``;
    None removes the cap.  An allocation past it empties the cache, then raises
    ``OutOfDeviceMemoryError`` (a ``MemoryError``, as UR's ``OutOfHostMemoryError`` is too)."""
    if nbytes is not None:
        nbytes = _checks.integer("memory limit", nbytes)
    _totals["limit"] = nbytes
