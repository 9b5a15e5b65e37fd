"""The caching allocator on the CPU device: freed memory is reused on the same in-order queue
without a wait, ordered by events on another queue, host memory only once its work is done;
statistics, ``empty_cache``, the memory limit with its retry; and no queue finish on free,
checked with a kernel that spins until the test lets it go (order, not timing, decides)."""

import contextlib
import ctypes
import gc
import json
import pickle
import sys
import threading
import time

import numpy as np
import pytest

import crash_probe
import device_under_test
import ur_cffi
from concurrency import run_in_threads
from ur_cffi import _handle, allocator
from ur_cffi.allocator import _Pool
from ur_cffi.enums import ur_event_status_t
from ur_cffi.errors import InvalidUsmSizeError

LOCAL = crash_probe.LOCAL_SIZE
COMPLETE = ur_event_status_t.UR_EVENT_STATUS_COMPLETE


@pytest.fixture(scope="module")
def spin(context, kernels):
    program, kernel = crash_probe.load(context, kernels, "spin")
    with program, kernel:
        yield kernel


@pytest.fixture(scope="module")
def axpy(context, kernels):
    program, kernel = crash_probe.load(context, kernels, "axpy")
    with program, kernel:
        yield kernel


class Spinning:
    """A ``spin`` kernel running on ``queue`` until :meth:`release` (or SPIN_LIMIT rounds)."""

    def __init__(self, spin, queue, out=None):
        self.flag = ur_cffi.zeros(1, np.int32, queue=queue, kind="host")
        self.out = out if out is not None else ur_cffi.empty(1, np.int32, queue=queue)
        self.event = spin.launch(queue, LOCAL, LOCAL, self.flag, self.out,
                                 crash_probe.SPIN_LIMIT, *crash_probe.spin_local())

    @property
    def running(self) -> bool:
        return self.event.status != COMPLETE

    def release(self) -> None:
        ctypes.c_int32.from_address(self.flag.data_ptr()).value = 1


def test_freed_memory_is_reused_on_the_same_queue(queue):
    first = ur_cffi.empty(1024, np.float32, queue=queue)
    address = first.data_ptr()
    before = ur_cffi.memory_stats()
    first.close()
    after_free = ur_cffi.memory_stats()
    assert after_free["cached_bytes"] >= before["cached_bytes"] + 4096
    assert after_free["allocated_bytes"] == before["allocated_bytes"] - 4096
    again = ur_cffi.empty(1000, np.float32, queue=queue)  # the same 4 KiB block size
    stats = ur_cffi.memory_stats()
    assert again.data_ptr() == address
    assert stats["cache_hits"] == before["cache_hits"] + 1
    assert stats["ur_allocations"] == before["ur_allocations"]
    assert stats["allocations"] == before["allocations"] + 1
    assert stats["frees"] == before["frees"] + 1
    assert stats["reserved_bytes"] == before["reserved_bytes"]  # no new memory from UR
    assert stats["cached_bytes"] == before["cached_bytes"]


def test_a_large_block_serves_sizes_up_to_half_its_own(queue, rng):
    # Each rounded size took a block of its own: sizes that vary (1 to 4 MiB here) cached one
    # of each (64 MiB reserved for this loop, against 18 MiB now).
    ur_cffi.empty_cache()  # (a block earlier tests left cached may fit the sizes below too)
    big = ur_cffi.empty(3 << 20, np.uint8, queue=queue)
    address = big.data_ptr()
    big.close()
    before = ur_cffi.memory_stats()
    half = (3 << 20) // 2  # (rounded to 128 KiB: 1.5 MiB less one step takes a block of its own)
    for nbytes, reused in ((half, True), (5 << 19, True), (half - (1 << 17), False),
                           (1 << 19, False)):
        again = ur_cffi.empty(nbytes, np.uint8, queue=queue)
        assert (again.data_ptr() == address) is reused, nbytes
        stats = ur_cffi.memory_stats()
        assert stats["allocated_bytes"] - before["allocated_bytes"] == \
            (3 << 20 if reused else ur_cffi.allocator.rounded(nbytes))  # the whole block
        values = rng.integers(0, 256, nbytes, dtype=np.uint8)
        again.copy_from(values)
        assert np.array_equal(again.to_numpy(), values)
        again.close()
        assert ur_cffi.memory_stats()["allocated_bytes"] == before["allocated_bytes"]
    for _ in range(50):  # varying sizes settle on few blocks
        ur_cffi.empty(int(rng.integers(1 << 20, 4 << 20)), np.uint8, queue=queue).close()
    assert ur_cffi.memory_stats()["ur_allocations"] - before["ur_allocations"] <= 12


@contextlib.contextmanager
def _freeing_at_a_collection_inside(code, held: dict, which: int):
    """While the block runs, a collection at each allocation of an object; the ``which``-th
    that starts inside ``code`` (a function's code object) drops ``held["array"]``, as a
    finalizer that collection ran would, and sets ``held["freed"]``."""
    seen = []

    def inside() -> bool:
        frame = sys._getframe(2)  # (under this function and the callback)
        while frame is not None and frame.f_code is not code:
            frame = frame.f_back
        return frame is not None

    def collecting(phase, info):
        if phase == "start" and held.get("array") is not None and inside():
            seen.append(None)
            if len(seen) == which:
                held["array"] = None
                held["freed"] = True

    threshold = gc.get_threshold()
    gc.callbacks.append(collecting)
    gc.collect()
    gc.set_threshold(1)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(collecting)


def test_a_collection_inside_the_search_for_a_larger_block_frees_safely(queue):
    """A collection that runs while the allocator looks through its larger cached blocks
    (every object allocation may start one) and frees an array of a size not cached yet: the
    allocation raised "dictionary changed size during iteration" (on the CPU device from the
    third collection inside the search on)."""
    mib = 1 << 20
    freed_inside = 0
    for which in range(1, 8):  # the collection inside the search that frees the array
        ur_cffi.empty(3 * mib, np.uint8, queue=queue).close()  # a cached 3 MiB block
        held = {"array": ur_cffi.empty((7 + which) * mib, np.uint8, queue=queue)}  # (new)
        with _freeing_at_a_collection_inside(_Pool._cached_larger.__code__, held, which):
            array = ur_cffi.empty(2 * mib, np.uint8, queue=queue)  # the 3 MiB block serves
        assert array.size == 2 * mib
        array.close()
        freed_inside += bool(held.get("freed"))
        held.clear()
    assert freed_inside  # (the test reached the search)


