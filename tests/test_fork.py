"""fork() after initialisation: the child gets ClosedError naming the cause on any use (there is
no re-initialisation path: the child has the parent's UR state without its runtime threads),
the parent carries on unharmed.  A process forked before UR was used, and a process started
with multiprocessing's "spawn" method, use UR normally.

The parent reads the child's report from a pipe and reaps it by order, not by delay; a child
that hangs (a forked child may wait for a lock no thread of its own will release) is killed
after CHILD_SECONDS and fails the test, instead of hanging it.
"""

from __future__ import annotations

import json
import textwrap

import pytest

import crash_probe

CHILD_SECONDS = 30
"""How long a forked or spawned child may take (about a second here, quiet or loaded)."""

REAP = textwrap.dedent("""
    import os, select, signal, time

    def reap(pid, deadline, read=None):
        # The child's report on `read` (until it closes it) and its exit status, or "hung" if
        # it is still running at `deadline` (then it is killed).
        report = b""
        while read is not None:
            ready, _, _ = select.select([read], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(read, 1 << 16) if ready else b""
            if not chunk:
                break
            report += chunk
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return report, os.waitstatus_to_exitcode(status)
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return report, "hung"
""")

AFTER_INIT = REAP + textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import ur_cffi, crash_probe
    import device_under_test

    device = device_under_test.get()
    context = device.create_context()
    queue = ur_cffi.Queue(context, device)
    program, axpy = crash_probe.load(context, crash_probe.Path(sys.argv[1]), "axpy")
    n = 1000
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    a = ur_cffi.asarray(x, queue=queue)
    out = ur_cffi.zeros(n, queue=queue)
    event = out.fill(1.0)
    grid = -(-n // crash_probe.BLOCK) * crash_probe.LOCAL_SIZE
    device.synchronize()  # (where that finishes queues, a child's returned, waiting for none)

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: every use must raise, nothing may crash
        os.close(read)
        uses = {
            "array.to_numpy": lambda: a.to_numpy(),
            "array.copy_from": lambda: a.copy_from(x),
            "queue.finish": lambda: queue.finish(),
            "device.synchronize": lambda: device.synchronize(),
            "event.wait": lambda: event.wait(),
            "kernel.launch": lambda: axpy.launch(queue, grid, crash_probe.LOCAL_SIZE, a, a, out,
                                                 2.0, n),
            "device.name": lambda: device.name,
            "context.create_queue": lambda: ur_cffi.Queue(context, device),
            "device.create_context": lambda: device.create_context(),  # (said "teardown")
            "devices()": lambda: ur_cffi.devices(),
            "default_device()": lambda: ur_cffi.default_device(),
            "init()": lambda: ur_cffi.init(),
            "empty": lambda: ur_cffi.empty(3, queue=queue),
            "memory_stats()": lambda: ur_cffi.memory_stats(),
            "empty_cache()": lambda: ur_cffi.empty_cache(),
        }
        seen = {}
        for name, use in uses.items():
            try:
                use()
                seen[name] = "no error"
            except Exception as error:
                seen[name] = [type(error).__name__, str(error)]
        for resource in (out, a, axpy, program, queue, context):  # releases nothing of the
            resource.close()                                       # parent's
        os.write(write, json.dumps(seen).encode())
        os.close(write)
        sys.exit(0)  # a normal exit: atexit runs, and must not tear the parent's UR down
    os.close(write)
    report, status = reap(pid, time.monotonic() + float(sys.argv[2]), read)
    seen = json.loads(report) if status == 0 else {}
    # The parent carries on with the very same objects.
    out.fill(np.nan)
    axpy.launch(queue, grid, crash_probe.LOCAL_SIZE, a, a, out, 2.0, n)
    result = out.to_numpy()
    reference = 3.0 * x.astype(np.float64)
    print(json.dumps({
        "child_status": status, "seen": seen,
        "parent_exact": bool(np.allclose(result, reference, rtol=2**-21, atol=0)),
        "parent_copy": bool(np.array_equal(a.to_numpy(), x)),
    }))
""")


def test_a_child_forked_after_init_gets_closed_errors_and_the_parent_carries_on(tmp_path,
                                                                                kernels):
    script = tmp_path / "fork.py"
    script.write_text(AFTER_INIT)
    done = crash_probe.run_child([kernels, CHILD_SECONDS], script=script, timeout=50)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(report, indent=1))
    assert report["child_status"] == 0
    for use, outcome in report["seen"].items():
        assert outcome != "no error", use
        kind, message = outcome
        assert kind == "ClosedError", (use, outcome)
        assert "fork" in message, (use, message)
    # Where the child could not have known better, the message says what to do instead.
    for use in ("devices()", "default_device()", "init()"):
        assert "spawn" in report["seen"][use][1]
    assert report["parent_exact"] and report["parent_copy"]


EVERY_LOCK_HELD = REAP + textwrap.dedent("""
    import json, os, sys, threading
    import ur_cffi
    from ur_cffi import _forking
    import device_under_test

    device = device_under_test.get()
    queue = ur_cffi.Queue(device.create_context(), device)
    kept = ur_cffi.empty(100, queue=queue)
    held, let_go = threading.Event(), threading.Event()

    def hold():  # other threads of the parent inside every lock of ur_cffi at the fork
        locks = list(_forking._made)
        for lock in locks:
            lock.acquire()
        held.set()
        let_go.wait()
        for lock in reversed(locks):
            lock.release()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        seen = {}
        for name, use in {"devices()": ur_cffi.devices, "barrier": queue.barrier,
                          "fill": lambda: kept.fill(1.0), "finish": queue.finish,
                          "memory_stats()": ur_cffi.memory_stats,
                          "empty_cache()": ur_cffi.empty_cache,
                          "empty": lambda: ur_cffi.empty(3, queue=queue)}.items():
            try:
                use()
                seen[name] = "no error"
            except Exception as error:
                seen[name] = type(error).__name__
        os.write(write, json.dumps(seen).encode())
        sys.exit(0)  # Python's exit, ur_cffi's teardown at exit with it
    os.close(write)
    let_go.set()
    holder.join()
    report, status = reap(pid, time.monotonic() + float(sys.argv[1]), read)
    print(json.dumps({"status": status, "seen": json.loads(report) if report else {},
                      "locks": len(_forking._made)}))
""")


def test_a_child_forked_while_other_threads_hold_every_lock_does_not_hang():
    # The allocator's lock, held by another thread at the fork, was never let go in the child:
    # memory_stats() hung there (5 children of 20 in a loop); made anew, it alone was: with
    # another thread in the loader's, the device list's or the enqueue lock, the child's
    # devices(), barrier or launch, or its exit, waited forever (30 children of 30, with three
    # threads listing devices).
    done = crash_probe.run_child(["10"], code=EVERY_LOCK_HELD, timeout=50)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["status"] == 0, report
    assert report["locks"] >= 10, report
    assert report["seen"] == dict.fromkeys(
        ["devices()", "barrier", "fill", "finish", "memory_stats()", "empty_cache()", "empty"],
        "ClosedError"), report


FORK_INSIDE_A_LOCK = REAP + textwrap.dedent("""
    import json, os, signal, sys, time
    import numpy as np
    import ur_cffi, device_under_test
    from ur_cffi import allocator, queue as queue_module

    device = device_under_test.get()
    queue = ur_cffi.Queue(device.create_context(), device)
    array = ur_cffi.zeros(16, np.float32, queue=queue)
    cached = [ur_cffi.empty(1024, np.float32, queue=queue) for _ in range(4)]
    queue.finish()
    del cached
    pid = []

    def fork_inside(frame, event, arg):  # as a signal handler or a finalizer that forks would
        if not pid and (queue_module.raw_enqueue_lock.locked() if sys.argv[2] == "enqueue"
                        else frame.f_code is allocator._free_blocks.__code__):
            pid.append(os.fork())

    read, write = os.pipe()
    sys.setprofile(fork_inside)
    try:
        array.fill(1.0) if sys.argv[2] == "enqueue" else ur_cffi.empty_cache()
        outcome = "returned"
    except BaseException as error:
        outcome = type(error).__name__
    sys.setprofile(None)
    if pid[0] == 0:
        report = {"outcome": outcome}
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
            report["ctrl_c"] = "ignored"
        except KeyboardInterrupt:
            report["ctrl_c"] = "KeyboardInterrupt"
        os.write(write, json.dumps(report).encode())
        os._exit(0)
    os.close(write)
    report, status = reap(pid[0], time.monotonic() + float(sys.argv[1]), read)
    print(json.dumps({"status": status, "parent": outcome,
                      "child": json.loads(report) if report else {}}))
""")


@pytest.mark.parametrize(("inside", "child_outcome"), [("enqueue", "ClosedError"),
                                                       ("allocator", "returned")])
def test_a_child_forked_inside_urcffis_own_locked_code_goes_on(inside, child_outcome):
    # Made free in the child, the lock the forking thread held itself raised RuntimeError
    # ("release unlocked lock") as its block ended, and its Ctrl-C section, never left,
    # swallowed every later Ctrl-C.
    done = crash_probe.run_child(["10", inside], code=FORK_INSIDE_A_LOCK, timeout=50)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"status": 0, "parent": "returned",
                      "child": {"outcome": child_outcome, "ctrl_c": "KeyboardInterrupt"}}, \
        report


FORK_BEFORE_USE = REAP + textwrap.dedent("""
    import os, sys
    import numpy as np
    import ur_cffi  # imported, not yet used: the loader is not initialised
    import device_under_test

    assert not ur_cffi.loader.initialized()
    pid = os.fork()
    if pid == 0:
        try:
            device = device_under_test.get()
            with device.create_context() as context, ur_cffi.Queue(context, device) as queue:
                x = np.arange(1000, dtype=np.float32)
                ok = np.array_equal(ur_cffi.asarray(x, queue=queue).to_numpy(), x)
            os._exit(0 if ok else 2)
        except Exception as error:
            print("child:", type(error).__name__, error, flush=True)
            os._exit(1)
    _, status = reap(pid, time.monotonic() + float(sys.argv[1]))
    print("child:", status)
    sys.exit(0 if status == 0 else 1)
""")


def test_a_child_forked_before_any_use_uses_ur_normally():
    done = crash_probe.run_child([CHILD_SECONDS], code=FORK_BEFORE_USE, check=False,
                                 timeout=50)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


FORK_DURING_INIT = REAP + textwrap.dedent("""
    import os, sys, threading, time
    import ur_cffi
    import device_under_test

    inside, initialise = threading.Event(), ur_cffi.loader._loader_init
    def marked(*args):
        inside.set()
        return initialise(*args)
    ur_cffi.loader._loader_init = marked  # (urLoaderInit, the loader's first call)
    initialising = threading.Thread(target=device_under_test.get, daemon=True)
    initialising.start()  # initialises UR
    inside.wait()
    read, write = os.pipe()
    pid = os.fork()  # while that thread is inside the loader's initialisation
    if pid == 0:
        os.close(read)
        try:
            device_under_test.get()
            message = "child used UR"
        except ur_cffi.ClosedError as error:
            message = "ClosedError: " + str(error)
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    report, status = reap(pid, time.monotonic() + float(sys.argv[1]), read)
    initialising.join()  # (UR calls of a daemon thread at exit: the CUDA adapter crashed)
    print(report.decode(), "|", status)
""")


def test_a_child_forked_while_another_thread_initialises_ur_gets_closed_errors():
    """The child of a fork inside another thread's first use of UR counted as forked before
    any use, and its own first call waited for good in the half-made loader (10 of 12 runs
    of a review's script)."""
    done = crash_probe.run_child([CHILD_SECONDS], code=FORK_DURING_INIT, timeout=90)
    report, status = done.stdout.strip().rsplit("|", 1)
    assert status.strip() == "0", done.stdout
    assert report.startswith("ClosedError: ur_cffi was initialised (or being initialised by "
                             "another thread) before this process was forked"), report


FORK_WHILE_EXIT_HANDLERS_ARE_REGISTERED = textwrap.dedent("""
    import ctypes, os, sys, threading, time
    import device_under_test

    device_under_test.get()  # UR initialised before the forks
    libc = ctypes.CDLL(None)
    harmless = ctypes.cast(libc.getpid, ctypes.c_void_p)
    stop = threading.Event()

    def register():  # as a library loaded by another thread registers its exit handlers
        while not stop.is_set():
            libc.on_exit(harmless, None)

    registering = [threading.Thread(target=register) for _ in range(2)]
    for thread in registering:
        thread.start()
    outcome = ["all exited"]

    def fork_children():
        forks = 0
        while forks < int(sys.argv[2]) and outcome == ["all exited"]:
            pid, forks = os.fork(), forks + 1
            if pid == 0:
                os._exit(0)
            deadline = time.monotonic() + float(sys.argv[1])
            while not os.waitpid(pid, os.WNOHANG)[0]:
                if time.monotonic() > deadline:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    outcome[0] = f"child {forks} hung"
                    break
                time.sleep(0.001)  # (polled this often, the forks hung most often before)

    if sys.argv[3] == "main":
        fork_children()
    else:
        forking = threading.Thread(target=fork_children)
        forking.start()
        forking.join()
    stop.set()
    for thread in registering:
        thread.join()
    print(outcome[0])
""")


@pytest.mark.parametrize("forker", ["main", "thread"])
def test_a_child_forked_while_other_threads_register_exit_handlers_does_not_hang(forker):
    """A forked child's first step registered a glibc exit handler, under glibc's lock of
    them, which the fork leaves held for good when another thread was registering one (UR's
    initialisation loads libraries that do): 30 to 34 of 300 such children hung, in each of
    four runs, though each was forked from the main thread and ended with ``os._exit``; forked
    from another thread, the 4th and the 40th hung in two runs.  Such a child now registers as
    Python exits, or as the thread that forked it ends."""
    done = crash_probe.run_child(["5", "300", forker],
                                 code=FORK_WHILE_EXIT_HANDLERS_ARE_REGISTERED, timeout=240)
    assert done.stdout.strip().splitlines()[-1] == "all exited", done.stdout


EXIT_STATUS = REAP + textwrap.dedent("""
    import os, sys, time
    import device_under_test

    device_under_test.get()  # UR initialised before the fork
    pid = os.fork()
    if pid == 0:
        exec(sys.argv[2])
    else:
        _, status = reap(pid, time.monotonic() + float(sys.argv[1]))
        print("child:", status)
""")


EXIT_STEPS = textwrap.dedent("""
    import atexit, os, sys
    import numpy as np
    import ur_cffi
    import device_under_test

    queue = ur_cffi.Queue(device_under_test.get().create_context())
    held = ur_cffi.zeros(1000, np.float32, queue=queue)  # objects of the parent's
    atexit.register(lambda: os.write(1, b"parent's exit function\\n"))
    pid = os.fork()
    if pid == 0:
        atexit.register(lambda: os.write(1, b"child's exit function\\n"))
        sys.exit(3)
    _, status = os.waitpid(pid, 0)
    print("child:", os.waitstatus_to_exitcode(status))
""")


def test_a_forked_childs_exit_runs_each_exit_function_once_and_says_nothing():
    # Its exit functions ran twice (ur_cffi's ran the rest from inside one), and its end,
    # through Python's own, printed "Exception ignored in _collected" for the parent's objects.
    done = crash_probe.run_child(code=EXIT_STEPS, check=False, timeout=50)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["child's exit function", "parent's exit function",
                                        "child: 3", "parent's exit function"], done.stdout
    assert "Exception" not in done.stderr, done.stderr


def test_a_forked_child_ends_with_the_status_python_gives_it():
    # Only sys.exit's status was kept: raise SystemExit(3), exit(3), quit(4) ended with 0, and
    # sys.exit("message") printed its message twice.
    for code, status, stderr in (("sys.exit(3)", 3, ""), ("raise SystemExit(3)", 3, ""),
                                 ("exit(3)", 3, ""), ("quit(4)", 4, ""), ("pass", 0, ""),
                                 ("raise ValueError('no')", 1, "ValueError: no"),
                                 ("sys.exit('said once')", 1, "said once")):
        done = crash_probe.run_child([CHILD_SECONDS, code], code=EXIT_STATUS, check=False,
                                     timeout=50)
        assert done.returncode == 0 and done.stdout.strip().endswith(f"child: {status}"), \
            (code, done.stdout, done.stderr[-2000:])
        # (Python 3.12 warns of a fork in a process with threads: not counted)
        assert done.stderr.count(stderr) == 1 if stderr else "Error" not in done.stderr, \
            (code, done.stderr)


SPAWN = textwrap.dedent("""
    import multiprocessing, sys
    import numpy as np
    import ur_cffi
    import device_under_test

    def work(seed):
        x = np.random.default_rng(seed).standard_normal(1000).astype(np.float32)
        device = device_under_test.get()
        with device.create_context() as context, ur_cffi.Queue(context, device) as queue:
            return bool(np.array_equal(ur_cffi.asarray(x, queue=queue).to_numpy(), x))

    if __name__ == "__main__":
        assert work(0)  # the parent has initialised UR
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            # Bounded: a worker that hangs raises TimeoutError, and the pool is terminated.
            print("spawned", pool.map_async(work, [1, 2, 3]).get(float(sys.argv[1])))
""")


def test_multiprocessing_spawn_is_the_way_to_use_ur_in_child_processes(tmp_path):
    script = tmp_path / "spawn.py"
    script.write_text(SPAWN)
    done = crash_probe.run_child([CHILD_SECONDS], script=script, timeout=50)
    assert "spawned [True, True, True]" in done.stdout
