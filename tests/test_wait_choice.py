"""Which way a wait goes (``ur_cffi._durations``): the plain blocking UR call for work measured
short, the interruptible wait for everything else; and Events, owned more cheaply than other
resources, still released exactly once.

The way a wait goes is checked, not timed: calls of ``_waiting.wait`` (the interruptible
path) are counted while the real UR waits run.  Every result is checked against float64 numpy.
"""

from __future__ import annotations

import gc
import math
import textwrap
import threading

import numpy as np
import pytest

import crash_probe
import ur_cffi
from ur_cffi import _durations, _handle, _waiting

BLOCK = 128


@pytest.fixture
def interruptible_waits():
    """The names of the UR waits that took the interruptible path (waits stay real)."""
    counted = []
    real = _waiting.wait
    previous = ur_cffi.set_interruptible_waits(True)

    def counting(*args, **kwargs):
        counted.append(args[1])
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_waiting, "wait", counting)
        yield counted
    ur_cffi.set_interruptible_waits(previous)


@pytest.fixture
def add(build_triton, queue, rng):
    """``add(n)``: fresh inputs on the device and an output poisoned with NaN, all copied
    and finished; returns ``(launch, check)``: ``launch(event=True)`` enqueues out = x + y,
    ``check()`` compares out with float64 numpy."""
    program, compiled = build_triton("add", BLOCK=BLOCK)
    kernel = program.kernel(compiled.name, **compiled.options)

    def prepare(n):
        x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
        arrays = [ur_cffi.asarray(a, queue=queue) for a in (x, y)]
        out = ur_cffi.asarray(np.full(n, np.nan, np.float32), queue=queue)
        queue.finish()
        groups = -(-n // BLOCK)

        def launch(event=True):
            return kernel.launch(queue, groups * compiled.local_size, compiled.local_size,
                                 *arrays, out, np.int32(n), event=event)

        def check():
            assert np.array_equal(out.to_numpy(), (x.astype(np.float64) + y).astype(np.float32))

        return launch, check

    prepare.kernel = kernel
    return prepare


def test_a_kernel_measured_short_is_waited_for_directly(add, queue, interruptible_waits):
    launch, check = add(1000)
    interruptible_waits.clear()
    launch()
    queue.finish()  # never measured: interruptible
    assert interruptible_waits == ["urQueueFinish"]
    check()
    assert math.isfinite(add.kernel.timing.per_item)
    for wait in ("finish", "event.wait", "event=False"):
        launch, check = add(1000)
        interruptible_waits.clear()
        event = launch(event=wait != "event=False")
        queue.finish() if wait != "event.wait" else event.wait()
        assert interruptible_waits == [], wait
        check()


def test_everything_else_is_waited_for_interruptibly(add, queue, interruptible_waits):
    launch, check = add(1000)
    launch()
    queue.finish()
    check()
    # Measured, but with far more work than a direct wait may take.
    add.kernel.timing.per_item = 2 * _durations.DIRECT_SECONDS / 1000
    launch, check = add(1000)
    interruptible_waits.clear()
    launch()
    queue.finish()
    assert interruptible_waits == ["urQueueFinish"]
    check()
    # Measured short again by that wait; then a copy in the window, which nothing measures.
    launch, check = add(1000)
    host = np.empty(1000, np.float32)
    source = ur_cffi.zeros(1000, np.float32, queue=queue)
    queue.finish()
    interruptible_waits.clear()
    event = launch()
    source.copy_to(host, blocking=False)
    queue.finish()
    assert interruptible_waits == ["urQueueFinish"]
    check()
    # The Event of a command that is not the latest, and an empty window.
    interruptible_waits.clear()
    event.wait()
    queue.finish()
    assert interruptible_waits == ["urEventWait", "urQueueFinish"]


@pytest.mark.parametrize("native", [None, False])
def test_a_graph_replay_measured_short_is_waited_for_directly(build_triton, context, queue, rng,
                                                              interruptible_waits, native):
    """A replay is measured like a kernel: its first wait is interruptible, later ones block
    directly, until a launch in the graph is updated or a replay waits on other work."""
    program, compiled = build_triton("add", BLOCK=BLOCK)
    kernel = program.kernel(compiled.name, **compiled.options)
    n = int(rng.integers(500, 3000))
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    dx, dy = ur_cffi.asarray(x, queue=queue), ur_cffi.asarray(y, queue=queue)
    out = ur_cffi.empty(n, np.float32, queue=queue)
    graph = ur_cffi.Graph(context, native=native)
    with graph.recording(queue):
        added = kernel.launch(queue, -(-n // BLOCK) * compiled.local_size, compiled.local_size,
                              dx, dy, out, np.int32(n))
    graph.finalize()

    def replay_and_finish(expected, **options) -> list:
        out.fill(np.nan)
        queue.finish()
        interruptible_waits.clear()
        graph.replay(queue, event=False, **options)
        queue.finish()
        waits = list(interruptible_waits)
        assert np.array_equal(out.to_numpy(), expected)
        return waits

    total = (x.astype(np.float64) + y).astype(np.float32)
    assert [replay_and_finish(total) for _ in range(3)] == [["urQueueFinish"], [], []]
    other = ur_cffi.zeros(4, queue=queue).fill(1.0)
    assert replay_and_finish(total, wait_for=[other]) == ["urQueueFinish"]
    if not graph.update_capabilities & ur_cffi.graph._CAPABILITIES["KERNEL_ARGUMENTS"]:
        graph.close()
        pytest.skip("the device's command buffers do not update arguments (the rest needs it)")
    added.update(dx, dx, out, np.int32(n))  # other work: measured again
    doubled = (x.astype(np.float64) * 2).astype(np.float32)
    assert [replay_and_finish(doubled) for _ in range(2)] == [["urQueueFinish"], []]
    graph.close()


def test_waits_in_other_threads_block_directly(add, queue, interruptible_waits):
    launch, check = add(1000)
    interruptible_waits.clear()
    launch()  # never measured, but no other thread can be interrupted
    worker = threading.Thread(target=queue.finish)
    worker.start()
    worker.join()
    assert interruptible_waits == []
    check()


def test_an_interrupted_wait_leaves_the_next_one_unpredicted(add, queue):
    launch, check = add(1000)
    launch()
    queue.finish()
    launch()
    assert _durations.expected_seconds(queue._window) < _durations.DIRECT_SECONDS
    queue._window[None] = 1  # what an interrupted wait puts back
    assert _durations.expected_seconds(queue._window) == math.inf
    queue.finish()
    assert queue._window == {}
    check()


def test_a_queue_waited_for_by_events_only_does_not_note_kernels_without_end(
        build_triton, context, device, rng, interruptible_waits):
    """An out-of-order queue never finished kept a window entry for every Kernel object ever
    launched on it (a review's soak: 10,001 after 10,000 launches of new Kernels, each
    Event waited): past 64 an Event's wait forgets them, and the next finish is waited for
    interruptibly, as for work not measured."""
    program, compiled = build_triton("add", BLOCK=BLOCK)
    n = 1000
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    with ur_cffi.Queue(context, device, out_of_order=True) as queue:
        arrays = [ur_cffi.asarray(a, queue=queue) for a in (x, y)]
        out = ur_cffi.empty(n, np.float32, queue=queue)
        sizes = []
        for _ in range(200):
            out.fill(np.nan)
            kernel = program.kernel(compiled.name, **compiled.options)
            kernel.launch(queue, -(-n // BLOCK) * compiled.local_size, compiled.local_size,
                          *arrays, out, np.int32(n)).wait()
            sizes.append(len(queue._window))
        assert max(sizes) <= 66, max(sizes)  # (the fill's entry, and one launch past 64)
        np.testing.assert_array_equal(out.to_numpy(), (x.astype(np.float64) + y).astype(
            np.float32))
        interruptible_waits.clear()
        queue.finish()
        assert len(interruptible_waits) == 1, interruptible_waits  # (a barrier's urEventWait)


def test_an_event_is_released_once_however_it_ends(add, queue):
    launch, check = add(1000)
    event = launch()
    event.wait()
    check()
    serial = event._serial
    assert serial in _handle._events
    event.close()
    event.close()  # twice is harmless
    assert event.closed and serial not in _handle._events
    with pytest.raises(ur_cffi.ClosedError):
        event.wait()
    launch, check = add(1000)
    event = launch()
    assert _handle.owns(event.handle)
    serial = event._serial
    del event
    gc.collect()
    assert serial not in _handle._events
    queue.finish()
    check()


TEARDOWN = textwrap.dedent("""
    import sys
    import numpy as np
    import ur_cffi, crash_probe
    import device_under_test
    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    _, lcg = crash_probe.load(context, crash_probe.Path(sys.argv[1]), "lcg")
    seed = np.random.default_rng().integers(-2**31, 2**31, crash_probe.BLOCK, dtype=np.int32)
    source = ur_cffi.asarray(seed, queue=queue)
    target = ur_cffi.zeros(crash_probe.BLOCK, np.int32, queue=queue)
    event = lcg.launch(queue, crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE, source, target,
                       crash_probe.BLOCK, 3)
    event.wait()
    assert np.array_equal(target.to_numpy(), crash_probe.lcg_reference(seed, 3))
    ur_cffi.loader.teardown()  # raises if UR's leak checker saw a leak
    assert event.closed
    try:
        event.wait()
    except ur_cffi.ClosedError:
        print("closed")
""")


def test_an_event_alive_at_teardown_is_released_and_reads_closed(tmp_path, kernels):
    # In a child, under UR's leak checker: teardown releases the Event's UR event, and the
    # Event then says it is closed instead of handing UR a released handle.
    script = tmp_path / "teardown.py"
    script.write_text(TEARDOWN)
    done = crash_probe.run_child([kernels], script=script,
                                 env=crash_probe.child_env(UR_CFFI_VALIDATION="1"))
    assert done.stdout.strip().splitlines()[-1] == "closed", done.stderr[-2000:]