def test_a_collection_inside_empty_cache_frees_safely(queue):
    """A collection that runs while empty_cache() walks a pool's cache and frees an array of
    a size not cached: the block was dropped with the cache's old lists, never freed (its
    bytes stayed reserved and its context referenced)."""
    ur_cffi.empty_cache()
    before = ur_cffi.memory_stats()
    freed_inside = 0
    for which in range(1, 9):  # the collection inside empty() that frees the array
        for _ in range(3):
            ur_cffi.empty(1000, np.uint8, queue=queue).close()  # cached blocks to walk over
        held = {"array": ur_cffi.empty(70_000 + 512 * which, np.uint8, queue=queue)}
        with _freeing_at_a_collection_inside(_Pool.empty.__code__, held, which):
            ur_cffi.empty_cache()
        freed_inside += bool(held.get("freed"))
        held.clear()
        ur_cffi.empty_cache()  # nothing in use: every block goes
        stats = ur_cffi.memory_stats()
        assert stats["reserved_bytes"] == before["reserved_bytes"], which
        assert stats["ur_allocations"] - before["ur_allocations"] == \
            stats["ur_frees"] - before["ur_frees"], which
    assert freed_inside  # (the test reached the walk)


def test_free_and_reuse_never_finish_the_queue(queue, spin, axpy, rng):
    """Allocate a temporary, launch on it, drop it: 50 times behind a kernel that spins until
    released.  Had any allocation or free finished the queue, the spinning kernel would have
    completed (by its own limit, seconds later) before the loop ended."""
    n = 100
    x = rng.standard_normal((50, n)).astype(np.float32)
    # USM on both sides: CUDA copies from or to pageable memory (numpy's) wait for the queue.
    inputs = ur_cffi.asarray(x, queue=queue)
    results = ur_cffi.full((50, n), np.nan, np.float32, queue=queue)
    spinning = Spinning(spin, queue)
    hits = ur_cffi.memory_stats()["cache_hits"]
    for i in range(50):
        temporary = ur_cffi.empty(n, np.float32, queue=queue)
        temporary.copy_from(inputs[i], blocking=False)
        out = ur_cffi.empty(n, np.float32, queue=queue)
        axpy.launch(queue, LOCAL, LOCAL, temporary, temporary, out, np.float32(3.0), n)
        results[i].copy_from(out, blocking=False)
        del temporary, out  # back to the pool while the copies and launch are still queued
    assert spinning.running, "an allocation or free waited for the queue"
    assert ur_cffi.memory_stats()["cache_hits"] >= hits + 98  # the loop reused its blocks
    spinning.release()
    queue.finish()
    np.testing.assert_allclose(results.to_numpy(), 4.0 * x.astype(np.float64), rtol=1e-6)


def test_reuse_on_another_queue_is_ordered_by_events(context, device, spin):
    """A block freed while a kernel on queue A still writes it, taken on queue B: B's commands
    wait for A's (a barrier on each queue), and no host wait happens (the count of cross-queue
    reuses shows the ordering).  B's fill is blocking, which the CPU runtime runs in the calling
    thread at once unless it waits: without the barriers it ran before the kernel's store."""
    with ur_cffi.Queue(context, device) as a, ur_cffi.Queue(context, device) as b:
        spinning, address = _spin_on_freed_block(spin, a)
        crossed = ur_cffi.memory_stats()["cross_queue_reuses"]
        taken = ur_cffi.empty(12_345, np.int32, queue=b)
        assert taken.data_ptr() == address
        assert ur_cffi.memory_stats()["cross_queue_reuses"] == crossed + 1
        assert spinning.running
        release = threading.Timer(0.3, spinning.release)
        release.start()
        taken.fill(-5)  # ordered after A's kernel: it returns once the kernel has stored
        release.join()
        a.finish()
        b.finish()
        assert taken.to_numpy()[0] == -5  # B wrote after the kernel's store, not before


def test_blocks_of_a_closing_queue_wait_for_its_close(context, device, spin):
    """While another thread closes (finishes) queue A, a block A last used is not taken on B:
    ordering B after A would enqueue on A, which the CUDA adapter holds until A's finish
    returns.  B gets another block at once; once A is closed, its block is free for B with
    nothing to order.  A host block freed during the close records no barrier on A either,
    and waits for the close."""
    with ur_cffi.Queue(context, device) as a, ur_cffi.Queue(context, device) as b:
        spinning, address = _spin_on_freed_block(spin, a)
        pinned = ur_cffi.empty(777, np.int32, queue=a, kind="host")  # a size of its own
        pinned_address = pinned.data_ptr()
        crossed = ur_cffi.memory_stats()["cross_queue_reuses"]
        closer = _close_in_another_thread(a)
        taken = ur_cffi.empty(12_345, np.int32, queue=b)
        assert taken.data_ptr() != address
        taken.fill(-5, blocking=False)
        b.finish()
        assert taken.to_numpy()[0] == -5
        del pinned  # freed while A closes: no barrier there, the block waits for the close
        pinned_taken = ur_cffi.empty(777, np.int32, queue=b, kind="host")
        assert pinned_taken.data_ptr() != pinned_address
        assert spinning.running, "taking or freeing memory waited for A's kernel"
        assert not a.closed
        spinning.release()
        closer.join()
        assert a.closed and not a.closing
        again = ur_cffi.empty(12_345, np.int32, queue=b)
        assert again.data_ptr() == address
        assert ur_cffi.empty(777, np.int32, queue=b, kind="host").data_ptr() == pinned_address
        assert ur_cffi.memory_stats()["cross_queue_reuses"] == crossed


