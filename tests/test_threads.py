"""Threads: several Python threads, each with its own queue on one device, launch and copy at
once with exact results; blocking waits release the GIL.

Thread safety as tested here (the README's text is in the reliability report):
- Every UR call releases the GIL, so blocking waits (``finish``, ``Event.wait``, blocking copies,
  ``device.synchronize``) let other Python threads run; the first use from many threads at once
  initialises the loader once.
- Distinct objects may be used from distinct threads at once (a queue per thread is the model);
  a Program, a Kernel (its launches take a lock), a queue finished by one thread while another
  enqueues, and arrays read by several threads may be shared.
- ``device.synchronize()`` may run while other threads create and close queues (it holds its
  own references to the queues it finishes):
  ``test_threads_creating_and_closing_queues_while_the_device_synchronizes``, in a child process.
- A queue closed while another thread enqueues on it: the enqueue raises ``ClosedError``
  (``test_closing_a_queue_while_another_thread_enqueues_raises_closed_error``).  Otherwise
  never safe: closing an object (or dropping its last reference) while another thread uses it.
- The race reproductions run in child processes (they crash the process as often as not) and
  repeat until the race shows, for up to 15 s.
- Whether a wait lets other threads run is decided by the order of events (``overlaps``), not by
  timing, so a loaded machine gives the same verdict; a spinning kernel, threads and children
  all have deadlines, so a test that fails does so in under a minute.
"""

from __future__ import annotations

import ctypes
import secrets
import signal
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import crash_probe
import ur_cffi
from ur_cffi.enums import ur_event_status_t

THREADS, LAUNCHES = 8, 500
JOIN_SECONDS = 45  # for threads that take about 2 s here, quiet or loaded
CHILD_SECONDS = 50  # for a child reproducing a race, which repeats it for 15 s
BLOCK, LOCAL = crash_probe.BLOCK, crash_probe.LOCAL_SIZE


@pytest.fixture(scope="module")
def new_axpy(context, kernels):
    """``new_axpy()``: a new Kernel of one shared axpy program."""
    program, kernel = crash_probe.load(context, kernels, "axpy")
    kernel.close()
    with program:
        yield lambda: crash_probe.kernel(program, kernels, "axpy")


@pytest.fixture(scope="module")
def spin(context, kernels):
    program, kernel = crash_probe.load(context, kernels, "spin")
    with program, kernel:
        yield kernel


