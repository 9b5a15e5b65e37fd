"""The fast launch paths: Kernel.launch reusing its checked argument block, Kernel.prepare,
launches without an Event, and blocking (non-interruptible) waits.  Every reuse must see a
change of argument, size, queue or memory, and a closed object must raise, never launch."""

import ctypes
import gc

import numpy as np
import pytest

import crash_probe
import ur_cffi
from ur_cffi.enums import ur_event_status_t

from test_program_kernel import BLOCK, add, add_reference, blocks, scale  # noqa: F401


def poisoned(n, queue):
    return ur_cffi.asarray(np.full(n, np.nan, np.float32), queue=queue)


def random_inputs(rng, n, queue):
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    return x, y, ur_cffi.asarray(x, queue=queue), ur_cffi.asarray(y, queue=queue)


def test_repeated_launches_with_the_same_objects_stay_exact(add, queue, rng):
    kernel, compiled = add
    n = 7 * BLOCK + 3
    x, y, dx, dy = random_inputs(rng, n, queue)
    out, count = poisoned(n, queue), np.int32(n)
    for _ in range(5):
        out.fill(np.nan)
        assert kernel.launch(queue, blocks(n, compiled), compiled.local_size, dx, dy, out,
                             count, event=False) is None
        queue.finish()
        assert np.array_equal(out.to_numpy(), add_reference(x, y))


def test_an_array_collected_mid_collection_counts_as_released_at_once(add, queue, rng):
    """An array a garbage collection frees gives its id to an array made before the collection
    has ended, when its release (which the launch's reuse counts: ``_handle.release_count``) was
    held back to that end: the launch reused the block with the freed array's address."""
    import weakref

    kernel, compiled = add
    n = 2 * BLOCK
    x, y, dx, dy = random_inputs(rng, n, queue)
    size, count = blocks(n, compiled), np.int32(n)
    out = poisoned(n, queue)
    kernel.launch(queue, size, compiled.local_size, dx, dy, out, count, event=False)
    seen = []

    def in_the_collection(_ref):  # a numpy array is not tracked by the collector: it goes,
        made = poisoned(n, queue)  # and this runs, while the cycle below is taken apart
        kernel.launch(queue, size, compiled.local_size, dx, dy, made, count, event=False)
        queue.finish()
        seen.append((ur_cffi._handle.release_count, made.to_numpy()))

    class Node:
        pass

    node = Node()
    node.me, node.out, node.host = node, out, np.zeros(3)  # out goes first, then host
    host_ref = weakref.ref(node.host, in_the_collection)  # noqa: F841 - its callback
    released = ur_cffi._handle.release_count
    del out, node
    gc.collect()
    assert len(seen) == 1
    counted, result = seen[0]
    assert counted > released  # (the id the launch compares may be the freed array's)
    assert np.array_equal(result, add_reference(x, y))


def test_a_view_dropped_and_another_made_in_its_place_is_not_reused(add, queue, rng):
    # CPython gives a new object the id of one just freed: a view of other memory made right
    # after the previous launch's view was dropped must not reuse that launch's block.
    kernel, compiled = add
    n = 2 * BLOCK
    x, y, dx, dy = random_inputs(rng, n + 64, queue)
    out, count, same_id = poisoned(n, queue), np.int32(n), 0
    y_view, view = dy[:n], dx[:n]
    for start in range(1, 16):
        previous = id(view)
        del view
        view = dx[start:start + n]
        same_id += id(view) == previous
        out.fill(np.nan)
        kernel.launch(queue, blocks(n, compiled), compiled.local_size, view, y_view, out, count,
                      event=False)
        queue.finish()
        assert np.array_equal(out.to_numpy(), add_reference(x[start:start + n], y[:n]))
    assert same_id  # the case above did come up