def test_blocks_of_a_collected_queue_wait_for_its_finish(context, device, spin):
    """As above for a queue dropped without close(): its collection finishes it while other
    threads run, and until that finish returns, neither the block it last used nor a block
    used on it through record_queue goes to other work."""
    with ur_cffi.Queue(context, device) as b:
        a = ur_cffi.Queue(context, device)
        flag = ur_cffi.zeros(1, np.int32, queue=b, kind="host")  # nothing of A's holds A
        out = ur_cffi.empty(12_345, np.int32, queue=a)
        address = out.data_ptr()
        spin.launch(a, LOCAL, LOCAL, flag, out, crash_probe.SPIN_LIMIT,
                    *crash_probe.spin_local(), event=False)
        recorded = ur_cffi.empty(23_456, np.int32, queue=b)
        recorded.record_queue(a)
        recorded_address = recorded.data_ptr()
        del out  # A's kernel still writes it
        ref, holder = a.ref, [a]
        del a
        gc.collect()
        crossed = ur_cffi.memory_stats()["cross_queue_reuses"]
        dropper = threading.Thread(target=holder.clear)  # the last reference: A's collection
        dropper.start()
        deadline = time.monotonic() + 30
        while ref() is not None:
            assert time.monotonic() < deadline, "queue A was never collected"
            time.sleep(1e-3)
        assert ref.finishing() and dropper.is_alive()  # its release waits for the kernel
        taken = ur_cffi.empty(12_345, np.int32, queue=b)
        assert taken.data_ptr() != address
        taken.fill(-5, blocking=False)
        del recorded  # used on A, which is still finishing: kept until it has
        assert ur_cffi.empty(23_456, np.int32, queue=b).data_ptr() != recorded_address
        # On CUDA, memory given back to the driver (a pool released) waits for all the
        # device's work, A's kernel too: there this step would wait for that kernel.
        if crash_probe.device_under_test.TYPE == "cpu":
            ur_cffi.empty_cache()  # frees the rest, not A's last block: nothing can wait for it
            assert ur_cffi.memory_stats(context)["cached_bytes"] >= 12_345 * 4
        b.finish()
        assert (taken.to_numpy() == -5).all()
        assert dropper.is_alive(), "taking or freeing memory waited for A's kernel"
        ctypes.c_int32.from_address(flag.data_ptr()).value = 1
        dropper.join()
        assert ref.finished and not ref.finishing()
        hits = ur_cffi.memory_stats(context)["cache_hits"]
        assert ur_cffi.empty(12_345, np.int32, queue=b).data_ptr() == address  # free now
        assert ur_cffi.memory_stats(context)["cache_hits"] == hits + 1  # kept, not freed
        assert ur_cffi.empty(23_456, np.int32, queue=b).data_ptr() == recorded_address
        assert ur_cffi.memory_stats()["cross_queue_reuses"] == crossed
        assert (taken.to_numpy() == -5).all()


def _close_in_another_thread(queue) -> threading.Thread:
    """A thread closing ``queue``, returned once it is inside the close (finishing)."""
    closer = threading.Thread(target=queue.close)
    closer.start()
    deadline = time.monotonic() + 30
    while not queue.closing:
        assert closer.is_alive() and time.monotonic() < deadline, "the close never began"
        time.sleep(1e-3)
    return closer


def _spin_on_freed_block(spin, queue) -> tuple:
    """A spinning kernel on ``queue`` writing a block already freed: ``(Spinning, the block's
    address)``."""
    gc.collect()
    out = ur_cffi.empty(12_345, np.int32, queue=queue)  # a size of its own
    address = out.data_ptr()
    spinning = Spinning(spin, queue, out)
    del out
    spinning.out = None  # the kernel still writes it; the queue's next barrier covers that
    gc.collect()
    return spinning, address


def test_host_memory_is_reused_only_once_its_work_is_done(queue, spin):
    out = ur_cffi.empty(64, np.int32, queue=queue, kind="host")
    address = out.data_ptr()
    spinning = Spinning(spin, queue, out)
    spinning.out = None
    del out
    gc.collect()
    other = ur_cffi.empty(64, np.int32, queue=queue, kind="host")  # the host could touch it
    assert other.data_ptr() != address and spinning.running
    spinning.release()
    queue.finish()
    other.close()
    again = [ur_cffi.empty(64, np.int32, queue=queue, kind="host") for _ in range(2)]
    assert address in [array.data_ptr() for array in again]


def test_empty_cache_and_the_memory_limit(queue):
    ur_cffi.empty_cache()
    stats = ur_cffi.memory_stats()
    assert stats["cached_bytes"] == 0
    base = stats["reserved_bytes"]
    frees, retries = stats["ur_frees"], stats["oom_retries"]
    ur_cffi.set_memory_limit(base + (64 << 10))
    try:
        assert ur_cffi.memory_stats()["limit_bytes"] == base + (64 << 10)
        cached = ur_cffi.empty(40 << 10, np.uint8, queue=queue)
        cached.close()  # 40 KiB cached
        kept = ur_cffi.empty(48 << 10, np.uint8, queue=queue)  # over the limit with the
        stats = ur_cffi.memory_stats()                           # cached block: emptied first
        assert stats["ur_frees"] == frees + 1 and stats["cached_bytes"] == 0
        assert stats["oom_retries"] == retries + 1  # (the limit's retries were not counted)
        served = stats["allocations"]
        with pytest.raises(MemoryError, match=r"^ur_cffi's memory limit returned .*: shape "
                                              r"\(32768,\) of uint8: 32768 bytes more would pass "
                                              "the limit .* urUSMDeviceAlloc was not called$"
                                              ) as refused:  # (it said UR returned it)
            ur_cffi.empty(32 << 10, np.uint8, queue=queue)
        assert str(pickle.loads(pickle.dumps(refused.value))) == str(refused.value)
        assert ur_cffi.memory_stats()["allocations"] == served  # a refused one is not counted
        with pytest.raises(ur_cffi.errors.OutOfDeviceMemoryError):
            ur_cffi.zeros((8, 4096), np.float32, queue=queue)
        kept.close()
        ur_cffi.empty(32 << 10, np.uint8, queue=queue).close()  # fits again
    finally:
        ur_cffi.set_memory_limit(None)
    assert ur_cffi.memory_stats()["limit_bytes"] is None
    with pytest.raises(TypeError, match="memory limit must be an integer"):
        ur_cffi.set_memory_limit(1.5)
    with pytest.raises(TypeError, match="memory_stats takes a ur_cffi Context or None, not "
                                        "Queue"):
        ur_cffi.memory_stats(queue)  # not a filter that matches no pool: all zeros
    with ur_cffi.empty(4, queue=queue) as array, \
            pytest.raises(TypeError, match="queue must be a ur_cffi Queue, not NoneType"):
        array.record_queue(None)
    ur_cffi.empty_cache()
    assert ur_cffi.memory_stats()["reserved_bytes"] == base


def test_a_collected_context_frees_its_cached_memory(device):
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    for kind in ("device", "host", "shared"):
        ur_cffi.ones(1000, queue=queue, kind=kind).close()
    stats = ur_cffi.memory_stats(context)
    assert stats["cached_bytes"] == 3 * 4096 and stats["allocated_bytes"] == 0
    reserved = ur_cffi.memory_stats()["reserved_bytes"]
    del queue, context
    gc.collect()
    assert ur_cffi.memory_stats()["reserved_bytes"] == reserved - 3 * 4096


