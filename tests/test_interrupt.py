"""Ctrl-C during a long wait raises KeyboardInterrupt promptly, and the objects stay usable (or
close cleanly).  Each case runs in a child process that sends itself SIGINT from a second thread
once its main thread waits (an order, not a delay) for a kernel that spins until the process
sets a flag in host memory.

Whether the interrupt came during the wait is decided by order: the kernel ends only by the flag,
set after the interrupt, or by itself after ``crash_probe.SPIN_LIMIT`` rounds (seconds).  How
promptly it came can only be timed: the latency is compared with a control's in the same child
(the same SIGINT, sent the same way, interrupting a plain ``threading.Event().wait()``), and a
child whose latency alone misses is run again, up to 3 times in all, before the test fails.
"""

from __future__ import annotations

import json
import textwrap

import pytest

import crash_probe

SCRIPT = textwrap.dedent("""
    import ctypes, gc, json, os, signal, sys, threading, time
    import numpy as np
    import ur_cffi, crash_probe
    import device_under_test
    from ur_cffi import _waiting

    wait, after = sys.argv[2], sys.argv[3]
    kernels = crash_probe.Path(sys.argv[1])
    BLOCK, LOCAL = crash_probe.BLOCK, crash_probe.LOCAL_SIZE
    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    _, spin = crash_probe.load(context, kernels, "spin")
    _, lcg = crash_probe.load(context, kernels, "lcg")
    seed = np.random.default_rng().integers(-2**31, 2**31, BLOCK, dtype=np.int32)
    source = ur_cffi.asarray(seed, queue=queue)
    target = ur_cffi.zeros(BLOCK, np.int32, queue=queue)
    flag = ur_cffi.zeros(1, np.int32, queue=queue, kind="host")
    spun = ur_cffi.empty(1, np.int32, queue=queue, kind="host")  # read without the queue
    spun.fill(-1)  # until the kernel ends and stores how many rounds it spun (0 or more)
    # Settled now: a first synchronize() tries urDeviceWaitExp in a helper thread, which the
    # OpenCL CPU device refuses at once; the SIGINT sent while that helper was waited for came
    # after it, outside any helper's wait (helpers_waiting 0, twice on 2026-12-07).
    device.synchronize()

    def release_the_kernel():
        ctypes.c_int32.from_address(flag.data_ptr()).value = 1

    def rounds_spun():
        return ctypes.c_int32.from_address(spun.data_ptr()).value

    host = np.zeros(BLOCK, np.int32)
    sent = {}

    def inside(code) -> bool:  # whether the main thread runs `code` or what it called
        frame = sys._current_frames().get(threading.main_thread().ident)
        while frame is not None and frame.f_code is not code:
            frame = frame.f_back
        return frame is not None

    def interrupt_inside(code):
        # SIGINT from a second thread once the main thread is inside `code`: after the order,
        # not after a delay (a loaded machine may take longer than any delay to get there).
        sent.clear()

        def send():
            deadline = time.monotonic() + 20
            while not inside(code) and time.monotonic() < deadline:
                time.sleep(1e-3)
            sent["inside"] = inside(code)
            sent["at"] = time.perf_counter()
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=send, daemon=True).start()

    def control():
        threading.Event().wait()  # Python's own interruptible wait, nothing of UR's

    interrupt_inside(control.__code__)
    try:
        control()
    except KeyboardInterrupt:
        control_latency = time.perf_counter() - sent["at"]

    # The spin kernel runs until the flag is set (it stores how long it spun only then), so it
    # is surely not over when SIGINT comes, which is once the wait has gone to its helper thread;
    # the lcg kernel behind it gives a result to check.  Should the wait hang, the kernel ends by
    # itself after MAX_STEPS rounds (seconds).
    MAX_STEPS = crash_probe.SPIN_LIMIT
    waiting = _waiting._wait_for.__code__  # where the main thread waits for the helper
    caught = None
    try:
        if wait == "finish after dropped launches":  # the usual `launch(...); finish()`
            spin.launch(queue, LOCAL, LOCAL, flag, spun, MAX_STEPS, *crash_probe.spin_local())
            lcg.launch(queue, LOCAL, LOCAL, source, target, BLOCK, 1000)
            interrupt_inside(waiting)
            queue.finish()
        elif wait == "empty_cache":  # waits for the queue that last used a cached block
            cached = ur_cffi.empty(12_345, np.int32, queue=queue)  # a size of its own
            event = spin.launch(queue, LOCAL, LOCAL, flag, spun, MAX_STEPS,
                                *crash_probe.spin_local())
            lcg.launch(queue, LOCAL, LOCAL, source, target, BLOCK, 1000)
            del cached
            gc.collect()
            interrupt_inside(waiting)
            ur_cffi.empty_cache()
        elif wait == "allocation past the memory limit":  # empties the cache first
            cached = ur_cffi.empty(12_345, np.int32, queue=queue)
            event = spin.launch(queue, LOCAL, LOCAL, flag, spun, MAX_STEPS,
                                *crash_probe.spin_local())
            lcg.launch(queue, LOCAL, LOCAL, source, target, BLOCK, 1000)
            del cached
            gc.collect()
            ur_cffi.set_memory_limit(ur_cffi.memory_stats()["reserved_bytes"] + 1000)
            interrupt_inside(waiting)
            try:
                ur_cffi.empty(1 << 20, np.uint8, queue=queue)
            finally:
                ur_cffi.set_memory_limit(None)
        elif wait == "context close":  # waits for the work of its cached memory first
            cached = ur_cffi.empty(12_345, np.int32, queue=queue)
            event = spin.launch(queue, LOCAL, LOCAL, flag, spun, MAX_STEPS,
                                *crash_probe.spin_local())
            lcg.launch(queue, LOCAL, LOCAL, source, target, BLOCK, 1000)
            del cached
            gc.collect()
            interrupt_inside(waiting)
            context.close()  # cut short: the context stays open, its cached memory too
        elif wait == "with block":  # leaving the block on Ctrl-C closes (finishes) `inner`
            with ur_cffi.Queue(context, device) as inner:
                # Done before the kernel spins: the CPU runtime need not run another queue's
                # commands while it does (a wait for them would last as long as the kernel).
                inner_target = ur_cffi.zeros(BLOCK, np.int32, queue=inner)
                lcg.launch(inner, LOCAL, LOCAL, source, inner_target, BLOCK, 1).wait()
                event = spin.launch(queue, LOCAL, LOCAL, flag, spun, MAX_STEPS,
                                    *crash_probe.spin_local())
                tail = lcg.launch(queue, LOCAL, LOCAL, source, target, BLOCK, 1000)
                interrupt_inside(waiting)
                queue.finish()
        elif wait.startswith("graph"):  # an update, or close, waits for the latest replay
            graph = ur_cffi.Graph(context, native=False)
            with graph.recording(queue):
                spin.launch(queue, LOCAL, LOCAL, flag, spun, MAX_STEPS, *crash_probe.spin_local())
                command = lcg.launch(queue, LOCAL, LOCAL, source, target, BLOCK, 1000)
            event = graph.replay(queue)
            interrupt_inside(waiting)
            if wait == "graph update":
                command.update(source, target, BLOCK, 1000)
            else:
                graph.close()
        else:
            event = spin.launch(queue, LOCAL, LOCAL, flag, spun, MAX_STEPS,
                                *crash_probe.spin_local())
            tail = lcg.launch(queue, LOCAL, LOCAL, source, target, BLOCK, 1000)
            interrupt_inside(waiting)
            if wait == "finish":
                queue.finish()
            elif wait == "event.wait":
                event.wait()
            elif wait == "blocking copy":  # behind the kernels on the in-order queue
                target.copy_to(host)
            elif wait == "synchronize":
                device.synchronize()
    except KeyboardInterrupt:
        caught = time.perf_counter()
    gc.collect()  # what the interrupted frames held goes now, as it may at any time
    report = {
        "sent_while_waiting": sent.get("inside", False),
        "interrupted": caught is not None,
        "latency": caught - sent["at"] if caught and sent else None,
        "control_latency": control_latency,
        "kernel_still_running": rounds_spun() == -1,
        "context_open": not context.closed,
        "helpers_waiting": _waiting.pending(),
    }
    expected = crash_probe.lcg_reference(seed, 1000)
    if after == "use":  # the same objects, used again
        # First: while the interrupted finish goes on in its helper, the CUDA adapter makes
        # another enqueue on the queue wait for it.
        release_the_kernel()
        if wait == "finish after dropped launches":
            event = queue.barrier()  # what follows waits for the dropped launches through this
        queue.finish()
        event.wait()
        report["spun"] = rounds_spun()
        report["released_by_the_flag"] = 0 <= rounds_spun() < MAX_STEPS
        report["result_exact"] = bool(np.array_equal(target.to_numpy(), expected))
        lcg.launch(queue, LOCAL, LOCAL, source, target, BLOCK, 3)
        report["again_exact"] = bool(np.array_equal(target.to_numpy(),
                                                    crash_probe.lcg_reference(seed, 3)))
    else:  # closed at once, the kernel still running: close() waits for the device
        threading.Timer(0.2, release_the_kernel).start()
        event.close()
        queue.close()
        report["closed"] = event.closed and queue.closed
        with ur_cffi.Queue(context, device) as fresh:
            out = np.zeros(BLOCK, np.int32)
            target.copy_to(out, queue=fresh)
            report["result_exact"] = bool(np.array_equal(out, expected))
    ur_cffi.loader.teardown()  # in validation mode: raises if anything leaked
    report["helpers_left"] = _waiting.pending()
    print(json.dumps(report))
""")