def test_a_launch_with_other_arguments_or_sizes_is_not_reused(add, queue, rng):
    kernel, compiled = add
    n = 4 * BLOCK
    x, y, dx, dy = random_inputs(rng, n, queue)
    first, second = poisoned(n, queue), poisoned(n, queue)
    global_size = blocks(n, compiled)
    kernel.launch(queue, global_size, compiled.local_size, dx, dy, first, np.int32(n)).wait()
    kernel.launch(queue, global_size, compiled.local_size, dy, dx, second, np.int32(n)).wait()
    assert np.array_equal(second.to_numpy(), add_reference(y, x))

    half = 2 * BLOCK  # fewer elements: the rest of the output must stay poisoned
    second.fill(np.nan)
    kernel.launch(queue, global_size, compiled.local_size, dy, dx, second, np.int32(half)).wait()
    got = second.to_numpy()
    assert np.array_equal(got[:half], add_reference(y, x)[:half])
    assert np.isnan(got[half:]).all()

    sizes = [blocks(half, compiled)]  # a list: changed in place, it must not be reused
    second.fill(np.nan)
    kernel.launch(queue, sizes, compiled.local_size, dx, dy, second, np.int32(n)).wait()
    sizes[0] = global_size
    kernel.launch(queue, sizes, compiled.local_size, dx, dy, second, np.int32(n)).wait()
    assert np.array_equal(second.to_numpy(), add_reference(x, y))


def test_memory_freed_and_reallocated_between_launches_is_not_reused(add, queue, context,
                                                                     device, rng):
    """A new output array that takes the freed one's Python id but not its address (a raw
    allocation takes that): a reuse by id alone would write into the raw allocation."""
    kernel, compiled = add
    n = 3 * BLOCK
    count = np.int32(n)
    x, y, dx, dy = random_inputs(rng, n, queue)
    taken, out_pointer = [], ur_cffi.ffi.new("void **")
    same_id = 0
    try:
        out = poisoned(n, queue)
        for _ in range(20):
            kernel.launch(queue, blocks(n, compiled), compiled.local_size, dx, dy, out, count,
                          event=False)
            queue.finish()
            assert np.array_equal(out.to_numpy(), add_reference(x, y))
            old_id = id(out)
            del out  # freed at once (no gc.collect(): it would free other objects of its size)
            ur_cffi.check(ur_cffi.lib.urUSMDeviceAlloc(
                context.handle, device.handle, ur_cffi.ffi.NULL, ur_cffi.ffi.NULL, 4 * n,
                out_pointer), "urUSMDeviceAlloc")
            taken.append(out_pointer[0])
            out = ur_cffi.empty(n, np.float32, queue=queue)  # first object since the del
            same_id += id(out) == old_id
            out.fill(np.nan)
    finally:
        queue.finish()
        for pointer in taken:
            ur_cffi.lib.urUSMFree(context.handle, pointer)
    assert same_id, "no new array took the freed one's id: the test did not test the reuse"


def test_a_ctypes_value_changed_in_place_is_not_reused(scale, queue, rng):
    kernel, compiled = scale
    n = 2 * BLOCK + 1
    x = rng.standard_normal(n).astype(np.float32)
    source, out = ur_cffi.asarray(x, queue=queue), poisoned(n, queue)
    a = ctypes.c_float(2.0)
    args = (np.int64(source.data_ptr()), np.int64(out.data_ptr()), a, np.int32(n))
    for value in (2.0, -3.5, 0.25):
        a.value = value
        out.fill(np.nan)
        kernel.launch(queue, blocks(n, compiled), compiled.local_size, *args).wait()
        assert np.array_equal(out.to_numpy(), (x.astype(np.float64) * value).astype(np.float32))


def test_local_sizes_are_fixed():
    local = ur_cffi.Local(64)
    with pytest.raises(AttributeError):
        local.nbytes = 8
    assert local.nbytes == 64 and repr(local) == "Local(64)"


def test_closed_objects_raise_on_the_reused_path(add, queue, context, device, rng):
    kernel, compiled = add
    n = BLOCK
    _, _, dx, dy = random_inputs(rng, n, queue)
    out = poisoned(n, queue)
    launch_args = (blocks(n, compiled), compiled.local_size, dx, dy, out, np.int32(n))
    own_queue = ur_cffi.Queue(context, device)
    kernel.launch(own_queue, *launch_args).wait()
    own_queue.close()
    with pytest.raises(ur_cffi.ClosedError, match="Queue is closed"):
        kernel.launch(own_queue, *launch_args)

    kernel.launch(queue, *launch_args).wait()
    out.close()
    with pytest.raises(ur_cffi.ClosedError, match="USMArray is closed"):
        kernel.launch(queue, *launch_args)

    own_kernel = kernel.program.kernel(compiled.name, **compiled.options)
    fresh = poisoned(n, queue)
    own_kernel.launch(queue, *launch_args[:4], fresh, np.int32(n)).wait()
    own_kernel.close()
    with pytest.raises(ur_cffi.ClosedError, match="Kernel is closed"):
        own_kernel.launch(queue, *launch_args[:4], fresh, np.int32(n))