def test_views_keep_their_block_from_the_pool(queue, rng):
    host = rng.standard_normal(256).astype(np.float32)
    array = ur_cffi.asarray(host, queue=queue)
    view = array[::4]
    address = array.data_ptr()
    del array
    gc.collect()
    other = ur_cffi.empty(256, np.float32, queue=queue)  # must not get the view's memory
    assert other.data_ptr() != address
    assert np.array_equal(view.to_numpy(), host[::4])


OUT_OF_MEMORY_RETRY = """
import json, resource, sys
import numpy as np
import ur_cffi
import device_under_test

kind = sys.argv[1]
device = device_under_test.get()
context = device.create_context()
queue = ur_cffi.Queue(context, device)
ur_cffi.zeros(16, queue=queue, kind=kind)  # whatever the first use maps, before the limit
# The address space the process has now, plus 3 GiB: two cached 1-GiB blocks leave room for
# no 1.5-GiB one until the cache is emptied.
used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (used + 3 * 2**30, resource.RLIM_INFINITY))
try:
    first, second = (ur_cffi.empty(2**30, np.uint8, queue=queue, kind=kind) for _ in range(2))
    first.fill(1, count=4096)
    second.fill(2, count=4096)
    del first, second
    cached = ur_cffi.memory_stats(context)["cached_bytes"]
    third = ur_cffi.empty(3 * 2**29, np.uint8, queue=queue, kind=kind)
    third.fill(3, count=4096)
    head = np.zeros(4096, np.uint8)
    third.copy_to(head, offset=3 * 2**29 - 4096)
    error = None
    retries = ur_cffi.memory_stats(context)["oom_retries"]
    try:  # more than the limit holds, cache emptied or not: one retry, counted once
        ur_cffi.empty(4 * 2**30, np.uint8, queue=queue, kind=kind)
        beyond = None
    except MemoryError as caught:
        beyond = ur_cffi.memory_stats(context)["oom_retries"] - retries
except MemoryError as caught:
    error = repr(caught)
finally:
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
stats = ur_cffi.memory_stats(context)
print(json.dumps({"error": error, "cached_before": cached, "stats": stats,
                  "retries_beyond": beyond}))
"""


@pytest.mark.parametrize("kind", ["device", "host", "shared"])
def test_out_of_memory_empties_the_cache_and_retries(kind):
    """Under an address-space limit, UR's own out-of-memory result (not the allocator's
    limit): the cached blocks are freed and the allocation succeeds on its second try."""
    done = crash_probe.run_child([kind], code=OUT_OF_MEMORY_RETRY, timeout=120)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["error"] is None
    assert result["cached_before"] >= 2 * 2**30
    stats = result["stats"]
    assert stats["oom_retries"] == 2 and stats["ur_frees"] >= 2
    assert result["retries_beyond"] == 1  # (counted twice, and the cache emptied twice)
    assert stats["cached_bytes"] == 0 and stats["allocated_bytes"] >= 3 * 2**29


COLLECTED_UNDER_LOCKS = """
import gc, json, threading
import numpy as np
import ur_cffi
from ur_cffi import allocator, queue as queue_module
import device_under_test

device = device_under_test.get()
context = device.create_context()
queue = ur_cffi.Queue(context, device)
gc.disable()  # collections only where this script makes them
result = {}
for kind in ("device", "host", "shared"):
    array = ur_cffi.empty(1000, np.float32, queue=queue, kind=kind)
    array.fill(1.0)
    cycle = [array]
    cycle.append(cycle)  # freed by a collection, not by its reference count
    del array, cycle
    frees = ur_cffi.memory_stats(context)["frees"]
    with queue_module.raw_enqueue_lock:  # as a launch holds it
        gc.collect()
        kept = len(allocator._returned)
    result[kind] = (kept, ur_cffi.memory_stats(context)["frees"] - frees)

# Another thread holds the allocator's lock and waits for the enqueue lock, which this thread
# holds while a collection frees an array, and then a context.
def collect_while_another_thread_waits():
    holding = threading.Event()

    def other():
        with allocator._lock:
            holding.set()
            with queue_module.enqueue_lock:
                pass

    with queue_module.raw_enqueue_lock:
        thread = threading.Thread(target=other)
        thread.start()
        holding.wait()
        gc.collect()
        kept = len(allocator._returned)
    thread.join()
    return kept

array = ur_cffi.empty(1000, np.float32, queue=queue)
cycle = [array]
cycle.append(cycle)
del array, cycle
frees = ur_cffi.memory_stats(context)["frees"]
kept = collect_while_another_thread_waits()
result["other thread"] = (kept, ur_cffi.memory_stats(context)["frees"] - frees)

other_context = device.create_context()  # its pools are released by the next call
ur_cffi.empty(1000, np.float32, queue=ur_cffi.Queue(other_context, device)).close()
cycle = [other_context]
cycle.append(cycle)
del other_context, cycle
kept = collect_while_another_thread_waits()
ur_cffi.memory_stats()
result["pools"] = (kept, len(allocator._pools))
print(json.dumps(result))
"""


def test_arrays_collected_under_the_enqueue_lock_are_freed_later():
    """A collection that frees USM arrays while the thread holds the enqueue lock (a launch
    allocates under it, so a collection can run there): giving a host or shared block back
    enqueues a barrier, which needs that lock, and the allocator's lock may be held by a
    thread waiting for it.  The free is done by the allocator's next call instead (it hung
    here before, in both cases); so is the release of a collected context's pools."""
    done = crash_probe.run_child(code="import faulthandler; "
                                 "faulthandler.dump_traceback_later(60, exit=True)\n"
                                 + COLLECTED_UNDER_LOCKS, timeout=120)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # (kept for later while the locks were held, done by the next call)
    assert result == {"device": [0, 1], "host": [1, 1], "shared": [1, 1],
                      "other thread": [1, 1], "pools": [1, 3]}