ATTEMPTS = 3
"""Children run for a case whose interrupt came late (timing) before the test fails."""


def interrupt(tmp_path, kernels, wait, after, validation="0") -> dict:
    script = tmp_path / "interrupt.py"
    script.write_text(SCRIPT)
    done = crash_probe.run_child([kernels, wait, after], script=script,
                                 env=crash_probe.child_env(UR_CFFI_VALIDATION=validation),
                                 timeout=50)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(report)
    return report


@pytest.mark.parametrize("wait", [
    "finish", "event.wait", "synchronize", "with block", "blocking copy",
    "finish after dropped launches", "graph update", "graph close", "empty_cache",
    "allocation past the memory limit", "context close"])
def test_ctrl_c_interrupts_a_wait_promptly_and_the_queue_still_works(tmp_path, kernels, wait):
    """Promptness is timed against the child's control, and retried (see the module's text);
    everything else is decided by order, in every run."""
    late = []
    for _ in range(ATTEMPTS):
        report = interrupt(tmp_path, kernels, wait, "use")
        assert report["sent_while_waiting"]  # SIGINT came once the wait was under way
        assert report["interrupted"]
        assert report["kernel_still_running"]  # it came before the kernel ended, not after
        assert report["context_open"]  # (a close cut short released it, its memory kept)
        assert report["helpers_waiting"] == 1  # the wait goes on in its helper thread
        assert report["released_by_the_flag"]  # not ended by itself after MAX_STEPS rounds
        assert report["result_exact"] and report["again_exact"]
        assert report["helpers_left"] == 0  # it ended with the kernel (teardown drains helpers)
        # Generous: the signal handler runs within milliseconds of the control's.
        if report["latency"] < report["control_latency"] + 1.0:
            break
        late.append((report["latency"], report["control_latency"]))
    else:
        pytest.fail(f"KeyboardInterrupt came late in {ATTEMPTS} runs: (latency, control's) {late}")


