"""ur_cffi.Graph against what happens around it: Ctrl-C in a replay or an update, other threads
closing or updating the graph, replays on a queue other than their arrays' own (and the caching
allocator's reuse of that memory), blocking reads while recording, and what ``close()`` lets go.

A ``spin`` kernel (``crash_probe``) holds a queue until the test sets a flag in host memory,
so a replay is really in flight while the test closes, frees or updates what it uses.
"""

import ctypes
import gc
import json
import sys
import textwrap
import threading
import time
import weakref

import numpy as np
import pytest

import crash_probe
import ur_cffi
import test_allocator
from test_allocator import axpy, spin  # noqa: F401 - fixtures
from test_graph import native, updatable  # noqa: F401 - fixtures

pytestmark = pytest.mark.usefixtures("torch_blocked")  # conftest.py

BLOCK, LOCAL = crash_probe.BLOCK, crash_probe.LOCAL_SIZE


@pytest.fixture
def switch_often():
    """Threads switch every microsecond (Python's default: 5 ms), so races show in a test."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def axpy_matches(got, a, x, y) -> bool:
    """``got`` is ``a * x + y`` within float32 rounding of its terms (fused or not)."""
    terms = a * x.astype(np.float64), y.astype(np.float64)
    error = np.abs(got - (terms[0] + terms[1]))
    return bool((error <= 2**-22 * (np.abs(terms[0]) + np.abs(terms[1]))).all())


class Spinning:
    """Launches of ``spin`` that run until :meth:`release` (or ``SPIN_LIMIT`` rounds)."""

    def __init__(self, spin, queue):
        self.kernel = spin
        self.flag = ur_cffi.zeros(1, np.int32, queue=queue, kind="host")
        self.rounds = ur_cffi.zeros(1, np.int32, queue=queue)
        self.flag_value = ctypes.c_int32.from_address(self.flag.data_ptr())

    def launch(self, queue):
        self.flag_value.value = 0
        self.kernel.launch(queue, LOCAL, LOCAL, self.flag, self.rounds, crash_probe.SPIN_LIMIT,
                           *crash_probe.spin_local(), event=False)

    def arm(self):
        self.flag_value.value = 0

    def release(self):
        self.flag_value.value = 1


def test_blocking_strided_reads_into_host_memory_while_recording_raise(native, queue, rng):
    """As a contiguous ``to_numpy()`` does: a strided read is several copies, and none of them
    is recorded; the same reads with ``blocking=False`` record and replay exactly."""
    values = rng.standard_normal(16).astype(np.float32)
    x = ur_cffi.asarray(values, queue=queue)
    reads = {"x[::2].to_numpy()": lambda: x[::2].to_numpy(),
             "x[::2].tolist()": lambda: x[::2].tolist(),
             "x.reshape(4, 4)[:, :2].to_numpy()": lambda: x.reshape(4, 4)[:, :2].to_numpy(),
             "x.copy_to(a transposed array)": lambda: x.reshape(4, 4).copy_to(
                 np.empty((4, 4), np.float32).T)}
    graph = ur_cffi.Graph(queue.context, native=native)
    with graph:
        with graph.recording(queue):
            for what, read in reads.items():
                with pytest.raises(RuntimeError, match="blocking copy into host memory"):
                    read()
                assert not graph.commands, what
            strided = np.full(8, np.nan, np.float32)
            columns = np.full((4, 4), np.nan, np.float32).T
            x[::2].copy_to(strided, blocking=False)
            x.reshape(4, 4).copy_to(columns, blocking=False)
        graph.replay(queue).wait()
        assert np.array_equal(strided, values[::2])
        assert np.array_equal(columns, values.reshape(4, 4))


def test_a_replay_on_another_queue_orders_the_reuse_of_its_memory(native, context, device,
                                                                 spin, rng):
    """A graph recorded on its array's own queue A, replayed on B, the array closed while the
    replay waits: memory allocated next on A is the array's only after the replay read it
    (the replay notes B for the allocator, as a copy given ``queue=B`` does)."""
    n = 4096
    values = rng.standard_normal(n).astype(np.float32)
    with ur_cffi.Queue(context, device) as a, ur_cffi.Queue(context, device) as b:
        spinning = Spinning(spin, a)
        x = ur_cffi.asarray(values, queue=a)
        host = np.full(n, np.nan, np.float32)
        graph = ur_cffi.Graph(context, native=native)
        with graph:
            with graph.recording(a):
                spinning.launch(a)  # the replay's first command: it holds the copy back
                x.copy_to(host, blocking=False)
            spinning.release()
            graph.replay(a).wait()
            assert np.array_equal(host, values)
            host[:] = np.nan
            spinning.arm()
            replayed = graph.replay(b)
            x.close()
            taken = ur_cffi.empty(n, np.float32, queue=a)  # may take x's memory, ordered
            release = threading.Timer(0.3, spinning.release)  # a fill that waits is released
            release.start()
            taken.fill(-7.0)  # blocking: on the code before, it ran before the replay read x
            release.join()
            replayed.wait()
            assert np.array_equal(host, values), "the replay read memory reused meanwhile"
            assert (taken.to_numpy() == -7.0).all()


def test_close_lets_go_of_the_graphs_arrays(native, queue, rng):
    """The arrays a graph's commands use are freed when the graph is closed, not when the
    Graph object is collected."""
    n = 1 << 18
    before = ur_cffi.memory_stats(queue.context)["allocated_bytes"]
    arrays = [ur_cffi.asarray(rng.standard_normal(n).astype(np.float32), queue=queue)
              for _ in range(3)]
    graph = ur_cffi.Graph(queue.context, native=native)
    with graph.recording(queue):
        arrays[1].copy_from(arrays[0], blocking=False)
        arrays[2].fill(1.0, blocking=False)
    graph.replay(queue).wait()
    refs = [weakref.ref(array) for array in arrays]
    in_use = ur_cffi.memory_stats(queue.context)["allocated_bytes"]
    assert in_use >= before + 3 * 4 * n  # (a cached block of up to twice the size may serve)
    del arrays
    gc.collect()
    assert all(ref() is not None for ref in refs)  # the graph holds them
    graph.close()
    gc.collect()
    assert [ref() for ref in refs] == [None] * 3
    assert ur_cffi.memory_stats(queue.context)["allocated_bytes"] == before
    assert graph.closed


def test_close_racing_a_replay_in_another_thread(native, axpy, spin, queue, rng,
                                                 monkeypatch):
    """``close()`` in one thread while another thread's ``replay()`` waits for the graph: the
    replay raises ``ClosedError``, never enqueues what the close is releasing (a released
    command buffer, its kernels).  The release is slowed down, so that a replay that could
    slip in between the close's wait and its release does."""
    from ur_cffi._handle import Resource
    from ur_cffi.queue import raw_enqueue_lock

    n = BLOCK
    x = ur_cffi.asarray(rng.standard_normal(n).astype(np.float32), queue=queue)
    y, out = ur_cffi.zeros(n, queue=queue), ur_cffi.zeros(n, queue=queue)
    spinning = Spinning(spin, queue)
    graph = ur_cffi.Graph(queue.context, native=native)
    with graph.recording(queue):
        spinning.launch(queue)
        axpy.launch(queue, LOCAL, LOCAL, x, y, out, 2.0, n, event=False)
    graph.replay(queue, event=False)  # in flight until released
    release = Resource.close

    def slow_release(resource):
        if resource is graph:
            time.sleep(0.05)
        release(resource)

    monkeypatch.setattr(Resource, "close", slow_release)
    outcome = []

    def replay_now():
        try:
            graph.replay(queue, event=False)
            outcome.append("replayed")
        except ur_cffi.ClosedError:
            outcome.append("closed")
        except Exception as error:  # noqa: BLE001 - the test reports it
            outcome.append(f"{type(error).__name__}: {error}")

    closer = threading.Thread(target=graph.close)
    closer.start()  # waits for the replay, holding the graph's lock
    closer.join(0.05)
    replayer = threading.Thread(target=replay_now)
    replayer.start()  # waits for that lock
    replayer.join(0.05)
    with raw_enqueue_lock:  # another thread's enqueue meanwhile
        spinning.release()
        closer.join()
        replayer.join(0.05)  # had it got the graph before its release, it waits for this lock
    replayer.join()
    queue.finish()
    assert outcome == ["closed"]


