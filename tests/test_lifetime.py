"""Ownership on the CPU device: each handle released exactly once (close, ``with``, collection),
children keeping parents alive, ClosedError after close, and no UR object leaked by 10,000
allocate/free cycles according to UR's own leak checker."""

import gc
import re
import textwrap
import weakref

import numpy as np
import pytest

import crash_probe
import device_under_test
import ur_cffi
from ur_cffi import _compat, _handle, allocator, ffi, info, lib, loader
from ur_cffi.enums import (
    ur_context_info_t,
    ur_event_info_t,
    ur_kernel_info_t,
    ur_program_info_t,
    ur_queue_info_t,
    ur_usm_alloc_info_t,
    ur_usm_type_t,
)

BLOCK = 128

# For each handle type: how UR reports its reference count, and how to take one more reference.
REFERENCES = {
    "context": ("urContextGetInfo", ur_context_info_t.UR_CONTEXT_INFO_REFERENCE_COUNT,
                "urContextRetain", "urContextRelease"),
    "queue": ("urQueueGetInfo", ur_queue_info_t.UR_QUEUE_INFO_REFERENCE_COUNT,
              "urQueueRetain", "urQueueRelease"),
    "event": ("urEventGetInfo", ur_event_info_t.UR_EVENT_INFO_REFERENCE_COUNT,
              "urEventRetain", "urEventRelease"),
    "buffer": ("urMemGetInfo", _compat.enumerator("ur_mem_info_t",
                                                  "UR_MEM_INFO_REFERENCE_COUNT"),
               "urMemRetain", "urMemRelease"),  # (not in UR 0.10's header: oneAPI 2025.0)
    "program": ("urProgramGetInfo", ur_program_info_t.UR_PROGRAM_INFO_REFERENCE_COUNT,
                "urProgramRetain", "urProgramRelease"),
    "kernel": ("urKernelGetInfo", ur_kernel_info_t.UR_KERNEL_INFO_REFERENCE_COUNT,
               "urKernelRetain", "urKernelRelease"),
}


def references(kind, handle):
    function, prop, _, _ = REFERENCES[kind]
    if prop is None:
        pytest.skip(f"this UR header has no reference-count query for a {kind}")
    return info.query(function, handle, prop)


@pytest.fixture
def make(device, context, queue, compile_triton):
    """``make(kind)``: a fresh object of that kind, the only Python reference to it."""
    compiled = compile_triton("add", BLOCK=BLOCK)

    def make_one(kind):
        if kind == "context":
            return device.create_context()
        if kind == "queue":
            return ur_cffi.Queue(context, device, out_of_order=True)
        if kind == "event":
            event = ur_cffi.zeros(16, queue=queue).fill(1.0, blocking=False)
            event.wait()
            return event
        if kind == "buffer":
            return ur_cffi.Buffer(context, 256)
        if kind == "program":
            return compiled.program(context)
        return compiled.program(context).kernel(compiled.name, **compiled.options)

    return make_one


def drop(way, obj):
    """Let go of ``obj`` by ``close()``, by leaving ``with``, or (``"gc"``) by collection."""
    if way == "close":
        obj.close()
    elif way == "with":
        with obj as same:
            assert same is obj and not obj.closed
    else:
        alive = weakref.ref(obj)
        del obj
        gc.collect()
        assert alive() is None


@pytest.mark.parametrize("way", ["close", "with", "gc"])
@pytest.mark.parametrize("kind", list(REFERENCES))
def test_each_handle_is_released_exactly_once(make, kind, way):
    objects = [make(kind)]
    handle = objects[0].handle
    _, _, retain, release = REFERENCES[kind]
    before = references(kind, handle)
    assert getattr(lib, retain)(handle) == 0  # our own reference keeps the handle valid
    try:
        assert references(kind, handle) == before + 1
        drop(way, objects.pop() if way == "gc" else objects[0])
        assert references(kind, handle) == before  # one release, not zero, not two
        for obj in objects:
            assert obj.closed
            obj.close()  # closing twice is harmless and releases nothing more
        assert references(kind, handle) == before
    finally:
        assert getattr(lib, release)(handle) == 0


@pytest.mark.parametrize("way", ["close", "with", "gc"])
@pytest.mark.parametrize("kind", ["device", "host", "shared"])
def test_usm_is_freed_exactly_once(queue, context, kind, way):
    # The queue's first command keeps a context reference, and so does a UR pool of the kind.
    ur_cffi.zeros(1, queue=queue, kind=kind)
    ur_cffi.empty_cache()  # freed memory stays cached (issue 12) until empty_cache()
    before = references("context", context.handle)
    arrays = [ur_cffi.empty(1000, queue=queue, kind=kind)]
    pointer = ffi.cast("void *", arrays[0].data_ptr())
    # USM has no reference count of its own: the allocation holds its context for urUSMFree
    # (once on the CPU device; the CUDA adapter's pools may take more).
    held = references("context", context.handle) - before
    assert held == 1 if device_under_test.TYPE == "cpu" else held >= 1

    def usm_type():
        return info.query("urUSMGetMemAllocInfo", context.handle, pointer,
                          ur_usm_alloc_info_t.UR_USM_ALLOC_INFO_TYPE)

    assert usm_type() != ur_usm_type_t.UR_USM_TYPE_UNKNOWN
    if way == "gc":  # (not drop(way, arrays.pop()): Python 3.10 holds a call's arguments on
        alive = weakref.ref(arrays[0])  # the caller's stack until it returns)
        arrays.clear()
        gc.collect()
        assert alive() is None
    else:
        drop(way, arrays[0])
    assert usm_type() != ur_usm_type_t.UR_USM_TYPE_UNKNOWN  # back in the allocator's cache
    ur_cffi.empty_cache()
    assert usm_type() == ur_usm_type_t.UR_USM_TYPE_UNKNOWN
    assert references("context", context.handle) == before
    for array in arrays:
        array.close()  # a second urUSMFree would fail or crash
    assert references("context", context.handle) == before