def test_closed_objects_raise_on_the_paths_without_an_event(add, queue, context, device, rng):
    # Kernel.launch reusing its block and a prepared launch, both with event=False, enqueue
    # without _launch: a closed queue or kernel must still raise ClosedError, not TypeError.
    kernel, compiled = add
    n = BLOCK
    x, y, dx, dy = random_inputs(rng, n, queue)
    out = poisoned(n, queue)
    own_queue = ur_cffi.Queue(context, device)
    launch_args = (blocks(n, compiled), compiled.local_size, dx, dy, out, np.int32(n))
    prepared = kernel.prepare(own_queue, *launch_args)
    for _ in range(2):
        kernel.launch(own_queue, *launch_args, event=False)
        prepared(event=False)
    own_queue.finish()
    assert np.array_equal(out.to_numpy(), add_reference(x, y))
    own_queue.close()
    with pytest.raises(ur_cffi.ClosedError, match="Queue is closed"):
        kernel.launch(own_queue, *launch_args, event=False)
    with pytest.raises(ur_cffi.ClosedError, match="Queue is closed"):
        prepared(event=False)

    own_kernel = kernel.program.kernel(compiled.name, **compiled.options)
    prepared = own_kernel.prepare(queue, *launch_args)
    prepared(event=False)
    queue.finish()
    own_kernel.close()
    out.fill(np.nan)
    with pytest.raises(ur_cffi.ClosedError, match="Kernel is closed"):
        prepared(event=False)
    queue.finish()
    assert np.isnan(out.to_numpy()).all()


def test_prepared_launch_repeats_exactly_and_honours_wait_lists(add, queue, context, device,
                                                               rng):
    kernel, compiled = add
    n = 5 * BLOCK + 17
    x, y, dx, dy = random_inputs(rng, n, queue)
    out = poisoned(n, queue)
    launch = kernel.prepare(queue, blocks(n, compiled), compiled.local_size, dx, dy, out,
                            np.int32(n))
    assert launch.kernel is kernel and launch.queue is queue and "add" in repr(launch)
    for _ in range(3):
        out.fill(np.nan)
        assert launch(event=False) is None
        queue.finish()
        assert np.array_equal(out.to_numpy(), add_reference(x, y))

    # Another queue's copy gates the prepared launch through wait_for.
    other = ur_cffi.Queue(context, device)
    new_x = rng.standard_normal(n).astype(np.float32)
    copied = dx.copy_from(new_x, queue=other, blocking=False)
    out.fill(np.nan)
    event = launch(wait_for=[copied])
    event.wait()
    assert event.status == ur_event_status_t.UR_EVENT_STATUS_COMPLETE
    assert np.array_equal(out.to_numpy(), add_reference(new_x, y))
    other.close()


def test_prepared_launch_holds_its_memory_and_refuses_closed_memory(add, queue, rng):
    kernel, compiled = add
    n = 2 * BLOCK
    x, y, dx, dy = random_inputs(rng, n, queue)
    out = poisoned(n, queue)
    launch = kernel.prepare(queue, blocks(n, compiled), compiled.local_size, dx, dy, out,
                            np.int32(n))
    del dx
    gc.collect()  # the prepared launch still holds x's memory
    launch(event=False)
    queue.finish()
    assert np.array_equal(out.to_numpy(), add_reference(x, y))
    dy.close()
    with pytest.raises(ur_cffi.ClosedError, match="argument [0-9]+: USMArray is closed"):
        launch()