@pytest.mark.parametrize("kind", ["device", "shared"])
def test_record_queue_orders_reuse_after_the_other_queues_work(context, device, spin, kind):
    """An array of queue A written by a kernel on queue B, then freed: with
    ``record_queue(B)``, A's next owner of the memory waits for B's kernel (no host wait)."""
    with ur_cffi.Queue(context, device) as a, ur_cffi.Queue(context, device) as b:
        gc.collect()
        out = ur_cffi.empty(23_456, np.int32, queue=a, kind=kind)  # a size of its own
        address = out.data_ptr()
        out[1:].record_queue(b)  # a view records for its base
        spinning = Spinning(spin, b, out)
        spinning.out = None
        del out
        gc.collect()
        taken = ur_cffi.empty(23_456, np.int32, queue=a, kind=kind)
        if kind == "device":  # ordered on the device after B's kernel
            assert taken.data_ptr() == address
            fill = taken.fill(-7, blocking=False)
            assert spinning.running and fill.status != COMPLETE
        else:  # the host could touch it at once: not reused before B's kernel completed
            assert taken.data_ptr() != address and spinning.running
            taken.fill(-7)
        spinning.release()
        a.finish()
        b.finish()
        assert taken.to_numpy()[0] == -7
        with device.create_context() as other, ur_cffi.Queue(other, device) as foreign:
            with pytest.raises(ValueError, match="not of the context"):
                taken.record_queue(foreign)


def test_an_array_used_on_many_short_lived_queues_keeps_none_of_them(context, device):
    """Each queue an array is used on is noted on its block (to order its reuse); queues gone
    and finished were kept: 20,000 graphs (each with a queue of its own) left 20,000, and each
    use scanned them all (four times slower after 20,000)."""
    array = ur_cffi.zeros(64, np.float32, queue=ur_cffi.Queue(context, device))
    host = np.empty(64, np.float32)
    for index in range(300):
        queue = ur_cffi.Queue(context, device)
        array.copy_to(host, queue=queue)
        if index % 2:
            queue.close()
        del queue  # (collected at once: its collection finishes it)
    assert len(array._handle.used_on) <= 2  # the latest queue, and one not yet collected
    with ur_cffi.Queue(context, device) as kept:
        array.fill(1.0, queue=kept)
        assert any(ref() is kept for ref in array._handle.used_on)
        array.fill(2.0, queue=ur_cffi.Queue(context, device))
        assert any(ref() is kept for ref in array._handle.used_on)  # open: still ordered


@pytest.mark.parametrize("copy", ["into", "out of", "fill", "part into"])
def test_copies_on_another_queue_order_reuse_without_record_queue(context, device, spin, copy):
    """A copy or fill of an array of queue A enqueued on queue B (behind a running kernel),
    then the array closed: its memory's next owner on A waits for B's command, as if
    ``record_queue(B)`` had been called (the array's Event does not hold it through close)."""
    with ur_cffi.Queue(context, device) as a, ur_cffi.Queue(context, device) as b:
        gc.collect()
        n = 34_567  # a size of its own
        array = ur_cffi.full(n, 5.0, np.float32, queue=a)
        other = ur_cffi.full(n, -3.0, np.float32, queue=b)
        address = array.data_ptr()
        spinning = Spinning(spin, b)
        if copy == "into":
            event = array.copy_from(other, queue=b, blocking=False)
        elif copy == "out of":
            event = other.copy_from(array, blocking=False)  # on B, reading A's array
        elif copy == "fill":
            event = array.fill(-3.0, queue=b, blocking=False)
        else:  # copy_to's offset= path, on B: it did not note B on its destination
            event = other.copy_to(array[:-1], offset=1, blocking=False)
        array.close()
        taken = ur_cffi.empty(n, np.float32, queue=a)
        assert taken.data_ptr() == address  # reused at once, ordered on the device
        filling = threading.Thread(target=taken.fill, args=(7.0,))  # a blocking fill
        filling.start()
        filling.join(0.5)  # unordered, it would have returned by then
        filled_early = not filling.is_alive()
        assert spinning.running
        spinning.release()
        filling.join()
        event.wait()
        a.finish()
        b.finish()
        assert not filled_early
        assert np.array_equal(taken.to_numpy(), np.full(n, 7.0, np.float32))
        assert np.array_equal(other.to_numpy(), np.full(n, 5.0 if copy == "out of" else -3.0,
                                                        np.float32))


def test_a_free_waits_for_the_close_of_a_recorded_queue(context, device, spin):
    """An array of queue A used on queue B (``record_queue``), freed while another thread
    closes B: its free would enqueue a barrier on B, which the CUDA adapter holds until the
    close's finish returns; it is kept instead, and done by an allocation after the close."""
    with ur_cffi.Queue(context, device) as a, ur_cffi.Queue(context, device) as b:
        gc.collect()
        out = ur_cffi.empty(34_567, np.int32, queue=a)  # a size of its own
        out.record_queue(b)
        spinning = Spinning(spin, b, out)
        spinning.out = None
        closer = _close_in_another_thread(b)
        frees = ur_cffi.memory_stats()["frees"]
        del out
        assert spinning.running, "the free waited for B's kernel"
        assert ur_cffi.memory_stats()["frees"] == frees  # kept: B is still closing
        spinning.release()
        closer.join()
        assert b.closed and not b.closing
        ur_cffi.empty(16, np.int32, queue=a).close()
        assert ur_cffi.memory_stats()["frees"] >= frees + 2  # the kept free, and this one


def test_closing_a_context_frees_its_cached_memory(device):
    """The pools of a closed context go with it (with UR pools, each would keep a reference on
    the context): its cached memory is freed at close, not when the object is collected."""
    live = len(_handle._live)
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    ur_cffi.empty(1000, np.float32, queue=queue).close()
    assert ur_cffi.memory_stats(context)["cached_bytes"] == 4096
    queue.close()
    context.close()  # the context object stays referenced: only close() can free it
    assert ur_cffi.memory_stats(context)["reserved_bytes"] == 0
    assert len(_handle._live) == live


PEAK = """
import numpy as np
import ur_cffi
import device_under_test

device = device_under_test.get()
context = device.create_context()
queue = ur_cffi.Queue(context, device)
for kind in ("device", "host", "shared"):  # one MiB at a time, of each kind
    ur_cffi.empty(1 << 20, np.uint8, queue=queue, kind=kind).close()
alone = ur_cffi.memory_stats()["peak_allocated_bytes"]
both = [ur_cffi.empty(1 << 20, np.uint8, queue=queue, kind=kind) for kind in ("host", "shared")]
together = ur_cffi.memory_stats(context)["peak_allocated_bytes"]
other = device.create_context()
ur_cffi.empty(1 << 20, np.uint8, queue=ur_cffi.Queue(other, device)).close()
print(alone, together, ur_cffi.memory_stats(other)["peak_allocated_bytes"],
      ur_cffi.memory_stats()["peak_allocated_bytes"])
"""