def closed_calls(obj, queue, context):
    """Every use of ``obj`` that needs its handle."""
    host = np.zeros(4, np.float32)
    if isinstance(obj, ur_cffi.Context):
        return [lambda: obj.handle, lambda: ur_cffi.Queue(obj),
                lambda: ur_cffi.Buffer(obj, 16), lambda: ur_cffi.Program.from_il(obj, b"1234")]
    if isinstance(obj, ur_cffi.Queue):
        return [obj.finish, obj.flush, obj.barrier, lambda: ur_cffi.empty(4, queue=obj),
                lambda: ur_cffi.zeros(4, queue=queue).copy_from(host, queue=obj)]
    if isinstance(obj, ur_cffi.Event):
        return [obj.wait, lambda: obj.status, lambda: obj.start_ns, lambda: obj.end_ns,
                lambda: ur_cffi.zeros(4, queue=queue).fill(1.0, wait_for=[obj])]
    if isinstance(obj, ur_cffi.Buffer):
        return [lambda: obj.write(queue, host), lambda: obj.read(queue, host), obj.native_handle]
    if isinstance(obj, ur_cffi.Program):
        return [lambda: obj.kernel("add"), lambda: obj.kernel_names, lambda: obj.binaries,
                obj.build_log, obj.build]
    if isinstance(obj, ur_cffi.Kernel):
        array = ur_cffi.zeros(4, queue=queue)
        return [lambda: obj.launch(queue, BLOCK, BLOCK, array, array, array, np.int32(4))]
    raise AssertionError(obj)


@pytest.mark.parametrize("kind", list(REFERENCES))
def test_closed_objects_raise_closed_error(make, queue, context, kind):
    obj = make(kind)
    obj.close()
    obj.close()  # harmless
    assert obj.closed and "closed" in repr(obj)
    for call in closed_calls(obj, queue, context):
        with pytest.raises(ur_cffi.ClosedError):
            call()
    with pytest.raises(ValueError):  # ClosedError is a ValueError
        obj.handle
    with pytest.raises(ur_cffi.ClosedError):
        with obj:
            pass


def test_closed_usm_array_raises_closed_error(queue):
    array = ur_cffi.zeros(8, queue=queue)
    other = ur_cffi.zeros(8, queue=queue)
    array.close()
    array.close()
    assert array.closed
    for call in (array.data_ptr, array.to_numpy, lambda: array.fill(1.0),
                 lambda: array.copy_from(np.zeros(8, np.float32)),
                 lambda: array.copy_to(np.zeros(8, np.float32)),
                 lambda: other.copy_from(array), lambda: other.copy_to(array)):
        with pytest.raises(ur_cffi.ClosedError):
            call()


def test_a_closed_queue_refuses_new_arrays(context, device):
    queue = ur_cffi.Queue(context, device)
    queue.close()
    with pytest.raises(ur_cffi.ClosedError, match="Queue is closed"):
        ur_cffi.USMArray(queue, 4)


def test_an_array_whose_queue_closed_says_so_and_works_on_another(context, device, rng):
    """The array is open (its memory belongs to the context): a command on its own queue
    names that queue and how to go on, and one on another queue of the context runs."""
    host = rng.standard_normal(6)
    with ur_cffi.Queue(context, device) as queue:
        array = ur_cffi.asarray(host, queue=queue)
    assert not array.closed
    with pytest.raises(ur_cffi.ClosedError, match=r"the queue this \(6,\) float64 array was "
                                                  "made on is closed; give the calls that take queue="):
        array.to_numpy()
    with ur_cffi.Queue(context, device) as other:
        assert np.array_equal(array.to_numpy(queue=other), host)