def test_a_prepared_launch_counts_a_close_made_during_its_checks(add, queue, rng,
                                                                  monkeypatch):
    """Another thread's close between a prepared launch's memory checks and its reading of the
    release count was taken as checked: every later call launched into the closed array's
    memory, by then another array's (the caching allocator's reuse)."""
    kernel, compiled = add
    n = BLOCK
    x, y, dx, dy = random_inputs(rng, n, queue)
    out = poisoned(n, queue)
    launch = kernel.prepare(queue, blocks(n, compiled), compiled.local_size, dx, dy, out,
                            np.int32(n))
    launch().wait()
    ur_cffi.empty(4, np.float32, queue=queue).close()  # a release: the next call checks again
    checks = ur_cffi.program.check_integer_addresses

    def closing_during_the_checks(*args):  # as another thread's close() may land there
        out.close()
        return checks(*args)

    monkeypatch.setattr(ur_cffi.program, "check_integer_addresses", closing_during_the_checks)
    launch(event=False)  # racing the close: launching is fair, as in C
    monkeypatch.undo()
    queue.finish()
    victim = ur_cffi.asarray(np.full(n, -1.0, np.float32), queue=queue)
    with pytest.raises(ur_cffi.ClosedError, match="argument 2: USMArray is closed"):
        launch(event=False)
    queue.finish()
    assert np.array_equal(victim.to_numpy(), np.full(n, -1.0, np.float32))


def test_prepare_checks_like_launch(add, queue, rng):
    kernel, compiled = add
    n = BLOCK
    _, _, dx, dy = random_inputs(rng, n, queue)
    with pytest.raises(TypeError, match=r"takes 4 arguments( \(and \d hidden_args\))?, 3 given"):
        kernel.prepare(queue, BLOCK, compiled.local_size, dx, dy, np.int32(n))
    with pytest.raises(ValueError, match="does not divide"):
        kernel.prepare(queue, BLOCK + 1, compiled.local_size, dx, dy, dy, np.int32(n))


def test_blocking_waits_finish_exactly(add, queue, rng):
    kernel, compiled = add
    n = 64 * BLOCK
    x, y, dx, dy = random_inputs(rng, n, queue)
    out = poisoned(n, queue)
    assert ur_cffi.interruptible_waits()
    previous = ur_cffi.set_interruptible_waits(False)
    try:
        assert previous is True and not ur_cffi.interruptible_waits()
        for _ in range(3):
            out.fill(np.nan)
            kernel.launch(queue, blocks(n, compiled), compiled.local_size, dx, dy, out,
                          np.int32(n), event=False)
            queue.finish()
            assert np.array_equal(out.to_numpy(), add_reference(x, y))
            out.fill(np.nan)
            kernel.launch(queue, blocks(n, compiled), compiled.local_size, dx, dy, out,
                          np.int32(n)).wait()
            assert np.array_equal(out.to_numpy(), add_reference(x, y))
    finally:
        ur_cffi.set_interruptible_waits(previous)
    assert ur_cffi.interruptible_waits()


@pytest.mark.parametrize("value, expected", [("0", False), ("1", True), ("", True)])
def test_the_environment_chooses_the_wait_kind(value, expected):
    done = crash_probe.run_child(code="import ur_cffi; print(ur_cffi.interruptible_waits())",
                                 env=crash_probe.child_env(UR_CFFI_INTERRUPTIBLE_WAITS=value),
                                 timeout=120)
    assert done.stdout.strip() == str(expected)


def test_set_interruptible_waits_overrides_a_malformed_variable():
    # (it read the variable first, and raised its SwitchError)
    done = crash_probe.run_child(
        code="import ur_cffi; print(ur_cffi.set_interruptible_waits(False), "
             "ur_cffi.interruptible_waits(), len(ur_cffi.devices()) > 0)",
        env=crash_probe.child_env(UR_CFFI_INTERRUPTIBLE_WAITS="maybe"), timeout=120)
    assert done.stdout.split() == ["True", "False", "True"], done.stdout