def test_the_peak_is_the_most_in_use_at_once():
    """It was the sum of each pool's own peak: 3 MiB for three kinds used one after another."""
    done = crash_probe.run_child(code=PEAK, timeout=60)
    assert done.stdout.split() == [str(1 << 20), str(2 << 20), str(1 << 20), str(3 << 20)]


@pytest.mark.parametrize("kind", ["device", "host"])
def test_a_block_freed_while_its_queue_closes_waits_for_the_close(context, device, spin, kind):
    """A kernel enqueued on queue A by another thread after A's close() has finished A, and
    before it released it: an array freed then went back as of a closed (idle) queue, and
    queue B got its block while the kernel still wrote it (x[0], its round count, in y)."""
    from ur_cffi import _handle as handles

    a, b = ur_cffi.Queue(context, device), ur_cffi.Queue(context, device)
    with b:
        flag = ur_cffi.zeros(1, np.int32, queue=a, kind="host")
        x = ur_cffi.empty(4321, np.int32, queue=a, kind=kind)  # a size of its own
        a.finish()
        inside, go = threading.Event(), threading.Event()

        def tracer(frame, event, arg):  # holds the close where it releases, after its finish
            caller = frame.f_back
            if event == "call" and frame.f_code is handles.Resource.close.__code__ and \
                    caller is not None and caller.f_code is ur_cffi.Queue.close.__code__:
                inside.set()
                go.wait(30)

        def close():
            sys.settrace(tracer)
            try:
                a.close()
            finally:
                sys.settrace(None)

        closer = threading.Thread(target=close)
        closer.start()
        assert inside.wait(30)
        event = spin.launch(a, LOCAL, LOCAL, flag, x, crash_probe.SPIN_LIMIT,
                            *crash_probe.spin_local())
        go.set()
        deadline = time.monotonic() + 30
        while a._handle is not None:  # released: its finish now waits for the kernel
            assert time.monotonic() < deadline
            time.sleep(1e-3)
        address = x.data_ptr()
        x.close()
        y = ur_cffi.empty(4321, np.int32, queue=b, kind=kind)
        y.fill(-1)
        assert event.status != COMPLETE, "the kernel ended by itself: the check says nothing"
        assert y.data_ptr() != address
        ctypes.c_int32.from_address(flag.data_ptr()).value = 1
        closer.join()
        assert np.array_equal(y.to_numpy(), np.full(4321, -1, np.int32))
        assert ur_cffi.empty(4321, np.int32, queue=b, kind=kind).data_ptr() == address


def test_first_allocations_in_threads_share_one_pool(device):
    """Threads making the first allocation of a context at once made a pool each: the
    allocator kept one, and the others' memory was missing from memory_stats and never
    freed by empty_cache() or the context's close."""
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(20):
            with device.create_context() as context:
                queues = [ur_cffi.Queue(context, device) for _ in range(4)]
                start = threading.Barrier(4)
                arrays = [None] * 4

                def allocate(i):
                    start.wait()
                    arrays[i] = ur_cffi.empty(1 << 16, np.uint8, queue=queues[i])

                run_in_threads(allocate, 4)
                assert len({id(queue._pools["device"]) for queue in queues}) == 1
                assert ur_cffi.memory_stats(context)["allocated_bytes"] == 4 << 16
                for array in arrays:
                    array.close()
                for queue in queues:
                    queue.close()
    finally:
        sys.setswitchinterval(switch)


def test_statistics_keep_a_closed_contexts_memory_in_use(device):
    """Closing a context took its pools out of memory_stats while its arrays still held the
    memory (and the limit still counted it), and the counters went backwards."""
    before = ur_cffi.memory_stats()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    array = ur_cffi.empty(1 << 20, np.uint8, queue=queue)
    queue.close()
    context.close()
    stats = ur_cffi.memory_stats()
    assert stats["allocated_bytes"] == before["allocated_bytes"] + (1 << 20)
    assert stats["ur_allocations"] == before["ur_allocations"] + 1
    array.close()
    stats = ur_cffi.memory_stats()
    assert stats["allocated_bytes"] == before["allocated_bytes"]
    assert stats["ur_allocations"] == before["ur_allocations"] + 1  # a count: it stays
    assert stats["ur_frees"] >= before["ur_frees"] + 1


def test_a_capsule_numpy_refused_gives_its_memory_back_at_empty_cache(queue):
    """numpy drops the DLPack capsule of device memory it refuses; the array's memory stayed
    allocated after del, gc.collect() and empty_cache(), until an unrelated later export."""
    before = ur_cffi.memory_stats()["allocated_bytes"]
    array = ur_cffi.empty(1 << 20, np.uint8, queue=queue)
    with pytest.raises((RuntimeError, BufferError, TypeError)):
        np.from_dlpack(array)
    del array
    gc.collect()
    assert ur_cffi.memory_stats()["allocated_bytes"] == before


def test_sizes_near_size_t_are_refused_by_the_allocator_or_the_shape_check(queue):
    """The rounded block of a size just below 2**64 overflowed size_t in cffi (a bare
    OverflowError); an integer shape skipped the index bound a 1-tuple gets."""
    for shape in (2**63 - 1, (2**63 - 1, 2)):  # 2**64 - 2 bytes: rounded, past size_t
        with pytest.raises((InvalidUsmSizeError, MemoryError), match="bytes"):  # (CUDA: the
            # adapter says out of host memory)
            ur_cffi.empty(shape, np.uint8, queue=queue)
    for shape in (2**64 - 2**17 + 1, (2**64 - 2**17 + 1,)):
        with pytest.raises(ValueError, match="out of range"):
            ur_cffi.empty(shape, np.uint8, queue=queue)


