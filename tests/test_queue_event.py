"""Queues (in-order, out-of-order, profiling) and events on the CPU device: finish, flush,
barriers, wait lists on every enqueue, and asynchronous work ordered only by events."""

import ctypes
import threading
import time

import numpy as np
import pytest

import crash_probe
import ur_cffi
from ur_cffi import errors, info
from ur_cffi._compat import BACKEND_PREFIX
from ur_cffi.enums import (
    ur_event_status_t,
    ur_profiling_info_t,
    ur_queue_flag_t,
    ur_queue_info_t,
)

COMPLETE = ur_event_status_t.UR_EVENT_STATUS_COMPLETE
BLOCK = 256


def ur_flags(queue):
    return info.query("urQueueGetInfo", queue.handle, ur_queue_info_t.UR_QUEUE_INFO_FLAGS)


def test_queue_kinds(context, device):
    with ur_cffi.Queue(context) as queue:
        assert queue.device is device and queue.context is context
        assert not queue.out_of_order and not queue.profiling
        assert ur_queue_flag_t.UR_QUEUE_FLAG_OUT_OF_ORDER_EXEC_MODE_ENABLE not in ur_flags(queue)
        assert "in-order" in repr(queue)
    with ur_cffi.Queue(context, device, out_of_order=True) as queue:
        assert queue.out_of_order and not queue.profiling
        assert ur_queue_flag_t.UR_QUEUE_FLAG_OUT_OF_ORDER_EXEC_MODE_ENABLE in ur_flags(queue)
        assert "out-of-order" in repr(queue)
    with ur_cffi.Queue(context, device, profiling=True) as queue:
        assert queue.profiling and not queue.out_of_order
        assert ur_queue_flag_t.UR_QUEUE_FLAG_PROFILING_ENABLE in ur_flags(queue)
    assert queue.closed and "closed" in repr(queue)
    with pytest.raises(TypeError, match="Queue: device must be a ur_cffi Device of the "
                                        "context, not object"):  # (it was a ValueError)
        ur_cffi.Queue(context, object())
    with pytest.raises(TypeError, match="not int 0"):  # not the default device
        ur_cffi.Queue(context, 0)
    for flags in ({"out_of_order": "no"}, {"profiling": 1}, {"out_of_order": None}):
        with pytest.raises(TypeError, match="must be True or False"):
            ur_cffi.Queue(context, **flags)


def test_finish_and_flush(queue, rng):
    n = 200_001
    x = rng.standard_normal(n).astype(np.float32)
    array = ur_cffi.empty(n, queue=queue)
    written = array.copy_from(x, blocking=False)
    out = np.full(n, np.nan, np.float32)
    read = array.copy_to(out, blocking=False)
    queue.flush()
    queue.finish()
    assert written.status == read.status == COMPLETE
    assert np.array_equal(out, x)
    queue.finish()  # an empty queue finishes at once
    queue.flush()


def test_leaving_with_finishes_the_queue(context, device, rng):
    n = 100_003
    x = rng.standard_normal(n)
    host = None
    with ur_cffi.Queue(context, device) as queue:
        host = ur_cffi.empty(n, np.float64, queue=queue, kind="host")
        source = ur_cffi.asarray(x, queue=queue)
        event = host.copy_from(source, blocking=False)
    assert queue.closed
    assert event.status == COMPLETE
    result = np.ctypeslib.as_array((ctypes.c_double * n).from_address(host.data_ptr()))
    assert np.array_equal(result, x)


def test_event_wait_and_status(queue, rng):
    x = rng.standard_normal(1000)
    array = ur_cffi.empty(1000, np.float64, queue=queue)
    event = array.copy_from(x, blocking=False)
    assert isinstance(event.status, ur_event_status_t)
    event.wait()
    assert event.status == COMPLETE
    event.wait()  # waiting again returns at once
    assert event.queue is queue
    assert np.array_equal(array.to_numpy(), x)