def test_objects_close_cleanly_right_after_an_interrupt_and_leak_nothing(tmp_path, kernels):
    # Under UR's leak checker: the helper's own references are given back too.
    report = interrupt(tmp_path, kernels, "event.wait", "close", validation="1")
    assert report["sent_while_waiting"]
    assert report["interrupted"] and report["kernel_still_running"]
    assert report["closed"] and report["result_exact"]
    assert report["helpers_left"] == 0


FIRST_USE_SCRIPT = textwrap.dedent("""
    import signal, threading
    import numpy as np
    import ur_cffi, device_under_test
    from ur_cffi import _interrupts

    made = {}

    def make():  # off the main thread: nothing there puts the handler in place
        device = device_under_test.get()
        made["queue"] = ur_cffi.Queue(device.create_context(), device)

    worker = threading.Thread(target=make)
    worker.start()
    worker.join()
    installed = [signal.getsignal(signal.SIGINT) is _interrupts._handler]
    array = ur_cffi.empty(16, np.float32, queue=made["queue"])
    installed.append(signal.getsignal(signal.SIGINT) is _interrupts._handler)
    print(installed)
""")


def test_the_main_threads_first_allocation_puts_the_handler_in_place():
    # An allocation holds Ctrl-C back (hold_back_in), which needs ur_cffi's SIGINT handler; a
    # queue made on another thread cannot install it (signal.signal works on the main thread
    # only), so the allocation does.
    done = crash_probe.run_child(code=FIRST_USE_SCRIPT, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "[False, True]"


AXPY_CHILD = textwrap.dedent("""
    import json, os, signal, sys, threading, time
    import numpy as np
    import ur_cffi, crash_probe, device_under_test

    BLOCK, LOCAL = crash_probe.BLOCK, crash_probe.LOCAL_SIZE
    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    _, axpy = crash_probe.load(context, crash_probe.Path(sys.argv[1]), "axpy")
    x, y, out = (ur_cffi.zeros(BLOCK, np.float32, queue=queue) for _ in range(3))
""")
"""A child's start: the test device's queue, the ``axpy`` kernel and three arrays for it."""


LOOP_SCRIPT = AXPY_CHILD + textwrap.dedent("""
    mode = sys.argv[2]
    args = (x, y, out, np.float32(2.0), np.int32(BLOCK))
    prepared = axpy.prepare(queue, BLOCK, LOCAL, *args)
    graph = ur_cffi.Graph(context)
    block = graph.recording(queue) if mode == "recorded" else ur_cffi.Queue(context, device)

    def launch(i):
        if mode == "prepared":
            prepared(event=False)
        else:
            axpy.launch(queue, BLOCK, LOCAL, *args, event=i % 2 == 0)

    launch(0)
    queue.finish()
    report = {"interrupted": False, "second": False}
    start = time.perf_counter()
    threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        with block:
            i = 0
            while time.perf_counter() - start < 20 and i < 200_000:
                launch(i)
                i += 1
    except KeyboardInterrupt:
        report["interrupted"] = True
    report["launches"] = i
    try:
        time.sleep(0.5)
    except KeyboardInterrupt:
        report["second"] = True
    queue.finish()
    print(json.dumps(report))
""")


@pytest.mark.parametrize("mode", ["launch", "prepared", "recorded"])
def test_ctrl_c_interrupts_a_loop_of_launches_once(kernels, mode):
    """A launch holds Ctrl-C back and sent it again 5 ms later; in a loop of launches every
    re-sent SIGINT came inside the next launch, and Ctrl-C came only after the loop (20,000
    launches, recorded or not: 0.4 to 0.8 s later).  It is raised as the launch returns now."""
    done = crash_probe.run_child((kernels, mode), code=LOOP_SCRIPT, timeout=120)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["interrupted"], report  # in the loop, not after it (when it came before)
    assert report["launches"] < 200_000, report
    assert not report["second"], report  # one Ctrl-C, one KeyboardInterrupt


SIGINT_TRACER = textwrap.dedent("""
    import os, signal

    sent = []

    def sigint_at_the_first_line_of(function):
        \"\"\"A trace function that sends a real SIGINT at the first line of ``function``
        (once: ``sent``).\"\"\"
        def tracer(frame, event, arg):
            if frame.f_code is not function.__code__:
                return None

            def line(frame, event, arg):
                if event == "line" and not sent:
                    sent.append(1)
                    os.kill(os.getpid(), signal.SIGINT)
                return line
            return line
        return tracer
""")


HELD_SCRIPT = AXPY_CHILD + SIGINT_TRACER + textwrap.dedent("""
    from ur_cffi.memory import USMArray

    tracer = sigint_at_the_first_line_of(USMArray._take_memory)  # an allocation

    report = {}
    try:
        sys.settrace(tracer)
        array = ur_cffi.empty(64, np.float32, queue=queue)
        sys.settrace(None)
        time.sleep(1.0)  # the interrupt, sent again from the allocation, comes here
        report["first"] = "never"
    except KeyboardInterrupt:
        sys.settrace(None)
        report["first"] = "raised"
    try:
        for _ in range(3):
            axpy.launch(queue, BLOCK, LOCAL, x, y, out, np.float32(2.0), np.int32(BLOCK))
        queue.finish()
        time.sleep(0.3)
        report["second"] = False
    except KeyboardInterrupt:
        report["second"] = True
    print(json.dumps(report))
""")


def test_an_interrupt_held_back_and_raised_later_is_not_raised_again(kernels):
    """Once its re-sent SIGINT had raised (outside any launch), the held-back interrupt stayed
    noted, and the next launch raised a second KeyboardInterrupt for the same Ctrl-C (seen
    in the interrupt sweep on an H100)."""
    done = crash_probe.run_child((kernels,), code=HELD_SCRIPT, timeout=120)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"first": "raised", "second": False}, report