@pytest.mark.parametrize("import_", ["from_dlpack", "from_pointer", "capsule of a closed array"])
@pytest.mark.parametrize("on", ["its queue", "a queue it records"])
def test_an_array_over_memory_of_another_queue_orders_its_reuse(context, device, spin, import_,
                                                                on):
    """``from_dlpack(a, queue=b)`` (a view whose queue is B) and ``from_pointer(..., queue=b,
    owner=a)``: a kernel on B wrote the memory late, and after the free A's next owner got it
    at once: every element of its fill was overwritten (65536 of 65536).  So did a kernel on
    a queue C that ``record_queue`` noted on the ``from_pointer`` array, or on the import of a
    capsule taken before ``a.close()``: it noted nothing."""
    with ur_cffi.Queue(context, device) as a, ur_cffi.Queue(context, device) as b, \
            ur_cffi.Queue(context, device) as c:
        gc.collect()
        source = ur_cffi.empty(24_567, np.int32, queue=a)  # a size of its own
        address = source.data_ptr()
        if import_ == "from_dlpack":
            imported = ur_cffi.from_dlpack(source, queue=b)
        elif import_ == "from_pointer":
            imported = ur_cffi.from_pointer(address, source.shape, source.dtype, queue=b,
                                            owner=source)
        else:  # its capsule's pin holds the memory (numpy would import it as well)
            capsule = source.__dlpack__()
            source.close()
            imported = ur_cffi.from_dlpack(capsule, queue=b)
            del capsule
        assert imported.queue is b
        runs_on = b if on == "its queue" else c
        if runs_on is c:
            imported.record_queue(c)
        flag = ur_cffi.zeros(1, np.int32, queue=b, kind="host")
        spin.launch(runs_on, LOCAL, LOCAL, flag, imported, crash_probe.SPIN_LIMIT,
                    *crash_probe.spin_local(), event=False)  # (an Event would hold imported)
        del source, imported
        gc.collect()
        if runs_on is c:
            b.finish()  # (the import gives its owner back once b's work is done)
        taken = ur_cffi.empty(24_567, np.int32, queue=a)
        if import_ != "from_dlpack" and runs_on is b:  # the array over it holds its owner
            assert taken.data_ptr() != address  # until the work on its queue is done
        else:
            assert taken.data_ptr() == address
        release = threading.Timer(0.3, lambda: setattr(
            ctypes.c_int32.from_address(flag.data_ptr()), "value", 1))
        release.start()
        taken.fill(-7)  # blocking: the CPU runtime runs it here, at once unless it must wait
        release.join()
        for queue in (a, b, c):
            queue.finish()
        assert taken.to_numpy()[0] == -7  # not the kernel's round count, written after


def _spinning_in_a_context_of_its_own(device, kernels):
    context = device.create_context()
    program, kernel = crash_probe.load(context, kernels, "spin")
    queue = ur_cffi.Queue(context, device)
    return context, (program, kernel), queue, Spinning(kernel, queue)


def test_a_free_after_its_context_closed_waits_for_no_queue(device, kernels):
    """After Context.close(), dropping a live array of it finished its queue: 3 s in a free,
    for a kernel queued before.  It is freed once that work is done, at a later allocator
    call."""
    context, loaded, queue, spinning = _spinning_in_a_context_of_its_own(device, kernels)
    kept = ur_cffi.empty(1 << 14, np.int32, queue=queue)
    context.close()
    before = ur_cffi.memory_stats(context)
    kept.close()
    assert spinning.running  # the free did not wait for the kernel
    assert ur_cffi.memory_stats(context)["ur_frees"] == before["ur_frees"]
    spinning.release()
    spinning.event.wait()
    after = ur_cffi.memory_stats(context)
    assert after["ur_frees"] == before["ur_frees"] + 1
    assert after["reserved_bytes"] == before["reserved_bytes"] - (1 << 16)
    for resource in (*loaded, queue):
        resource.close()


def test_a_block_freed_while_its_queue_closes_is_freed_after_the_contexts_close(device,
                                                                                kernels):
    """A block freed while another thread closed its queue, then the context closed: it was
    never freed (ur_frees 1 of 2 allocations), vanished from memory_stats, and still counted
    against the memory limit."""
    from ur_cffi import allocator

    context, loaded, queue, spinning = _spinning_in_a_context_of_its_own(device, kernels)
    array = ur_cffi.empty(1 << 16, np.int32, queue=queue)
    closer = threading.Thread(target=queue.close)
    closer.start()
    deadline = time.monotonic() + 30
    while not queue.closing:
        assert time.monotonic() < deadline
        time.sleep(1e-3)
    array.close()
    for resource in loaded:
        resource.close()
    context.close()
    spinning.release()
    closer.join()
    spinning.flag.close()
    spinning.out.close()
    stats = ur_cffi.memory_stats(context)
    assert stats["ur_frees"] == stats["ur_allocations"] and stats["reserved_bytes"] == 0
    assert ur_cffi.memory_stats()["reserved_bytes"] == allocator._totals["reserved"]


def test_a_closed_contexts_statistics_keep_their_counts(device):
    """They went backwards as its pools retired: allocations 2, 1, 0 as the arrays went, no
    free counted, and the peak 0."""
    with device.create_context() as context, ur_cffi.Queue(context, device) as queue:
        first = ur_cffi.empty(1024, np.float32, queue=queue)
        second = ur_cffi.empty(2048, np.float32, queue=queue, kind="host")
        context.close()
        first.close()
        stats = ur_cffi.memory_stats(context)
        assert (stats["allocations"], stats["frees"], stats["peak_allocated_bytes"]) == \
            (2, 1, 4096 + 8192)
        second.close()
        stats = ur_cffi.memory_stats(context)
        assert (stats["allocations"], stats["frees"], stats["peak_allocated_bytes"],
                stats["allocated_bytes"]) == (2, 2, 4096 + 8192, 0)


def test_an_owner_of_another_context_is_not_ordered_by_the_wrappers_queue(device):
    """from_pointer(owner=a) recorded the wrapper's queue on a's block even where it was of
    another context: the next allocation of that size in a's context waited for an event of
    the other context (UR_RESULT_ERROR_UNKNOWN) and its block leaked."""
    with device.create_context() as first, device.create_context() as second, \
            ur_cffi.Queue(first, device) as a_queue, ur_cffi.Queue(second, device) as b_queue:
        owner = ur_cffi.zeros(1000, np.float32, queue=a_queue)
        other = ur_cffi.zeros(1000, np.float32, queue=b_queue)
        wrapped = ur_cffi.from_pointer(other.data_ptr(), other.shape, other.dtype,
                                       queue=b_queue, owner=owner)
        del wrapped, owner
        gc.collect()
        again = ur_cffi.zeros(1000, np.float32, queue=a_queue)
        assert np.array_equal(again.to_numpy(), np.zeros(1000, np.float32))