def test_random_launch_sequences_stay_exact(add, queue, rng):
    """300 launches that mix reused and new arguments, sizes, closed and reallocated arrays,
    Events or none, and prepared launches: every output is exact and every launch of a
    closed array raises."""
    kernel, compiled = add
    size = 6 * BLOCK
    hosts = [rng.standard_normal(size).astype(np.float32) for _ in range(3)]
    inputs = [ur_cffi.asarray(host, queue=queue) for host in hosts]
    outputs = [poisoned(size, queue) for _ in range(2)]
    counts = {n: np.int32(n) for n in (BLOCK, 3 * BLOCK + 5, size)}
    prepared = []  # (launch, n, the arrays it holds)
    for step in range(300):
        action = rng.random()
        if action < 0.08:  # replace an input: the old one is closed (or only dropped)
            i = int(rng.integers(3))
            old = inputs[i]
            hosts[i] = rng.standard_normal(size).astype(np.float32)
            inputs[i] = ur_cffi.asarray(hosts[i], queue=queue)
            if rng.random() < 0.5:
                old.close()
            del old
            continue
        xi, yi = (int(v) for v in rng.integers(3, size=2))
        oi = int(rng.integers(2))
        n = int(rng.choice(list(counts)))
        out = outputs[oi]
        out.fill(np.nan)
        if action < 0.25 and prepared:
            launch, n, held = prepared[int(rng.integers(len(prepared)))]
            out = held[2]
            out.fill(np.nan)
            if held[0].closed or held[1].closed:
                with pytest.raises(ur_cffi.ClosedError):
                    launch()
                continue
            launch(event=bool(rng.integers(2)))
            x, y = held[0].to_numpy(), held[1].to_numpy()
        else:
            args = (inputs[xi], inputs[yi], out,
                    counts[n] if rng.random() < 0.7 else np.int32(n))
            launch_args = (queue, blocks(n, compiled), compiled.local_size, *args)
            if action < 0.35:
                launch = kernel.prepare(*launch_args)
                prepared.append((launch, n, args[:3]))
                launch(event=False)
            else:
                kernel.launch(*launch_args, event=bool(rng.integers(2)))
            x, y = hosts[xi], hosts[yi]
        queue.finish()
        got = out.to_numpy()
        assert np.array_equal(got[:n], add_reference(x[:n], y[:n])), step
        assert np.isnan(got[n:]).all(), step



@pytest.mark.parametrize("respell", [
    lambda sizes: (float(sizes[0][0]), sizes[1]),
    lambda sizes: (np.float64(sizes[0][0]), sizes[1]),
    lambda sizes: ((sizes[0][0], 1.0), sizes[1]),
    lambda sizes: ((sizes[0][0], True), sizes[1]),
    lambda sizes: (sizes[0], (float(sizes[1][0]), 1)),
    lambda sizes: ((np.timedelta64(sizes[0][0]), 1), sizes[1]),
], ids=["float", "numpy float", "float in a tuple", "bool in a tuple", "float local size",
        "timedelta in a tuple"])
def test_sizes_equal_to_the_reused_ones_but_not_integers_are_refused(add, queue, rng, respell):
    """32.0 == 32 and True == 1: sizes the first launch would refuse are refused after a
    launch with the equal integers too, not launched from its reused block."""
    kernel, compiled = add
    n = 2 * BLOCK
    x, y, dx, dy = random_inputs(rng, n, queue)
    out, count = poisoned(n, queue), np.int32(n)  # the same objects: reusable
    sizes = ((blocks(n, compiled), 1), (compiled.local_size, 1))
    kernel.launch(queue, *sizes, dx, dy, out, count, event=False)
    queue.finish()
    assert np.array_equal(out.to_numpy(), add_reference(x, y))
    global_size, local_size = respell(sizes)
    if type(global_size) is not tuple:  # a one-dimensional launch to reuse first
        kernel.launch(queue, sizes[0][0], sizes[1][0], dx, dy, out, count, event=False)
        local_size = sizes[1][0]
    with pytest.raises(TypeError, match="must be an integer|cannot be interpreted as an int"):
        kernel.launch(queue, global_size, local_size, dx, dy, out, count, event=False)
    with pytest.raises(TypeError, match="must be an integer|cannot be interpreted as an int"):
        kernel.launch(queue, global_size, local_size, dy, dx, out, count, event=False)  # (refill)
    queue.finish()