ALLOCATION_LOOP = textwrap.dedent("""
    import json, os, signal, sys, threading, time
    import numpy as np
    import ur_cffi, device_under_test

    device = device_under_test.get()
    queue = ur_cffi.Queue(device.create_context(), device)
    report = {"interrupted": False, "second": False}
    start = time.perf_counter()
    threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        allocations = 0
        while time.perf_counter() - start < 10 and allocations < 400_000:
            array = ur_cffi.empty(256, np.float32, queue=queue, kind=sys.argv[1])
            del array
            allocations += 1
    except KeyboardInterrupt:
        report["interrupted"] = True
    try:
        time.sleep(0.5)
    except KeyboardInterrupt:
        report["second"] = True
    print(json.dumps(report))
""")


@pytest.mark.parametrize("kind", ["host", "shared", "device"])
def test_ctrl_c_interrupts_a_loop_of_allocations_once(kind):
    """Host and shared allocations and frees hold Ctrl-C back; in a loop every re-sent SIGINT
    came inside the next one (350 re-sends in 2.8 s), and it never came.  The allocation
    raises it as it returns now."""
    done = crash_probe.run_child((kind,), code=ALLOCATION_LOOP, timeout=120)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == \
        {"interrupted": True, "second": False}


EMPTY_CACHE_INTERRUPTED = SIGINT_TRACER + textwrap.dedent("""
    import json, os, signal, sys, time
    import numpy as np
    import ur_cffi, device_under_test
    from ur_cffi import allocator

    device = device_under_test.get()
    queue = ur_cffi.Queue(device.create_context(), device)
    arrays = [ur_cffi.empty(1024 * (1 + i % 7), np.float32, queue=queue, kind="host")
              for i in range(200)]
    queue.finish()
    del arrays  # all cached
    tracer = sigint_at_the_first_line_of(allocator._free_blocks)  # as blocks are freed

    report = {}
    try:
        sys.settrace(tracer)
        ur_cffi.empty_cache()
        sys.settrace(None)
        time.sleep(1.0)  # an interrupt held back comes here
        report["interrupted"] = False
    except KeyboardInterrupt:
        sys.settrace(None)
        report["interrupted"] = True
    ur_cffi.empty_cache()
    stats = ur_cffi.memory_stats()
    report.update(sent=bool(sent), reserved=stats["reserved_bytes"],
                  frees=stats["ur_frees"], allocations=stats["ur_allocations"])
    print(json.dumps(report))
""")