def _inside(thread: threading.Thread, code) -> bool:
    """Whether ``thread`` runs ``code`` or what it called."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None and frame.f_code is not code:
        frame = frame.f_back
    return frame is not None


@pytest.mark.parametrize("waiting_in", ["allocation past the memory limit", "context close"])
def test_waits_for_cached_work_leave_other_allocations_alone(device, kernels, waiting_in):
    """An allocation past the memory limit (which empties the cache) and a context's close
    (which frees its cached memory) waited for the work of the cached blocks under the
    allocator's lock: another thread's cache hit on an idle queue of another context waited
    for a kernel that used none of its memory."""
    busy_context = device.create_context()
    program, kernel = crash_probe.load(busy_context, kernels, "spin")
    busy = ur_cffi.Queue(busy_context, device)
    cached = ur_cffi.empty(1 << 20, np.uint8, queue=busy)
    spinning = Spinning(kernel, busy)
    cached.close()  # last used on busy, whose kernel spins
    outcome = []

    def wait():
        try:
            if waiting_in == "context close":
                busy_context.close()
            else:
                ur_cffi.empty(2 << 20, np.uint8, queue=busy)
        except MemoryError as error:
            outcome.append(error)

    with device.create_context() as other, ur_cffi.Queue(other, device) as idle:
        ur_cffi.empty(1000, np.float32, queue=idle).close()  # the cache hit to come
        if waiting_in != "context close":
            # (2 MiB more passes it with the cache emptied: in use now, and 1.5 MiB)
            ur_cffi.set_memory_limit(ur_cffi.memory_stats()["allocated_bytes"] + (3 << 19))
        waiting = threading.Thread(target=wait)
        try:
            waiting.start()
            while not _inside(waiting, allocator._wait_for_cached_work.__code__):
                assert waiting.is_alive() and spinning.running
                time.sleep(1e-3)
            ur_cffi.empty(1000, np.float32, queue=idle).close()
            assert spinning.running, f"an allocation waited for the {waiting_in}'s wait"
        finally:
            spinning.release()
            waiting.join()
            ur_cffi.set_memory_limit(None)
    if waiting_in == "context close":
        assert busy_context.closed and not outcome
    else:
        assert "would pass the limit" in str(outcome[0])
        busy.close()
        busy_context.close()
    kernel.close()
    program.close()


@pytest.mark.parametrize("closed", [False, True], ids=["open context", "closed context"])
def test_empty_cache_waits_without_the_allocators_lock(device, kernels, closed):
    """empty_cache() waited for the work of cached memory under the allocator's lock (and
    deaf to Ctrl-C: tests/test_interrupt.py): every other thread's allocation waited for a
    kernel that used none of its memory.  Also for memory of a context closed since."""
    context = device.create_context()
    program, kernel = crash_probe.load(context, kernels, "spin")
    queue = ur_cffi.Queue(context, device)
    used = ur_cffi.empty(23_457, np.int32, queue=queue)  # a size of its own
    spinning = Spinning(kernel, queue, used)
    spinning.out = None
    if closed:  # (its kernel and program later: on CUDA the program's release unloads its
        context.close()  # module, which waits for the kernel)
    del used
    gc.collect()
    emptied, allocated = threading.Event(), threading.Event()
    emptying = threading.Thread(target=lambda: (ur_cffi.empty_cache(), emptied.set()))
    emptying.start()
    with device.create_context() as other, ur_cffi.Queue(other, device) as other_queue:
        def allocate():
            ur_cffi.empty(10, queue=other_queue).close()
            allocated.set()

        allocating = threading.Thread(target=allocate)
        allocating.start()
        try:
            assert allocated.wait(10)  # while the kernel still runs
            assert spinning.running and not emptied.is_set()
        finally:
            spinning.release()
            allocating.join()
            emptying.join()
    assert emptied.is_set()
    queue.close()
    kernel.close()
    program.close()


def test_an_allocation_of_the_largest_size_the_device_takes_is_not_rounded_past_it(queue):
    """Blocks are rounded up to 128 KiB: an allocation of exactly the device's largest size
    was rounded past it and refused (INVALID_USM_SIZE)."""
    from ur_cffi.allocator import rounded

    largest = queue.device.max_mem_alloc_size
    for nbytes in (largest, largest - 1):
        assert nbytes <= rounded(nbytes, largest) <= largest
    assert rounded((2 << 20) + 1, largest) == (2 << 20) + (1 << 17)  # (others as before)
    if device_under_test.TYPE != "cpu":
        return  # (the CPU device's memory is the host's, taken page by page: no real cost)
    array = ur_cffi.empty(largest, np.uint8, queue=queue)
    assert array.nbytes == largest
    array.close()
    ur_cffi.empty_cache()


@pytest.mark.parametrize("nbytes", [513, 1025, 4097, 100_001])
def test_a_block_holds_the_whole_array_just_past_a_size_class(queue, nbytes):
    before = ur_cffi.memory_stats()["allocated_bytes"]
    array = ur_cffi.empty(nbytes, np.uint8, queue=queue)
    assert ur_cffi.memory_stats()["allocated_bytes"] - before >= nbytes
    array.close()


def test_a_block_freed_on_an_out_of_order_queue_is_ordered_before_its_reuse_there(context,
                                                                                    device):
    # Commands of an out-of-order queue run in any order: the reuse needs the barrier that
    # reuses on other queues have (counted in cross_queue_reuses).
    with ur_cffi.Queue(context, device, out_of_order=True) as queue:
        first = ur_cffi.empty(54_321, np.int32, queue=queue)  # a size of its own
        address = first.data_ptr()
        first.fill(1)
        del first
        ordered = ur_cffi.memory_stats()["cross_queue_reuses"]
        again = ur_cffi.empty(54_321, np.int32, queue=queue)
        assert again.data_ptr() == address
        assert ur_cffi.memory_stats()["cross_queue_reuses"] == ordered + 1
        queue.finish()


def test_of_the_cached_blocks_that_fit_the_smallest_serves(queue):
    ur_cffi.empty_cache()
    small = ur_cffi.empty(5 << 19, np.uint8, queue=queue)  # 2.5 MiB
    large = ur_cffi.empty(7 << 19, np.uint8, queue=queue)  # 3.5 MiB
    small_address = small.data_ptr()
    small.close()
    large.close()
    assert ur_cffi.empty(2 << 20, np.uint8, queue=queue).data_ptr() == small_address


def test_an_allocation_may_reach_the_memory_limit_exactly(queue):
    ur_cffi.empty_cache()
    ur_cffi.set_memory_limit(ur_cffi.memory_stats()["reserved_bytes"] + (64 << 10))
    try:
        ur_cffi.empty(64 << 10, np.uint8, queue=queue).close()
    finally:
        ur_cffi.set_memory_limit(None)