def test_children_keep_their_parents_alive(device, compile_triton, rng):
    """Only a Kernel and USMArrays survive; context, queue and program live on through them."""
    compiled = compile_triton("add", BLOCK=BLOCK)
    n = 4 * BLOCK + 11
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))

    def build():
        context = device.create_context()
        queue = ur_cffi.Queue(context, device)
        program = compiled.program(context)
        parents = [weakref.ref(o) for o in (context, queue, program)]
        return (program.kernel("add", **compiled.options), ur_cffi.asarray(x, queue=queue),
                ur_cffi.asarray(y, queue=queue), ur_cffi.empty(n, queue=queue), parents)

    kernel, dx, dy, out, parents = build()
    gc.collect()
    assert all(ref() is not None and not ref().closed for ref in parents)
    out.fill(np.nan)
    kernel.launch(out.queue, -(-n // BLOCK) * compiled.local_size, compiled.local_size,
                  dx, dy, out, np.int32(n)).wait()
    assert np.array_equal(out.to_numpy(), (x.astype(np.float64) + y).astype(np.float32))
    del kernel, dx, dy, out
    gc.collect()
    assert all(ref() is None for ref in parents)  # and now they are released


def test_an_event_keeps_its_queue_alive(context, device):
    def submit():
        queue = ur_cffi.Queue(context, device)
        return ur_cffi.zeros(1000, queue=queue).fill(2.0, blocking=False), weakref.ref(queue)

    event, queue = submit()
    gc.collect()
    assert queue() is not None
    event.wait()
    assert event.status == 0  # UR_EVENT_STATUS_COMPLETE
    del event
    gc.collect()
    assert queue() is None


def test_10000_allocations_in_process_leave_nothing_behind(queue, context, rng):
    x = rng.standard_normal(33).astype(np.float32)
    for kind in ("device", "host", "shared"):  # each kind's pool exists from here on
        ur_cffi.empty(33, queue=queue, kind=kind).copy_from(x)  # the queue's first copy keeps
    gc.collect()                                                 # a context reference
    ur_cffi.empty_cache()  # freed memory stays cached (issue 12) until empty_cache()
    live = len(_handle._live) + len(_handle._events)
    context_references = references("context", context.handle)
    for i in range(10_000):
        array = ur_cffi.empty(33, queue=queue, kind=("device", "host", "shared")[i % 3])
        array.copy_from(x)
        if i % 2:
            array.close()
    del array
    gc.collect()
    out = np.full(33, np.nan, np.float32)
    ur_cffi.asarray(x, queue=queue).copy_to(out)
    assert np.array_equal(out, x)
    assert len(_handle._live) + len(_handle._events) == live
    assert ur_cffi.memory_stats(context)["cache_hits"] >= 9_000  # the loop reused its memory
    ur_cffi.empty_cache()
    assert references("context", context.handle) == context_references


# --- UR's own leak checker, in fresh processes ---------------------------------------------

LEAK_SCRIPT = textwrap.dedent("""
    import gc, sys
    import numpy as np
    import ur_cffi
    import device_under_test
    from ur_cffi import ffi, lib

    assert ur_cffi.loader.init() and ur_cffi.loader.validation_enabled()
    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    host = np.arange(33, dtype=np.float32)
    for i in range(10_000):
        array = ur_cffi.empty(33, queue=queue, kind=("device", "host", "shared")[i % 3])
        event = array.copy_from(host, blocking=False)
        buffer = ur_cffi.Buffer(context, host.nbytes)
        buffer.write(queue, host, wait_for=[event])
        if i % 2:  # half closed explicitly, half left to the garbage collector
            array.close(); event.close(); buffer.close()
    del array, event, buffer
    gc.collect()
    out = np.zeros(33, np.float32)
    ur_cffi.asarray(host, queue=queue).copy_to(out)
    assert np.array_equal(out, host)
    if sys.argv[1] == "leak":  # the control: a raw queue nobody releases
        raw = ffi.new("ur_queue_handle_t *")
        result = lib.urQueueCreate(context.handle, device.handle, ffi.NULL, raw)
        ur_cffi.check(result, "urQueueCreate")
        print(f"leaked {int(ffi.cast('uintptr_t', raw[0])):#x}")
    ur_cffi.loader.teardown()
    print("torn down")
""")


def run_with_leak_checking(mode):
    # The loader reads UR_CFFI_VALIDATION (full validation + leak checking layers); UR's logger
    # for those layers prints only when UR_LOG_VALIDATION asks it to.
    env = crash_probe.child_env(UR_CFFI_VALIDATION="1",
                                UR_LOG_VALIDATION="level:warning;output:stderr")
    done = crash_probe.run_child([mode], code=LEAK_SCRIPT, env=env, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "torn down" in done.stdout
    # Less the layer's known false reports (validation mode's own filter: loader).
    return done.stdout, loader.parse_validation_log(done.stderr)


def test_10000_cycles_leak_nothing_by_urs_leak_checker():
    _, reports = run_with_leak_checking("clean")
    assert reports == []


def test_the_leak_checker_reports_a_deliberate_leak():
    stdout, reports = run_with_leak_checking("leak")
    leaked = stdout.split("leaked ")[1].split()[0]
    assert f"Retained 1 reference(s) to handle {leaked}" in "\n".join(reports)
    # Nothing of ur_cffi's own is reported along with it.
    assert sum("Retained" in line for line in reports) == 1


def test_a_repr_never_raises(queue):
    """Not for an allocator pool, whose handle is its key where the device has no UR pool,
    nor for an object whose ``__init__`` never set its handle."""
    for kind in ("device", "host", "shared"):
        assert re.fullmatch(r"<_Pool (open|0x[0-9a-f]+)>", repr(allocator.pool_for(queue, kind)))
    for cls in (ur_cffi.Program, ur_cffi.Kernel, ur_cffi.Event, ur_cffi.Buffer):
        assert repr(object.__new__(cls)) == f"<{cls.__name__} closed>"


# --- closing parents first, and the loader's teardown, in fresh processes ------------------

PARENTS_FIRST = textwrap.dedent("""
    import gc
    import numpy as np
    import ur_cffi
    import device_under_test

    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    # No enqueue here: after one, the CPU runtime keeps a context reference of its own.
    arrays = [ur_cffi.empty(10, queue=queue, kind=k) for k in ("device", "host", "shared")]
    queue.close()
    context.close()
    print("arrays after their context", [a.closed for a in arrays], flush=True)
    arrays[0].close()  # urUSMFree, after the user closed the context
    del arrays
    gc.collect()
    print("freed", flush=True)

    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    event = ur_cffi.zeros(10, queue=queue).fill(1.0, blocking=False)
    queue.close()
    context.close()
    print("event after its queue", int(event.status), event.closed, flush=True)
    event.close()
    ur_cffi.loader.teardown()
    print("torn down", queue.closed, context.closed)
""")


def test_closing_parents_before_children_is_safe():
    """A freed USM pointer once went to urUSMFree with a released context: a segfault."""
    done = crash_probe.run_child(code=PARENTS_FIRST, check=False, timeout=50)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["arrays after their context [False, False, False]",
                                        "freed", "event after its queue 0 False",
                                        "torn down True True"]


TEARDOWN = textwrap.dedent("""
    import numpy as np
    import ur_cffi
    import device_under_test

    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    array = ur_cffi.asarray(np.arange(4.0), queue=queue)
    platform = device.platform
    ur_cffi.loader.teardown()
    for obj in (device, platform, context, queue, array):
        assert obj.closed, obj
        assert "closed" in repr(obj)  # a repr never raises (it read the device's name)
        try:
            obj.handle
        except ur_cffi.ClosedError:
            pass
        else:
            raise AssertionError(f"{obj!r} still hands out its released handle")
    try:
        array.to_numpy()
    except ur_cffi.ClosedError as error:
        assert str(error) == "USMArray is closed", error  # (not: its queue is, pass queue=)
    else:
        raise AssertionError("to_numpy() after teardown read released memory")
    # The next use initialises the loader again, with new objects.
    device = device_under_test.get()
    with device.create_context() as context, ur_cffi.Queue(context) as queue:
        print(ur_cffi.asarray(np.arange(4.0), queue=queue).to_numpy().tolist())
""")


GARBAGE_CYCLE = textwrap.dedent("""
    import gc
    import numpy as np
    import ur_cffi
    import device_under_test

    device = device_under_test.get()
    read, taken = [], []


    class Taker:  # garbage of the same collection whose finalizer allocates
        def __init__(self, queue, n):
            self.queue, self.n, self.me = queue, n, self

        def __del__(self):
            taken.append(ur_cffi.full(self.n, np.nan, np.float32, queue=self.queue))


    class Holder:  # garbage whose finalizer uses the ur_cffi objects it holds
        def __init__(self, **objects):
            self.__dict__.update(objects)
            self.me = self

        def __del__(self):
            self.queue.finish()
            self.event.wait()
            self.scratch.fill(3.0)
            read.append((self.array.to_numpy(), self.host_view.copy(),
                         self.scratch.to_numpy()))


    data = np.random.default_rng().standard_normal(1 << 16).astype(np.float32)
    for _ in range(3):
        queue = ur_cffi.Queue(device.create_context(), device)
        Taker(queue, data.size)
        host = ur_cffi.asarray(data, queue=queue, kind="host")
        host_view = np.asarray(host)
        host.close()  # its memory stays for the numpy view
        scratch = ur_cffi.full(8, np.nan, np.float32, queue=queue)
        Holder(queue=queue, array=ur_cffi.asarray(data, queue=queue), host_view=host_view,
               event=scratch.fill(2.0, blocking=False), scratch=scratch)
        Taker(queue, data.size)
        del queue, host, host_view, scratch
        gc.collect()
        assert len(taken) == 2, taken
        taken.clear()
    assert len(read) == 3, read
    for device_copy, host_copy, scratch in read:
        assert np.array_equal(device_copy, data), "the device array read other data"
        assert np.array_equal(host_copy, data), "the numpy view read other data"
        assert (scratch == 3.0).all(), scratch
    print("ok")
""")


def test_finalizers_in_a_garbage_cycle_still_use_its_ur_cffi_objects():
    """The collector calls weak references' callbacks (which released queues, arrays, pools)
    before the finalizers of the same garbage: a finalizer that read an array of its cycle
    read memory another finalizer's allocation had taken; one that finished its queue
    crashed in urEnqueueEventsWaitWithBarrier; its Event was closed."""
    done = crash_probe.run_child(code=GARBAGE_CYCLE, check=False, timeout=100)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
    assert "Exception ignored" not in done.stderr, done.stderr[-3000:]


ANOTHER_THREADS_COLLECTION = textwrap.dedent("""
    import gc
    import os
    import threading
    import numpy as np
    import ur_cffi
    import device_under_test
    from ur_cffi import _handle

    entered, done = threading.Event(), threading.Event()


    class Waiting:  # garbage whose finalizer waits, the GIL released, until told
        def __init__(self):
            self.me = self

        def __del__(self):
            entered.set()
            done.wait(60)


    def collect():
        Waiting()
        gc.collect()


    gc.disable()
    collector = threading.Thread(target=collect)
    collector.start()
    entered.wait(60)
    pid = os.fork()  # while the other thread collects (ur_cffi unused yet: the child may)
    if pid == 0:
        queue = ur_cffi.Queue(device_under_test.get().create_context())
        for _ in range(100):
            ur_cffi.empty(1 << 16, np.float32, queue=queue).fill(1.0, blocking=False)
        gc.collect()
        os._exit(0 if not _handle.after_collection and
                 ur_cffi.memory_stats()["allocated_bytes"] == 0 else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    queue = ur_cffi.Queue(device_under_test.get().create_context())
    n = 1 << 22
    ur_cffi.empty(n, np.float32, queue=queue).close()  # one block in the cache
    ur_cffi.set_memory_limit(int(1.5 * 4 * n))  # room for one array of n
    for _ in range(3):  # each needs the block the one before gave back
        array = ur_cffi.empty(n, np.float32, queue=queue)
        array.fill(1.0, blocking=False)
        del array
    assert not _handle.after_collection, _handle.after_collection
    done.set()
    collector.join()
    assert ur_cffi.memory_stats()["allocated_bytes"] == 0
    print("ok")
""")


def test_another_threads_collection_does_not_hold_back_this_threads_releases():
    """Releases waited for any thread's collection: an array dropped while another thread's
    finalizer waited stayed allocated (the next allocation passed the memory limit), and a
    child forked meanwhile deferred every release for good."""
    done = crash_probe.run_child(code=ANOTHER_THREADS_COLLECTION, check=False, timeout=100)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


PARENTS_OF_A_DEFERRED_RELEASE = textwrap.dedent("""
    import gc
    import threading
    import ur_cffi
    import device_under_test
    from ur_cffi import _handle

    device = device_under_test.get()
    order = []


    def logged(name, release):
        def logging_release(*args):
            order.append(name)
            return release(*args)
        return logging_release


    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    for owner, name in ((context, "context"), (queue, "queue")):  # the order of releases
        ref, release, args, parents = _handle._live[owner._serial]
        _handle._live[owner._serial] = (ref, logged(name, release), args, parents)
    del owner, ref, release, args, parents
    drop, dropped = threading.Event(), threading.Event()
    holder = [context]


    def drop_the_context():  # another thread's last reference, dropped mid-collection
        drop.wait(30)
        holder.clear()
        dropped.set()


    class Signal:  # its finalizer runs in the collection, after the queue's was deferred
        def __del__(self):
            drop.set()
            dropped.wait(30)


    class Cycle:
        def __init__(self):
            self.me = self


    other = threading.Thread(target=drop_the_context)
    other.start()
    gc.disable()
    old_queue, old_signal = queue, Signal()
    gc.collect()  # both to the oldest generation
    cycle = Cycle()
    cycle.queue, cycle.signal = old_queue, old_signal  # held by a young cycle alone
    del queue, old_queue, old_signal, context, cycle
    gc.collect(0)
    other.join()
    print(order)
""")


def test_a_deferred_release_keeps_its_parents_until_it_has_run():
    """A queue's release deferred to the end of a collection did not hold its context: another
    thread dropping the context's last reference meanwhile released it first."""
    done = crash_probe.run_child(code=PARENTS_OF_A_DEFERRED_RELEASE, check=False, timeout=100)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "['queue', 'context']"


WAITS_IN_A_FINALIZER = textwrap.dedent("""
    import gc
    import numpy as np
    import ur_cffi
    import device_under_test

    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    n = 1 << 22
    scratch = ur_cffi.empty(4 * n, np.float32, queue=queue)
    data = np.random.default_rng().standard_normal(1 << 16).astype(np.float32)
    source = ur_cffi.asarray(data, queue=queue)
    seen = []


    class Holder:  # holds the last reference to a queue, in a cycle
        def __init__(self, queue, check):
            self.queue, self.check, self.me = queue, check, self

        def __del__(self):
            seen.append(self.check())


    def synchronized(destination):
        device.synchronize()
        return np.array_equal(np.asarray(destination), data)


    def from_dlpack(destination):
        return np.array_equal(np.from_dlpack(destination), data)


    def allocated():  # the cache holds n floats last used on the collected queue
        return ur_cffi.empty(2 * n, np.float32, queue=queue).nbytes == 8 * n


    gc.disable()
    for check in (synchronized, from_dlpack):
        destination = ur_cffi.full(data.size, np.nan, np.float32, queue=queue, kind="host")
        other = ur_cffi.Queue(context, device)
        for value in range(30):  # work that takes a while, then the copy the check reads
            scratch.fill(float(value), queue=other, blocking=False)
        destination.copy_from(source, queue=other, blocking=False)
        other.flush()
        Holder(other, lambda: check(destination))
        del other
        gc.collect()
    other = ur_cffi.Queue(context, device)
    ur_cffi.empty(n, np.float32, queue=other).close()
    ur_cffi.set_memory_limit(8 * n + 4 * scratch.size + source.nbytes + (1 << 20))
    Holder(other, allocated)
    del other
    gc.collect()
    print(seen)
""")


def test_a_finalizer_that_waits_finds_its_collected_queue_finished():
    """A queue collected in a cycle was finished only once the collection had ended: a
    finalizer's device.synchronize() or np.from_dlpack() returned before its work had run
    (stale data), and the memory limit refused what emptying the cache would have allowed."""
    done = crash_probe.run_child(code=WAITS_IN_A_FINALIZER, check=False, timeout=100)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[True, True, True]", done.stderr[-3000:]


TEARDOWN_IN_A_FINALIZER = textwrap.dedent("""
    import gc
    import numpy as np
    import ur_cffi
    import device_under_test
    from ur_cffi import _handle, loader

    device = device_under_test.get()
    queue = ur_cffi.Queue(device.create_context(), device, out_of_order=True)
    data = np.random.default_rng().standard_normal(1 << 16).astype(np.float32)
    source = ur_cffi.asarray(data, queue=queue)
    copied = ur_cffi.empty(1 << 16, np.float32, queue=queue)
    event = copied.copy_from(source, blocking=False)
    event.wait()
    del source  # held by the copy's Event alone: the teardown's own release drops it


    class Shutdown:
        def __init__(self):
            self.me = self
            self.queue = ur_cffi.Queue(device.create_context(), device)
            self.array = ur_cffi.asarray(data, queue=self.queue, kind="host")

        def __del__(self):
            loader.teardown()  # (what it raises, the collector prints)
            print("read after the teardown call:", np.array_equal(np.asarray(self.array), data))


    gc.disable()
    Shutdown()
    gc.collect()
    print("after the collection:", loader.initialized(), len(_handle.after_collection),
          queue.closed, copied.closed)
""")


def test_a_teardown_in_a_finalizer_runs_when_the_collection_ends():
    """It ran at once: the finalizer's own garbage (an array, its queue) was released under it
    and still read as open (a segfault reading it), and an array whose last reference the
    teardown's release dropped was released after urLoaderTearDown (the validation layer
    reported the context it held)."""
    env = crash_probe.child_env(UR_CFFI_VALIDATION="1")
    done = crash_probe.run_child(code=TEARDOWN_IN_A_FINALIZER, env=env, check=False, timeout=100)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["read after the teardown call: True",
                                        "after the collection: False 0 True True"], \
        done.stdout + done.stderr[-3000:]
    assert "Exception ignored" not in done.stderr, done.stderr[-3000:]


COLLECTION_UNDER_THE_HANDLES_LOCK = textwrap.dedent("""
    import gc
    import sys
    import ur_cffi
    import device_under_test
    from ur_cffi import queue as queue_module

    context = device_under_test.get().create_context()
    live = ur_cffi.Queue(context)


    def profiler(frame, event, arg):  # a collection inside retained()'s lock, as a profiler's
        if event == "c_return" and getattr(arg, "__name__", "") == "urQueueRetain":
            gc.collect()


    for _ in range(3):
        cycle = [ur_cffi.Queue(context)]  # a queue dropped in a reference cycle
        cycle.append(cycle)
        del cycle
        sys.setprofile(profiler)
        handle = queue_module.retained(live)
        sys.setprofile(None)
        ur_cffi.lib.urQueueRelease(handle)
    print("ok")
""")


def test_a_queue_collected_under_the_queue_handles_lock_is_released():
    """A profile hook or signal handler run under the device's queue_handles_lock (inside
    retained(), which the allocator and synchronize() call) can start a collection; a queue
    it released took the same lock: the thread waited for itself."""
    done = crash_probe.run_child(code=COLLECTION_UNDER_THE_HANDLES_LOCK, check=False,
                                 timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


STATS_ACROSS_TEARDOWN = textwrap.dedent("""
    import gc
    import numpy as np
    import ur_cffi
    import device_under_test

    queue = ur_cffi.Queue(device_under_test.get().create_context())
    ur_cffi.zeros(100, np.float32, queue=queue).close()
    kept = ur_cffi.zeros(100, np.float32, queue=queue)
    before = ur_cffi.memory_stats()
    ur_cffi.loader.teardown()
    del queue, kept
    gc.collect()  # the torn-down context goes, and its pools with it
    queue = ur_cffi.Queue(device_under_test.get().create_context())
    ur_cffi.zeros(100, np.float32, queue=queue)
    after = ur_cffi.memory_stats()
    counted = ("allocations", "cache_hits", "ur_allocations", "frees", "ur_frees")
    print([after[name] - before[name] for name in counted])
""")


SHOWN_AT_TEARDOWN = textwrap.dedent("""
    import numpy as np
    import ur_cffi
    import device_under_test

    queue = ur_cffi.Queue(device_under_test.get().create_context())
    array = ur_cffi.full(1 << 20, 7, np.uint8, queue=queue, kind="host")
    view = np.asarray(array)
    capsule_view = ur_cffi.asarray(np.arange(3.0), queue=queue, kind="host")
    tensor = np.from_dlpack(capsule_view)
    del array, capsule_view  # the memory stays for the numpy arrays
    for _ in range(2):
        try:
            ur_cffi.loader.teardown()
        except RuntimeError as error:
            assert "the memory of 2 array(s) is still used outside ur_cffi" in str(error), error
        else:
            raise AssertionError("teardown freed memory a numpy view uses")
        assert int(view[-1]) == 7 and tensor.tolist() == [0.0, 1.0, 2.0] and not queue.closed
    del view, tensor
    owner = ur_cffi.zeros(64, np.float32, queue=queue)
    wrap = ur_cffi.from_pointer(owner.data_ptr(), (8, 8), np.float32, queue=queue, owner=owner)
    owner.close()  # its memory stays for the wrap, which ur_cffi releases first
    ur_cffi.loader.teardown()
    assert queue.closed and wrap.closed
    print("ok")
""")

SHOWN_AT_EXIT = textwrap.dedent("""
    import atexit
    import threading

    import numpy as np

    views = {}
    # Registered before ur_cffi's own exit function, so it runs after it.
    atexit.register(lambda: print("at exit", float(views["host"].sum()), flush=True))

    import ur_cffi
    import device_under_test

    queue = ur_cffi.Queue(device_under_test.get().create_context())
    views["host"] = np.from_dlpack(ur_cffi.full(1 << 20, 2.0, np.float32, queue=queue,
                                                kind="host"))
    shared = np.asarray(ur_cffi.full(1 << 20, 3.0, np.float32, queue=queue, kind="shared"))
    started = threading.Event()


    def keep_reading():
        while True:
            shared.sum()
            started.set()


    threading.Thread(target=keep_reading, daemon=True).start()
    started.wait()
    print("main ends", flush=True)
""")


def test_teardown_refuses_to_free_memory_numpy_still_uses():
    # It freed it: a numpy view of 64 MiB of host USM read freed memory (SIGSEGV).
    done = crash_probe.run_child(code=SHOWN_AT_TEARDOWN, check=False, timeout=50)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


def test_the_exit_frees_no_memory_numpy_still_uses():
    # The teardown at exit freed it: an exit function registered earlier, or a daemon thread,
    # that read a numpy view then crashed the process (SIGSEGV).
    for _ in range(3):
        done = crash_probe.run_child(code=SHOWN_AT_EXIT, check=False, timeout=50)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split("\n")[:2] == ["main ends", f"at exit {2.0 * (1 << 20)}"]


VIEWS_OF_CLOSED_ARRAYS_AT_EXIT = textwrap.dedent("""
    import os
    import numpy as np
    import ur_cffi
    import device_under_test

    device = device_under_test.get()
    queue = ur_cffi.Queue(device.create_context(), device)
    arrays = [ur_cffi.asarray(np.arange(8, dtype=np.float32), queue=queue, kind="host")
              for _ in range(2)]
    os.kept = [np.asarray(arrays[0]), np.from_dlpack(arrays[1])]  # in a module ur_cffi's
    for array in arrays:                                            # end comes before
        array.close()
    print("main ends", flush=True)
""")


def test_views_of_closed_arrays_outliving_ur_cffi_end_quietly():
    # Their pins' finalizers ran after the interpreter's end had cleared ur_cffi's modules:
    # "Exception ignored in ExportPin.__del__ ... 'NoneType' object is not callable".
    done = crash_probe.run_child(code=VIEWS_OF_CLOSED_ARRAYS_AT_EXIT, check=False, timeout=50)
    assert done.returncode == 0 and done.stdout == "main ends\n", done.stderr[-3000:]
    assert "Exception ignored" not in done.stderr, done.stderr[-3000:]


LAUNCHING_AT_EXIT = textwrap.dedent("""
    import sys, threading
    import numpy as np
    import ur_cffi
    import crash_probe
    import device_under_test

    device = device_under_test.get()
    context = device.create_context()
    _, axpy = crash_probe.load(context, sys.argv[1], "axpy")
    x = ur_cffi.ones(1 << 16, np.float32, queue=ur_cffi.Queue(context, device))
    started = threading.Event()


    def keep_launching():
        queue = ur_cffi.Queue(context, device)
        while True:
            axpy.launch(queue, x.size // crash_probe.BLOCK * crash_probe.LOCAL_SIZE,
                        crash_probe.LOCAL_SIZE, x, x, x, np.float32(0.5), np.int32(x.size))
            started.set()


    for _ in range(2):
        threading.Thread(target=keep_launching, daemon=True).start()
    started.wait()
    print("main ends", flush=True)
""")


def test_the_exit_ends_with_daemon_threads_still_launching(kernels):
    # The teardown at exit finished each queue while these enqueued more: it never returned.
    done = crash_probe.run_child([kernels], code=LAUNCHING_AT_EXIT, check=False, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "main ends"


BUILDING_AT_EXIT = textwrap.dedent("""
    import random, sys, threading, time
    import ur_cffi
    import crash_probe
    import device_under_test

    device = device_under_test.get()
    context = device.create_context()
    started = threading.Barrier(4)


    def keep_building():
        started.wait()
        while True:
            try:
                crash_probe.load(context, sys.argv[1], "block_sums")
            except ur_cffi.ClosedError:  # (the teardown at exit has begun, or is done)
                time.sleep(0.001)


    for _ in range(3):
        threading.Thread(target=keep_building, daemon=True).start()
    started.wait()
    time.sleep(random.uniform(0.05, 0.3))
    print("main ends", flush=True)
""")


@pytest.mark.skipif(not ur_cffi._compat.HAS_LAUNCH_WITH_ARGS, reason=(
    "oneAPI 2025.x: the CPU runtime of 2025.2.0 still crashed at exit with daemon threads "
    "building (SIGSEGV, 2026-12-07's fresh-clone CI) although no build was in progress, "
    "before the exit stopped releasing under them (not checked again): checked from oneAPI "
    "2026.0 on"))
@pytest.mark.cpu_device("the CUDA adapter crashed at such an exit (SIGSEGV, 1 of 3 GPU runs "
                        "of 2026-12-07, before the exit stopped releasing under daemon threads; "
                        "not checked again): daemon threads using UR at exit are safe on the "
                        "CPU device only")
def test_the_exit_ends_with_daemon_threads_still_building_programs(kernels):
    # Intel's CPU runtime aborted the process after the interpreter's end with a build still
    # running (14 of 15 runs with three such threads): the teardown at exit waits for builds
    # in progress, and refuses new ones.
    for _ in range(3):
        done = crash_probe.run_child([kernels], code=BUILDING_AT_EXIT, check=False, timeout=60,
                                     env=crash_probe.child_env(UR_CFFI_VALIDATION="0"))
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip() == "main ends"


USED_BY_A_THREAD_AT_EXIT = textwrap.dedent("""
    import atexit, sys, threading

    freed = []

    class Owner:  # of memory ur_cffi wraps (a DLPack producer's, say)
        def __del__(self):
            freed.append(True)

    def after_ur_cffi():  # registered first: runs after ur_cffi's teardown at exit
        print("queue", "closed" if queue.closed else "open",
              "program", "closed" if program.closed else "open",
              "owner", "freed" if freed else "kept", flush=True)
        if not program.closed:  # nor is memory released when closed now, nor does a
            frees = ur_cffi.memory_stats()["frees"]  # teardown run now
            memory.close()
            ur_cffi.loader.teardown()
            print("frees", ur_cffi.memory_stats()["frees"] - frees, "loader",
                  "initialised" if ur_cffi.loader.initialized() else "torn down", flush=True)

    atexit.register(after_ur_cffi)
    import ur_cffi
    import crash_probe
    import device_under_test

    device = device_under_test.get()
    context = device.create_context()
    program, _ = crash_probe.load(context, sys.argv[1], "axpy")
    queue = ur_cffi.Queue(context, device)
    memory = ur_cffi.zeros(16, "float32", queue=queue)
    wrap = ur_cffi.from_pointer(memory.data_ptr(), (16,), "float32", queue=queue,
                                owner=Owner())
    if sys.argv[2] == "thread":
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    print("main ends", flush=True)
""")


@pytest.mark.parametrize("thread", ["thread", "none"])
def test_the_exit_releases_nothing_while_another_thread_runs(kernels, thread, tmp_path):
    # The teardown at exit released objects that daemon threads were still using: one
    # making kernels from a program crashed the process (SIGSEGV, urKernelGetInfo; or a double
    # free: "double free or corruption") in 5 of 40 runs of the daemon-builds test's child
    # (2026-12-07, both cores; it failed the fresh-clone CI's validated slice).  Its queues are
    # closed and finished, as the teardown's would be.
    done = crash_probe.run_child([kernels, thread], code=USED_BY_A_THREAD_AT_EXIT, check=False,
                                 timeout=60, env=crash_probe.child_env(UR_CFFI_VALIDATION="1",
                                                                       TMPDIR=tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(tmp_path.glob("ur_cffi-validation-*")) == []  # (left behind without a report)
    if thread == "thread":  # (nor is anything released later, or torn down)
        said = ["queue closed program open owner kept", "frees 0 loader initialised"]
    else:
        said = ["queue closed program closed owner freed"]
    assert done.stdout.splitlines() == ["main ends", *said], done.stdout
    said = "ur_cffi: no teardown at exit, so no leak report: 1 other thread(s) still running"
    assert (said in done.stderr) == (thread == "thread"), done.stderr[-3000:]


def slowed_at_exit(slowed: str, started: str, said: str) -> str:
    """A child whose daemon thread calls ``started``, which calls ``slowed`` (a module's
    function, made 0.3 s slower: CUDA's urLoaderInit and urPlatformGet take a while), and
    prints ``said`` once that returns; the main thread ends meanwhile."""
    module, name = slowed.rsplit(".", 1)
    return textwrap.dedent(f"""
        import os, threading, time
        import ur_cffi, {module}

        inside, real = threading.Event(), {slowed}
        def slowly(*args):
            inside.set()
            time.sleep(0.3)
            result = real(*args)
            os.write(1, b"{said}\\n")
            return result
        {slowed} = slowly
        threading.Thread(target={started}, daemon=True).start()
        inside.wait()
        print("main ends", flush=True)
    """)


INITIALISING_AT_EXIT = slowed_at_exit("ur_cffi.loader._loader_init", "ur_cffi.loader.adapters",
                                      "initialised")


def test_the_exit_waits_for_a_daemon_threads_initialisation_of_ur():
    # The process ended under the initialisation: CUDA's adapter crashed (SIGSEGV, a test
    # forking during it, 1 of 2 GPU runs of 2026-12-07).
    done = crash_probe.run_child(code=INITIALISING_AT_EXIT, check=False, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["main", "ends", "initialised"], done.stdout


def test_objects_are_closed_after_loader_teardown():
    done = crash_probe.run_child(code=TEARDOWN, check=False, timeout=50)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[0.0, 1.0, 2.0, 3.0]"


def test_memory_stats_keep_counting_across_a_teardown():
    # The counters of the pools a teardown released were lost once their context went.
    done = crash_probe.run_child(code=STATS_ACROSS_TEARDOWN, check=False, timeout=50)
    assert done.returncode == 0, done.stderr[-3000:]
    # one allocation more (from UR: a new context), freed into the cache, and the teardown's
    # free of the kept one (through UR)
    assert done.stdout.strip() == "[1, 0, 1, 2, 1]"


ENUMERATING_AT_EXIT = slowed_at_exit("ur_cffi.device._enumerate", "ur_cffi.devices",
                                     "enumerated")

AGAIN_AFTER_THE_EXIT = textwrap.dedent("""
    import atexit, os, sys, threading

    def after_ur_cffi():  # registered first: runs after ur_cffi's teardown at exit
        outcome = []
        def enumerate_devices():
            try:
                ur_cffi.devices()
                outcome.append("initialised again")
            except ur_cffi.ClosedError as error:
                outcome.append(str(error))
        thread = threading.Thread(target=enumerate_devices)
        thread.start()
        thread.join()
        os.write(1, (outcome[0] + "\\n").encode())

    atexit.register(after_ur_cffi)
    import ur_cffi
    ur_cffi.devices()
    print("main ends", flush=True)
""")


def test_the_exit_waits_for_a_daemon_threads_device_enumeration():
    # The process ended under a daemon thread's urPlatformGet: the CUDA adapter crashed
    # (SIGSEGV in 25 of 48 runs of the fork-during-initialisation test's parent without its
    # join, on an H200, 2026-12-07 13:15).  Nor does another thread initialise UR again after
    # the teardown at exit.
    done = crash_probe.run_child(code=ENUMERATING_AT_EXIT, check=False, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["main", "ends", "enumerated"], done.stdout
    done = crash_probe.run_child(code=AGAIN_AFTER_THE_EXIT, check=False, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == [
        "main ends", "UR was torn down at the interpreter's exit: another thread cannot "
        "initialise it again (the process's end under it crashed the CUDA adapter)"], done.stdout