def test_ctrl_c_during_empty_cache_loses_no_block():
    """empty_cache() took each pool's blocks out at once and freed them one by one: Ctrl-C
    between two frees lost the rest (their memory and the context reference each held, for
    good: 43 to 48 MB of 3,000 blocks in each of five runs)."""
    done = crash_probe.run_child(code=EMPTY_CACHE_INTERRUPTED, timeout=120)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["sent"] and report["interrupted"], report
    assert report["reserved"] == 0 and report["frees"] == report["allocations"], report


ANOTHER_SIGNALS_EXCEPTION = """
import faulthandler, random, signal, sys, time
import ur_cffi, device_under_test
faulthandler.dump_traceback_later(30, exit=True)  # a hang ends as exit status 1, not a crash
device = device_under_test.get()
context = device.create_context()
armed = False
def on_alarm(signum, frame):
    if armed:
        raise TimeoutError
signal.signal(signal.SIGALRM, on_alarm)
timeouts, start = 0, time.monotonic()
try:
    while time.monotonic() - start < 3:
        try:
            armed = True
            signal.setitimer(signal.ITIMER_REAL, random.uniform(1e-6, 0.002))
            for _ in range(50):
                ur_cffi.Queue(context, device).close()  # its finish waits in a helper thread
            armed = False
        except TimeoutError:
            armed = False
            timeouts += 1
    print("timeouts", timeouts)
except Exception as error:  # (Python's own threading may break under such handlers)
    print("python error", type(error).__name__, error)
"""