def test_barrier(context, device, rng):
    n = 50_001
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    with ur_cffi.Queue(context, device, out_of_order=True) as queue:
        a = ur_cffi.empty(n, np.float64, queue=queue)
        b = ur_cffi.empty(n, np.float64, queue=queue)
        first = a.copy_from(x, blocking=False)
        second = b.copy_from(y, blocking=False)
        barrier = queue.barrier()
        assert isinstance(barrier, ur_cffi.Event)
        barrier.wait()
        assert first.status == second.status == COMPLETE
        # Only after ``first``: the copy of ``a`` into ``b`` must see ``a`` written.
        first = a.fill(3.0, blocking=False)
        after = queue.barrier(wait_for=first)
        copied = b.copy_from(a, blocking=False, wait_for=[after])
        copied.wait()
        assert first.status == COMPLETE
        assert np.array_equal(b.to_numpy(), np.full(n, 3.0))
        after = queue.barrier([copied, first])
        after.wait()
        with pytest.raises(TypeError, match="wait_for takes Event objects"):
            queue.barrier(wait_for=[after, "not an event"])


def test_profiling_timestamps_increase(context, device, build_triton, rng):
    program, compiled = build_triton("lcg_steps", BLOCK=1024)
    kernel = program.kernel(compiled.name, ("ptr", "ptr", "int32", "int32"),
                            **compiled.options)
    n = 100_003
    x = rng.integers(-(2**31), 2**31, n, dtype=np.int32)
    grid = -(-n // 1024) * compiled.local_size
    with ur_cffi.Queue(context, device, profiling=True) as queue:
        source = ur_cffi.asarray(x, queue=queue)
        out = ur_cffi.empty(n, np.int32, queue=queue)
        copy = out.fill(0, blocking=False)
        first = kernel.launch(queue, grid, compiled.local_size, source, out, n, 2000,
                              wait_for=[copy])
        second = kernel.launch(queue, grid, compiled.local_size, out, out, n, 2000,
                               wait_for=[first])
        second.wait()
        stamps = [first.profiling(p) for p in (
            ur_profiling_info_t.UR_PROFILING_INFO_COMMAND_QUEUED,
            ur_profiling_info_t.UR_PROFILING_INFO_COMMAND_SUBMIT,
            ur_profiling_info_t.UR_PROFILING_INFO_COMMAND_START,
            ur_profiling_info_t.UR_PROFILING_INFO_COMMAND_END)]
        assert all(type(s) is int for s in stamps)
        if device.backend.name == BACKEND_PREFIX + "CUDA":
            # UR's CUDA adapter reports one stamp for both, recorded on CUDA's default stream
            # rather than the queue's: it can come after the queue's START
            assert stamps[0] == stamps[1] and stamps[2] <= stamps[3]
        else:
            assert stamps == sorted(stamps)
        assert first.start_ns < first.end_ns  # the kernel does real work
        assert first.elapsed_ns == first.end_ns - first.start_ns > 0
        assert copy.end_ns <= first.start_ns  # ordered by the wait lists
        assert first.end_ns <= second.start_ns < second.end_ns


def test_profiling_needs_a_profiling_queue(queue):
    event = ur_cffi.zeros(10, queue=queue).fill(1.0)
    with pytest.raises(errors.ProfilingInfoNotAvailableError,
                       match="COMMAND_START: the Event's queue was made without "
                             "profiling=True") as raised:
        event.start_ns  # (UR's own error did not say why)
    assert isinstance(raised.value, NotImplementedError)
    from ur_cffi.enums import ur_event_info_t

    for prop in (12345, None, "UR_PROFILING_INFO_COMMAND_START",
                 ur_event_info_t.UR_EVENT_INFO_COMMAND_QUEUE):  # the last gave a NULL handle
        with pytest.raises(TypeError, match="profiling takes a ur_profiling_info_t"):
            event.profiling(prop)


def test_a_copy_of_several_commands_gives_no_timestamps_of_its_barrier(context, device, rng):
    """The Event of a strided copy is a barrier after its row copies: its timestamps (0.4 us
    for a 150 ms copy) timed nothing, silently; they raise now, and the copy's are a
    contiguous one's."""
    host = rng.standard_normal((4, 3000)).astype(np.float32)
    with ur_cffi.Queue(context, device, profiling=True) as queue:
        array = ur_cffi.asarray(host, queue=queue)
        out = ur_cffi.full((4, 2000), np.nan, np.float32, queue=queue)
        several = out.copy_from(array[:, :2000])  # 4 rows of 8000 bytes: a 2D copy
        assert np.array_equal(out.to_numpy(), host[:, :2000])
        with pytest.raises(errors.ProfilingInfoNotAvailableError,
                           match="stands for several copy commands"):
            several.start_ns
        with pytest.raises(TypeError, match="profiling takes a ur_profiling_info_t"):
            several.profiling(None)
        whole = array.copy_from(host)
        assert whole.elapsed_ns >= 0 and whole.end_ns >= whole.start_ns


def test_an_event_takes_only_an_event_handle(queue):
    """A NULL or other handle used to be taken, and crashed the process at its first use."""
    from ur_cffi import ffi

    for handle in (ffi.NULL, ffi.cast("ur_event_handle_t", 0), queue.handle, 0, None):
        with pytest.raises(TypeError, match="Event takes a non-null ur_event_handle_t"):
            ur_cffi.Event(handle, queue)


def test_an_event_refuses_a_queue_it_was_not_enqueued_on(context, device, queue):
    """``Event(handle, queue)`` took an event of another context: a wait on it passed the wait
    list's context check, and UR answered ``UR_RESULT_ERROR_UNKNOWN`` naming nothing."""
    from ur_cffi import ffi

    with ur_cffi.Context([device]) as other_context, \
            ur_cffi.Queue(other_context, device) as other_context_queue, \
            ur_cffi.Queue(context, device) as same_context_queue:
        for source, match in ((other_context_queue, "another context"),
                              (same_context_queue, "another queue")):
            raw = ffi.new("ur_event_handle_t *")
            ur_cffi.check(ur_cffi.lib.urEnqueueEventsWait(source.handle, 0, ffi.NULL, raw),
                          "urEnqueueEventsWait")
            with pytest.raises(ValueError, match=f"is an event of {match} than"):
                ur_cffi.Event(raw[0], queue)
            event = ur_cffi.Event(raw[0], source)  # refused above without taking the handle
            event.wait()
            assert event.status == COMPLETE
            event.close()


def test_a_queues_context_device_and_flags_are_read_only(context, device):
    """``queue.flags = 0`` made ``queue.profiling`` False on a profiling queue, and the
    allocator took an out-of-order queue for an in-order one."""
    with ur_cffi.Queue(context, device, out_of_order=True, profiling=True) as queue:
        for name, value in (("context", None), ("device", None), ("flags", 0)):
            with pytest.raises(AttributeError, match=f"Queue.{name} is read-only"):
                setattr(queue, name, value)
        assert queue.context is context and queue.device is device
        assert queue.profiling and queue.out_of_order


def test_an_event_refuses_a_handle_another_event_owns(queue, rng):
    """``Event(other.handle, queue)`` was taken: two owners, two urEventRelease calls for one
    reference, and later events crashed on the freed one."""
    data = rng.standard_normal(1 << 16)
    array = ur_cffi.empty(data.size, np.float64, queue=queue)
    first = array.copy_from(data, blocking=False)
    with pytest.raises(ValueError, match="is owned already"):
        ur_cffi.Event(first.handle, queue)
    filled = array.fill(np.nan, blocking=False)
    with pytest.raises(ValueError, match="is owned already"):
        ur_cffi.Event(filled.handle, queue)
    filled.wait()
    first.wait()
    assert first.status == ur_cffi.enums.ur_event_status_t.UR_EVENT_STATUS_COMPLETE
    assert np.isnan(array.to_numpy()).all()


@pytest.mark.parametrize("n", [1, 777, 100_003])
def test_async_copies_on_an_out_of_order_queue_are_ordered_by_events(context, device, rng, n):
    x = rng.standard_normal(n)
    with ur_cffi.Queue(context, device, out_of_order=True) as queue:
        a = ur_cffi.empty(n, np.float64, queue=queue, kind="device")
        b = ur_cffi.empty(n, np.float64, queue=queue, kind="shared")
        c = ur_cffi.empty(n + 5, np.float64, queue=queue, kind="device")
        poison = c.fill(np.nan, blocking=False)
        step1 = a.copy_from(x, blocking=False)
        step2 = b.copy_from(a, blocking=False, wait_for=[step1])
        step3 = c.copy_from(b, offset=5, blocking=False, wait_for=[step2, poison])
        step4 = c.fill(-1.0, count=5, blocking=False, wait_for=step3)
        out = np.full(n + 5, np.nan)
        step5 = c.copy_to(out, blocking=False, wait_for=[step4])
        events = [poison, step1, step2, step3, step4, step5]
        assert all(isinstance(e, ur_cffi.Event) for e in events)
        step5.wait()
        assert all(e.status == COMPLETE for e in events)
    assert np.array_equal(out[:5], np.full(5, -1.0))
    assert np.array_equal(out[5:], x)


def test_every_enqueue_takes_a_wait_list(context, device, build_triton, rng):
    """One chain through every kind of enqueue on an out-of-order queue; exact results."""
    program, compiled = build_triton("add", BLOCK=BLOCK)
    add = program.kernel(compiled.name, ("ptr", "ptr", "ptr", "int32"),
                         **compiled.options)
    n = 3 * BLOCK + 17
    x = rng.standard_normal(n).astype(np.float32)
    with ur_cffi.Queue(context, device, out_of_order=True) as queue:
        buffer = ur_cffi.Buffer(context, x.nbytes)
        a = ur_cffi.empty(n, queue=queue)
        b = ur_cffi.empty(n, queue=queue)
        out = ur_cffi.empty(n, queue=queue)
        e1 = buffer.write(queue, x, blocking=False)
        staged = np.full(n, np.nan, np.float32)
        e2 = buffer.read(queue, staged, blocking=False, wait_for=[e1])
        e3 = a.copy_from(staged, blocking=False, wait_for=[e2])
        e4 = b.fill(0.5, blocking=False, wait_for=[e3])
        e5 = queue.barrier(wait_for=[e4])
        e6 = out.fill(np.nan, blocking=False, wait_for=[e5])
        e7 = add.launch(queue, -(-n // BLOCK) * compiled.local_size, compiled.local_size,
                        a, b, out, n, wait_for=[e6, e3])
        e8 = out.copy_to(b, blocking=False, wait_for=[e7])
        result = np.full(n, np.nan, np.float32)
        e9 = b.copy_to(result, blocking=False, wait_for=[e8])
        e9.wait()
    assert np.array_equal(staged, x)
    expected = (x.astype(np.float64) + 0.5).astype(np.float32)  # one rounding, as on device
    assert np.array_equal(result, expected)


def test_wait_lists_reject_non_events(queue):
    array = ur_cffi.empty(4, queue=queue)
    for call in (lambda: array.fill(0.0, wait_for=[1]),
                 lambda: array.copy_from(np.zeros(4, np.float32), wait_for=["event"]),
                 lambda: array.copy_to(np.zeros(4, np.float32), wait_for=[None])):
        with pytest.raises(TypeError, match="wait_for takes Event objects"):
            call()
    open_event, closed = queue.barrier(), queue.barrier()
    closed.close()
    with pytest.raises(ur_cffi.ClosedError, match=r"wait_for\[1\]: Event is closed"):
        array.fill(0.0, wait_for=[open_event, closed])  # (it said only "Event is closed")


def test_closing_queues_holds_no_memory(context):
    # close() finished an idle queue through a probe, a barrier with an event, and Intel's CPU
    # runtime keeps about 10 KiB for every queue that ever made an event: 10,000 queues made
    # and closed kept 100 MiB, against nothing for queues dropped without close().
    import gc

    import crash_probe

    def cycles(count, close):
        for _ in range(count):
            queue = ur_cffi.Queue(context)
            if close:
                queue.close()
            del queue
        gc.collect()

    grown = {}
    for close in (False, True):
        cycles(100, close)
        before = crash_probe.rss_bytes()
        cycles(2000, close)
        grown[close] = crash_probe.rss_bytes() - before
    assert grown[True] < grown[False] + (4 << 20), grown


def test_finish_of_an_out_of_order_queue_waits_for_a_kernel_still_running(context, device,
                                                                         kernels):
    program, spin = crash_probe.load(context, kernels, "spin")
    with program, spin, ur_cffi.Queue(context, device, out_of_order=True) as queue:
        flag = ur_cffi.zeros(1, np.int32, queue=queue, kind="host")
        out = ur_cffi.empty(1, np.int32, queue=queue)
        event = spin.launch(queue, crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE, flag, out,
                            crash_probe.SPIN_LIMIT, *crash_probe.spin_local())
        release = threading.Timer(
            0.3, lambda: setattr(ctypes.c_int32.from_address(flag.data_ptr()), "value", 1))
        release.start()
        queue.finish()
        status = event.status
        release.join()
        assert status == COMPLETE


class UserEvent:
    """An OpenCL user event of ``context``'s native context and a barrier on ``queue`` behind
    it (``barrier``, an Event): a command that ends when :meth:`set` says, as it says."""

    def __init__(self, context, queue):
        from ur_cffi import ffi, lib

        self.opencl = opencl = ctypes.CDLL("libOpenCL.so.1")  # the OpenCL adapter's loader
        opencl.clCreateUserEvent.restype = ctypes.c_void_p
        opencl.clCreateUserEvent.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        opencl.clSetUserEventStatus.argtypes = [ctypes.c_void_p, ctypes.c_int]
        opencl.clReleaseEvent.argtypes = [ctypes.c_void_p]
        native = ffi.new("ur_native_handle_t *")
        assert lib.urContextGetNativeHandle(context.handle, native) == 0
        status = ctypes.c_int()
        self.native = opencl.clCreateUserEvent(ctypes.c_void_p(int(native[0])),
                                               ctypes.byref(status))
        assert status.value == 0 and self.native
        self.wrapped, barrier = ffi.new("ur_event_handle_t *"), ffi.new("ur_event_handle_t *")
        assert lib.urEventCreateWithNativeHandle(ffi.cast("ur_native_handle_t", self.native),
                                                 context.handle, ffi.NULL, self.wrapped) == 0
        assert lib.urEnqueueEventsWaitWithBarrier(queue.handle, 1, self.wrapped, barrier) == 0
        self.barrier = ur_cffi.Event(barrier[0], queue)
        queue.barrier().close()  # (the barrier is no longer the queue's latest command)

    def set(self, status: int, after: float, seen: list) -> threading.Thread:
        """Set the status (0: complete, negative: an error) from another thread ``after``
        seconds, noting in ``seen`` the threads there are then, with their names then;
        returns that thread."""
        def later():
            time.sleep(after)
            seen.extend((thread, thread.name) for thread in threading.enumerate())
            assert self.opencl.clSetUserEventStatus(ctypes.c_void_p(self.native), status) == 0

        setter = threading.Thread(target=later)
        setter.start()
        return setter

    def close(self):
        from ur_cffi import lib

        self.barrier.close()
        assert lib.urEventRelease(self.wrapped[0]) == 0
        self.opencl.clReleaseEvent(ctypes.c_void_p(self.native))


@pytest.mark.cpu_device("an OpenCL user event, through the OpenCL adapter's native handles")
@pytest.mark.parametrize("interruptible", [True, False])
def test_a_command_that_failed_raises_from_its_wait_on_either_path(context, queue,
                                                                   interruptible):
    # The interruptible wait hands a long wait to a helper thread: the error that helper's
    # urEventWait returned must reach the caller, as the plain blocking call's does (dropping
    # it left every other test passing).  The command fails for real: a barrier behind an
    # OpenCL user event that another thread sets to an error status.
    user_event, seen = UserEvent(context, queue), []
    previous = ur_cffi.set_interruptible_waits(interruptible)
    setter = user_event.set(-5, 0.2, seen)
    try:
        with pytest.raises(errors.InEventListExecStatusError, match="urEventWait"):
            user_event.barrier.wait()
    finally:
        ur_cffi.set_interruptible_waits(previous)
        setter.join()
        user_event.close()
    assert ("ur_cffi urEventWait" in [name for _, name in seen]) is interruptible, seen


@pytest.mark.cpu_device("an OpenCL user event, through the OpenCL adapter's native handles")
def test_long_waits_one_after_another_take_one_helper_thread(context, queue):
    # Each wait handed to a helper started a thread of its own, and Intel's CPU runtime keeps
    # memory for good for every thread that called it: about 60 bytes a wait, without end
    # (a review's soak test: 4,000 finishes of a 43 ms kernel, RSS 248 kB more).
    helpers = set()
    previous = ur_cffi.set_interruptible_waits(True)
    try:
        for _ in range(4):
            user_event, seen = UserEvent(context, queue), []
            setter = user_event.set(0, 0.05, seen)
            user_event.barrier.wait()
            assert user_event.barrier.status == COMPLETE
            setter.join()
            user_event.close()
            helpers.update(thread for thread, name in seen if name == "ur_cffi urEventWait")
    finally:
        ur_cffi.set_interruptible_waits(previous)
    assert len(helpers) == 1, helpers