def test_concurrent_updates_of_one_launch_agree_with_the_command_buffer(updatable, axpy,
                                                                         queue, rng,
                                                                         switch_often):
    """Two threads update one recorded launch at once, each changing one argument: what the
    replay computes is what the graph records (and holds) afterwards, whichever came last."""
    n = BLOCK
    x_values, x2_values, y_values = (rng.standard_normal(n).astype(np.float32)
                                     for _ in range(3))
    x, x2 = ur_cffi.asarray(x_values, queue=queue), ur_cffi.asarray(x2_values, queue=queue)
    y, out = ur_cffi.asarray(y_values, queue=queue), ur_cffi.empty(n, queue=queue)
    count = np.int32(n)
    graph = ur_cffi.Graph(queue.context, native=updatable)
    with graph:
        with graph.recording(queue):
            launch = axpy.launch(queue, LOCAL, LOCAL, x, y, out, np.float32(2.0), count)
        graph.replay(queue).wait()
        for trial in range(2000):
            launch.update(x, y, out, np.float32(2.0), count)
            start = threading.Barrier(2)

            def update(*args):
                start.wait()
                launch.update(*args)

            threads = [threading.Thread(target=update, args=args) for args in (
                (x2, y, out, np.float32(2.0), count), (x, y, out, np.float32(5.0), count))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            recorded = launch._command.args  # what the graph holds and checks
            first, scale = recorded[0], float(recorded[3])
            out.fill(np.nan)
            graph.replay(queue).wait()
            source = x2_values if first is x2 else x_values
            assert axpy_matches(out.to_numpy(), scale, source, y_values), (trial, scale,
                                                                           first is x2)


def test_a_replay_of_no_command_waits_for_its_wait_list(native, spin, context, device):
    """A graph with no command of its own (nothing recorded, or a barrier) replayed on an
    out-of-order queue: natively, its empty command buffer ended at once, before the work
    it was to wait for (a kernel still spinning on another queue)."""
    with ur_cffi.Queue(context, device) as other, \
            ur_cffi.Queue(context, device, out_of_order=True) as queue:
        for record_barrier in (False, True):
            with ur_cffi.Graph(context, native=native) as graph:
                if record_barrier:
                    with graph.recording(queue):
                        queue.barrier()
                spinning = test_allocator.Spinning(spin, other)  # (with its Event)
                replay = graph.replay(queue, wait_for=[spinning.event])
                releaser = threading.Timer(0.3, spinning.release)
                releaser.start()
                try:
                    replay.wait()
                    assert not spinning.running  # the replay ended after the kernel
                finally:
                    spinning.release()
                    releaser.join()
                other.finish()


def test_an_array_made_while_recording_takes_no_memory_still_in_use(native, spin, context,
                                                                   device):
    """An array made inside a recording block took the memory its queue had just freed, with
    a kernel there still to write it: a replay on another queue ran before that kernel's
    store, which then overwrote what the replay had written."""
    with ur_cffi.Queue(context, device) as recorded, ur_cffi.Queue(context, device) as other:
        n = 12_345  # a size of its own
        old = ur_cffi.empty(n, np.int32, queue=recorded)
        spinning = test_allocator.Spinning(spin, recorded, old)  # stores into old[0] at its end
        spinning.out = None
        del old
        gc.collect()
        with ur_cffi.Graph(context, native=native) as graph:
            with graph.recording(recorded):
                made = ur_cffi.empty(n, np.int32, queue=recorded)
                made.fill(-5, blocking=False)
            releaser = threading.Timer(0.3, spinning.release)
            releaser.start()
            try:
                graph.replay(other).wait()
            finally:
                spinning.release()
                releaser.join()
            recorded.finish()
            assert (made.to_numpy() == -5).all()


def test_recordings_reuse_cached_memory_whose_work_is_done(native, context, device):
    """Arrays made while recording take only memory whose work is done; a block whose queue
    was idle (its work done long before) was taken for busy: every recording allocated anew
    (reserved memory grew by each recording's arrays)."""
    with ur_cffi.Queue(context, device) as queue:
        def record():
            with ur_cffi.Graph(context, native=native) as graph:
                with graph.recording(queue):
                    made = ur_cffi.empty(1 << 18, np.float32, queue=queue)  # 1 MiB
                    made.fill(1.0, blocking=False)
                graph.replay(queue).wait()
                assert (made.to_numpy() == 1.0).all()
            del made
            gc.collect()

        record()
        reserved = ur_cffi.memory_stats(context)["reserved_bytes"]
        for _ in range(4):
            record()
        assert ur_cffi.memory_stats(context)["reserved_bytes"] == reserved


def test_updates_of_two_parts_of_one_launch_in_two_threads_both_apply(updatable, axpy, queue,
                                                                      rng, monkeypatch):
    """One thread updates a recorded launch's arguments, another its global size: each update
    made its new state from the launch's before the graph's lock, and the one applied second
    undid the first (in 116 of 300 races).  The first is held here after making its state,
    while the second runs."""
    from ur_cffi import graph as graph_module

    n = 2 * BLOCK
    x_values, x2_values, y_values = (rng.standard_normal(n).astype(np.float32)
                                     for _ in range(3))
    x, x2 = ur_cffi.asarray(x_values, queue=queue), ur_cffi.asarray(x2_values, queue=queue)
    y, out = ur_cffi.asarray(y_values, queue=queue), ur_cffi.empty(n, queue=queue)
    arguments = (y, out, np.float32(2.0), np.int32(n))
    made, go, errors = threading.Event(), threading.Event(), []
    original = graph_module._Launch.kernel_update

    def kernel_update(self, *args, **kwargs):
        new = original(self, *args, **kwargs)
        if threading.current_thread().name == "arguments":
            made.set()
            go.wait(30)
        return new

    monkeypatch.setattr(graph_module._Launch, "kernel_update", kernel_update)
    with ur_cffi.Graph(queue.context, native=updatable) as graph:
        with graph.recording(queue):
            launch = axpy.launch(queue, 2 * LOCAL, LOCAL, x, *arguments)

        def update(*args, **kwargs):
            try:
                launch.update(*args, **kwargs)
            except BaseException as error:  # noqa: BLE001 - the test reports it
                errors.append(error)

        first = threading.Thread(target=update, args=(x2, *arguments), name="arguments")
        first.start()
        assert made.wait(30)
        second = threading.Thread(target=update, kwargs={"global_size": LOCAL})
        second.start()
        second.join(0.5)  # it waits for the first (before, it ran through meanwhile)
        go.set()
        first.join(30)
        second.join(30)
        assert not errors, errors
        assert launch._command.args[0] is x2
        out.fill(np.nan)
        graph.replay(queue).wait()
        got = out.to_numpy()
        assert axpy_matches(got[:BLOCK], 2.0, x2_values[:BLOCK], y_values[:BLOCK])
        assert np.isnan(got[BLOCK:]).all()  # one work-group's block only: the new size


INTERRUPTED = textwrap.dedent("""
    import ctypes, json, os, signal, sys, threading, time
    import numpy as np
    import ur_cffi, crash_probe, device_under_test
    from test_graph_lifetime import axpy_matches
    from ur_cffi.graph import Graph
    from ur_cffi.queue import raw_enqueue_lock

    kernels, what, native = crash_probe.Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "native"
    LOCAL = crash_probe.LOCAL_SIZE
    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    _, spin = crash_probe.load(context, kernels, "spin")
    _, axpy = crash_probe.load(context, kernels, "axpy")
    flag = ur_cffi.zeros(1, np.int32, queue=queue, kind="host")
    rounds = ur_cffi.zeros(1, np.int32, queue=queue, kind="host")  # the kernel's, at its end
    flag_value = ctypes.c_int32.from_address(flag.data_ptr())
    rounds_value = ctypes.c_int32.from_address(rounds.data_ptr())
    n = crash_probe.BLOCK
    rng = np.random.default_rng()
    x_values, x2_values, y_values = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    x, x2 = ur_cffi.asarray(x_values, queue=queue), ur_cffi.asarray(x2_values, queue=queue)
    y, out = ur_cffi.asarray(y_values, queue=queue), ur_cffi.empty(n, queue=queue)
    if device.pageable_copies_wait:  # a replay would return only after the spin (README)
        host = np.asarray(ur_cffi.full(n, np.nan, np.float32, queue=queue, kind="host"))
    else:
        host = np.full(n, np.nan, np.float32)  # pageable: host memory only the graph holds
    graph = Graph(context, native=None if native else False)
    with graph.recording(queue):
        spin.launch(queue, LOCAL, LOCAL, flag, rounds, crash_probe.SPIN_LIMIT,
                    *crash_probe.spin_local(), event=False)  # released by the test
        launch = axpy.launch(queue, LOCAL, LOCAL, x, y, out, 2.0, n)
        out.copy_to(host, blocking=False)  # host memory only the graph holds from here on
    flag_value.value = 1
    graph.replay(queue).wait()
    if what == "update" and native and not graph.native:
        print(json.dumps({"skip": f"the graph fell back to one-by-one replays ({graph!r}), "
                                  "whose update takes no enqueue lock"}))
        sys.exit(0)

    def interrupt_inside(code):
        # SIGINT once the main thread is inside `code` (and waiting for the enqueue lock this
        # thread holds: another thread's enqueue), then let it go on.
        deadline = time.monotonic() + 20  # (never there: no SIGINT, and the test fails)
        with raw_enqueue_lock:
            while time.monotonic() < deadline:
                frame = sys._current_frames()[threading.main_thread().ident]
                while frame is not None and frame.f_code is not code:
                    frame = frame.f_back
                if frame is not None:
                    break
                time.sleep(1e-3)
            else:
                return
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)

    result = {}
    if what == "replay":
        flag_value.value = 0
        rounds_value.value = -1
        host[:] = np.nan
        sender = threading.Thread(target=interrupt_inside, args=(Graph.replay.__code__,))
        sender.start()
        try:
            graph.replay(queue)
            result["interrupted"] = False
        except KeyboardInterrupt:
            result["interrupted"] = True
        sender.join()
        closer = threading.Thread(target=graph.close)
        closer.start()
        closer.join(0.3)
        result["close_waited"] = closer.is_alive()
        result["replay_still_spinning"] = rounds_value.value == -1  # else nothing to wait for
        flag_value.value = 1
        closer.join()
        result["replay_exact"] = axpy_matches(host, 2.0, x_values, y_values)
    else:
        sender = threading.Thread(target=interrupt_inside, args=(Graph._update.__code__,))
        sender.start()
        try:
            launch.update(x2, y, out, 2.0, n)
            result["interrupted"] = False
        except KeyboardInterrupt:
            result["interrupted"] = True
        sender.join()
        result["graph_has_x2"] = launch._command.args[0] is x2
        out.fill(np.nan)
        graph.replay(queue).wait()
        result["replay_exact"] = axpy_matches(out.to_numpy(), 2.0, x2_values, y_values)
        x2.close()
        try:
            graph.replay(queue).wait()
            result["closed_memory_refused"] = False
        except ur_cffi.ClosedError:
            result["closed_memory_refused"] = True
        graph.close()
    print(json.dumps(result))
""")


@pytest.mark.parametrize("what", ["replay", "update"])
def test_ctrl_c_in_a_replay_or_an_update_leaves_the_graph_owning_its_work(native, kernels,
                                                                         what):
    """Ctrl-C while ``replay()`` or ``update()`` waits for the enqueue lock comes once the
    graph owns the replay's event (``close()`` still waits for that replay) or holds the
    update's memory (the replay uses the new array, and refuses it once closed).  In a child
    process, which a use of freed memory would crash."""
    if what == "update" and native is False:
        pytest.skip("a one-by-one graph's update takes no enqueue lock: nothing to interrupt")
    done = crash_probe.run_child([kernels, what, "native" if native is None else "one-by-one"],
                                 code=INTERRUPTED, timeout=120, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:  # (oneAPI 2025.2: the CPU runtime appends no USM copy natively)
        pytest.skip(result["skip"])
    assert result.pop("interrupted"), result
    assert all(result.values()), result


def test_an_update_of_the_sizes_alone_is_checked_as_a_launch(updatable, axpy, queue):
    x = ur_cffi.zeros(BLOCK, queue=queue)
    graph = ur_cffi.Graph(queue.context, native=updatable)
    with graph:
        with graph.recording(queue):
            launch = axpy.launch(queue, LOCAL, LOCAL, x, x, x, 2.0, BLOCK)
            with pytest.raises(RuntimeError, match="recording into this graph"):
                graph.replay(queue)
        graph.finalize()
        with pytest.raises(ValueError, match="exceeds size_t: the work-item ids would wrap"):
            launch.update(global_offset=2**64 - LOCAL)