def groups(n: int) -> int:
    return -(-n // BLOCK)


def axpy_reference(a, x, y):
    return np.float64(a) * x.astype(np.float64) + y


def close_enough(out, reference, x, y, a) -> bool:
    # One fp32 rounding of each term (the kernel may or may not fuse the multiply-add).
    bound = 2**-22 * (np.abs(np.float64(a) * x) + np.abs(y)) + 1e-30
    return bool(np.all(np.abs(out - reference) <= bound))


def test_8_threads_launch_and_copy_concurrently_with_exact_results(device, context,
                                                                    new_axpy):
    seeds = [secrets.randbits(64) for _ in range(THREADS)]
    print(f"numpy seeds: {seeds}")
    start = threading.Barrier(THREADS)
    done = [0] * THREADS
    failures, errors = [], []

    def work(index: int):
        rng = np.random.default_rng(seeds[index])
        try:
            kernel = new_axpy()  # one Kernel per thread
            with kernel, ur_cffi.Queue(context, device) as queue:
                start.wait()
                for i in range(LAUNCHES):
                    n = int(rng.integers(1, 3 * BLOCK))
                    a = np.float32(rng.standard_normal())
                    x = rng.standard_normal(n).astype(np.float32)
                    y = rng.standard_normal(n).astype(np.float32)
                    kind = ("device", "shared", "host")[i % 3]
                    with ur_cffi.empty(n, queue=queue, kind=kind) as dx, \
                            ur_cffi.empty(n, queue=queue) as dy, \
                            ur_cffi.empty(n, queue=queue) as out, \
                            ur_cffi.empty(n, queue=queue, kind="host") as copy:
                        ready = [dx.copy_from(x, blocking=False), dy.copy_from(y, blocking=False),
                                 out.fill(np.nan, blocking=False)]
                        launched = kernel.launch(queue, groups(n) * LOCAL, LOCAL, dx, dy, out, a,
                                                 n, wait_for=ready)
                        copy.copy_from(out, wait_for=[launched], blocking=i % 2 == 0)
                        result = np.full(n, np.nan, np.float32)
                        copy.copy_to(result)  # blocking; in order after the copy above
                        if not close_enough(result, axpy_reference(a, x, y), x, y, a):
                            failures.append((index, i, n))
                        done[index] += 1
        except Exception as error:  # reported below; a thread's exception would vanish
            errors.append((index, repr(error)))
            start.abort()

    # Daemons, joined by a deadline: a thread that hangs fails the test instead of hanging it.
    threads = [threading.Thread(target=work, args=(index,), daemon=True)
               for index in range(THREADS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + JOIN_SECONDS
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert failures == []
    assert done == [LAUNCHES] * THREADS  # 4,000 launches, 12,000 copies, 4,000 fills checked


SYNCHRONIZE_WHILE_CLOSING = textwrap.dedent("""
    import sys, threading
    import crash_probe
    from crash_probe import rounds
    import numpy as np
    import ur_cffi
    import device_under_test

    device = device_under_test.get()
    context = device.create_context()
    x = np.arange(100, dtype=np.float32)
    for round in rounds():
        errors = []

        def churn():
            try:
                for _ in range(200):
                    with ur_cffi.Queue(context, device) as queue:
                        out = np.zeros_like(x)
                        ur_cffi.asarray(x, queue=queue).copy_to(out)
                        if not np.array_equal(out, x):
                            errors.append("copy")
            except Exception as error:
                errors.append(repr(error))

        threads = [threading.Thread(target=churn) for _ in range(4)]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            try:
                device.synchronize()
            except Exception as error:
                errors.append(repr(error))
        for thread in threads:
            thread.join()
        if errors:
            sys.exit(f"round {round}: {errors[:3]}")
    print("synchronized")
""")


def test_threads_creating_and_closing_queues_while_the_device_synchronizes():
    # device.synchronize() finishes every queue ur_cffi made on the device (the CPU device has
    # no urDeviceWaitExp) while other threads create and close theirs.  In a child process:
    # a released queue handle reaching UR may crash.
    done = crash_probe.run_child(code=SYNCHRONIZE_WHILE_CLOSING, check=False,
                                 timeout=CHILD_SECONDS)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "synchronized" in done.stdout


def overlaps(context, device, spin, axpy, wait: str, waiter: str,
             max_steps: int = crash_probe.SPIN_LIMIT) -> bool:
    """``waiter`` ("main" or "worker") waits by ``wait`` for a kernel that spins until a flag
    is set, while the other thread, once the kernel runs, submits 20 short jobs on a second
    queue, notes whether the waiter is still waiting (and the kernel still running), sets the
    flag, and then waits for and checks the 20 jobs.

    True if the waiter was still in its wait once all 20 jobs were submitted.  Decided by order,
    not by time: the GIL changes hands here only where a thread gives it up (the switch interval
    is raised), so the other thread runs only once the waiter has called its wait, and the kernel
    ends only by the flag, set after the check, or by itself after ``max_steps`` rounds (seconds,
    against milliseconds for the submissions).  Had the wait held the GIL, the other thread could
    only have run after the kernel ended by itself."""
    rng = np.random.default_rng()
    with ur_cffi.Queue(context, device) as long_queue, \
            ur_cffi.Queue(context, device) as short_queue:
        flag = ur_cffi.zeros(1, np.int32, queue=long_queue, kind="host")
        spun = ur_cffi.empty(1, np.int32, queue=long_queue)
        spun.fill(-1)  # the kernel stores how many rounds it spun: 0 if released at once
        host = np.zeros(1, np.int32)
        # The control's call is looked up beforehand: the waiter goes straight into its wait.
        gil_holding_finish = ctypes.PyDLL(None).urQueueFinish  # ctypes.PyDLL keeps the GIL
        long_handle = ctypes.c_void_p(int(ur_cffi.ffi.cast("uintptr_t", long_queue.handle)))
        entered, returned = threading.Event(), threading.Event()
        outcome, errors = {"exact": 0}, []

        def release_the_kernel():
            ctypes.c_int32.from_address(flag.data_ptr()).value = 1

        def block():
            try:
                entered.set()
                if wait == "finish":
                    long_queue.finish()
                elif wait == "event.wait":
                    long_event.wait()
                elif wait == "blocking copy":  # queued behind the kernel on the in-order queue
                    spun.copy_to(host)
                else:  # the control
                    gil_holding_finish(long_handle)
                returned.set()
            except BaseException as error:  # a thread's exception would vanish
                errors.append(("waiter", repr(error)))
                release_the_kernel()

        def short_jobs():
            # Submitted during the wait, waited for after it: the CPU runtime need not run a
            # second queue's commands while a kernel spins (on the 2-core CI machine, quiet,
            # about one run in ten had the short queue's first copy wait for the spinning
            # kernel to end by itself).
            jobs = []
            try:
                entered.wait()
                while long_event.status in (ur_event_status_t.UR_EVENT_STATUS_QUEUED,
                                            ur_event_status_t.UR_EVENT_STATUS_SUBMITTED):
                    time.sleep(1e-3)  # until the kernel runs (or has ended, in the control)
                for _ in range(20):
                    n = int(rng.integers(1, 3 * BLOCK))
                    x = rng.standard_normal(n).astype(np.float32)
                    result = np.full(n, np.nan, np.float32)
                    dx = ur_cffi.empty(n, queue=short_queue)
                    out = ur_cffi.empty(n, queue=short_queue)
                    jobs.append((x, result, dx, out))
                    dx.copy_from(x, blocking=False)
                    out.fill(np.nan, blocking=False)
                    axpy.launch(short_queue, groups(n) * LOCAL, LOCAL, dx, dx, out,
                                np.float32(1.0), n)
                    out.copy_to(result, blocking=False)
                outcome["overlapped"] = not returned.is_set() and (
                    long_event.status != ur_event_status_t.UR_EVENT_STATUS_COMPLETE)
            except BaseException as error:
                errors.append(("jobs", repr(error)))
            finally:
                release_the_kernel()
            try:
                short_queue.finish()
                outcome["exact"] = sum(np.array_equal(result, 2 * x)
                                       for x, result, _, _ in jobs)
                for _, _, dx, out in jobs:
                    dx.close()
                    out.close()
            except BaseException as error:
                errors.append(("checking the jobs", repr(error)))

        switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(60.0)  # longer than any test: no forced GIL hand-over
        try:
            long_event = spin.launch(long_queue, LOCAL, LOCAL, flag, spun, max_steps,
                                     *crash_probe.spin_local())
            # `waiter` waits for the long kernel; the other thread runs the short jobs.
            here, there = (block, short_jobs) if waiter == "main" else (short_jobs, block)
            thread = threading.Thread(target=there, daemon=True)
            thread.start()
            here()
            thread.join(JOIN_SECONDS)  # it ends with the kernel, SPIN_LIMIT rounds at the most
            assert not thread.is_alive()
        finally:
            sys.setswitchinterval(switch_interval)
        long_queue.finish()
        assert errors == []
        assert outcome["exact"] == 20
        spun_rounds = spun.to_numpy()[0]
        assert 0 <= spun_rounds <= max_steps  # the kernel ran, and ended by the flag or itself
        if wait == "blocking copy":
            assert host[0] == spun_rounds
        return outcome["overlapped"]


@pytest.mark.parametrize("waiter", ["main", "worker"])
@pytest.mark.parametrize("wait", ["finish", "event.wait", "blocking copy"])
def test_a_blocking_wait_lets_other_threads_run(device, context, new_axpy, spin, wait, waiter):
    with new_axpy() as axpy:
        assert overlaps(context, device, spin, axpy, wait, waiter)


@pytest.mark.parametrize("waiter", ["main", "worker"])
def test_the_overlap_check_catches_a_wait_that_holds_the_gil(device, context, new_axpy, spin,
                                                            waiter):
    # The same check with a wait that keeps the GIL: the kernel ends by itself (after
    # SPIN_LIMIT rounds, a few seconds), and only then can the other thread run.
    with new_axpy() as axpy:
        assert not overlaps(context, device, spin, axpy, "GIL-holding finish", waiter)


FINISH_WHILE_ENQUEUEING = textwrap.dedent("""
    import sys, threading
    import crash_probe
    from crash_probe import rounds
    import numpy as np
    import ur_cffi
    import device_under_test

    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    x = np.arange(100, dtype=np.float32)
    # Where a copy from pageable memory first finishes the queue (CUDA), a round of 20,000
    # took 2 s on an H100 alone, and more than the child's time with other tests beside it.
    copies = 5_000 if device.pageable_copies_wait else 20_000
    for round in rounds():
        def enqueue():
            with ur_cffi.asarray(x, queue=queue) as array:
                for _ in range(copies):
                    array.copy_from(x, blocking=False)

        worker = threading.Thread(target=enqueue)
        worker.start()
        finishes = 0
        while worker.is_alive():
            try:
                queue.finish()  # the main thread's finish polls before it waits
            except Exception as error:
                sys.exit(f"round {round}, after {finishes} finishes: {error!r}")
            finishes += 1
        worker.join()
    queue.finish()
    print("finished")
""")


def test_the_main_thread_may_finish_a_queue_another_thread_enqueues_on():
    done = crash_probe.run_child(code=FINISH_WHILE_ENQUEUEING, check=False,
                                 timeout=CHILD_SECONDS)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "finished" in done.stdout


def run_script(tmp_path, kernels, source: str, *args) -> str:
    """Run ``source`` in a child process with the test kernels' folder and ``args`` as its
    arguments; its output, once it exited with status 0 (a crash shows as a negative signal
    number)."""
    script = tmp_path / "child.py"
    script.write_text(source)
    done = crash_probe.run_child([kernels, *args], script=script, check=False,
                                 timeout=CHILD_SECONDS)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


FINISH_WHILE_LAUNCHING_OUT_OF_ORDER = textwrap.dedent("""
    import sys, threading, time
    import numpy as np
    import ur_cffi, crash_probe
    import device_under_test
    from lcg import lcg_reference

    device = device_under_test.get()
    context = device.create_context()
    program, lcg = crash_probe.load(context, crash_probe.Path(sys.argv[1]), "lcg")
    queue = ur_cffi.Queue(context, device, out_of_order=True)
    n = crash_probe.BLOCK
    seed = np.random.default_rng().integers(-2**31, 2**31, n, dtype=np.int32)
    source, out = ur_cffi.asarray(seed, queue=queue), ur_cffi.zeros(n, np.int32, queue=queue)
    queue.finish()
    pool = queue._pools["device"]  # what empty_cache() empties, after a finish of its own
    for wait in (queue.finish, device.synchronize, pool.empty):
        done, launches = [], 0
        def launch():
            global launches
            end = time.monotonic() + 5
            while time.monotonic() < end:
                launched = lcg.launch(queue, crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE,
                                      source, out, n, 10, event=launches % 32 == 31)
                if launched is not None:  # (a backlog that outgrows the device makes each
                    launched.wait()       # finish longer than the last: 68 s under load)
                launches += 1
            done.append(True)
        worker = threading.Thread(target=launch)
        worker.start()
        while not done:
            if wait is pool.empty:  # a block last used on the queue, freed (a urQueueFinish)
                ur_cffi.empty(1024, np.float32, queue=queue).close()
            wait()
        worker.join()
        queue.finish()
        if not launches or not np.array_equal(out.to_numpy(), lcg_reference(seed, 10)):
            sys.exit(f"{wait.__name__}: {launches} launches, a wrong result")
    print("finished")
""")


def test_a_queue_may_be_finished_while_another_thread_launches_out_of_order(tmp_path,
                                                                           kernels):
    # urQueueFinish (Queue.finish, Device.synchronize, the allocator's free of cached blocks)
    # while another thread launched on an out-of-order queue crashed the CPU runtime (SIGSEGV):
    # 5 of 9 runs of this test without its third part.
    assert "finished" in run_script(tmp_path, kernels, FINISH_WHILE_LAUNCHING_OUT_OF_ORDER)


FINISH_FROM_A_SIGNAL_HANDLER = textwrap.dedent("""
    import faulthandler, sys, time
    import numpy as np
    import ur_cffi, crash_probe
    import device_under_test

    faulthandler.dump_traceback_later(60, exit=True)  # a hang ends the child
    device = device_under_test.get()
    context = device.create_context()
    program, lcg = crash_probe.load(context, crash_probe.Path(sys.argv[1]), "lcg")
    queue = ur_cffi.Queue(context, device, out_of_order=sys.argv[2] == "out-of-order")
    steps = 10 if queue.out_of_order else 20_000  # (in order: a few ms a kernel, so that
    n = crash_probe.BLOCK                         # finish() polls its probe)
    source = ur_cffi.asarray(np.arange(n, dtype=np.int32), queue=queue)
    out = ur_cffi.zeros(n, np.int32, queue=queue)
    queue.finish()
    watchdog = crash_probe.Watchdog(queue.finish)
    end = time.monotonic() + 3
    while time.monotonic() < end:
        lcg.launch(queue, crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE, source, out, n,
                   steps, event=False)
    watchdog.stop()
    queue.finish()
    print("finished", watchdog.calls)
""")


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no signal.setitimer here")
@pytest.mark.parametrize("order", ["out-of-order", "in-order"])
def test_a_signal_handler_may_finish_a_queue_its_thread_enqueues_on(tmp_path, kernels, order):
    # finish() of an out-of-order queue enqueues a barrier under the enqueue lock, which a
    # handler run inside the main thread's own enqueue waited for for good: it gives up after
    # FINISH_LOCK_SECONDS and finishes with urQueueFinish, probing nothing.  An in-order
    # queue's finish of a long window polled a probe, a barrier enqueued under that lock: it
    # probes nothing while the lock is taken.
    assert run_script(tmp_path, kernels, FINISH_FROM_A_SIGNAL_HANDLER,
                      order).startswith("finished")


SYNCHRONIZE_AFTER_A_DROP = textwrap.dedent("""
    import sys, threading, time
    import numpy as np
    import ur_cffi, crash_probe
    import device_under_test
    from lcg import lcg_reference

    STEPS = 50_000_000  # about a second on the CPU device
    device = device_under_test.get()
    context = device.create_context()
    program, lcg = crash_probe.load(context, crash_probe.Path(sys.argv[1]), "lcg")
    setup = ur_cffi.Queue(context, device)
    n = crash_probe.BLOCK
    seed = np.random.default_rng().integers(-2**31, 2**31, n, dtype=np.int32)
    source = ur_cffi.asarray(seed, queue=setup)
    out = ur_cffi.zeros(n, np.int32, queue=setup, kind="host")
    setup.close()  # no open queue: on the CPU runtime finishing one waits for the device's work
    dropped = []

    def worker():
        queue = ur_cffi.Queue(context, device)
        lcg.launch(queue, crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE, source, out, n, STEPS,
                   event=False)
        queue.flush()
        dropped.append(queue.ref)
        del queue  # its collection finishes it, in this thread

    thread = threading.Thread(target=worker)
    thread.start()
    while not dropped or dropped[0]() is not None:
        time.sleep(0.001)
    device.synchronize()
    complete = np.array_equal(np.asarray(out), lcg_reference(seed, STEPS))
    thread.join()
    print("complete" if complete else "synchronize returned before the dropped queue's work")
""")


def test_synchronize_waits_for_a_queue_another_thread_dropped(tmp_path, kernels):
    # A queue dropped without close() left the device's list at once, while its collection
    # still finished it: synchronize() returned, and the host memory it wrote was incomplete.
    output = run_script(tmp_path, kernels, SYNCHRONIZE_AFTER_A_DROP)
    assert "complete" in output.splitlines(), output


SYNCHRONIZE_INSIDE_A_DROP = textwrap.dedent("""
    import faulthandler, sys, time, weakref
    import numpy as np
    import ur_cffi, crash_probe
    import device_under_test

    faulthandler.dump_traceback_later(40, exit=True)  # a hang ends the child
    device = device_under_test.get()
    context = device.create_context()
    program, lcg = crash_probe.load(context, crash_probe.Path(sys.argv[1]), "lcg")
    n = crash_probe.BLOCK
    with ur_cffi.Queue(context, device) as setup:
        source = ur_cffi.asarray(np.arange(n, dtype=np.int32), queue=setup)
        out = ur_cffi.zeros(n, np.int32, queue=setup)
    queue = ur_cffi.Queue(context, device)
    queue.barrier()
    weakref.finalize(queue, device.synchronize)  # runs before the queue's own release
    del queue
    watchdog = crash_probe.Watchdog(device.synchronize)  # inside a queue's release at times
    end = time.monotonic() + 3
    while time.monotonic() < end:
        queue = ur_cffi.Queue(context, device)
        lcg.launch(queue, crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE, source, out, n, 100,
                   event=False)
        del queue  # its collection finishes it, here
    watchdog.stop()
    print("finished", watchdog.calls)
""")


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no signal.setitimer here")
def test_synchronize_inside_a_queues_release_in_this_thread(tmp_path, kernels):
    # synchronize() waited for dropped queues' releases to finish them: from a finalizer run
    # before a queue's own release, or a signal handler run inside it, it waited for good (the
    # release is further up its own thread); it finishes them itself.  The handler after the
    # urQueueRelease, before the handle was noted released, crashed that first version.
    assert run_script(tmp_path, kernels, SYNCHRONIZE_INSIDE_A_DROP).startswith("finished")


SHARED_KERNEL = textwrap.dedent("""
    import sys, threading
    from crash_probe import rounds
    import numpy as np
    import ur_cffi, crash_probe
    import device_under_test

    THREADS, LAUNCHES, n = 8, 500, 1000
    device = device_under_test.get()
    context = device.create_context()
    program, kernel = crash_probe.load(context, crash_probe.Path(sys.argv[1]), "axpy")
    for round in rounds():
        results, start = {}, threading.Barrier(THREADS)

        def work(t):
            with ur_cffi.Queue(context, device) as queue:
                ones = ur_cffi.asarray(np.ones(n, np.float32), queue=queue)
                out = ur_cffi.zeros(n, queue=queue)
                start.wait()
                for _ in range(LAUNCHES):  # out += (t + 1) * ones, LAUNCHES times, in order
                    kernel.launch(queue, 4 * crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE,
                                  ones, out, out, np.float32(t + 1), n)
                results[t] = out.to_numpy()

        threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wrong = [t for t in range(THREADS)
                 if not np.array_equal(results[t], np.full(n, LAUNCHES * (t + 1), np.float32))]
        if wrong:
            sys.exit(f"round {round}: threads {wrong} got another thread's launches")
    print("exact")
""")


def test_threads_may_share_one_kernel(tmp_path, kernels):
    script = tmp_path / "shared_kernel.py"
    script.write_text(SHARED_KERNEL)
    # Wrong results or a segfault in the CPU runtime, in a child process either way.
    done = crash_probe.run_child([kernels], script=script, check=False,
                                 timeout=CHILD_SECONDS)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "exact" in done.stdout


# Rounds of a queue with an lcg kernel's arrays, closed while a thread uses it (n: blocks).
CLOSING_ROUNDS = """
    import sys, threading, time
    from crash_probe import rounds
    import numpy as np
    import ur_cffi, crash_probe
    import device_under_test

    device = device_under_test.get()
    context = device.create_context()
    program, lcg = crash_probe.load(context, crash_probe.Path(sys.argv[1]), "lcg")
    n = {blocks} * crash_probe.BLOCK
    x = np.arange(n, dtype=np.int32)
    closed_seen = 0
    for round in rounds(seconds=5):
        queue = ur_cffi.Queue(context, device)
        a, b = ur_cffi.asarray(x, queue=queue), ur_cffi.empty(n, np.int32, queue=queue)
"""

CLOSE_WHILE_ENQUEUEING = textwrap.dedent(CLOSING_ROUNDS.format(blocks=16) + """\
        errors = []

        def enqueue():
            try:
                for i in range(200):
                    lcg.launch(queue, 16 * crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE, a, b,
                               np.int32(n), np.int32(10), event=i % 2 == 0)
            except ur_cffi.ClosedError:
                errors.append("closed")
            except Exception as error:
                errors.append(repr(error))

        worker = threading.Thread(target=enqueue)
        worker.start()
        time.sleep(0.002)
        queue.close()
        worker.join()
        if errors and errors != ["closed"]:
            sys.exit(f"round {round}: {errors}")
        closed_seen += errors == ["closed"]
    print(f"closed cleanly; ClosedError in {closed_seen} rounds")
""")


def test_closing_a_queue_while_another_thread_enqueues_raises_closed_error(kernels):
    """The queue's release waits for an enqueue that read its handle, and later ones raise
    ClosedError in the enqueuing thread.  (A launch used to call UR with the released queue:
    a segmentation fault in 3 of 3 runs.)"""
    done = crash_probe.run_child([kernels], code=CLOSE_WHILE_ENQUEUEING, check=False,
                                 timeout=CHILD_SECONDS)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "closed cleanly" in done.stdout
    assert "ClosedError in 0 rounds" not in done.stdout  # the race was there to lose


CLOSE_WHILE_FINISHING = textwrap.dedent(CLOSING_ROUNDS.format(blocks=4) + """\
        errors, started = [], threading.Event()
        wait = queue.finish if round % 2 else queue.flush

        def launch_and_wait():
            try:
                while True:
                    lcg.launch(queue, 4 * crash_probe.LOCAL_SIZE, crash_probe.LOCAL_SIZE, a, b,
                               np.int32(n), np.int32(3), event=False)
                    started.set()
                    wait()
            except ur_cffi.ClosedError:
                errors.append("closed")
            except Exception as error:
                errors.append(repr(error))
            finally:
                started.set()

        worker = threading.Thread(target=launch_and_wait)
        worker.start()
        started.wait()
        queue.close()
        worker.join()
        if errors != ["closed"]:
            sys.exit(f"round {round}: {errors}")
        closed_seen += 1
    print(f"closed cleanly in {closed_seen} rounds")
""")


def test_closing_a_queue_while_another_thread_finishes_or_flushes_it(kernels):
    """``finish()`` and ``flush()`` read the handle without the enqueue lock: a close of
    another thread released it under them (a segmentation fault within a second, 4 of 4
    runs).  Now the release waits for the finishes and flushes in progress at the close."""
    done = crash_probe.run_child([kernels], code=CLOSE_WHILE_FINISHING, check=False,
                                 timeout=CHILD_SECONDS)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "closed cleanly" in done.stdout


def test_a_finish_whose_window_another_finish_emptied_still_waits(context, device, kernels):
    """Two threads finishing one queue: the second could find the one entry of the window
    gone between its length check and ``popitem()`` (``KeyError`` from ``finish()``)."""
    program, lcg = crash_probe.load(context, kernels, "lcg")

    class TakenMeanwhile(dict):
        def popitem(self):  # what a finish of another thread does between the two
            super().popitem()
            raise KeyError("popitem(): dictionary is empty")

    with ur_cffi.Queue(context, device) as queue, program, lcg:
        n = 4 * BLOCK
        a = ur_cffi.asarray(np.arange(n, dtype=np.int32), queue=queue)
        b = ur_cffi.empty(n, np.int32, queue=queue)
        b_view = np.asarray(ur_cffi.full(n, -1, np.int32, queue=queue, kind="host"))
        lcg.launch(queue, 4 * LOCAL, LOCAL, a, b, np.int32(n), np.int32(3), event=False)
        b.copy_to(b_view, blocking=False)
        queue._window = TakenMeanwhile(queue._window)
        queue.finish()  # waits for the launch and the copy all the same
        seen = b_view.copy()  # before anything else waits
        assert queue._window == {}
        queue._window = {}
        assert (seen != -1).all() and np.array_equal(seen, b.to_numpy())


def test_a_close_inside_the_same_threads_finish_is_refused(context, device, kernels):
    """A close from a signal handler or a finalizer while this thread is inside ``finish()``
    of the queue: the finish would go on with the released handle (a segmentation fault in a
    stress run), or the close waited for it for ever.  It raises instead, and the queue stays
    open and finishes."""
    program, lcg = crash_probe.load(context, kernels, "lcg")
    refused = []

    class CloseInside(dict):
        def popitem(self):  # what a signal handler can do inside finish()
            try:
                queue.close()
            except RuntimeError as error:
                refused.append(str(error))
            return super().popitem()

    with ur_cffi.Queue(context, device) as queue, program, lcg:
        n = 4 * BLOCK
        a = ur_cffi.asarray(np.arange(n, dtype=np.int32), queue=queue)
        b = ur_cffi.empty(n, np.int32, queue=queue)
        lcg.launch(queue, 4 * LOCAL, LOCAL, a, b, np.int32(n), np.int32(3), event=False)
        queue._window = CloseInside(queue._window)
        queue.finish()
        queue._window = {}
        assert len(refused) == 1 and "close() of a queue this thread is finishing" in refused[0]
        assert not queue.closed
    assert queue.closed


FLUSHING_ELSEWHERE = textwrap.dedent("""
    import threading, time
    import ur_cffi
    import device_under_test

    device = device_under_test.get()
    context = device.create_context()
    busy, stop = ur_cffi.Queue(context, device), threading.Event()

    def flush_for_ever():
        while not stop.is_set():
            busy.flush()

    flushers = [threading.Thread(target=flush_for_ever) for _ in range(3)]
    for thread in flushers:
        thread.start()
    slowest = 0.0
    for _ in range(50):
        queue = ur_cffi.Queue(context, device)
        started = time.perf_counter()
        queue.close()
        slowest = max(slowest, time.perf_counter() - started)
    stop.set()
    for thread in flushers:
        thread.join()
    print(f"closed 50 queues beside 3 threads flushing another; slowest {slowest:.3f} s")
""")


def test_a_close_waits_only_for_the_flushes_in_progress_when_it_comes():
    """A release waited while any other thread was inside any flush: threads flushing
    another queue non-stop held a close for ever (100 s and more)."""
    done = crash_probe.run_child(code=FLUSHING_ELSEWHERE, check=False, timeout=CHILD_SECONDS)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "closed 50 queues" in done.stdout


def test_the_first_use_from_8_threads_at_once_initialises_once():
    done = crash_probe.run_child(timeout=CHILD_SECONDS, code=textwrap.dedent("""
        import threading, ur_cffi
        start, found = threading.Barrier(8), []

        def first_use():
            start.wait()
            found.append(tuple(d.handle for d in ur_cffi.devices()))

        threads = [threading.Thread(target=first_use) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(found) == 8 and len(set(found)) == 1 and found[0], found
        assert ur_cffi.loader.generation() == 1
        print("once")
    """))
    assert "once" in done.stdout