def test_an_exception_from_another_signals_handler_does_not_crash_a_wait():
    """Only Ctrl-C is held back; a SIGALRM handler that raises (a timeout helper's) inside a
    wait's ``helper.start()`` gave the queue's reference back while the started helper
    finished the queue with it: SIGSEGV within 3 s, 5 of 5 runs.  The helper, once running,
    now owns the references.  (Such handlers may still leave locks held: README says so.)"""
    done = crash_probe.run_child(code=ANOTHER_SIGNALS_EXCEPTION, timeout=90, check=False)
    assert done.returncode >= 0, done.stderr[-4000:]


CTRL_C_INSIDE_QUEUE_CREATE = """
import gc, os, signal
import ur_cffi, device_under_test
from ur_cffi import queue as queue_module
device = device_under_test.get()
context = device.create_context()
real_check = queue_module.check
def check(result, name, *rest):  # a Ctrl-C handled inside urQueueCreate's section
    if name == "urQueueCreate":
        os.kill(os.getpid(), signal.SIGINT)
    return real_check(result, name, *rest)
queue_module.check = check
try:
    ur_cffi.Queue(context, device)
except KeyboardInterrupt:
    print("interrupted")
queue_module.check = real_check
gc.collect()
print("left unfinished", len(device._unfinished))
"""


def test_ctrl_c_as_a_queue_is_made_is_raised_after_its_device_knows_it():
    """The interrupt, raised as the section around urQueueCreate ended, came before the queue
    was added to its device's sets: ``device.synchronize()`` did not know it, and its release
    printed "Exception ignored ... TypeError: weak object has gone away"."""
    done = crash_probe.run_child(code=CTRL_C_INSIDE_QUEUE_CREATE, timeout=60)
    assert done.stdout.split("\n")[:2] == ["interrupted", "left unfinished 0"], done.stdout
    assert "Exception ignored" not in done.stderr, done.stderr[-2000:]


CTRL_C_IN_A_WEAK_COLLECTIONS_CALLBACK = SIGINT_TRACER + textwrap.dedent("""
    import gc, sys, time, weakref
    import ur_cffi, device_under_test

    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    queue.finish()
    try:
        sys.settrace(sigint_at_the_first_line_of(device._queues._remove))
        try:
            queue.close()
            del queue  # its device's WeakSet drops it, in a callback
            gc.collect()
        finally:
            sys.settrace(None)
        time.sleep(0.5)
        print("not interrupted", sent)
    except KeyboardInterrupt:
        print("interrupted", sent)
""")


def test_ctrl_c_in_a_weak_collections_callback_is_raised_after_it():
    """A SIGINT handled in the callback by which a WeakSet of ur_cffi's drops a dead entry
    (a queue closed and dropped) was printed as "Exception ignored" and lost (about 0.5% of
    Ctrl-Cs in a loop making and closing queues): it is sent again after the callback."""
    done = crash_probe.run_child(code=CTRL_C_IN_A_WEAK_COLLECTIONS_CALLBACK, timeout=60)
    assert done.stdout.strip() == "interrupted [1]", (done.stdout, done.stderr[-2000:])
    assert "Exception ignored" not in done.stderr, done.stderr[-2000:]