def test_the_block_kept_for_reuse_does_not_keep_views_alive(add, queue, rng):
    """Kernel.launch held the views of its last launch (so that their ids stayed theirs), and
    through them their memory, until the kernel's next launch with other arguments."""
    import weakref

    kernel, compiled = add
    n = 2 * BLOCK
    for _ in range(3):
        x, y, dx, dy = random_inputs(rng, n + 64, queue)
        out = poisoned(n, queue)
        for _ in range(2):  # the second launch reuses the block
            kernel.launch(queue, blocks(n, compiled), compiled.local_size, dx[:n], dy[1:n + 1],
                          out, np.int32(n), event=False)
            queue.finish()
            assert np.array_equal(out.to_numpy(), add_reference(x[:n], y[1:n + 1]))
        views = dx[:n], dy[1:n + 1]
        kernel.launch(queue, blocks(n, compiled), compiled.local_size, *views, out,
                      np.int32(n), event=False)
        kernel.launch(queue, blocks(n, compiled), compiled.local_size, *views, out,
                      np.int32(n), event=False)
        queue.finish()
        gone = weakref.ref(dx), weakref.ref(dy)
        del views, dx, dy
        gc.collect()
        assert gone[0]() is None and gone[1]() is None
    # Nor does anything keep the kernel (a cache of the views' callbacks held every Kernel
    # launched with a view, its Program and Context: 12 MiB of 3 contexts, 2026-12-05).
    program = kernel.program
    made = program.kernel(kernel.name, **compiled.options)
    x, y, dx, dy = random_inputs(rng, n, queue)
    made.launch(queue, blocks(n, compiled), compiled.local_size, dx[:n], dy[:n], out,
                np.int32(n), event=False)
    queue.finish()
    kernel_gone = weakref.ref(made)
    del made
    gc.collect()
    assert kernel_gone() is None


def test_launches_on_other_arrays_each_time_stay_exact(add, queue, rng):
    """Launches that differ from the previous one in their arrays alone (ping-pong buffers,
    temporaries, views) refill the checked block with the new addresses: each output exact,
    with or without an Event."""
    kernel, compiled = add
    n = 3 * BLOCK + 7
    hosts = [rng.standard_normal(n + 16).astype(np.float32) for _ in range(4)]
    arrays = [ur_cffi.asarray(host, queue=queue) for host in hosts]
    outputs = [poisoned(n, queue) for _ in range(3)]
    count, size = np.int32(n), blocks(n, compiled)
    for step in range(40):
        xi, yi = (int(v) for v in rng.integers(4, size=2))
        oi = int(rng.integers(3))
        start = int(rng.integers(17)) if step % 3 == 0 else 0  # now and then a view
        x = arrays[xi][start:start + n] if start else arrays[xi]
        out = outputs[oi] if step % 5 else ur_cffi.empty(n, np.float32, queue=queue)
        out.fill(np.nan)
        kernel.launch(queue, size, compiled.local_size, x, arrays[yi], out, count,
                      event=bool(step % 2))
        queue.finish()
        reference = add_reference(hosts[xi][start:start + n], hosts[yi][:n])
        assert np.array_equal(out.to_numpy(), reference), step


def test_a_launch_on_other_arrays_checks_them_as_the_first(add, queue, device, rng):
    kernel, compiled = add
    n = BLOCK
    _, _, dx, dy = random_inputs(rng, n, queue)
    out, count, size = poisoned(n, queue), np.int32(n), blocks(n, compiled)
    kernel.launch(queue, size, compiled.local_size, dx, dy, out, count).wait()
    closed = ur_cffi.empty(n, np.float32, queue=queue)
    closed.close()
    with pytest.raises(ur_cffi.ClosedError, match="USMArray is closed"):
        kernel.launch(queue, size, compiled.local_size, closed, dy, out, count)
    base = ur_cffi.empty(2 * n, np.float32, queue=queue)
    view = base[n:]
    base.close()
    with pytest.raises(ur_cffi.ClosedError):
        kernel.launch(queue, size, compiled.local_size, view, dy, out, count)
    with device.create_context() as other_context, ur_cffi.Queue(other_context) as other:
        foreign = ur_cffi.empty(n, np.float32, queue=other)
        with pytest.raises(ValueError, match="argument 0 of 'add': the USMArray belongs to "
                                             "another context"):
            kernel.launch(queue, size, compiled.local_size, foreign, dy, out, count)
        foreign.close()
    with pytest.raises(TypeError):
        kernel.launch(queue, size, compiled.local_size, np.zeros(n, np.float32), dy, out,
                      count)
    out.fill(np.nan)  # and the block of the last good launch is as it was
    x = rng.standard_normal(n).astype(np.float32)
    kernel.launch(queue, size, compiled.local_size, ur_cffi.asarray(x, queue=queue), dy, out,
                  count, event=False)
    queue.finish()
    assert np.array_equal(out.to_numpy(), add_reference(x, dy.to_numpy()))


def test_a_refilled_block_outlives_another_threads_refill_before_its_enqueue(add, queue, rng):
    """Thread A refills the kernel's block, then waits for the enqueue lock (held here, as by
    another thread's enqueue); two launches here refill it again before failing on their wait
    lists.  A's launch must still enqueue its own block: only the kernel's reusable entry
    held it, and the refills freed it (UR then read freed memory)."""
    import threading
    import time

    from ur_cffi.queue import raw_enqueue_lock

    kernel, compiled = add
    n = 2 * BLOCK
    hosts = {name: rng.standard_normal(n).astype(np.float32) for name in "0ABCy"}
    x = {name: ur_cffi.asarray(hosts[name], queue=queue) for name in "0ABC"}
    y, count, size = ur_cffi.asarray(hosts["y"], queue=queue), np.int32(n), blocks(n, compiled)
    out = {name: poisoned(n, queue) for name in "0ABC"}
    queue.finish()

    def launch(name, **options):
        return kernel.launch(queue, size, compiled.local_size, x[name], y, out[name], count,
                             **options)

    launch("0", event=False)
    raised = []

    def launch_a():
        try:
            launch("A", event=False)
        except Exception as error:  # noqa: BLE001 - the test's verdict below
            raised.append(error)

    with raw_enqueue_lock:
        thread = threading.Thread(target=launch_a)
        thread.start()
        deadline = time.monotonic() + 60
        while kernel._reusable[0][4][0] != id(x["A"]):  # A refilled: now at the lock
            assert time.monotonic() < deadline and thread.is_alive(), raised
            time.sleep(0.001)
        for name in "BC":
            with pytest.raises(TypeError):
                launch(name, wait_for="not a list")
    thread.join()
    queue.finish()
    assert not raised, raised
    assert np.array_equal(out["A"].to_numpy(), add_reference(hosts["A"], hosts["y"]))
    assert np.isnan(out["B"].to_numpy()).all() and np.isnan(out["C"].to_numpy()).all()


def _axpy_into_doomed(queue, context, kernels, rng) -> tuple:
    """``(program, axpy kernel (ptr, ptr, ptr, f32, i32), x, y array, x array, an output
    array to close, the float32 of 2 * x + y)``."""
    program, kernel = crash_probe.load(context, kernels, "axpy")
    x, y = (rng.standard_normal(crash_probe.BLOCK).astype(np.float32) for _ in range(2))
    reference = (2.0 * x.astype(np.float64) + y).astype(np.float32)
    return (program, kernel, x, ur_cffi.asarray(y, queue=queue),
            ur_cffi.asarray(x, queue=queue), poisoned(crash_probe.BLOCK, queue), reference)


def test_an_address_argument_is_checked_again_after_a_release(queue, context, kernels, rng):
    """An integer address for a pointer parameter is checked as USM of the context when the
    block is packed: after a release (its memory may be gone), a launch on another array
    must check it again, not copy the block it was checked for (the kernel wrote into freed
    memory)."""
    program, kernel, x, dy, dx, doomed, reference = _axpy_into_doomed(queue, context, kernels,
                                                                      rng)
    n, a, local = crash_probe.BLOCK, np.float32(2.0), crash_probe.LOCAL_SIZE
    count = np.int32(n)
    kernel.launch(queue, local, local, dx, dy, doomed.data_ptr(), a, count).wait()
    assert np.allclose(doomed.to_numpy(), reference, rtol=1e-6)
    address, other = doomed.data_ptr(), ur_cffi.asarray(x, queue=queue)  # (not at address)
    doomed.close()
    ur_cffi.empty_cache()  # the memory is gone, not only back in the cache
    if ur_cffi.memory.is_usm(context, address):
        pytest.skip("this runtime still reports the freed address as USM memory of the "
                    "context: there is nothing to refuse")
    with pytest.raises(ValueError, match="is not USM memory of the launch queue's context"):
        kernel.launch(queue, local, local, other, dy, address, a, count)
    out = poisoned(n, queue)
    kernel.launch(queue, local, local, other, dy, out.data_ptr(), a, count).wait()
    assert np.allclose(out.to_numpy(), reference, rtol=1e-6)
    kernel.close()
    program.close()


@pytest.mark.parametrize("between", ["close", "close and a launch"])
def test_a_prepared_launch_checks_its_address_arguments_after_a_release(queue, context, kernels,
                                                                        rng, between):
    """A prepared launch checked an integer address once, at prepare(): after the memory was
    freed it launched the kernel into it (glibc aborted: "corrupted double-linked list").
    With a launch between the close and the free (the block cached then: it passes, as an
    address would in C), the free itself must make the next call check again."""
    program, kernel, _, dy, dx, doomed, reference = _axpy_into_doomed(queue, context, kernels,
                                                                      rng)
    address, local = doomed.data_ptr(), crash_probe.LOCAL_SIZE
    prepared = kernel.prepare(queue, local, local, dx, dy, address, np.float32(2.0),
                              np.int32(crash_probe.BLOCK))
    prepared().wait()
    assert np.allclose(doomed.to_numpy(), reference, rtol=1e-6)
    doomed.close()
    if between == "close and a launch":
        prepared(event=False)
        queue.finish()
    ur_cffi.empty_cache()  # the memory is gone, not only back in the cache
    if ur_cffi.memory.is_usm(context, address):
        pytest.skip("this runtime still reports the freed address as USM memory of the "
                    "context: there is nothing to refuse")
    for event in (True, False):
        with pytest.raises(ValueError, match=f"argument 2 of kernel 'axpy': address "
                                             f"0x{address:x} "
                                             r"is no longer USM memory of the context \(freed "
                                             "since the launch was prepared or recorded"):
            prepared(event=event)
    kernel.close()
    program.close()


def test_a_graph_checks_its_launches_address_arguments_after_a_release(queue, context, device,
                                                                      kernels, rng):
    """A recorded launch of an integer address replayed into the memory freed since (a
    crash)."""
    program, kernel, _, dy, dx, doomed, reference = _axpy_into_doomed(queue, context, kernels,
                                                                      rng)
    address, local = doomed.data_ptr(), crash_probe.LOCAL_SIZE
    graph = ur_cffi.Graph(context, device)
    with graph.recording(queue):
        kernel.launch(queue, local, local, dx, dy, address, np.float32(2.0),
                      np.int32(crash_probe.BLOCK))
    graph.replay(queue).wait()
    assert np.allclose(doomed.to_numpy(), reference, rtol=1e-6)
    doomed.close()
    ur_cffi.empty_cache()  # the memory is gone, not only back in the cache
    if ur_cffi.memory.is_usm(context, address):
        pytest.skip("this runtime still reports the freed address as USM memory of the "
                    "context: there is nothing to refuse")
    with pytest.raises(ValueError, match=r"replay: command 0 \(launch of kernel 'axpy'\): "
                                         f"argument 2 of kernel 'axpy': address 0x{address:x} is "
                                         "no longer USM memory"):
        graph.replay(queue)
    graph.close()
    kernel.close()
    program.close()


def test_a_launch_on_a_queue_closed_while_recording_raises(add, queue, context, device, rng):
    kernel, compiled = add
    n = BLOCK
    _, _, dx, dy = random_inputs(rng, n, queue)
    out, count, size = poisoned(n, queue), np.int32(n), blocks(n, compiled)
    own_queue = ur_cffi.Queue(context, device)
    kernel.launch(own_queue, size, compiled.local_size, dx, dy, out, count).wait()
    graph = ur_cffi.Graph(context)
    with graph.recording(own_queue):
        own_queue.close()
        for x in (dx, dy):  # the same objects, then another array (a refill either way)
            with pytest.raises(ur_cffi.ClosedError, match="Queue is closed"):
                kernel.launch(own_queue, size, compiled.local_size, x, dy, out, count)
    graph.close()
